// The cost ledger: one entry per offloaded GEMM call, with what the cost model charges it.
#ifndef TENET_RUNTIME_LEDGER_H_
#define TENET_RUNTIME_LEDGER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost_model/charge.h"
#include "cost_model/cost_model.h"
#include "cost_model/vector.h"
#include "runtime/program.h"

namespace tenet {
namespace runtime {

/*!
 * \brief The call a step makes, for the cost model: its shape, the element widths of its
 *  scheme, and its quantization recipe (charge.h holds what that costs).
 * \param c_shape the step's output shape (batch dims, M, N); \param k the reduction length.
 */
GemmCall StepCall(const Step& step, const std::vector<int64_t>& c_shape, int64_t k);

/*! \brief The vector call of a GEMM step's fused epilogue `index` (0: the bias add when the
 *  step has a bias, then its activation) on an output of `c_shape`. */
VectorCall EpilogueCall(const Step& step, int index, const std::vector<int64_t>& c_shape);
/*! \brief How many epilogue operators a step has (bias, activation), and the name of one. */
int EpilogueCount(const Step& step);
std::string EpilogueEntryName(const Step& step, int index);

/*! \brief One charged call: a GEMM step, its fused epilogue, or a vector step of a charge call. */
struct LedgerEntry {
  uint64_t call_index;  // the module-wide count of function calls; a merged region's steps share it
  uint32_t program, step;  // program: Descriptor::programs, or vector_programs for a vector step
  uint32_t tag;  // index into Ledger::Tags(), the phase set by the user ("prefill", ...)
  std::shared_ptr<const Charge> charge;  // null for an empty GEMM (a zero dim)
  std::shared_ptr<const VectorCharge> vector;  // set for epilogues and vector steps
  int32_t epilogue = -1;      // >= 0: the epilogue operator of GEMM step `step`
  bool vector_step = false;   // a step of vector_programs[program]
};

/*! \brief VectorCharge remembered per distinct vector call (thread-safe, as ChargeCache). */
class VectorChargeCache {
 public:
  explicit VectorChargeCache(const Accelerator& accelerator) : accelerator_(accelerator) {}
  std::shared_ptr<const VectorCharge> Get(const VectorCall& call);

 private:
  const Accelerator& accelerator_;
  std::shared_mutex mutex_;
  std::unordered_map<VectorCall, std::shared_ptr<const VectorCharge>, VectorCallHash> cache_;
};

/*! \brief The append-only list of entries, safe to append to from several threads. */
class Ledger {
 public:
  Ledger() { tags_.push_back(""); }
  uint64_t NextCallIndex() { return next_call_.fetch_add(1, std::memory_order_relaxed); }
  void Append(std::vector<LedgerEntry>* entries);
  std::vector<LedgerEntry> Snapshot() const;
  std::vector<std::string> Tags() const;
  void Reset();
  /*! \brief Entries appended from now on carry this tag. */
  void SetTag(const std::string& tag);
  uint32_t CurrentTag() const { return current_tag_.load(std::memory_order_relaxed); }

 private:
  mutable std::mutex mutex_;
  std::vector<LedgerEntry> entries_;
  std::vector<std::string> tags_;
  std::atomic<uint32_t> current_tag_{0};
  std::atomic<uint64_t> next_call_{0};
};

/*!
 * \brief The ledger as JSON, every value a named field (tenet_byoc.ledger reads the names):
 *  {"accelerator", "dataflow", "clock_ghz", "tags": [str],
 *   "functions": [{"symbol", "steps": [{"pattern", "name", "scheme"}]}],
 *   "charges": [{call fields, array metrics by name, "tensors": {name: {...}}}],
 *   "entries": [{"call_index", "program", "step", "tag", "charge"}]}.
 *  Entries refer to the table of distinct charges (a model makes few distinct calls many
 *  times), so a long ledger stays small; an empty GEMM has "charge": null.
 */
std::string LedgerJson(const Ledger& ledger, const Descriptor& descriptor);
/*! \brief The same JSON for some of the ledger's entries (tags from the ledger). */
std::string LedgerJson(const Ledger& ledger, const Descriptor& descriptor,
                       const std::vector<LedgerEntry>& entries);

}  // namespace runtime
}  // namespace tenet

#endif  // TENET_RUNTIME_LEDGER_H_
