// What one offloaded GEMM call is charged: the one rule that the runtime's ledger and the
// Python binding (cost_model.analyze_gemm, cost_model.charge_gemm) both apply.
//
// A call comes in as a plain description (GemmCall: shape, batch, operand widths, the
// quantization recipe and what it adds: side data, extra ops) and goes out as a plain
// Charge. The parts of a charge are
// levels of the model, each its own struct filled by its own function: the PE array
// (TENET's relations, with the bandwidth stall), the memory hierarchy (buffer and DRAM
// traffic per tile, overlap, roofline) and energy. The accelerator's MappingPolicy says how
// the call's dataflow and tiles are chosen; with kind "auto" a MappingSearch (mapping.h)
// chooses them, so every caller (ledger, binding) gets the search at once.
//
// Pure C++17. ChargeGemm is thread-safe; the MappingSearch it may be given is thread-safe
// itself (its cache is behind a mutex). Errors as std::invalid_argument naming the field.
#pragma once

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "cost_model/accelerator.h"
#include "cost_model/cost_model.h"
#include "cost_model/energy.h"
#include "cost_model/mapping.h"
#include "cost_model/memory.h"

namespace tenet {

// Where a quantized call turns stored codes into the values it multiplies; this decides
// the dequantization work it is charged.
enum class Dequantization {
  kNone,    // float operands, or scales folded away at compile time
  kWeight,  // weights dequantized before the array: one op per weight element (N x K)
  kKGroup,  // partial sums rescaled per K-group inside the accumulation (group-wise
            // activations, MX blocks): batch x M x N x ceil(K / G) multiply-adds, each a
            // read and a write of the accumulator
  kOutput,  // one rescale per output element after the integer GEMM: batch x M x N
};

// Which elements of an operand share one scale (and zero point). For B the names are those
// of a weight [N, K]; kEmbedding on B is one scale per K index (a V cache's per-token
// scales in P x V, whose K is the token axis).
enum class Granularity {
  kNone,       // not quantized (float)
  kTensor,     // one scale per operand
  kChannel,    // weights: one per output channel (N); activations: one per token (M)
  kEmbedding,  // activations: one per hidden channel (K), static, folded into the weights
  kGroup,      // G consecutive elements along K (weights: N x K/G; activations: M x K/G)
  kGroupN,     // weights only: G consecutive elements along N for each K index (K x N/G),
               // the channel groups of one token of a V cache used as PV's B operand
};

// Quantization scales default to float16 side data (as MLC-LLM, GPTQ and AWQ store them).
constexpr int64_t kScaleBits = 16;

// How the quantize pass stored and computes one call: everything its charge depends on
// beyond the shape and the element widths. Stamped by the pass; the codegen copies it.
//
// The field list, written once: X(type, name, default, required in the JSON form). The
// struct, ==, the hash, the JSON form (SerializeQuantRecipe / ParseQuantRecipe) and the
// Python binding (its constructor's keywords, attributes and QuantRecipe.FIELDS) are all
// made from it, so a new field is one line here (and what the charge does with it).
#define TENET_QUANT_RECIPE_FIELDS(X)                                                          \
  X(Dequantization, place, Dequantization::kNone, true)                                     \
  X(Granularity, weight, Granularity::kNone, true)                                          \
  X(int64_t, weight_group, 0, true)        /* G for Granularity::kGroup */                  \
  X(Granularity, activation, Granularity::kNone, true)                                      \
  X(int64_t, activation_group, 0, true)                                                     \
  /* calibrated scales read off chip; dynamic ones are computed on chip (a max-abs pass) */ \
  /* and never leave it */                                                                  \
  X(bool, activation_static, false, true)                                                   \
  X(int64_t, k_group, 0, true)             /* G of Dequantization::kKGroup */               \
  X(int, scale_bits, kScaleBits, true)     /* 16 fp16, 32 fp32, 8 e8m0 (MX) */              \
  X(int, zero_point_bits, 0, true)         /* 0: symmetric (no zero points stored) */       \
  X(int, accumulator_bits, 32, true)       /* int32 or float32 partial sums */              \
  /* B is an activation with one tensor per batch element (attention's K or V cache, one */ \
  /* per head): its scales and its dequantization count once per batch element. Optional */ \
  /* in the JSON form (only attention's KV operand sets it). */                             \
  X(bool, weight_batched, false, false)                                                     \
  /* Dequantization::kWeight: 0, the weight is dequantized once per call (N x K ops); R > */ \
  /* 0, again for every R rows of the output (per M-tile: N x K x ceil(M / R) per batch */   \
  /* element), as a kernel that dequantizes inside each output tile does (PyTorch's */       \
  /* tinygemm int4 kernel: 16-row tiles). Optional in the JSON form. */                      \
  X(int64_t, dequant_rows, 0, false)                                                        \
  /* The 8-bit-or-narrower codes are floats (fp8 e4m3 / e5m2, fp4 e2m1), not integers: */   \
  /* they need a float MAC unit (GemmWorkload::float_codes). Optional in the JSON form. */   \
  X(bool, float_codes, false, false)

struct QuantRecipe {
#define TENET_RECIPE_MEMBER(type, name, init, required) type name = init;
  TENET_QUANT_RECIPE_FIELDS(TENET_RECIPE_MEMBER)
#undef TENET_RECIPE_MEMBER
};

// Calls f(name, member pointer, required) for each field of QuantRecipe, in order.
template <typename F>
void ForEachRecipeField(F&& f) {
#define TENET_RECIPE_VISIT(type, name, init, required) f(#name, &QuantRecipe::name, required);
  TENET_QUANT_RECIPE_FIELDS(TENET_RECIPE_VISIT)
#undef TENET_RECIPE_VISIT
}

void Validate(const QuantRecipe& recipe);
bool operator==(const QuantRecipe& a, const QuantRecipe& b);

// The one JSON form of a recipe, every field by name in the list's order (places and
// granularities by their names). The one parser of it (the runtime's descriptor and the
// binding both call it): every field required but those the list marks optional (their
// default when absent); an unknown key is refused; `where` prefixes messages. Validated.
std::string SerializeQuantRecipe(const QuantRecipe& recipe);
QuantRecipe ParseQuantRecipe(const std::string& json, const std::string& where = "recipe");

// What the recipe adds to a call, per call (the parts of GemmWorkload's side data and ops).
struct QuantWork {
  int64_t weight_side_bits = 0;      // weight scales + zero points
  int64_t activation_side_bits = 0;  // static activation scales
  int64_t quantize_ops = 0;          // activations quantized on chip: 1 op per element
                                     // (static scale), 2 (dynamic: max-abs, then quantize)
  int64_t dequant_ops = 0;           // by place (see Dequantization)
  int64_t accumulator_traffic_bits = 0;  // kKGroup: partial sums read and written per group
                                         // (GemmWorkload::extra_register_bits: register energy)
};

// One call as the cost model sees it.
struct GemmCall {
  GemmWorkload workload;        // shape, batch, operand widths, side-data bits, extra ops
                                // and extra register bits
  std::string scheme = "none";  // the quantization scheme that produced the call
  QuantRecipe recipe;           // how it is quantized (kNone place for float calls)
  QuantWork quant;              // what the recipe adds; its sums are in `workload`
};

// The call of a GEMM with batch x [m, k] x [k, n] operands of the given widths,
// quantized by `recipe`: side data and extra ops follow from the recipe and the shape.
GemmCall DescribeGemmCall(int64_t batch, int64_t m, int64_t n, int64_t k, int bits_a,
                          int bits_b, int bits_c, const QuantRecipe& recipe,
                          const std::string& scheme);

const char* DequantizationName(Dequantization place);
Dequantization ParseDequantization(const std::string& name);
const char* GranularityName(Granularity g);
Granularity ParseGranularity(const std::string& name);

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
  // The call's energy by component at the PE unit its operand widths run on; total_pj
  // includes edge_pj.
  EnergyBreakdown energy;
  // Weight dequantization on the accelerator's edge dequantizer (vector.h), when it converts
  // the call's weight width and the recipe dequantizes weights (place kWeight): its cycles
  // (overlapped with the array: memory.cycles is at least this) and its energy. 0 otherwise
  // (the dequantization then runs on the PEs as extra ops).
  int64_t edge_cycles = 0;
  double edge_pj = 0;
};

// Whether the accelerator's edge dequantizer converts the call's weights (place kWeight, a
// width it converts): that work then leaves the PEs and runs beside the array (vector.h).
bool OnEdge(const GemmCall& call, const Accelerator& accelerator);
// The cycles the edge dequantizer takes for the call's weights (0 when not OnEdge).
int64_t EdgeCycles(const GemmCall& call, const Accelerator& accelerator);
// What of the call the PEs run, as ChargeGemm charges it: the workload less the weight
// dequantization on the edge (OnEdge), at the MAC width it runs at (codes without a unit of
// their own emulated on a wider one: EmulatedMacBits). Refuses (std::invalid_argument)
// operand widths the PEs do not take.
GemmWorkload PeWorkload(const GemmCall& call, const Accelerator& accelerator);

// The call as the accelerator computes it: M rounded up to the row tile its MAC unit's
// kernel computes it in (MacSpec::row_tiles), and the stationary operand's two dimensions to
// whole array tiles (MemoryHierarchy::whole_stationary_tiles); else the call itself. Side
// data and extra work stay the call's. Applying it twice changes nothing.
GemmCall ComputedCall(const GemmCall& call, const Accelerator& accelerator);

// The MACs of `w` (batch x m x n x k, overflow refused naming `what`): a charge's MACs are its
// call's own work, whatever padding its ComputedCall adds (PEs held idle).
int64_t WorkloadMacs(const GemmWorkload& w, const char* what);

// The ComputedCall is charged (its traffic, cycles, energy; the MACs are `call`'s own, see
// WorkloadMacs); Charge::call is `call`.
// Operand widths the accelerator's PEs do not take, and tiles that do not fit, are refused
// (std::invalid_argument naming them). `method` is the array level's (AnalyzeGemm).
// With mapping kind "auto" the call's dataflow and tiles are `search`->Best(call) (`search`
// must be MakeMappingSearch(accelerator): callers that charge many calls hold one per
// accelerator, so each distinct call is searched once); without one the call is searched
// afresh. The charge is then the search's choice: memory and energy as the search computed
// them, the array level of the chosen dataflow.
Charge ChargeGemm(const GemmCall& call, const Accelerator& accelerator,
                  AnalysisMethod method = AnalysisMethod::kAuto, MappingSearch* search = nullptr);

// An accelerator with what all its charges share made once: its array and the array its
// buffer tiles run on, prepared (PrepareArray, PrepareTileArray; not under mapping "auto",
// whose search picks the dataflow per call), and its mapping search. ChargeGemm(call,
// prepared, method) equals ChargeGemm(call, accelerator, method, search) field for field
// and, for an accelerator that validates, error for error; charging the many calls of a
// model or of a design-space point
// through one is several times faster (no relation is parsed again per call or tile).
// Immutable but for the search (thread-safe): share one between threads.
struct PreparedAccelerator {
  Accelerator accelerator;
  std::shared_ptr<const PreparedArray> array;  // null under mapping "auto"
  std::shared_ptr<const PreparedArray> tiles;  // null under mapping "auto"
  std::shared_ptr<MappingSearch> search;       // MakeMappingSearch's (null unless "auto")
};
// Validates the accelerator's hardware, dataflow and memory (as charging would). `search`
// null: MakeMappingSearch(accelerator).
PreparedAccelerator PrepareAccelerator(const Accelerator& accelerator,
                                       std::shared_ptr<MappingSearch> search = nullptr);
Charge ChargeGemm(const GemmCall& call, const PreparedAccelerator& accelerator,
                  AnalysisMethod method = AnalysisMethod::kAuto);

// The buffer tiles a call runs with on `accelerator` under mapping "default" or "given" (a
// search's tiles come with its dataflow: MappingSearch::Best).
TileMapping ChooseMapping(const GemmWorkload& w, const Accelerator& accelerator);

// What mapping "auto" searches on `accelerator`: MappingSpace::ForDataflow of its dataflow
// and supported_dataflows (those of os, ws and is on its array for a preset; the user's
// relations alone otherwise), each
// untiled preset also with its streamed dimension cut into kAutoStreamTiles chunks, tiles in
// array-edge granules; double-buffered stationary loading wherever its memory has it.
MappingSpace AutoMappingSpace(const Accelerator& accelerator);
// Streamed-dimension tilings of the auto space, in array edges (x max(rows, cols)).
constexpr int64_t kAutoStreamTiles[] = {1, 4};
// The search an accelerator charges through: one per accelerator with mapping "auto"
// (thread-safe, remembers every distinct call), null for the other kinds.
std::shared_ptr<MappingSearch> MakeMappingSearch(const Accelerator& accelerator);

// The ledger's one schema: a charge as named fields, in the order the runtime's ledger JSON
// writes them (src/runtime/ledger.cc), the Python binding gives them (Charge.ledger_fields)
// and tenet_byoc.ledger.LedgerEntry declares them (a test checks the names). Integers stay
// integers; byte counts are bits / 8 (doubles). macs are the call's own (memory.macs), num_pes
// the PEs its cycles hold (memory.num_pes: on cores, every core's; active_pes and the other
// array figures stay one core's). pe_utilization is the call's utilization: macs over the MAC
// capacity cycles (memory.cycles) x num_pes x macs_per_pe_per_cycle, not Metrics'
// array_utilization (over the array level's cycles alone).
using LedgerValue = std::variant<int64_t, double, std::string, bool>;
using LedgerFields = std::vector<std::pair<const char*, LedgerValue>>;
LedgerFields ChargeLedgerFields(const Charge& charge);
// A vector call's charge (vector.h) as the same fields, in the same order: unit "vector",
// m x n = rows x row length (the output's last axis), batch 1, k the second operand's
// elements (add / multiply / divide; rotary: its tables; else 0); cycles, compute_cycles,
// bytes by level and energy (mac_pj: its arithmetic) the unit's; roofline_cycles max(compute,
// DRAM); stall_cycles / dram_stall_cycles what the transfers add over compute; the PE array's
// own fields 0. Both tables end with op ("matmul" or the vector kind), elements (output
// elements), vector_{add,mul,exp,recip,tanh}_ops, spilled and schedule ("" for the array).
LedgerFields VectorLedgerFields(const VectorCharge& charge);
// Per tensor (A, B, C): TENET's array-level figures and the buffer level's traffic.
std::vector<std::pair<std::string, LedgerFields>> ChargeTensorFields(const Charge& charge);

// Equality and hashing of calls, for caches keyed by the call.
bool operator==(const GemmCall& a, const GemmCall& b);
struct GemmCallHash {
  size_t operator()(const GemmCall& call) const;
};


// ChargeGemm remembered per distinct call on one accelerator, with the accelerator's one
// MappingSearch: what the runtime's ledger and the Python binding hold. Thread-safe:
// readers share a lock; a miss is charged outside any lock (two threads may charge the same
// new call; the first insert wins and both answers are equal).
class ChargeCache {
 public:
  explicit ChargeCache(Accelerator accelerator);
  std::shared_ptr<const Charge> Get(const GemmCall& call);
  const Accelerator& accelerator() const { return accelerator_; }
  // Distinct calls the mapping search has searched (0 unless mapping "auto").
  int64_t searches() const { return search_ ? search_->searches() : 0; }

 private:
  Accelerator accelerator_;
  std::shared_ptr<MappingSearch> search_;
  std::shared_mutex mutex_;
  std::unordered_map<GemmCall, std::shared_ptr<const Charge>, GemmCallHash> cache_;
};

}  // namespace tenet
