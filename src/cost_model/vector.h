// The vector unit and the edge dequantizer beside the PE array: what a non-GEMM operator
// (norms, softmax, activations, elementwise, rotary, embedding, quantize, KV-cache writes)
// costs, and what converts narrow weight codes at the array edge.
//
// Pure C++17, no TVM, no Python; every function is thread-safe (no state). Bad input throws
// std::invalid_argument naming the field, the value and what is accepted.
//
// Model (README.md in this directory, "The vector unit"): an operator of N output elements in
// rows of H (its last axis; R = N / H rows) does a fixed number of operations of each class
// per element and per row (VectorOps: the formulas, one per operator kind). The unit has
// `lanes` lanes; an op of class c occupies a lane for cycles_per_op[c] cycles, so compute
// takes ceil(sum_c ops[c] x cycles_per_op[c] / lanes) cycles. Its operands stream through the
// global buffer at the unit's buffer bandwidth; parameters (norm weights, rotary tables,
// embedding rows) come from DRAM; when the operator's activations and output do not fit the
// buffer together they spill (inputs read from, output written to DRAM); a KV-cache write's
// output always goes to DRAM. Transfers overlap compute (streamed), so the call takes the
// largest of the compute, buffer and DRAM cycles. A unit that runs kernels as a GPU does
// (VectorUnit: streams_from_dram, passes, dram_efficiency, row_bits_per_cycle,
// launch_cycles) reads its activations from DRAM once per pass of its kernel and writes the
// output there, at dram_efficiency of the bandwidth, no faster than one row's passes on one
// core, and pays a fixed launch per kernel: launch + max(compute, buffer, DRAM, row).
// On an accelerator of cores (core.h, count > 1) each core has its share of the unit (lanes /
// count lanes, buffer_bandwidth_bits / count): a call's rows (softmax and norms: a row is one
// core's) or elements (every other kind) go to the cores in waves, so compute and buffer
// cycles are one core's share, ceil(units / count) units; DRAM stays the chip's, and the
// DRAM traffic also crosses the shared level at cores.shared_bandwidth_bits. One core is
// charged exactly as above.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/core.h"
#include "cost_model/json.h"
#include "cost_model/memory.h"

namespace tenet {

// The classes of operation a vector lane executes, each with its own cost.
enum class VectorOpClass {
  kAdd,    // add, subtract, max, compare, round, clamp
  kMul,    // multiply
  kExp,    // exponential
  kRecip,  // reciprocal, reciprocal square root (a divide is a reciprocal and a multiply)
  kTanh,   // tanh, erf (the approximations GELU uses)
};
constexpr int kVectorOpClasses = 5;
using VectorOpCounts = std::array<int64_t, kVectorOpClasses>;
using VectorOpFigures = std::array<double, kVectorOpClasses>;
const char* VectorOpClassName(VectorOpClass c);  // "add", "mul", "exp", "recip", "tanh"

// Horowitz, ISSCC 2014, 45 nm: a float32 add 0.9 pJ, a float32 multiply 3.7 pJ. The
// transcendental classes have no figure there; they are charged as the float32
// multiply-adds (4.6 pJ each) of the usual approximations: exp as range reduction and a
// polynomial (4 multiply-adds), reciprocal / rsqrt as a seed and two Newton steps (2 x (2
// multiplies + 1 add) = 16.6 pJ), tanh / erf as a rational approximation (7 multiply-adds
// and a reciprocal: 48.8 pJ). Cycles per op follow the same counts on a pipelined lane:
// 1 for add and multiply, 4 for exp and reciprocal, 8 for tanh / erf. The sums are written
// out (4 x 4.6 = 18.4, 7 x 4.6 + 16.6 = 48.8) so they print as written, not 18.400000000000002.
constexpr VectorOpFigures kVectorPjPerOp45nm = {0.9, 3.7, 18.4, 16.6, 48.8};
constexpr VectorOpFigures kVectorCyclesPerOp = {1, 1, 4, 4, 8};

// Whether vector work overlaps the array's (pipelined behind the GEMM that produces its
// input, as the TPU's activation pipeline) or runs after it. A charge carries it; how a
// model's latency adds calls up follows from it (README).
enum class VectorSchedule { kPipelined, kSerial };
const char* VectorScheduleName(VectorSchedule s);  // "pipelined", "serial"
VectorSchedule ParseVectorSchedule(const std::string& name);

// The vector unit: float32 lanes beside the array, reading and writing the global buffer.
struct VectorUnit {
  int64_t lanes = 16;                                 // >= 1
  VectorOpFigures cycles_per_op = kVectorCyclesPerOp;  // each > 0: lane cycles per op
  VectorOpFigures pj_per_op = kVectorPjPerOp45nm;      // each >= 0
  // Buffer <-> vector unit, bits per cycle, > 0: by default one float32 operand in and one
  // out per lane per cycle (lanes x 64).
  double buffer_bandwidth_bits = 16 * 64;
  VectorSchedule schedule = VectorSchedule::kPipelined;
  // A vector kernel as a GPU runs it (all 0 / 1 / false: the unit above, charged as before).
  int64_t launch_cycles = 0;      // >= 0: fixed cost of each vector kernel (launch, tail)
  double dram_efficiency = 1.0;   // (0, 1]: the share of DRAM bandwidth its streams reach
  // true: every kernel reads its activations from DRAM and writes its output there (a GPU's
  // kernels work through global memory), whatever fits the buffer.
  bool streams_from_dram = false;
  // Reads of its input a softmax / a layer or RMS norm kernel makes (the max, the sum and
  // the output; the moments and the output), >= 1; every other operator reads it once.
  int64_t softmax_passes = 1, norm_passes = 1;
  // > 0: a row-reducing kernel (softmax, norms) takes at least one row's passes at this many
  // bits per cycle (one core on one row, bound by its memory round trips); 0: no such bound.
  double row_bits_per_cycle = 0;
};

void Validate(const VectorUnit& unit);

// A dequantizer between the buffer and the array edge that turns weight codes of the widths
// it converts into the values the PEs multiply, in parallel with the array
// (Dequantization::kWeight runs here instead of on the PEs when the weight width is one of
// `bits`). elements_per_cycle 0: there is none (dequantization runs on the PEs).
struct EdgeDequantizer {
  int64_t elements_per_cycle = 0;  // >= 0: weight elements converted per cycle at the edge
  std::vector<int> bits;           // code widths converted, ascending, each 1..32; non-empty
                                   // exactly when elements_per_cycle > 0
  // A float16 multiply (the scale) and add (the zero point), Horowitz ISSCC 2014 45 nm:
  // 1.1 + 0.4 pJ per element.
  double pj_per_element = 1.1 + 0.4;  // >= 0

  bool Converts(int code_bits) const;
};
void Validate(const EdgeDequantizer& edge);

// The operator kinds the vector unit is charged for.
enum class VectorOp {
  kLayerNorm, kRmsNorm, kSoftmax, kGeluTanh, kGeluErf, kSilu, kAdd, kMultiply, kDivide,
  kRotary, kTake, kMask, kQuantize, kKvWrite, kRelu, kTanh,
};
constexpr int kVectorOps = 16;
const char* VectorOpName(VectorOp op);  // "layer_norm", ..., "kv_write", "relu", "tanh"
VectorOp ParseVectorOp(const std::string& name);
// The reads of its input `op`'s kernel makes on `unit` (softmax_passes, norm_passes or 1).
int64_t VectorInputPasses(VectorOp op, const VectorUnit& unit);

// One non-GEMM operator call as the cost model sees it.
struct VectorCall {
  VectorOp op = VectorOp::kAdd;
  std::vector<int64_t> shape;  // the output's shape, each >= 1; its last axis is the row
  int bits_in = 32;            // activations (and parameters) read, 1..64
  int bits_out = 32;           // the output written, 1..64
  // add / multiply / divide: the second operand's elements (fewer than the output's when it
  // is broadcast: a scale, a bias); rotary: the cos and sin tables' elements together; 0 for
  // every other kind.
  int64_t operand_elements = 0;
};
// Checks the fields and that operand_elements suits the kind (1..N for binary kinds, >= 1
// for rotary, 0 otherwise).
void Validate(const VectorCall& call);
bool operator==(const VectorCall& a, const VectorCall& b);
std::string SerializeVectorCall(const VectorCall& call);

// Operations of each class the call does (the formulas in vector.cc, one per kind).
VectorOpCounts VectorOps(const VectorCall& call);

// What a vector call costs on an accelerator's vector unit and memory.
struct VectorCharge {
  VectorCall call;
  int64_t elements = 0;  // output elements N
  int64_t rows = 0;      // N / H
  VectorOpCounts ops{};  // by VectorOpClass
  int64_t buffer_read_bits = 0, buffer_write_bits = 0;
  int64_t dram_read_bits = 0, dram_write_bits = 0;
  bool spilled = false;  // activations and output did not fit the buffer together
  int64_t compute_cycles = 0, buffer_cycles = 0, dram_cycles = 0;
  int64_t cores = 1;          // cores the call runs on: min(units, cores.count)
  int64_t shared_cycles = 0;  // its DRAM traffic through the cores' shared level (0: one core)
  int64_t cycles = 0;  // launch + max of compute, buffer, DRAM, shared and row: the latency
  int64_t passes = 1;        // reads of the input (VectorInputPasses)
  int64_t row_cycles = 0;    // one row's passes at row_bits_per_cycle (0: no such bound)
  int64_t launch_cycles = 0; // the unit's launch_cycles
  double latency_us = 0;
  VectorSchedule schedule = VectorSchedule::kPipelined;
  double op_pj = 0, buffer_pj = 0, dram_pj = 0, total_pj = 0;
};
// Hashing of calls, for the runtime's cache of charges per distinct call.
struct VectorCallHash {
  size_t operator()(const VectorCall& call) const;
};
// `cores`: the accelerator's (its count > 1 spreads the call, lanes a multiple of the count).
VectorCharge ChargeVectorCall(const VectorCall& call, const VectorUnit& unit,
                              const MemoryHierarchy& memory, double clock_ghz,
                              const Cores& cores = Cores{});

namespace detail {
// The two units' parts of the accelerator's JSON form (accelerator.h), every field by name;
// `where` names the object in messages. The readers check keys and types; Validate checks
// values.
OrderedJson VectorUnitJson(const VectorUnit& unit);
VectorUnit ParseVectorUnitJson(const JsonValue& value, const std::string& where);
OrderedJson EdgeDequantizerJson(const EdgeDequantizer& edge);
EdgeDequantizer ParseEdgeDequantizerJson(const JsonValue& value, const std::string& where);
}  // namespace detail

}  // namespace tenet
