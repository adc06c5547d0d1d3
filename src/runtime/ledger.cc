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
