// TENET's relation-centric cost model of a spatial accelerator: hardware, dataflow and
// workload as plain values, exact 64-bit metrics, and TENET's own file formats.
//
// Pure C++17; no TVM, no Python. Every function is thread-safe (no shared mutable state).
// Every bad input throws std::invalid_argument with a message naming what is wrong; a call
// whose derived counts would leave int64 (or whose latency is not finite) throws
// std::overflow_error. The Python binding raises ValueError for both.
//
// How the numbers are computed (see README.md in this directory for the full account):
//  * Ground truth is enumeration of the definitions (AnalysisMethod::kEnumerate): every
//    instance is mapped to its space-time point, and every (space-time point, element)
//    pair is checked against its neighbours. Linear in the number of instances.
//  * The fast exact method (AnalysisMethod::kFast) applies to GEMM with the "os"/"ws"/"is"
//    presets (tiled or not) on a systolic interconnect. The schedule is a sequence of
//    folds; each fold is a rectangular wavefront whose counts have closed forms in its
//    rows r, columns c and stream length L, and folds fall into at most 8 size classes.
//    The only interaction between folds (the first stamp of a fold sees the last stamp of
//    the previous one as its previous time stamp) is checked explicitly fold by fold
//    when it can matter (a 1x1 last PE). Tests check it equals enumeration.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tenet {

// MACs one PE completes per cycle. The rate may depend on the operand width (the wider of
// A and B): a PE doing r MACs per cycle at a width is an r-wide dot-product unit.
// Either one rate at every width (`by_bits` empty) or a table by width, with 1 at the
// widths the table does not list (`base` is then 1).
struct MacRate {
  int64_t base = 1;
  std::map<int, int64_t> by_bits;  // operand width -> rate, e.g. {16: 2, 8: 4, 4: 8}

  // The rate of a call whose wider operand has `bits` bits.
  int64_t AtBits(int bits) const;
  bool operator==(const MacRate& o) const { return base == o.base && by_bits == o.by_bits; }
};

// The hardware of an accelerator: PE array, interconnect, memory system, MAC rates, clock.
struct Hardware {
  std::string name = "hardware";
  // isl-style set, 1-D or 2-D, e.g. "{PE[p,q]: 0<=p<16 and 0<=q<16}". Must be bounded.
  std::string pe_domain;
  // isl-style map PE -> neighbouring PE it receives data from,
  // e.g. "{PE[p,q]->PE[p-1,q]; PE[p,q]->PE[p,q-1]}" (TENET's systolic.p).
  std::string interconnect;
  double bandwidth_bits = 1024;  // off-chip bandwidth, bits per cycle, > 0
  double avg_latency = 16;       // average off-chip access latency, cycles, >= 0
  double clock_ghz = 1.0;        // > 0
  int64_t l1_bytes = 256;        // per-PE buffer (informational, from TENET's .p line 3)
  int64_t l2_bytes = 1 << 20;    // shared buffer (informational)
  // How fast a PE computes. A preset dataflow (one instance per PE and stamp) uses rate r
  // as an r-wide dot product along K; another dataflow may put up to r instances on one
  // PE at one stamp. Non-MAC ops (extra_ops: float dequantization) run at the base rate.
  MacRate macs_per_pe_per_cycle;

  // An R x C array whose data flows right and down (TENET's systolic.p generalised).
  static Hardware Systolic(int64_t rows, int64_t cols, double bandwidth_bits = 1024,
                           double avg_latency = 16, double clock_ghz = 1.0,
                           int64_t l1_bytes = 256, int64_t l2_bytes = 1 << 20,
                           MacRate macs_per_pe_per_cycle = {});
  // Number of PEs in pe_domain (validates).
  int64_t NumPEs() const;
};
// Throws std::invalid_argument naming the bad field.
void Validate(const Hardware& hw);

// The dataflow: which PE runs an instance (space) and when (time).
struct Dataflow {
  std::string name = "dataflow";
  std::string space;  // e.g. "{S[i,j,k]->PE[i%8, j%8]}"
  std::string time;   // e.g. "{S[i,j,k]->T[floor(i/8), floor(j/8), i%8+j%8+k]}"
  // Set by Preset (informational; the fast path re-derives the preset and compares).
  std::string preset;
  int64_t rows = 0, cols = 0;
  std::map<std::string, int64_t> tiling;

  // "os" (output-stationary, C stays), "ws" (weight-stationary, B stays), "is"
  // (input-stationary, A stays) on a rows x cols systolic array, for GEMM S[i,j,k]
  // (C[i,j] += A[i,k] * B[k,j]). Optional tiling of the streamed dimension:
  // os {"k": t}, ws {"m": t}, is {"n": t}: the stream is cut into chunks of t.
  static Dataflow Preset(const std::string& name, int64_t rows, int64_t cols,
                         const std::map<std::string, int64_t>& tiling = {});
};
void Validate(const Dataflow& df);

// The accelerator (hardware + dataflow + memory hierarchy + PEs' precisions + buffer
// mapping) is in accelerator.h: it needs memory.h and energy.h, which build on this header.

// One tensor access of a statement.
struct TensorAccess {
  std::string relation;  // e.g. "{S[i,j,k]->A[i,k]}"; the tensor is named by its range
  bool is_write = false;
  int bits = 32;
};

// A general TENET statement: an iteration domain (a box, possibly with extra affine
// constraints) and access relations per tensor, reads first then writes (as in .s files).
struct Statement {
  std::string name = "statement";
  std::string domain;  // e.g. "{S[i,j,k]: 0<=i<4 and 0<=j<4 and 0<=k<4}"
  std::vector<TensorAccess> accesses;

  static Statement Gemm(int64_t m, int64_t n, int64_t k, int bits_a = 32, int bits_b = 32,
                        int bits_c = 32);
};

struct GemmWorkload {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  int bits_a = 32, bits_b = 32, bits_c = 32;
  // Side data (quantization scales, zero points) read off chip once per call, in bits.
  // Added to the off-chip reads, hence to the ingress delay and the bandwidth stall.
  int64_t extra_read_bits = 0;
  // Non-MAC element ops (dequantization, max-abs reductions) for the whole call, run on
  // the active PEs at the hardware's base rate b (MacRate::base):
  // ceil(extra_ops / (active_pes * b)) cycles added to cycles; extra_ops / (active_pes * b)
  // to compute_delay and compute_delay_exact.
  int64_t extra_ops = 0;
  // Register-file bits accessed beyond the MACs' own (MemoryMetrics::register_access_bits),
  // for the whole call: partial sums read and written once per K-group when they are
  // rescaled inside the accumulation (QuantWork::accumulator_traffic_bits). Charged in
  // energy only (register_pj); a register access costs no cycles in this model.
  int64_t extra_register_bits = 0;
  // Operands of 8 bits or fewer hold float codes (fp8, fp4), not integers: they run on a
  // float MAC unit (energy.h, PrecisionTable::Lookup). From QuantRecipe::float_codes.
  bool float_codes = false;
  // The width whose MAC rate the call runs at when its codes run emulated on a wider unit
  // (EmulatedMacBits, set by the charge); 0: the wider operand's.
  int mac_bits = 0;
  // Operands that stay on chip between calls (the call plan knows a call's input is the
  // previous call's output): a_on_chip, A is already in the accelerator's on-chip level (a
  // unified buffer, an L2); c_on_chip, C stays there for the next call. When they fit (see
  // memory.h, OnChipFits) they make no DRAM traffic; otherwise they are charged as usual.
  bool a_on_chip = false, c_on_chip = false;
};
void Validate(const GemmWorkload& w);
// The width the hardware's MAC rate is read at for `w` (Hardware::macs_per_pe_per_cycle).
inline int RateBits(const GemmWorkload& w) {
  return w.mac_bits > 0 ? w.mac_bits : (w.bits_a > w.bits_b ? w.bits_a : w.bits_b);
}
// A GemmWorkload from its fields, validated (the bindings' way in).
GemmWorkload MakeWorkload(int64_t m, int64_t n, int64_t k, int64_t batch, int bits_a, int bits_b,
                          int bits_c, int64_t extra_read_bits, int64_t extra_ops,
                          int64_t extra_register_bits = 0);

struct TensorMetrics {
  bool is_write = false;
  int bits = 32;
  int64_t total = 0;   // (space-time point, element) access pairs
  int64_t unique = 0;  // pairs whose element no neighbouring space-time point accesses
  double reuse_factor = 0;    // total / unique
  double spatial_reuse = 0;   // pairs also accessed by an interconnect neighbour (same or
                              // previous stamp), divided by the number of instances
  double temporal_reuse = 0;  // pairs also accessed by the same PE at the previous stamp,
                              // divided by the number of instances
  int64_t offchip_elements = 0;  // = unique (elements moved between chip and memory)
  int64_t offchip_bits = 0;      // offchip_elements * bits
  double offchip_bytes = 0;      // offchip_bits / 8
};

struct Metrics {
  int64_t macs = 0;
  int64_t time_steps = 0;
  int64_t active_pes = 0;
  int64_t num_pes = 0;  // PEs in the hardware's PE domain
  int64_t macs_per_pe_per_cycle = 1;  // the hardware's rate at this call's operand width
  double avg_active_pes = 0;
  // TENET's figures.
  double ingress_delay = 0, egress_delay = 0, compute_delay = 0, delay = 0;
  // Sum over time stamps of the most MACs one PE runs at that stamp, divided by the rate
  // (TENET issue #3's exact compute delay), plus extra_ops / (active_pes * base rate).
  double compute_delay_exact = 0;
  // The trusted latency: compute_cycles + stall_cycles (see README.md).
  int64_t compute_cycles = 0;
  int64_t stall_cycles = 0;
  int64_t cycles = 0;
  int64_t folds = 0;  // presets only: number of folds run one after another
  int64_t offchip_read_bits = 0, offchip_write_bits = 0;
  // The array's utilization: macs / (cycles * num_pes * macs_per_pe_per_cycle) over this
  // level's cycles. Not the ledger's pe_utilization, which divides by the call's cycles
  // (the buffer level's, memory stalls included: charge.h ChargeLedgerFields). Several calls
  // combine as sum(macs) / sum(cycles * num_pes * macs_per_pe_per_cycle).
  double array_utilization = 0;
  double bandwidth_bits_per_cycle = 0;  // off-chip bits / compute_cycles (no-stall need)
  double latency_us = 0;                // cycles / clock
  std::string method;                   // "fast" or "enumerate"
  std::map<std::string, TensorMetrics> tensors;  // named by the statement: "A","B","C"
};

enum class AnalysisMethod { kAuto, kFast, kEnumerate };

// Batch > 1 is `batch` independent GEMMs one after another: every count, delay and cycle
// figure is batch times that of one GEMM (no reuse across GEMMs); averages, reuse factors
// and utilization are those of one GEMM. extra_read_bits / extra_ops / extra_register_bits
// are per call; the array level ignores extra_register_bits (energy.h's CallEnergy charges it).
// The hardware's MAC rate at max(bits_a, bits_b) applies (see Hardware); charge.h's
// ChargeGemm is how a runtime call is costed.
Metrics AnalyzeGemm(const GemmWorkload& w, const Hardware& hw, const Dataflow& df,
                    AnalysisMethod method = AnalysisMethod::kAuto);

// What AnalyzeGemm works out from a hardware and dataflow before it looks at the call: both
// validated, their relations parsed, the PE count, the preset the dataflow is recognised as
// and whether the interconnect is systolic. Parsing the relations costs far more than the
// fast method's counting, and a charge analyses every tile shape of a call on one array, a
// model many calls: PrepareArray does it once and AnalyzeGemm(w, array, method) then equals
// AnalyzeGemm(w, array.hardware, array.dataflow, method) field for field, errors included.
// Made only by PrepareArray; immutable, so one may be shared between threads.
struct PreparedArray {
  Hardware hardware;
  Dataflow dataflow;
  int64_t num_pes = 0;
  bool is_preset = false;     // the dataflow's relations are an os/ws/is preset's ...
  Dataflow preset;            // ... this one
  std::string preset_error;   // recognising the preset threw this (thrown again for a GEMM)
  bool systolic = false;      // the interconnect is the systolic one (for a preset only)
  bool pe_box = false;        // the PE domain is a box [pe_lo, pe_hi) (2-D: else re-read)
  int64_t pe_lo[2] = {0, 0}, pe_hi[2] = {0, 0};
};
std::shared_ptr<const PreparedArray> PrepareArray(const Hardware& hw, const Dataflow& df);
Metrics AnalyzeGemm(const GemmWorkload& w, const PreparedArray& array,
                    AnalysisMethod method = AnalysisMethod::kAuto);
// A general statement. kAuto uses the fast path when the statement is a GEMM and the
// dataflow a preset on a systolic interconnect, enumeration otherwise (bounded size).
Metrics Analyze(const Statement& st, const Hardware& hw, const Dataflow& df,
                AnalysisMethod method = AnalysisMethod::kAuto);

// Enumeration refuses statements with more instances than this.
constexpr int64_t kMaxEnumeratedInstances = 4'000'000;

// TENET files. .p: PE domain, interconnect, "L1 L2 bandwidth avg_latency";
// .m: space map, time map; .s: "reads writes", domain, one access per line.
Hardware ParseTenetHardware(const std::string& text, const std::string& name = "hardware");
Dataflow ParseTenetMapping(const std::string& text, const std::string& name = "dataflow");
Statement ParseTenetStatement(const std::string& text, const std::string& name = "statement");
std::string FormatTenetHardware(const Hardware& hw);
std::string FormatTenetMapping(const Dataflow& df);
std::string FormatTenetStatement(const Statement& st);
Hardware LoadTenetHardware(const std::string& path);
Dataflow LoadTenetMapping(const std::string& path);
Statement LoadTenetStatement(const std::string& path);
void SaveTextFile(const std::string& path, const std::string& text);


}  // namespace tenet
