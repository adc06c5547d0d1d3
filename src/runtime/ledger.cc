// The cost cache and the ledger of charged calls.
#include "runtime/ledger.h"

#include <algorithm>
#include <functional>

namespace tenet {
namespace runtime {

bool GemmWorkloadEqual::operator()(const GemmWorkload& a, const GemmWorkload& b) const {
  return a.batch == b.batch && a.m == b.m && a.n == b.n && a.k == b.k && a.bits_a == b.bits_a &&
         a.bits_b == b.bits_b && a.bits_c == b.bits_c && a.extra_read_bits == b.extra_read_bits &&
         a.extra_ops == b.extra_ops;
}

size_t GemmWorkloadHash::operator()(const GemmWorkload& g) const {
  size_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) { h = (h ^ std::hash<int64_t>()(v)) * 1099511628211ull; };
  mix(g.batch);
  mix(g.m);
  mix(g.n);
  mix(g.k);
  mix(g.bits_a);
  mix(g.bits_b);
  mix(g.bits_c);
  mix(g.extra_read_bits);
  mix(g.extra_ops);
  return h;
}

Metrics CostCache::Analyze(const GemmWorkload& key) const {
  auto it = macs_per_cycle_by_bits_.find(std::max(key.bits_a, key.bits_b));
  const int64_t p = it == macs_per_cycle_by_bits_.end() ? 1 : it->second;
  GemmWorkload w = key;
  w.k = (key.k + p - 1) / p;
  w.bits_a = key.bits_a * static_cast<int>(p);
  w.bits_b = key.bits_b * static_cast<int>(p);
  Metrics m = AnalyzeGemm(w, hardware_, dataflow_);
  if (p > 1) {
    // Back from packed vectors to elements: real MACs, A and B counted per element (their
    // bits already are), utilization against p MACs per PE per cycle.
    m.macs = key.batch * key.m * key.n * key.k;
    for (const char* name : {"A", "B"}) {
      TensorMetrics& t = m.tensors.at(name);
      t.total *= p;
      t.unique *= p;
      t.offchip_elements *= p;
      t.bits /= static_cast<int>(p);
    }
    m.pe_utilization = static_cast<double>(m.macs) /
                       (static_cast<double>(m.cycles) * m.num_pes *
                        hardware_.macs_per_pe_per_cycle * p);
  }
  return m;
}

std::shared_ptr<const Metrics> CostCache::Get(const GemmWorkload& key) {
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  auto metrics = std::make_shared<const Metrics>(Analyze(key));
  std::unique_lock<std::shared_mutex> lock(mutex_);
  return cache_.emplace(key, std::move(metrics)).first->second;
}

void Ledger::Append(LedgerEntry entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back(std::move(entry));
}

void Ledger::Append(std::vector<LedgerEntry>* entries) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& e : *entries) entries_.push_back(std::move(e));
}

std::vector<LedgerEntry> Ledger::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_;
}

std::vector<std::string> Ledger::Tags() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tags_;
}

void Ledger::Reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  next_call_.store(0);
}

void Ledger::SetTag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < tags_.size(); ++i) {
    if (tags_[i] == tag) {
      current_tag_.store(static_cast<uint32_t>(i));
      return;
    }
  }
  tags_.push_back(tag);
  current_tag_.store(static_cast<uint32_t>(tags_.size() - 1));
}

}  // namespace runtime
}  // namespace tenet
