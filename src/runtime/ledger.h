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
#include "runtime/program.h"

namespace tenet {
namespace runtime {

/*!
 * \brief The call a step makes, for the cost model: its shape, the element widths of its
 *  scheme, and its quantization recipe (charge.h holds what that costs).
 * \param c_shape the step's output shape (batch dims, M, N); \param k the reduction length.
 */
GemmCall StepCall(const Step& step, const std::vector<int64_t>& c_shape, int64_t k);

/*! \brief One charged GEMM: which step of which function, and what it was charged. */
struct LedgerEntry {
  uint64_t call_index;  // the module-wide count of function calls; a merged region's steps share it
  uint32_t program, step;
  uint32_t tag;  // index into Ledger::Tags(), the phase set by the user ("prefill", ...)
  std::shared_ptr<const Charge> charge;  // null for an empty GEMM (a zero dim)
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
