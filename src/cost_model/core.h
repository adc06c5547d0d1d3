// An accelerator of cores: N cores, each the accelerator's array (its hardware, dataflow,
// local buffer and registers: Accelerator::memory's buffer and register fields), sharing one
// on-chip level (an L2, a unified buffer) with its bandwidth, and DRAM; a fixed cost per
// kernel launch. How a call's work spreads over the cores and what it is charged.
//
// Units are in the field names (bits per cycle, bytes, cycles). Pure C++17, no TVM; every
// function is thread-safe (no state). Bad input throws std::invalid_argument naming the
// field ("cores.count"), which the Python binding raises as ValueError.
//
// Model (README.md in this directory, "An accelerator of cores"):
//  * One core (count 1, launch_cycles 0) is charged exactly as before: ChargeGemm's rule.
//  * Otherwise a call C[M,N] (+)= A[M,K] B[K,N] (batch times) is cut into work units: output
//    tiles of tm x tn (tm a multiple of the array's rows, tn of its columns), each batch
//    element its own tiles, and K split s ways (split-K; s <= max_split_k). The units go to
//    the cores in waves: active = min(units, count) cores, waves = ceil(units / count). One
//    core runs `waves` GEMMs of min(tm, M) x min(tn, N) x ceil(K / s), charged by the one-core
//    rule with the core's DRAM side being its share of the shared level:
//    shared_bandwidth_bits / active bits per cycle (the shared level's bandwidth shared).
//  * The call takes launch_cycles + max(one core's cycles, compulsory DRAM bits / the
//    accelerator's DRAM bandwidth) + the split-K reduction (s partial C's at psum_bits written
//    and read back through the shared level, and one more launch), at the cheapest (tm, tn,
//    s) of the candidates: tm = rows x 2^i, tn = cols x 2^j (i, j = 0..5, no larger than
//    needed), s = 1, 2, 4, ... max_split_k (no more than K / rows).
//  * Traffic, energy and the array's volumes: one core's, times the units over the waves (all
//    units' work); time (cycles, time steps, delays) the critical path, one core's waves;
//    PE counts every core's (ChargeOnCores lifts each field, core.cc).
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/json.h"

namespace tenet {

struct Accelerator;
struct Charge;
struct GemmCall;
enum class AnalysisMethod;

struct Cores {
  int64_t count = 1;                 // cores, >= 1
  double shared_bandwidth_bits = 0;  // shared level <-> the cores, bits per cycle; > 0 when
                                     // count > 1 (0: one core, no shared level)
  int64_t shared_bytes = 0;          // the shared level's capacity, bytes, >= 0
  int64_t launch_cycles = 0;         // fixed cost of one kernel launch, cycles, >= 0
  int64_t max_split_k = 1;           // most ways K is split, a power of 2 >= 1
};
void Validate(const Cores& cores);
bool operator==(const Cores& a, const Cores& b);
// count 1 and no launch cost: charged exactly as an accelerator without cores.
bool IsOneCore(const Cores& cores);

// The call charged on an accelerator of cores (the model above); `accelerator.cores` must
// not be IsOneCore. Mapping "auto": the split is chosen with each core's default tiling,
// then the chosen core's work is searched (one search per call) and the faster of the two
// kept. Mapping "given": those tiles for each core's work. `prune`: a split whose lower bound
// (its core's roofline) is not below the best so far is skipped uncharged; the choice and
// the charge are the exhaustive search's (prune false) to the bit.
Charge ChargeOnCores(const GemmCall& call, const Accelerator& accelerator, AnalysisMethod method,
                     bool prune = true);

namespace detail {
// The JSON object of the "cores" member: {"count", "shared_bandwidth_bits", "shared_bytes",
// "launch_cycles", "max_split_k"}, every key required; validated.
OrderedJson CoresJson(const Cores& cores);
Cores ParseCoresJson(const JsonValue& v, const std::string& where);
}  // namespace detail

}  // namespace tenet
