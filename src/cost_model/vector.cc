// What a non-GEMM operator costs on the vector unit (see vector.h), and the JSON parts of
// the vector unit and the edge dequantizer.
#include "cost_model/vector.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>

#include "cost_model/checked.h"
#include "cost_model/json.h"

namespace tenet {

namespace {

constexpr const char* kClassNames[kVectorOpClasses] = {"add", "mul", "exp", "recip", "tanh"};
constexpr const char* kOpNames[kVectorOps] = {
    "layer_norm", "rms_norm", "softmax", "gelu_tanh", "gelu_erf", "silu",     "add",
    "multiply",   "divide",   "rotary",  "take",      "mask",     "quantize", "kv_write",
    "relu",       "tanh"};
constexpr const char* kScheduleNames[] = {"pipelined", "serial"};

std::string Joined(const char* const* names, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += (i ? ", " : "") + std::string(names[i]);
  return s;
}

bool IsBinary(VectorOp op) {
  return op == VectorOp::kAdd || op == VectorOp::kMultiply || op == VectorOp::kDivide;
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

const char* VectorOpClassName(VectorOpClass c) { return kClassNames[static_cast<int>(c)]; }
const char* VectorOpName(VectorOp op) { return kOpNames[static_cast<int>(op)]; }
const char* VectorScheduleName(VectorSchedule s) { return kScheduleNames[static_cast<int>(s)]; }

VectorOp ParseVectorOp(const std::string& name) {
  for (int i = 0; i < kVectorOps; ++i)
    if (name == kOpNames[i]) return static_cast<VectorOp>(i);
  throw std::invalid_argument("unknown vector operator '" + name + "'; expected one of " +
                              Joined(kOpNames, kVectorOps));
}

VectorSchedule ParseVectorSchedule(const std::string& name) {
  for (int i = 0; i < 2; ++i)
    if (name == kScheduleNames[i]) return static_cast<VectorSchedule>(i);
  throw std::invalid_argument("unknown vector schedule '" + name +
                              "'; expected pipelined (overlaps the array) or serial (after it)");
}

void Validate(const VectorUnit& u) {
  if (u.lanes < 1)
    throw std::invalid_argument("VectorUnit.lanes must be >= 1, got " + Str(u.lanes));
  for (int c = 0; c < kVectorOpClasses; ++c) {
    const double cyc = u.cycles_per_op[c], pj = u.pj_per_op[c];
    if (!(cyc > 0) || !std::isfinite(cyc))
      throw std::invalid_argument(std::string("VectorUnit.cycles_per_op.") + kClassNames[c] +
                                  " must be a positive number of lane cycles, got " + Num(cyc));
    if (!(pj >= 0) || !std::isfinite(pj))
      throw std::invalid_argument(std::string("VectorUnit.pj_per_op.") + kClassNames[c] +
                                  " must be a finite number >= 0 of pJ, got " + Num(pj));
  }
  if (!(u.buffer_bandwidth_bits > 0) || !std::isfinite(u.buffer_bandwidth_bits))
    throw std::invalid_argument("VectorUnit.buffer_bandwidth_bits must be a positive number of "
                                "bits per cycle, got " + Num(u.buffer_bandwidth_bits));
  if (u.launch_cycles < 0)
    throw std::invalid_argument("VectorUnit.launch_cycles must be >= 0 cycles, got " +
                                Str(u.launch_cycles));
  if (!(u.dram_efficiency > 0 && u.dram_efficiency <= 1))
    throw std::invalid_argument("VectorUnit.dram_efficiency must be in (0, 1] (the share of "
                                "DRAM bandwidth a vector kernel reaches), got " +
                                Num(u.dram_efficiency));
  for (auto [name, p] : {std::pair{"softmax_passes", u.softmax_passes},
                         {"norm_passes", u.norm_passes}})
    if (p < 1 || p > 64)
      throw std::invalid_argument(std::string("VectorUnit.") + name + " must be 1..64 reads of "
                                  "the input, got " + Str(p));
  if (!(u.row_bits_per_cycle >= 0) || !std::isfinite(u.row_bits_per_cycle))
    throw std::invalid_argument("VectorUnit.row_bits_per_cycle must be a finite number >= 0 "
                                "(0: no per-row bound), got " + Num(u.row_bits_per_cycle));
}

int64_t VectorInputPasses(VectorOp op, const VectorUnit& u) {
  if (op == VectorOp::kSoftmax) return u.softmax_passes;
  if (op == VectorOp::kLayerNorm || op == VectorOp::kRmsNorm) return u.norm_passes;
  return 1;
}

bool EdgeDequantizer::Converts(int code_bits) const {
  return elements_per_cycle > 0 && std::find(bits.begin(), bits.end(), code_bits) != bits.end();
}

void Validate(const EdgeDequantizer& e) {
  if (e.elements_per_cycle < 0)
    throw std::invalid_argument("EdgeDequantizer.elements_per_cycle must be >= 0 (0: none), got " +
                                Str(e.elements_per_cycle));
  if ((e.elements_per_cycle > 0) != !e.bits.empty())
    throw std::invalid_argument(
        "EdgeDequantizer.bits must list the code widths it converts exactly when "
        "elements_per_cycle > 0 (got " + Str(static_cast<int64_t>(e.bits.size())) +
        " widths with elements_per_cycle " + Str(e.elements_per_cycle) + ")");
  for (size_t i = 0; i < e.bits.size(); ++i) {
    if (e.bits[i] < 1 || e.bits[i] > 32)
      throw std::invalid_argument("EdgeDequantizer.bits[" + Str(int64_t(i)) + "] = " +
                                  Str(e.bits[i]) + "; expected a code width in 1..32");
    if (i > 0 && e.bits[i] <= e.bits[i - 1])
      throw std::invalid_argument("EdgeDequantizer.bits must be ascending without repeats, got " +
                                  Str(e.bits[i - 1]) + " before " + Str(e.bits[i]));
  }
  if (!(e.pj_per_element >= 0) || !std::isfinite(e.pj_per_element))
    throw std::invalid_argument("EdgeDequantizer.pj_per_element must be a finite number >= 0, "
                                "got " + Num(e.pj_per_element));
}

void Validate(const VectorCall& c) {
  if (c.shape.empty())
    throw std::invalid_argument(std::string("VectorCall.shape of ") + VectorOpName(c.op) +
                                " must have at least one axis");
  int64_t n = 1;
  for (size_t i = 0; i < c.shape.size(); ++i) {
    if (c.shape[i] < 1)
      throw std::invalid_argument("VectorCall.shape[" + Str(int64_t(i)) + "] = " +
                                  Str(c.shape[i]) + "; every axis must be >= 1");
    n = CheckedMul(n, c.shape[i], "VectorCall elements");
  }
  for (auto [name, bits] : {std::pair{"bits_in", c.bits_in}, {"bits_out", c.bits_out}})
    if (bits < 1 || bits > 64)
      throw std::invalid_argument(std::string("VectorCall.") + name + " = " + Str(bits) +
                                  "; expected 1..64");
  const std::string at = std::string("VectorCall.operand_elements of ") + VectorOpName(c.op) +
                         " = " + Str(c.operand_elements);
  if (IsBinary(c.op)) {
    if (c.operand_elements < 1 || c.operand_elements > n)
      throw std::invalid_argument(at + "; expected the second operand's elements, 1.." + Str(n));
  } else if (c.op == VectorOp::kRotary) {
    if (c.operand_elements < 1)
      throw std::invalid_argument(at + "; expected the cos and sin tables' elements, >= 1");
  } else if (c.operand_elements != 0) {
    throw std::invalid_argument(at + "; expected 0 (only add, multiply, divide and rotary read "
                                "a second operand)");
  }
  // Bit counts below are products of elements and widths.
  CheckedMul(CheckedAdd(n, c.operand_elements, "VectorCall elements"), 64, "VectorCall bits");
}

bool operator==(const VectorCall& a, const VectorCall& b) {
  return a.op == b.op && a.shape == b.shape && a.bits_in == b.bits_in &&
         a.bits_out == b.bits_out && a.operand_elements == b.operand_elements;
}

std::string SerializeVectorCall(const VectorCall& c) {
  std::ostringstream os;
  os << "{\"op\":\"" << VectorOpName(c.op) << "\",\"shape\":[";
  for (size_t i = 0; i < c.shape.size(); ++i) os << (i ? "," : "") << c.shape[i];
  os << "],\"bits_in\":" << c.bits_in << ",\"bits_out\":" << c.bits_out
     << ",\"operand_elements\":" << c.operand_elements << '}';
  return os.str();
}

size_t VectorCallHash::operator()(const VectorCall& c) const {
  size_t h = std::hash<int>()(static_cast<int>(c.op));
  auto mix = [&h](int64_t v) { h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (int64_t d : c.shape) mix(d);
  mix(c.bits_in);
  mix(c.bits_out);
  mix(c.operand_elements);
  return h;
}

VectorOpCounts VectorOps(const VectorCall& c) {
  Validate(c);
  int64_t n = 1;
  for (int64_t d : c.shape) n *= d;
  const int64_t h = c.shape.back(), r = n / h, e = c.operand_elements;
  // {add, mul, exp, recip, tanh}; N output elements in R rows of H.
  switch (c.op) {
    // sum x, x - mean, sum of squares, + beta (per element); + eps (per row) |
    // square, x rstd, x gamma (per element); / H for mean and variance (per row) | rsqrt.
    case VectorOp::kLayerNorm: return {4 * n + r, 3 * n + 2 * r, 0, r, 0};
    // sum of squares; + eps | square, x rstd, x gamma; / H | rsqrt.
    case VectorOp::kRmsNorm: return {n + r, 3 * n + r, 0, r, 0};
    // max, x - max, sum | x (1 / sum) | exp | 1 / sum per row.
    case VectorOp::kSoftmax: return {3 * n, n, n, r, 0};
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): x^2, x^3, x 0.044715, x sqrt(2/pi),
    // 0.5 x, x (1 + t) | x + ..., 1 + t | tanh.
    case VectorOp::kGeluTanh: return {2 * n, 6 * n, 0, 0, n};
    // 0.5 x (1 + erf(x / sqrt 2)): x / sqrt 2, 0.5 x, x (1 + e) | 1 + e | erf.
    case VectorOp::kGeluErf: return {n, 3 * n, 0, 0, n};
    // x / (1 + exp(-x)): 1 + ..., x (1 / ...), exp, reciprocal.
    case VectorOp::kSilu: return {n, n, n, n, 0};
    case VectorOp::kAdd: return {n, 0, 0, 0, 0};
    case VectorOp::kMultiply: return {0, n, 0, 0, 0};
    // x (1 / y): one reciprocal per divisor element (a broadcast divisor once), one multiply
    // per output element.
    case VectorOp::kDivide: return {0, n, 0, e, 0};
    // x cos + rotate_half(x) sin: two multiplies and an add per element.
    case VectorOp::kRotary: return {n, 2 * n, 0, 0, 0};
    // A gather and a copy: data movement only.
    case VectorOp::kTake: return {0, 0, 0, 0, 0};
    case VectorOp::kKvWrite: return {0, 0, 0, 0, 0};
    // The causal test (query position >= key position) and the select: one compare each.
    case VectorOp::kMask: return {n, 0, 0, 0, 0};
    // x (1 / scale) | round, clamp below, clamp above.
    case VectorOp::kQuantize: return {3 * n, n, 0, 0, 0};
    // max(x, 0): one compare-select per element.
    case VectorOp::kRelu: return {n, 0, 0, 0, 0};
    // tanh alone (Gemma-2's soft-capping of attention and final logits): one approximation.
    case VectorOp::kTanh: return {0, 0, 0, 0, n};
  }
  return {};
}

VectorCharge ChargeVectorCall(const VectorCall& call, const VectorUnit& unit,
                              const MemoryHierarchy& mem, double clock_ghz, const Cores& cores) {
  Validate(unit);
  Validate(cores);
  if (unit.lanes % cores.count != 0)
    throw std::invalid_argument("vector.lanes (" + std::to_string(unit.lanes) +
                                ") must be a multiple of cores.count (" +
                                std::to_string(cores.count) + "): each core has its own lanes");
  VectorCharge ch;
  ch.call = call;
  ch.ops = VectorOps(call);  // validates the call
  int64_t n = 1;
  for (int64_t d : call.shape) n *= d;
  const int64_t h = call.shape.back(), r = n / h, e = call.operand_elements;
  ch.elements = n;
  ch.rows = r;
  const int64_t in = call.bits_in, out = call.bits_out;
  // Activations read from the buffer, parameters from DRAM (through the buffer), output.
  int64_t act_bits = 0, param_bits = 0;
  switch (call.op) {
    case VectorOp::kAdd: case VectorOp::kMultiply: case VectorOp::kDivide:
      act_bits = (n + e) * in; break;
    case VectorOp::kLayerNorm: act_bits = n * in; param_bits = 2 * h * in; break;  // gamma, beta
    case VectorOp::kRmsNorm: act_bits = n * in; param_bits = h * in; break;        // gamma
    case VectorOp::kRotary: act_bits = n * in; param_bits = e * in; break;         // cos, sin
    case VectorOp::kTake: act_bits = r * 32; param_bits = n * out; break;  // int32 ids; rows
    case VectorOp::kMask: break;  // built from positions alone
    default: act_bits = n * in; break;
  }
  const int64_t out_bits = n * out;
  ch.passes = VectorInputPasses(call.op, unit);
  const int64_t act_reads = CheckedMul(act_bits, ch.passes, "VectorCall bits");
  ch.spilled = act_bits + out_bits > mem.buffer_bytes * 8;
  const bool in_dram = ch.spilled || unit.streams_from_dram;
  ch.buffer_read_bits = act_reads + param_bits;
  ch.buffer_write_bits = call.op == VectorOp::kKvWrite ? 0 : out_bits;
  ch.dram_read_bits = param_bits + (in_dram ? act_reads : 0);
  ch.dram_write_bits = (in_dram || call.op == VectorOp::kKvWrite) ? out_bits : 0;

  double lane_cycles = 0, op_pj = 0;
  for (int c = 0; c < kVectorOpClasses; ++c) {
    lane_cycles += double(ch.ops[c]) * unit.cycles_per_op[c];
    op_pj += double(ch.ops[c]) * unit.pj_per_op[c];
  }
  const bool reduces_rows = call.op == VectorOp::kSoftmax || call.op == VectorOp::kLayerNorm ||
                            call.op == VectorOp::kRmsNorm;
  const int64_t buffer_bits = ch.buffer_read_bits + ch.buffer_write_bits;
  const int64_t dram_bits = ch.dram_read_bits + ch.dram_write_bits;
  if (cores.count == 1) {
    ch.compute_cycles = static_cast<int64_t>(std::ceil(lane_cycles / double(unit.lanes)));
    ch.buffer_cycles = CeilCycles(buffer_bits, unit.buffer_bandwidth_bits);
  } else {  // one core's share: ceil(units / count) of the rows or elements, in waves
    const int64_t units = reduces_rows ? r : n;
    const int64_t waves = CeilDiv(units, cores.count);
    const double share = double(waves) / double(units);
    ch.cores = std::min(units, cores.count);
    ch.compute_cycles = static_cast<int64_t>(
        std::ceil(lane_cycles * share / double(unit.lanes / cores.count)));
    ch.buffer_cycles = static_cast<int64_t>(std::ceil(
        double(buffer_bits) * share / (unit.buffer_bandwidth_bits / double(cores.count))));
    ch.shared_cycles = CeilCycles(dram_bits, cores.shared_bandwidth_bits);
  }
  ch.dram_cycles = CeilCycles(dram_bits, mem.dram_bandwidth_bits * unit.dram_efficiency);
  if (reduces_rows && unit.row_bits_per_cycle > 0)
    ch.row_cycles = CeilCycles(CheckedMul(ch.passes, h * in, "VectorCall bits"),
                               unit.row_bits_per_cycle);
  ch.launch_cycles = unit.launch_cycles;
  ch.cycles = CheckedAdd(unit.launch_cycles,
                         std::max({ch.compute_cycles, ch.buffer_cycles, ch.dram_cycles,
                                   ch.shared_cycles, ch.row_cycles}),
                         "vector unit: cycles");
  ch.latency_us = double(ch.cycles) / (clock_ghz * 1e3);
  ch.schedule = unit.schedule;
  ch.op_pj = op_pj;
  ch.buffer_pj = double(ch.buffer_read_bits + ch.buffer_write_bits) * mem.buffer_pj_per_bit;
  ch.dram_pj = double(ch.dram_read_bits + ch.dram_write_bits) * mem.dram_pj_per_bit;
  ch.total_pj = ch.op_pj + ch.buffer_pj + ch.dram_pj;
  if (!std::isfinite(ch.total_pj))  // finite figures whose products overflow
    throw std::invalid_argument(
        "vector unit: the energy of a call overflows a double (ops " +
        std::to_string(ch.op_pj) + " pJ, buffer " + std::to_string(ch.buffer_pj) + ", DRAM " +
        std::to_string(ch.dram_pj) + "): vector.pj_per_op or memory *_pj_per_bit is too large");
  return ch;
}

namespace detail {

OrderedJson VectorUnitJson(const VectorUnit& u) {
  OrderedJson cycles = OrderedJson::object(), pj = OrderedJson::object();
  for (int c = 0; c < kVectorOpClasses; ++c) {
    cycles[kClassNames[c]] = u.cycles_per_op[c];
    pj[kClassNames[c]] = u.pj_per_op[c];
  }
  return {{"lanes", u.lanes},
          {"cycles_per_op", cycles},
          {"pj_per_op", pj},
          {"buffer_bandwidth_bits", u.buffer_bandwidth_bits},
          {"schedule", VectorScheduleName(u.schedule)},
          {"launch_cycles", u.launch_cycles},
          {"dram_efficiency", u.dram_efficiency},
          {"streams_from_dram", u.streams_from_dram},
          {"softmax_passes", u.softmax_passes},
          {"norm_passes", u.norm_passes},
          {"row_bits_per_cycle", u.row_bits_per_cycle}};
}

VectorUnit ParseVectorUnitJson(const JsonValue& v, const std::string& where) {
  ExpectKeys(v, {"lanes", "cycles_per_op", "pj_per_op", "buffer_bandwidth_bits", "schedule",
                 "launch_cycles", "dram_efficiency", "streams_from_dram", "softmax_passes",
                 "norm_passes", "row_bits_per_cycle"},
             where);
  VectorUnit u;
  u.lanes = IntegerMember(v, "lanes", where);
  std::vector<std::string> classes(kClassNames, kClassNames + kVectorOpClasses);
  for (auto [key, field] : {std::pair{"cycles_per_op", &VectorUnit::cycles_per_op},
                            {"pj_per_op", &VectorUnit::pj_per_op}}) {
    const JsonValue& per = Member(v, key, where);
    const std::string at = where + "." + key;
    ExpectKeys(per, classes, at);
    for (int c = 0; c < kVectorOpClasses; ++c)
      (u.*field)[c] = NumberMember(per, kClassNames[c], at);
  }
  u.buffer_bandwidth_bits = NumberMember(v, "buffer_bandwidth_bits", where);
  try {
    u.schedule = ParseVectorSchedule(StringMember(v, "schedule", where));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ".schedule: " + e.what());
  }
  // The kernel fields came later: a file without them keeps the defaults.
  if (v.contains("launch_cycles")) u.launch_cycles = IntegerMember(v, "launch_cycles", where);
  if (v.contains("dram_efficiency"))
    u.dram_efficiency = NumberMember(v, "dram_efficiency", where);
  if (v.contains("streams_from_dram"))
    u.streams_from_dram = BoolMember(v, "streams_from_dram", where);
  if (v.contains("softmax_passes")) u.softmax_passes = IntegerMember(v, "softmax_passes", where);
  if (v.contains("norm_passes")) u.norm_passes = IntegerMember(v, "norm_passes", where);
  if (v.contains("row_bits_per_cycle"))
    u.row_bits_per_cycle = NumberMember(v, "row_bits_per_cycle", where);
  return u;
}

OrderedJson EdgeDequantizerJson(const EdgeDequantizer& e) {
  return {{"elements_per_cycle", e.elements_per_cycle},
          {"bits", e.bits},
          {"pj_per_element", e.pj_per_element}};
}

EdgeDequantizer ParseEdgeDequantizerJson(const JsonValue& v, const std::string& where) {
  ExpectKeys(v, {"elements_per_cycle", "bits", "pj_per_element"}, where);
  EdgeDequantizer e;
  e.elements_per_cycle = IntegerMember(v, "elements_per_cycle", where);
  const JsonValue& bits = Member(v, "bits", where);
  if (!bits.is_array())
    throw std::invalid_argument(where + ".bits must be a list of code widths");
  for (size_t i = 0; i < bits.size(); ++i) {
    const int64_t b = AsInteger(bits[i], where + ".bits[" + Str(int64_t(i)) + "]");
    if (b < 1 || b > 32)
      throw std::invalid_argument(where + ".bits[" + Str(int64_t(i)) + "] = " + Str(b) +
                                  "; expected a code width in 1..32");
    e.bits.push_back(static_cast<int>(b));
  }
  e.pj_per_element = NumberMember(v, "pj_per_element", where);
  return e;
}

}  // namespace detail

}  // namespace tenet
