// The cost ledger: one entry per offloaded GEMM call, with its accelerator cost.
#ifndef TENET_RUNTIME_LEDGER_H_
#define TENET_RUNTIME_LEDGER_H_

#include <atomic>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost_model/cost_model.h"

namespace tenet {
namespace runtime {

/*!
 * \brief The cost model's workload of one call (shape, element widths, side data) is the key
 *  of the cost cache; these make it hashable.
 */
struct GemmWorkloadHash {
  size_t operator()(const GemmWorkload& w) const;
};
struct GemmWorkloadEqual {
  bool operator()(const GemmWorkload& a, const GemmWorkload& b) const;
};

/*!
 * \brief The cost model's answer per call shape, computed once per shape.
 *
 * Readers share a lock; a miss computes outside any lock (two threads may both compute the
 * same new shape; the first insert wins and both answers are equal).
 */
class CostCache {
 public:
  /*!
   * \param macs_per_cycle_by_bits operand width -> MACs one PE does per cycle at that width
   *  (absent: 1). A PE doing p MACs per cycle is a p-wide dot-product unit along K: the call
   *  is costed as the GEMM with ceil(K / p) packed elements of p x bits each.
   */
  CostCache(Hardware hardware, Dataflow dataflow, std::map<int, int64_t> macs_per_cycle_by_bits)
      : hardware_(std::move(hardware)),
        dataflow_(std::move(dataflow)),
        macs_per_cycle_by_bits_(std::move(macs_per_cycle_by_bits)) {}
  std::shared_ptr<const Metrics> Get(const GemmWorkload& key);
  const Hardware& hardware() const { return hardware_; }
  const Dataflow& dataflow() const { return dataflow_; }

 private:
  Metrics Analyze(const GemmWorkload& key) const;

  Hardware hardware_;
  Dataflow dataflow_;
  std::map<int, int64_t> macs_per_cycle_by_bits_;
  std::shared_mutex mutex_;
  std::unordered_map<GemmWorkload, std::shared_ptr<const Metrics>, GemmWorkloadHash,
                     GemmWorkloadEqual>
      cache_;
};

/*! \brief One charged GEMM: which step of which function, its shape and its cost. */
struct LedgerEntry {
  uint64_t call_index;  // the module-wide count of function calls; a merged region's steps share it
  uint32_t program, step;
  uint32_t tag;  // index into Ledger::tags(), the phase set by the user ("prefill", ...)
  GemmWorkload shape;
  std::shared_ptr<const Metrics> cost;  // null when charging was off
};

/*! \brief The append-only list of entries, safe to append to from several threads. */
class Ledger {
 public:
  Ledger() { tags_.push_back(""); }
  uint64_t NextCallIndex() { return next_call_.fetch_add(1, std::memory_order_relaxed); }
  void Append(LedgerEntry entry);
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

}  // namespace runtime
}  // namespace tenet

#endif  // TENET_RUNTIME_LEDGER_H_
