// The ledger of charged calls, the call a step makes, and the ledger's JSON.
#include "runtime/ledger.h"

#include <sstream>

#include "cost_model/json.h"

namespace tenet {
namespace runtime {

using detail::JsonQuote;

GemmCall StepCall(const Step& step, const std::vector<int64_t>& c_shape, int64_t k) {
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < c_shape.size(); ++i) batch *= c_shape[i];
  return DescribeGemmCall(batch, c_shape[c_shape.size() - 2], c_shape.back(), k, step.bits_a,
                          step.bits_b, step.bits_c, step.recipe, step.scheme);
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

namespace {

// The names are tenet_byoc.ledger's LedgerEntry and TensorTraffic field names.
void WriteCharge(std::ostream& os, const Charge& c) {
  const GemmWorkload& w = c.call.workload;
  const Metrics& m = c.array;
  const MemoryMetrics& mm = c.memory;
  const EnergyBreakdown& en = c.energy;
  // The call's latency is the buffer level's (memory.cycles): utilization against it.
  const double capacity = double(mm.cycles) * double(m.num_pes) * double(m.macs_per_pe_per_cycle);
  os << "{\"batch\":" << w.batch << ",\"m\":" << w.m << ",\"n\":" << w.n << ",\"k\":" << w.k
     << ",\"bits_a\":" << w.bits_a << ",\"bits_b\":" << w.bits_b << ",\"bits_c\":" << w.bits_c
     << ",\"extra_read_bits\":" << w.extra_read_bits << ",\"extra_ops\":" << w.extra_ops
     << ",\"extra_register_bits\":" << w.extra_register_bits
     << ",\"dequant_place\":" << JsonQuote(DequantizationName(c.call.recipe.place))
     << ",\"scale_bits\":" << c.call.recipe.scale_bits
     << ",\"accumulator_bits\":" << c.call.recipe.accumulator_bits
     << ",\"weight_side_bits\":" << c.call.quant.weight_side_bits
     << ",\"activation_side_bits\":" << c.call.quant.activation_side_bits
     << ",\"quantize_ops\":" << c.call.quant.quantize_ops
     << ",\"dequant_ops\":" << c.call.quant.dequant_ops
     << ",\"accumulator_traffic_bits\":" << c.call.quant.accumulator_traffic_bits
     << ",\"macs\":" << m.macs << ",\"cycles\":" << mm.cycles
     << ",\"roofline_cycles\":" << mm.roofline_cycles << ",\"array_cycles\":" << m.cycles
     << ",\"dram_stall_cycles\":" << mm.dram_stall_cycles
     << ",\"compute_cycles\":" << m.compute_cycles << ",\"stall_cycles\":" << m.stall_cycles
     << ",\"tenet_delay\":" << m.delay << ",\"ingress_delay\":" << m.ingress_delay
     << ",\"egress_delay\":" << m.egress_delay << ",\"compute_delay\":" << m.compute_delay
     << ",\"compute_delay_exact\":" << m.compute_delay_exact
     << ",\"time_steps\":" << m.time_steps << ",\"folds\":" << m.folds
     << ",\"active_pes\":" << m.active_pes << ",\"num_pes\":" << m.num_pes
     << ",\"macs_per_pe_per_cycle\":" << m.macs_per_pe_per_cycle
     << ",\"avg_active_pes\":" << m.avg_active_pes
     << ",\"pe_utilization\":" << (capacity > 0 ? double(m.macs) / capacity : 0.0)
     << ",\"bandwidth_bits_per_cycle\":" << m.bandwidth_bits_per_cycle
     << ",\"latency_us\":" << mm.latency_us
     << ",\"offchip_read_bytes\":" << m.offchip_read_bits / 8.0
     << ",\"offchip_write_bytes\":" << m.offchip_write_bits / 8.0
     << ",\"dram_read_bytes\":" << mm.dram_read_bits / 8.0
     << ",\"dram_write_bytes\":" << mm.dram_write_bits / 8.0
     << ",\"buffer_read_bytes\":" << mm.buffer_read_bits / 8.0
     << ",\"buffer_write_bytes\":" << mm.buffer_write_bits / 8.0
     << ",\"energy_pj\":" << en.total_pj << ",\"mac_pj\":" << en.mac_pj
     << ",\"register_pj\":" << en.register_pj << ",\"buffer_pj\":" << en.buffer_pj
     << ",\"dram_pj\":" << en.dram_pj << ",\"mapping\":" << JsonQuote(mm.mapping)
     << ",\"tensors\":{";
  const char* sep = "";
  for (const auto& kv : m.tensors) {
    const TensorMetrics& t = kv.second;
    os << sep << JsonQuote(kv.first) << ":{\"bits\":" << t.bits
       << ",\"is_write\":" << (t.is_write ? "true" : "false") << ",\"total\":" << t.total
       << ",\"unique\":" << t.unique << ",\"reuse_factor\":" << t.reuse_factor
       << ",\"spatial_reuse\":" << t.spatial_reuse << ",\"temporal_reuse\":" << t.temporal_reuse
       << ",\"offchip_elements\":" << t.offchip_elements
       << ",\"offchip_bytes\":" << t.offchip_bytes;
    const auto traffic = mm.tensors.find(kv.first);
    const OperandTraffic o = traffic == mm.tensors.end() ? OperandTraffic{} : traffic->second;
    os << ",\"dram_read_bytes\":" << o.dram_read_bits / 8.0
       << ",\"dram_write_bytes\":" << o.dram_write_bits / 8.0
       << ",\"buffer_read_bytes\":" << o.buffer_read_bits / 8.0
       << ",\"buffer_write_bytes\":" << o.buffer_write_bits / 8.0 << '}';
    sep = ",";
  }
  os << "}}";
}

}  // namespace

std::string LedgerJson(const Ledger& ledger, const Descriptor& descriptor) {
  return LedgerJson(ledger, descriptor, ledger.Snapshot());
}

std::string LedgerJson(const Ledger& ledger, const Descriptor& descriptor,
                       const std::vector<LedgerEntry>& entries) {
  const Accelerator& acc = descriptor.accelerator;
  std::ostringstream os;
  os.precision(17);
  os << "{\"accelerator\":" << JsonQuote(acc.name)
     << ",\"dataflow\":" << JsonQuote(acc.dataflow.name)
     << ",\"clock_ghz\":" << acc.hardware.clock_ghz << ",\"tags\":[";
  const std::vector<std::string> tags = ledger.Tags();
  for (size_t i = 0; i < tags.size(); ++i) os << (i ? "," : "") << JsonQuote(tags[i]);
  os << "],\"functions\":[";
  for (size_t i = 0; i < descriptor.programs.size(); ++i) {
    const Program& p = descriptor.programs[i];
    os << (i ? "," : "") << "{\"symbol\":" << JsonQuote(p.symbol) << ",\"steps\":[";
    for (size_t s = 0; s < p.steps.size(); ++s) {
      os << (s ? "," : "") << "{\"pattern\":" << JsonQuote(p.steps[s].pattern)
         << ",\"name\":" << JsonQuote(p.steps[s].name)
         << ",\"scheme\":" << JsonQuote(p.steps[s].scheme) << '}';
    }
    os << "]}";
  }
  os << "],\"charges\":[";
  std::unordered_map<const Charge*, size_t> ids;
  for (const LedgerEntry& e : entries) {
    if (!e.charge || ids.count(e.charge.get())) continue;
    os << (ids.empty() ? "" : ",");
    WriteCharge(os, *e.charge);
    ids.emplace(e.charge.get(), ids.size());
  }
  os << "],\"entries\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    const LedgerEntry& e = entries[i];
    os << (i ? "," : "") << "{\"call_index\":" << e.call_index << ",\"program\":" << e.program
       << ",\"step\":" << e.step << ",\"tag\":" << e.tag << ",\"charge\":";
    if (e.charge) os << ids.at(e.charge.get());
    else os << "null";
    os << '}';
  }
  os << "]}";
  return os.str();
}

}  // namespace runtime
}  // namespace tenet
