// What one offloaded GEMM call is charged: the one rule that the runtime's ledger and the
// Python binding (cost_model.analyze_gemm, cost_model.charge_gemm) both apply.
//
// A call comes in as a plain description (GemmCall: shape, batch, operand widths, side
// data, extra ops, scheme) and goes out as a plain Charge. The parts of a charge are
// levels of the model, each its own struct filled by its own function: today the PE array
// (TENET's relations, with the bandwidth stall), the memory hierarchy (buffer and DRAM
// traffic per tile, overlap, roofline) and energy; a mapping search is one more kind of
// the accelerator's MappingPolicy, used in ChargeGemm, so every caller gets it at once.
//
// Pure C++17, thread-safe (no state), errors as std::invalid_argument naming the field.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/accelerator.h"
#include "cost_model/cost_model.h"
#include "cost_model/energy.h"
#include "cost_model/memory.h"

namespace tenet {

// Where a quantized call turns stored integers into the values it multiplies; this decides
// the non-MAC work and the side data it is charged.
enum class Dequantization {
  kNone,                 // float operands
  kWeight,               // weight-only: one multiply per weight element, before the array
  kActivationAndOutput,  // int8 x int8: the activation's max-abs and quantization (2 ops
                         // per element of A) and the output's dequantization (1 per C)
};

// Quantization scales are charged as float16 side data (as MLC-LLM, GPTQ and AWQ store
// them), read off chip once per call.
constexpr int64_t kScaleBits = 16;

// One call as the cost model sees it.
struct GemmCall {
  GemmWorkload workload;        // shape, batch, operand widths, side-data bits, extra ops
  std::string scheme = "none";  // the quantization scheme that produced the call
};

// The call of a GEMM with batch x [m, k] x [k, n] operands of the given widths, whose
// quantization (if any) keeps `scale_elements` scales and dequantizes at `place`.
GemmCall DescribeGemmCall(int64_t batch, int64_t m, int64_t n, int64_t k, int bits_a,
                          int bits_b, int bits_c, Dequantization place,
                          int64_t scale_elements, const std::string& scheme);

// What a call costs, by level of the model.
struct Charge {
  GemmCall call;
  // The PE array alone (TENET's relations): counts, reuse, cycles with one off-chip
  // bandwidth stall. Kept for TENET's figures; the call's latency is memory.cycles.
  Metrics array;
  // The buffer level: the call cut into buffer tiles by the accelerator's mapping choice,
  // each tile costed by the exact array model (cached per tile shape); DRAM, buffer and
  // register traffic, cycles with DRAM transfers overlapped, roofline_cycles, the mapping.
  // memory.cycles (and latency_us) is the call's latency.
  MemoryMetrics memory;
  // The call's energy by component at the PE unit its operand widths run on.
  EnergyBreakdown energy;
};

// Operand widths the accelerator's PEs do not take, and tiles that do not fit, are refused
// (std::invalid_argument naming them). `method` is the array level's (AnalyzeGemm).
Charge ChargeGemm(const GemmCall& call, const Accelerator& accelerator,
                  AnalysisMethod method = AnalysisMethod::kAuto);

// The buffer tiles a call runs with on `accelerator` (its MappingPolicy applied to the call).
TileMapping ChooseMapping(const GemmWorkload& w, const Accelerator& accelerator);

// Equality and hashing of calls, for caches keyed by the call.
bool operator==(const GemmCall& a, const GemmCall& b);
struct GemmCallHash {
  size_t operator()(const GemmCall& call) const;
};

}  // namespace tenet
