// An accelerator of cores: spreading a call over them (see core.h).
#include "cost_model/core.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cost_model/charge.h"
#include "cost_model/checked.h"

namespace tenet {

namespace {

void Require(bool ok, const std::string& field, const std::string& value, const char* accepted) {
  if (!ok)
    throw std::invalid_argument("cores." + field + " = " + value + "; expected " + accepted);
}

struct Split {
  int64_t tm = 1, tn = 1, s = 1, units = 1, active = 1, waves = 1;
};

// The one-core call of one core's share: `waves` sub-GEMMs of the split's size, its side
// data and extra work the share of the call's.
GemmCall CoreCall(const GemmCall& call, const Split& sp) {
  const GemmWorkload& w = call.workload;
  GemmCall c = call;
  c.workload.m = std::min(sp.tm, w.m);
  c.workload.n = std::min(sp.tn, w.n);
  c.workload.k = CeilDiv(w.k, sp.s);
  c.workload.batch = sp.waves;
  // A core reads an on-chip operand from the shared level, its "DRAM" side here.
  c.workload.a_on_chip = c.workload.c_on_chip = false;
  const double share = static_cast<double>(sp.waves) / static_cast<double>(sp.units);
  auto part = [share](int64_t x) { return static_cast<int64_t>(std::ceil(x * share)); };
  c.workload.extra_read_bits = part(w.extra_read_bits);
  c.workload.extra_ops = part(w.extra_ops);
  c.workload.extra_register_bits = part(w.extra_register_bits);
  c.quant.weight_side_bits = part(call.quant.weight_side_bits);
  c.quant.activation_side_bits = part(call.quant.activation_side_bits);
  c.quant.quantize_ops = part(call.quant.quantize_ops);
  c.quant.dequant_ops = part(call.quant.dequant_ops);
  c.quant.accumulator_traffic_bits = part(call.quant.accumulator_traffic_bits);
  return c;
}

Accelerator CoreAccelerator(const Accelerator& acc, int64_t active) {
  Accelerator core = acc;
  core.cores = Cores{};
  // The call is cut into its computed tiles already (ComputedCall): a share is not again.
  for (MacSpec& u : core.precision.units) u.row_tiles.clear();
  core.memory.whole_stationary_tiles = false;
  core.memory.dram_bandwidth_bits = acc.cores.shared_bandwidth_bits / static_cast<double>(active);
  return core;
}

// A core's buffer tiles for its share under mapping "default": its whole output tile stays
// in the buffer (C accumulates there; A and B are fetched once per unit) while K streams
// through in the longest chunk that fits beside it with A and B double-buffered (halved
// from the whole K until it fits). false: not even one K element fits.
bool CoreTiles(const GemmCall& sub, const MemoryHierarchy& mem, TileMapping* tiles) {
  const GemmWorkload& w = sub.workload;
  TileMapping t;
  t.tm = w.m;
  t.tn = w.n;
  t.order = "mnk";
  for (int64_t tk = w.k; tk >= 1; tk = tk > 1 ? CeilDiv(tk, 2) : 0) {
    t.tk = tk;
    if (BufferBytesNeeded(w, mem, t) <= mem.buffer_bytes) {
      *tiles = t;
      return true;
    }
    if (tk == 1) break;
  }
  return false;
}

struct Costed {
  Split split;
  int64_t cycles = std::numeric_limits<int64_t>::max();
  int64_t reduction = 0;
};

int64_t Scale(int64_t x, double f) {
  const double v = std::round(static_cast<double>(x) * f);
  if (!(v < 9.2e18)) throw std::overflow_error("cost model: cores: traffic overflows int64");
  return static_cast<int64_t>(v);
}

}  // namespace

void Validate(const Cores& c) {
  Require(c.count >= 1, "count", Str(c.count), ">= 1");
  Require(std::isfinite(c.shared_bandwidth_bits) && c.shared_bandwidth_bits >= 0,
          "shared_bandwidth_bits", std::to_string(c.shared_bandwidth_bits), "a finite value >= 0");
  Require(c.count == 1 || c.shared_bandwidth_bits > 0, "shared_bandwidth_bits",
          std::to_string(c.shared_bandwidth_bits), "> 0 when count > 1 (the shared level)");
  Require(c.shared_bytes >= 0, "shared_bytes", Str(c.shared_bytes), ">= 0");
  Require(c.launch_cycles >= 0, "launch_cycles", Str(c.launch_cycles), ">= 0");
  Require(c.max_split_k >= 1 && (c.max_split_k & (c.max_split_k - 1)) == 0, "max_split_k",
          Str(c.max_split_k), "a power of 2 >= 1");
}

bool operator==(const Cores& a, const Cores& b) {
  return a.count == b.count && a.shared_bandwidth_bits == b.shared_bandwidth_bits &&
         a.shared_bytes == b.shared_bytes && a.launch_cycles == b.launch_cycles &&
         a.max_split_k == b.max_split_k;
}

bool IsOneCore(const Cores& c) { return c.count == 1 && c.launch_cycles == 0; }

Charge ChargeOnCores(const GemmCall& asked, const Accelerator& acc, AnalysisMethod method,
                     bool prune) {
  Validate(acc.cores);
  const GemmCall call = ComputedCall(asked, acc);
  // Operands kept on chip live in the shared level: no DRAM (HBM) traffic when they fit.
  const GemmWorkload w = OnChipFitted(call.workload, acc.cores.shared_bytes);
  const int64_t rows = std::max<int64_t>(1, acc.dataflow.rows);
  const int64_t cols = std::max<int64_t>(1, acc.dataflow.cols);
  const Cores& cores = acc.cores;
  const int64_t dram = CeilCycles(CompulsoryDramBits(w), acc.memory.dram_bandwidth_bits);
  // The split is chosen with each core's default tiles (or the user's given ones), comparing
  // latencies alone: ChargeGemm's memory.cycles under those tiles, with the call's edge
  // dequantization beside it. Every split's core work has the call's widths, so one array
  // model, its tile costs remembered, serves them all.
  const bool given = acc.mapping.kind == "given";
  const ArrayModel array = CachedArrayModel(
      ExactArrayModel(PeWorkload(call, acc), acc.hardware, acc.dataflow, acc.memory));
  Costed best;
  for (int64_t tm = rows;; tm *= 2) {
    for (int64_t tn = cols;; tn *= 2) {
      for (int64_t s = 1; s <= cores.max_split_k; s *= 2) {
        if (s > 1 && CeilDiv(w.k, s) < rows) break;
        Split sp{tm, tn, s};
        sp.units = CheckedMul(CheckedMul(CheckedMul(w.batch, CeilDiv(w.m, tm), "cores: units"),
                                         CeilDiv(w.n, tn), "cores: units"),
                              s, "cores: units");
        sp.active = std::min(sp.units, cores.count);
        sp.waves = CeilDiv(sp.units, cores.count);
        const GemmCall sub = CoreCall(call, sp);
        const Accelerator core = CoreAccelerator(acc, sp.active);
        TileMapping tiles = acc.mapping.tiles;
        if (!given && !CoreTiles(sub, core.memory, &tiles)) continue;
        int64_t reduction = 0;
        if (s > 1) {
          const int64_t psum = CheckedMul(CheckedMul(CheckedMul(w.batch, w.m, "cores"), w.n, "cores"),
                                          CheckedMul(s, 2 * acc.memory.psum_bits, "cores"), "cores");
          reduction = CheckedAdd(cores.launch_cycles, CeilCycles(psum, cores.shared_bandwidth_bits),
                                 "cores: cycles");
        }
        auto total = [&](int64_t core_cycles) {
          return CheckedAdd(CheckedAdd(cores.launch_cycles, std::max(core_cycles, dram),
                                       "cores: cycles"),
                            reduction, "cores: cycles");
        };
        const GemmWorkload pe = PeWorkload(sub, core);
        // No tiling of a core's work beats its roofline (AnalyzeMemory's cycles are at least
        // its roofline_cycles: every tile's folds hold the array for its MACs at the full
        // rate, every operand crosses the core's DRAM side once): a split that cannot go
        // below the best so far is not charged. The choice is the exhaustive one's (strict <).
        if (prune && total(RooflineCycles(pe, array.num_pes, array.macs_per_pe_per_cycle,
                                          core.memory, array.ops_per_pe_per_cycle)) >= best.cycles)
          continue;
        const int64_t cycles = total(std::max(AnalyzeMemory(pe, array, core.memory, tiles).cycles,
                                              EdgeCycles(sub, core)));
        if (cycles < best.cycles) best = Costed{sp, cycles, reduction};
      }
      if (tn >= w.n || tn >= cols * 32) break;
    }
    if (tm >= w.m || tm >= rows * 32) break;
  }
  if (best.cycles == std::numeric_limits<int64_t>::max())
    throw std::invalid_argument("accelerator '" + acc.name + "': no split of the call over its " +
                                "cores fits one core's buffer (memory.buffer_bytes = " +
                                Str(acc.memory.buffer_bytes) + ")");
  const Split& sp = best.split;
  Accelerator core = CoreAccelerator(acc, sp.active);
  const GemmCall sub = CoreCall(call, sp);
  Accelerator whole_tile = core;  // the core's output tile kept whole (CoreTiles)
  TileMapping tiles;
  CoreTiles(sub, core.memory, &tiles);
  whole_tile.mapping.kind = "given";
  whole_tile.mapping.tiles = tiles;
  // The split was chosen on latencies alone: a refusal of the chosen core's work (an energy
  // that overflows) names the call it is a share of.
  auto charged = [&](const Accelerator& on) {
    try {
      return ChargeGemm(sub, on, method);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("a " + Str(w.m) + " x " + Str(w.n) + " x " + Str(w.k) +
                                  " GEMM on " + Str(sp.active) + " cores, one core's share: " +
                                  e.what());
    }
  };
  Charge charge = charged(whole_tile);
  if (core.mapping.kind == "auto") {
    // The search's choice of the core's tiles, unless the whole-tile tiling (outside its
    // space) is faster: "auto" is never slower than "default".
    Charge searched = charged(core);
    if (searched.memory.cycles < charge.memory.cycles) charge = std::move(searched);
  } else if (core.mapping.kind == "given") {
    charge = charged(core);  // the user's own tiles for every core
  }
  const double f = static_cast<double>(sp.units) / static_cast<double>(sp.waves);
  MemoryMetrics& m = charge.memory;
  for (auto& [name, t] : m.tensors) {
    t.dram_read_bits = Scale(t.dram_read_bits, f);
    t.dram_write_bits = Scale(t.dram_write_bits, f);
    t.buffer_read_bits = Scale(t.buffer_read_bits, f);
    t.buffer_write_bits = Scale(t.buffer_write_bits, f);
    t.dram_fetches = Scale(t.dram_fetches, f);
  }
  m.dram_read_bits = Scale(m.dram_read_bits, f);
  m.dram_write_bits = Scale(m.dram_write_bits, f);
  m.buffer_read_bits = Scale(m.buffer_read_bits, f);
  m.buffer_write_bits = Scale(m.buffer_write_bits, f);
  m.register_access_bits = Scale(m.register_access_bits, f);
  m.compulsory_dram_bits = CompulsoryDramBits(w);
  m.tile_steps = Scale(m.tile_steps, f);
  m.macs = WorkloadMacs(asked.workload, "cores: MACs");  // the call's own work (charge.h)
  const int64_t core_cycles = m.cycles;
  m.cycles = CheckedAdd(CheckedAdd(cores.launch_cycles,
                                   std::max(core_cycles, CeilCycles(CompulsoryDramBits(w),
                                                                    acc.memory.dram_bandwidth_bits)),
                                   "cores: cycles"),
                        best.reduction, "cores: cycles");
  m.dram_stall_cycles = std::max<int64_t>(0, m.cycles - m.array_cycles - m.extra_op_cycles);
  m.num_pes = CheckedMul(PrepareArray(acc.hardware, acc.dataflow)->num_pes,
                         cores.count, "cores: PEs");
  GemmWorkload rated = w;  // codes emulated on a wider unit run at its rate
  rated.mac_bits = EmulatedMacBits(w, acc.precision);
  const int64_t rate = acc.hardware.macs_per_pe_per_cycle.AtBits(RateBits(rated));
  m.roofline_cycles = std::max<int64_t>(
      cores.launch_cycles,
      RooflineCycles(w, m.num_pes, static_cast<double>(rate), acc.memory,
                     static_cast<double>(acc.hardware.macs_per_pe_per_cycle.base)));
  m.latency_us = m.cycles / (acc.hardware.clock_ghz * 1e3);
  m.mapping = "cores " + Str(sp.active) + "/" + Str(cores.count) + " x tiles " + Str(sp.tm) +
              "x" + Str(sp.tn) + " split-k " + Str(sp.s) + " waves " + Str(sp.waves) + " | " +
              m.mapping;
  EnergyBreakdown& e = charge.energy;
  for (double* x : {&e.mac_pj, &e.register_pj, &e.buffer_pj, &e.dram_pj, &e.total_pj}) *x *= f;
  charge.edge_cycles = Scale(charge.edge_cycles, f);
  charge.edge_pj *= f;
  if (!std::isfinite(e.total_pj))  // finite figures whose products overflow (see charge.cc)
    throw std::invalid_argument(
        "accelerator '" + acc.name + "': the energy of a " + Str(w.m) + " x " + Str(w.n) +
        " x " + Str(w.k) + " GEMM on its " + Str(cores.count) +
        " cores overflows a double: precision pj_per_mac, memory *_pj_per_bit or "
        "edge_dequantizer.pj_per_element is too large");
  charge.call = asked;
  return charge;
}

namespace detail {

OrderedJson CoresJson(const Cores& c) {
  return {{"count", c.count},
          {"shared_bandwidth_bits", c.shared_bandwidth_bits},
          {"shared_bytes", c.shared_bytes},
          {"launch_cycles", c.launch_cycles},
          {"max_split_k", c.max_split_k}};
}

Cores ParseCoresJson(const JsonValue& v, const std::string& where) {
  ExpectKeys(v, {"count", "shared_bandwidth_bits", "shared_bytes", "launch_cycles", "max_split_k"},
             where);
  Cores c;
  c.count = IntegerMember(v, "count", where);
  c.shared_bandwidth_bits = NumberMember(v, "shared_bandwidth_bits", where);
  c.shared_bytes = IntegerMember(v, "shared_bytes", where);
  c.launch_cycles = IntegerMember(v, "launch_cycles", where);
  c.max_split_k = IntegerMember(v, "max_split_k", where);
  try {
    Validate(c);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  return c;
}

}  // namespace detail

}  // namespace tenet
