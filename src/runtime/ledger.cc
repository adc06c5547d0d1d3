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
  GemmCall call = DescribeGemmCall(batch, c_shape[c_shape.size() - 2], c_shape.back(), k,
                                   step.bits_a, step.bits_b, step.bits_c, step.recipe,
                                   step.scheme);
  call.workload.a_on_chip = step.a_on_chip;
  call.workload.c_on_chip = step.c_on_chip;
  return call;
}

int EpilogueCount(const Step& step) {
  return (step.has_bias ? 1 : 0) + (step.epilogue != Epilogue::kNone ? 1 : 0);
}

VectorCall EpilogueCall(const Step& step, int index, const std::vector<int64_t>& c_shape) {
  VectorCall call;
  call.shape = c_shape;
  if (step.has_bias && index == 0) {
    call.op = VectorOp::kAdd;
    call.operand_elements = c_shape.back();  // one bias per output column
    return call;
  }
  switch (step.epilogue) {
    case Epilogue::kRelu: call.op = VectorOp::kRelu; break;
    case Epilogue::kGelu: call.op = VectorOp::kGeluErf; break;
    default: call.op = VectorOp::kGeluTanh; break;
  }
  return call;
}

std::string EpilogueEntryName(const Step& step, int index) {
  if (step.has_bias && index == 0) return step.name + ".bias";
  return step.name + "." + EpilogueName(step.epilogue);
}

std::shared_ptr<const VectorCharge> VectorChargeCache::Get(const VectorCall& call) {
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = cache_.find(call);
    if (it != cache_.end()) return it->second;
  }
  auto charge = std::make_shared<const VectorCharge>(ChargeVectorCall(
      call, accelerator_.vector, accelerator_.memory, accelerator_.hardware.clock_ghz,
      accelerator_.cores));
  std::unique_lock<std::shared_mutex> lock(mutex_);
  return cache_.emplace(call, std::move(charge)).first->second;
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

void WriteValue(std::ostream& os, const LedgerValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) os << *i;
  else if (const auto* d = std::get_if<double>(&v)) os << *d;
  else if (const auto* b = std::get_if<bool>(&v)) os << (*b ? "true" : "false");
  else os << JsonQuote(std::get<std::string>(v));
}

void WriteFields(std::ostream& os, const LedgerFields& fields) {
  const char* sep = "";
  for (const auto& f : fields) {
    os << sep << '"' << f.first << "\":";
    WriteValue(os, f.second);
    sep = ",";
  }
}

void WriteVectorCharge(std::ostream& os, const VectorCharge& c) {
  os << '{';
  WriteFields(os, VectorLedgerFields(c));
  os << ",\"recipe\":" << SerializeQuantRecipe(QuantRecipe{}) << ",\"tensors\":{}}";
}

// The charge's fields from the one table (charge.h ChargeLedgerFields), which
// tenet_byoc.ledger's LedgerEntry and TensorTraffic declare by the same names.
void WriteCharge(std::ostream& os, const Charge& c) {
  os << '{';
  WriteFields(os, ChargeLedgerFields(c));
  os << ",\"recipe\":" << SerializeQuantRecipe(c.call.recipe) << ",\"tensors\":{";
  const char* sep = "";
  for (const auto& t : ChargeTensorFields(c)) {
    os << sep << JsonQuote(t.first) << ":{";
    WriteFields(os, t.second);
    os << '}';
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
      const Step& st = p.steps[s];
      os << (s ? "," : "") << "{\"pattern\":" << JsonQuote(st.pattern)
         << ",\"name\":" << JsonQuote(st.name) << ",\"scheme\":" << JsonQuote(st.scheme)
         << ",\"epilogues\":[";
      for (int j = 0; j < EpilogueCount(st); ++j) {
        os << (j ? "," : "") << "{\"pattern\":\"epilogue\",\"name\":"
           << JsonQuote(EpilogueEntryName(st, j)) << ",\"scheme\":\"none\"}";
      }
      os << "]}";
    }
    os << "]}";
  }
  // Vector programs follow the GEMM programs: a vector step's "program" counts from there.
  for (const VectorProgram& vp : descriptor.vector_programs) {
    os << ",{\"symbol\":" << JsonQuote(vp.symbol) << ",\"steps\":[";
    for (size_t s = 0; s < vp.steps.size(); ++s) {
      os << (s ? "," : "") << "{\"pattern\":" << JsonQuote(std::string("vector.") +
                                                             VectorOpName(vp.steps[s].op))
         << ",\"name\":" << JsonQuote(vp.steps[s].name)
         << ",\"scheme\":" << JsonQuote(vp.steps[s].scheme) << '}';
    }
    os << "]}";
  }
  os << "],\"charges\":[";
  std::unordered_map<const void*, size_t> ids;
  for (const LedgerEntry& e : entries) {
    const void* key = e.vector ? static_cast<const void*>(e.vector.get())
                               : static_cast<const void*>(e.charge.get());
    if (!key || ids.count(key)) continue;
    os << (ids.empty() ? "" : ",");
    if (e.vector) WriteVectorCharge(os, *e.vector);
    else WriteCharge(os, *e.charge);
    ids.emplace(key, ids.size());
  }
  os << "],\"entries\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    const LedgerEntry& e = entries[i];
    const size_t program = e.vector_step ? descriptor.programs.size() + e.program : e.program;
    os << (i ? "," : "") << "{\"call_index\":" << e.call_index << ",\"program\":" << program
       << ",\"step\":" << e.step << ",\"epilogue\":" << e.epilogue << ",\"tag\":" << e.tag
       << ",\"charge\":";
    if (e.vector) os << ids.at(e.vector.get());
    else if (e.charge) os << ids.at(e.charge.get());
    else os << "null";
    os << '}';
  }
  os << "]}";
  return os.str();
}

}  // namespace runtime
}  // namespace tenet
