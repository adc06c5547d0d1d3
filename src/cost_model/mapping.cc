// The mapping search: enumerate the declared space of one call, prune by lower bounds that
// cannot drop the optimum, analyse the rest with AnalyzeMemory and keep the least key.
// Four parts, as Timeloop separates them: the map space (MapSpace: candidates in the
// declared order, CheckFits), the bounds (CallBounds, FirstBounds, ExactTiles), the model
// (Evaluate: AnalyzeMemory + CallEnergy) and the search driver (SearchDriver: threads, the
// best so far). A refused candidate is an EvalStatus value with its reason.
#include "cost_model/mapping.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "cost_model/checked.h"

namespace tenet {

const char* const kTileOrders[6] = {"mnk", "mkn", "nmk", "nkm", "kmn", "knm"};

namespace {

// Work items (dataflow x tile sizes) from which the automatic thread count uses 2 threads.
constexpr size_t kItemsPerExtraThread = 50000;

using detail::Dim;
using detail::MakeDim;

constexpr const char* kCount = "mapping search: a count";

// The streamed dimension of a preset: os k, ws m, is n.
char StreamDim(const std::string& preset) { return preset == "os" ? 'k' : preset == "ws" ? 'm' : 'n'; }

// (primary, secondary, index): the least wins.
struct Key {
  double primary = std::numeric_limits<double>::infinity();
  double secondary = std::numeric_limits<double>::infinity();
  int64_t index = std::numeric_limits<int64_t>::max();
};
// True when a candidate with lower bounds (p, s) and `index` cannot come before `best`.
bool CannotBeat(double p, double s, int64_t index, const Key& best) {
  if (p != best.primary) return p > best.primary;
  if (s != best.secondary) return s > best.secondary;
  return index > best.index;
}
bool Before(const Key& a, const Key& b) {
  if (a.primary != b.primary) return a.primary < b.primary;
  if (a.secondary != b.secondary) return a.secondary < b.secondary;
  return a.index < b.index;
}

// The objective's (primary, secondary) from cycles and energy.
std::pair<double, double> Objectives(MappingObjective o, double cycles, double pj) {
  switch (o) {
    case MappingObjective::kLatency: return {cycles, pj};
    case MappingObjective::kEnergy: return {pj, cycles};
    case MappingObjective::kEdp: return {cycles * pj, cycles};
  }
  return {cycles, pj};
}


// The closed-form DRAM bits per channel (A with side data, B, C) of one candidate; the
// same loop-nest argument as memory.cc (README "Traffic"), without spans or padding.
std::array<int64_t, 3> DramBits(const GemmWorkload& w, const MemoryHierarchy& mem,
                                const Dim& dm, const Dim& dn, const Dim& dk, const char* order,
                                bool accumulate, int64_t chunk) {
  // levels 0 = batch, 1..3 = order; which operands a level indexes.
  std::array<int64_t, 4> count{w.batch, 0, 0, 0};
  std::array<char, 4> name{'b', order[0], order[1], order[2]};
  for (int l = 1; l < 4; ++l)
    count[l] = name[l] == 'm' ? dm.count : name[l] == 'n' ? dn.count : dk.count;
  auto relevant = [](int op, char d) {
    if (d == 'b') return true;
    if (op == 0) return d == 'm' || d == 'k';
    if (op == 1) return d == 'k' || d == 'n';
    return d == 'm' || d == 'n';
  };
  auto revisits = [&](int op) {
    int r = -1;
    for (int l = 0; l < 4; ++l)
      if (count[l] > 1 && relevant(op, name[l])) r = l;
    int64_t v = 1;
    for (int l = 0; l < r; ++l)
      if (!relevant(op, name[l])) v = CheckedMul(v, count[l], kCount);
    return v;
  };
  const int64_t a_elems = CheckedMul(CheckedMul(w.m, w.k, kCount), w.batch, kCount),
                b_elems = CheckedMul(CheckedMul(w.k, w.n, kCount), w.batch, kCount),
                c_elems = CheckedMul(CheckedMul(w.m, w.n, kCount), w.batch, kCount);
  // Operands kept on chip (when they fit: AnalyzeMemory) move no DRAM bits: counted as 0
  // here, a lower bound either way.
  const int bits_a = w.a_on_chip ? 0 : w.bits_a, bits_c = w.c_on_chip ? 0 : w.bits_c;
  std::array<int64_t, 3> bits{};
  bits[0] = CheckedAdd(CheckedMul(CheckedMul(a_elems, revisits(0), kCount), bits_a, kCount),
                       w.extra_read_bits, kCount);
  bits[1] = CheckedMul(CheckedMul(b_elems, revisits(1), kCount), w.bits_b, kCount);
  int64_t partial;
  if (accumulate) {
    partial = CheckedMul(c_elems, revisits(2) - 1, kCount);
    bits[2] = CheckedAdd(CheckedMul(c_elems, bits_c, kCount),
                         CheckedMul(CheckedMul(partial, mem.psum_bits, kCount), 2, kCount), kCount);
  } else {
    const int64_t passes = CheckedAdd(CheckedMul(dk.count - 1, CeilDiv(dk.tile, chunk), kCount),
                                      CeilDiv(dk.last, chunk), kCount);
    partial = CheckedMul(c_elems, passes - 1, kCount);
    bits[2] = CheckedAdd(CheckedMul(c_elems, bits_c, kCount),
                         CheckedMul(partial, mem.psum_bits, kCount), kCount);
  }
  return bits;
}

int64_t TimeOf(const MemoryHierarchy& mem, const std::array<int64_t, 3>& ch) {
  if (mem.dram_channel_per_operand)
    return std::max({CeilCycles(ch[0], mem.dram_bandwidth_bits),
                     CeilCycles(ch[1], mem.dram_bandwidth_bits),
                     CeilCycles(ch[2], mem.dram_bandwidth_bits)});
  return CeilCycles(CheckedAdd(CheckedAdd(ch[0], ch[1], kCount), ch[2], kCount),
                    mem.dram_bandwidth_bits);
}

// A candidate's cycles from its tile loop nest, given its first fetch, its array time and
// the cycles it pays outside the overlap: max(first fetch + array + last write-back, the
// busiest DRAM channel's bits / bandwidth), as AnalyzeMemory's overlap model bounds it.
// Also returns the DRAM bits of all channels.
std::pair<int64_t, double> CandidateCycles(const GemmWorkload& w, const MemoryHierarchy& mem,
                                           const Dim& dm, const Dim& dn, const Dim& dk,
                                           const char* order, bool accumulate, int64_t chunk,
                                           int64_t first_fetch, int64_t array_cycles,
                                           int64_t outside_cycles) {
  const auto bits = DramBits(w, mem, dm, dn, dk, order, accumulate, chunk);
  const int64_t last_c = CheckedMul(dm.last, dn.last, kCount);
  const int bits_c = w.c_on_chip ? 0 : w.bits_c;  // as in DramBits
  const int64_t lw_bits =
      accumulate
          ? CheckedMul(last_c, bits_c, kCount)
          : CheckedMul(last_c,
                       CheckedAdd(CheckedMul(CeilDiv(dk.last, chunk) - 1, mem.psum_bits, kCount),
                                  bits_c, kCount),
                       kCount);
  const int64_t lw = TimeOf(mem, {0, 0, lw_bits});
  const int64_t cycles =
      CheckedAdd(outside_cycles,
                 std::max(CheckedAdd(CheckedAdd(first_fetch, array_cycles, kCount), lw, kCount),
                          TimeOf(mem, bits)),
                 kCount);
  return {cycles, static_cast<double>(bits[0] + bits[1] + bits[2])};
}

// The fold model's compute cycles of a preset on one tile (README "cycles": folds run one
// after another, each as long as a full R x C one, load + L + R + C - 2, the load hidden
// when the stationary registers are double-buffered): the exact analysis adds only
// buffer <-> array stalls to it, so it bounds the tile's cycles from below. Active PEs as the
// fast method counts them. Used only for presets at one MAC per PE per cycle; every tile
// the search analyses is checked against it (a logic_error if it were ever above).
struct FoldBound {
  bool applies = false;
  char preset = 'o';
  int64_t rows = 1, cols = 1, stream_tile = 0, load = 0;
  bool steady = false;  // folds in steady state (memory.h SteadyFoldCycles)

  // (SP, SQ, SL) of a tile in the preset's canonical form.
  void Canon(int64_t m, int64_t n, int64_t k, int64_t* sp, int64_t* sq, int64_t* sl) const {
    if (preset == 'o') { *sp = m; *sq = n; *sl = k; }
    else if (preset == 'w') { *sp = k; *sq = n; *sl = m; }
    else { *sp = k; *sq = m; *sl = n; }
  }
  int64_t Cycles(int64_t m, int64_t n, int64_t k) const {
    if (steady) return SteadyFoldCycles(preset, rows, cols, stream_tile, 1, m, n, k);
    int64_t sp, sq, sl;
    Canon(m, n, k, &sp, &sq, &sl);
    const int64_t folds_pq = CheckedMul(CeilDiv(sp, rows), CeilDiv(sq, cols), kCount);
    const int64_t t = stream_tile > 0 ? std::min(stream_tile, sl) : sl;
    const int64_t full = sl / t, rem = sl % t;
    const int64_t over = load + rows + cols - 2;
    int64_t c = CheckedMul(CheckedMul(folds_pq, full, kCount), CheckedAdd(t, over, kCount), kCount);
    if (rem) c = CheckedAdd(c, CheckedMul(folds_pq, CheckedAdd(rem, over, kCount), kCount), kCount);
    return c;
  }
  int64_t ActivePes(int64_t m, int64_t n, int64_t k) const {
    int64_t sp, sq, sl;
    Canon(m, n, k, &sp, &sq, &sl);
    return std::min(rows, sp) * std::min(cols, sq);
  }
};

FoldBound MakeFoldBound(const Dataflow& df, const ArrayModel& am, const MemoryHierarchy& mem) {
  FoldBound f;
  if (df.preset.empty() || df.rows < 1 || df.cols < 1 || am.macs_per_pe_per_cycle != 1) return f;
  if (df.preset != "os" && df.preset != "ws" && df.preset != "is") return f;
  f.applies = true;
  f.preset = df.preset[0];
  f.rows = df.rows;
  f.cols = df.cols;
  if (!df.tiling.empty()) f.stream_tile = df.tiling.begin()->second;
  f.load = (df.preset != "os" && !mem.stationary_double_buffered) ? df.rows : 0;
  f.steady = mem.stationary_double_buffered;
  return f;
}

}  // namespace

MappingObjective ParseMappingObjective(const std::string& name) {
  if (name == "latency") return MappingObjective::kLatency;
  if (name == "energy") return MappingObjective::kEnergy;
  if (name == "edp") return MappingObjective::kEdp;
  throw std::invalid_argument("mapping objective must be \"latency\", \"energy\" or \"edp\", got \"" +
                              name + "\"");
}

std::string MappingObjectiveName(MappingObjective o) {
  switch (o) {
    case MappingObjective::kLatency: return "latency";
    case MappingObjective::kEnergy: return "energy";
    case MappingObjective::kEdp: return "edp";
  }
  return "latency";
}

MappingSpace MappingSpace::Presets(int64_t rows, int64_t cols,
                                   const std::vector<std::string>& presets) {
  MappingSpace s;
  for (const auto& p : presets) s.dataflows.push_back(Dataflow::Preset(p, rows, cols));
  Validate(s);
  return s;
}

MappingSpace MappingSpace::ForDataflow(const Dataflow& df) {
  Validate(df);
  if (!df.preset.empty() && df.rows > 0 && df.cols > 0) return Presets(df.rows, df.cols);
  MappingSpace s;
  s.dataflows = {df};
  return s;
}

MappingSpace MappingSpace::ForDataflow(const Dataflow& df,
                                       const std::vector<std::string>& supported) {
  Validate(df);
  if (supported.empty() || df.preset.empty() || df.rows < 1 || df.cols < 1) {
    MappingSpace s;
    s.dataflows = {df};
    return s;
  }
  // In os, ws, is order whatever the list's order, so candidates keep their numbering.
  std::vector<std::string> presets;
  for (const char* p : {"os", "ws", "is"})
    if (std::find(supported.begin(), supported.end(), p) != supported.end()) presets.push_back(p);
  if (presets.empty())
    throw std::invalid_argument("supported_dataflows lists no preset of os, ws, is");
  return Presets(df.rows, df.cols, presets);
}

void Validate(const MappingSpace& s) {
  if (s.dataflows.empty())
    throw std::invalid_argument("MappingSpace.dataflows is empty: list at least one dataflow "
                                "(an os/ws/is preset or TENET relations)");
  for (const auto& df : s.dataflows) Validate(df);
  for (int64_t t : s.stream_tiles)
    if (t < 1)
      throw std::invalid_argument("MappingSpace.stream_tiles must be tilings >= 1 (elements), got " +
                                  Str(t));
  if (s.granule < 0)
    throw std::invalid_argument("MappingSpace.granule must be >= 0 (elements; 0 = the array edge), got " +
                                Str(s.granule));
  if (s.max_even_split < 1 || s.max_even_split > 64)
    throw std::invalid_argument("MappingSpace.max_even_split must be in 1..64, got " +
                                Str(s.max_even_split));
}

int64_t SpaceGranule(const MappingSpace& s) {
  if (s.granule > 0) return s.granule;
  int64_t g = 0;
  for (const auto& df : s.dataflows)
    if (!df.preset.empty()) g = std::max({g, df.rows, df.cols});
  return std::max<int64_t>(g, 1);
}

std::vector<int64_t> TileSizeCandidates(int64_t extent, int64_t granule, int max_even_split) {
  if (extent < 1) throw std::invalid_argument("tile candidates: extent must be >= 1, got " + Str(extent));
  if (granule < 1) throw std::invalid_argument("tile candidates: granule must be >= 1, got " + Str(granule));
  if (max_even_split < 1)
    throw std::invalid_argument("tile candidates: max_even_split must be >= 1, got " +
                                Str(max_even_split));
  std::set<int64_t> s{extent};
  for (int64_t t = granule; t < extent; t *= 2) {
    s.insert(t);
    if (t > extent / 2) break;  // next doubling would pass the extent
  }
  const int64_t units = CeilDiv(extent, granule);
  for (int64_t c = 1; c <= max_even_split; ++c) s.insert(std::min(extent, granule * CeilDiv(units, c)));
  return {s.begin(), s.end()};
}

std::vector<Dataflow> SearchedDataflows(const MappingSpace& space, const GemmWorkload& w) {
  std::vector<Dataflow> out = space.dataflows;
  for (const auto& df : space.dataflows) {
    if (df.preset.empty() || !df.tiling.empty()) continue;
    const char d = StreamDim(df.preset);
    const int64_t extent = d == 'k' ? w.k : d == 'm' ? w.m : w.n;
    std::set<int64_t> seen;
    for (int64_t t : space.stream_tiles)
      if (t < extent && seen.insert(t).second)
        out.push_back(Dataflow::Preset(df.preset, df.rows, df.cols, {{std::string(1, d), t}}));
  }
  return out;
}

namespace {

// ---- The map space: the candidates of one call, in the declared order. ----------------

// A work item is (dataflow, tm, tn, tk), numbered dataflow-major with tk fastest; its 12
// candidates (tile-loop order x accumulate, accumulate first) are numbered item x 12 + c and
// share the item's capacity check and tile costs.
constexpr int kPerItem = 12;

struct MapSpace {
  std::vector<Dataflow> dataflows;
  std::vector<int64_t> tms, tns, tks;

  MapSpace(const MappingSpace& space, const GemmWorkload& w)
      : dataflows(SearchedDataflows(space, w)) {
    const int64_t g = SpaceGranule(space);
    tms = TileSizeCandidates(w.m, g, space.max_even_split);
    tns = TileSizeCandidates(w.n, g, space.max_even_split);
    tks = TileSizeCandidates(w.k, g, space.max_even_split);
  }
  int64_t Items() const {
    return static_cast<int64_t>(dataflows.size() * tms.size() * tns.size() * tks.size());
  }
  // Item `id`: its dataflow's index and its tiles (order and accumulate left at defaults).
  int DataflowOf(int64_t id) const {
    return static_cast<int>(id / static_cast<int64_t>(tms.size() * tns.size() * tks.size()));
  }
  TileMapping TilesOf(int64_t id) const {
    TileMapping t;
    const int64_t nk = tks.size(), nn = tns.size(), nm = tms.size();
    t.tk = tks[id % nk];
    t.tn = tns[id / nk % nn];
    t.tm = tms[id / nk / nn % nm];
    return t;
  }
  // Candidate c (0..11) of an item with tiles `t`.
  static TileMapping Candidate(TileMapping t, int c) {
    t.order = kTileOrders[c / 2];
    t.accumulate_in_buffer = c % 2 == 0;
    return t;
  }
};

// Whether a candidate (or all of an item's) is a mapping, and why not; as Timeloop's
// EvalStatus, a refusal is a value the driver counts, not an exception it catches.
struct EvalStatus {
  bool success = true;
  std::string fail_reason;
  static EvalStatus Fail(std::string why) { return {false, std::move(why)}; }
};

// Capacity of an item: relation tiles must be small enough to enumerate, and the tiles
// must fit the buffer.
EvalStatus CheckFits(const GemmWorkload& w, const MemoryHierarchy& mem, const Dataflow& df,
                     const TileMapping& t) {
  if (df.preset.empty() &&
      CheckedMul(CheckedMul(t.tm, t.tn, kCount), t.tk, kCount) > kMaxEnumeratedInstances)
    return EvalStatus::Fail("relation tiles above " + Str(kMaxEnumeratedInstances) + " MACs");
  const int64_t need = BufferBytesNeeded(w, mem, t);
  if (need > mem.buffer_bytes)
    return EvalStatus::Fail("tiles m" + Str(t.tm) + " n" + Str(t.tn) + " k" + Str(t.tk) + " need " +
                            Str(need) + " bytes of buffer, it has " + Str(mem.buffer_bytes));
  return {};
}

// ---- The bounds: lower bounds of a candidate's (cycles, pJ), for pruning. ---------------

// Lower bounds on energy are computed in another summation order than CallEnergy: keep them
// a hair below, so rounding never lets a bound pass the exact value.
constexpr double kEnergyBoundScale = 1.0 - 1e-9;

// What every candidate of one call pays alike: MACs and extra ops, and the registers (the
// MACs' own accesses and the call's extra ones, e.g. partial sums rescaled per K-group),
// summed as CallEnergy sums them. A constant here still moves the EDP optimum (cycles x pJ).
struct CallBounds {
  int64_t macs = 0;
  double pj_fixed = 0;

  CallBounds(const GemmWorkload& w, const MemoryHierarchy& mem, const MacSpec& mac)
      : macs(CheckedMul(CheckedMul(CheckedMul(w.m, w.n, kCount), w.k, kCount), w.batch, kCount)) {
    pj_fixed = static_cast<double>(macs + w.extra_ops) * mac.pj_per_mac +
               (static_cast<double>(
                    CheckedMul(macs, w.bits_a + w.bits_b + 2 * int64_t(mem.psum_bits), kCount)) +
                static_cast<double>(w.extra_register_bits)) *
                   mem.register_pj_per_bit;
  }
  // The energy bound of a candidate moving `dram_bits` (and `buffer_bits` between the
  // buffer and the array, when known).
  double Pj(const MemoryHierarchy& mem, double dram_bits, double buffer_bits = 0) const {
    return (pj_fixed + dram_bits * (mem.dram_pj_per_bit + mem.buffer_pj_per_bit) +
            buffer_bits * mem.buffer_pj_per_bit) *
           kEnergyBoundScale;
  }
};

// The tile dimensions of an item and the K chunk its partial sums leave the array in.
struct ItemNest {
  Dim dm, dn, dk;
  int64_t chunk;
  ItemNest(const GemmWorkload& w, const ArrayModel& am, const TileMapping& t)
      : dm(MakeDim('m', w.m, t.tm)),
        dn(MakeDim('n', w.n, t.tn)),
        dk(MakeDim('k', w.k, t.tk)),
        chunk(am.k_pass > 0 ? am.k_pass : dk.tile) {}
};

// Calls fn(count, m, n, k) for each tile shape class of the nest (full or last tile per
// dimension) that occurs, with the number of its tiles over the call's batch.
template <typename Fn>
void ForEachTileClass(const GemmWorkload& w, const ItemNest& x, Fn fn) {
  for (int a = 1; a >= 0; --a)
    for (int b = 1; b >= 0; --b)
      for (int e = 1; e >= 0; --e) {
        const int64_t cm = a ? x.dm.count - 1 : 1, cn = b ? x.dn.count - 1 : 1,
                      ck = e ? x.dk.count - 1 : 1;
        if (cm == 0 || cn == 0 || ck == 0) continue;
        const int64_t n =
            CheckedMul(CheckedMul(CheckedMul(cm, cn, kCount), ck, kCount), w.batch, kCount);
        fn(n, a ? x.dm.tile : x.dm.last, b ? x.dn.tile : x.dn.last, e ? x.dk.tile : x.dk.last);
      }
}

// The first fetch of an item: its first A (with side data) and B tiles.
int64_t FirstFetch(const GemmWorkload& w, const MemoryHierarchy& mem, const ItemNest& x) {
  return TimeOf(mem,
                {CheckedAdd(CheckedMul(CheckedMul(x.dm.tile, x.dk.tile, kCount),
                                       w.a_on_chip ? 0 : w.bits_a, kCount),
                            w.extra_read_bits, kCount),
                 CheckedMul(CheckedMul(x.dk.tile, x.dn.tile, kCount), w.bits_b, kCount), 0});
}

// An item's 12 candidates' first lower bounds (no tile costs: array cycles >= MACs / (PEs x
// rate), or the fold model's where it applies), and the best of them as its visiting key.
struct ItemBounds {
  std::array<int64_t, kPerItem> cycles{};
  std::array<double, kPerItem> pj{};
  double sort_key = std::numeric_limits<double>::infinity();
};

ItemBounds FirstBounds(const GemmWorkload& w, const MemoryHierarchy& mem, const ArrayModel& am,
                       const FoldBound& fb, const CallBounds& call, MappingObjective objective,
                       const ItemNest& x) {
  int64_t array_lb =
      CeilCycles(call.macs, static_cast<double>(am.num_pes) * am.macs_per_pe_per_cycle);
  int64_t extra_lb =
      CeilCycles(w.extra_ops, static_cast<double>(am.num_pes) * am.ops_per_pe_per_cycle);
  if (fb.applies) {
    int64_t sum = 0;
    ForEachTileClass(w, x, [&](int64_t n, int64_t sm, int64_t sn, int64_t sk) {
      sum = CheckedAdd(sum, CheckedMul(n, fb.Cycles(sm, sn, sk), kCount), kCount);
    });
    array_lb = std::max(array_lb, sum);
    extra_lb = CeilCycles(w.extra_ops, static_cast<double>(std::max<int64_t>(
                                           1, fb.ActivePes(x.dm.tile, x.dn.tile, x.dk.tile))) *
                                           am.ops_per_pe_per_cycle);
  }
  const int64_t ff = FirstFetch(w, mem, x);
  ItemBounds b;
  for (int c = 0; c < kPerItem; ++c) {
    const auto [cyc, dram] =
        CandidateCycles(w, mem, x.dm, x.dn, x.dk, kTileOrders[c / 2], c % 2 == 0, x.chunk, ff,
                        array_lb, CheckedAdd(extra_lb, am.prologue_cycles, kCount));
    b.cycles[c] = cyc;
    b.pj[c] = call.Pj(mem, dram);
    b.sort_key = std::min(b.sort_key, Objectives(objective, double(cyc), b.pj[c]).first);
  }
  return b;
}

// An item's exact tile costs, summed over its tile shape classes: the second, tighter bound's
// array cycles, buffer bits, extra-op cycles and first fetch. A tile the array analysis
// refuses (e.g. relations outside the PE domain) refuses the whole item.
struct ItemTiles {
  EvalStatus status;
  int64_t sum_array = 0, extra = 0, ff = 0;
  double buffer_bits = 0;
};

ItemTiles ExactTiles(const GemmWorkload& w, const MemoryHierarchy& mem, const ArrayModel& am,
                     const FoldBound& fb, const ItemNest& x) {
  ItemTiles r;
  TileCost full;
  try {
    ForEachTileClass(w, x, [&](int64_t n, int64_t sm, int64_t sn, int64_t sk) {
      const TileCost tc = am.tile_cost(sm, sn, sk);
      if (fb.applies && tc.cycles < fb.Cycles(sm, sn, sk))
        throw std::logic_error("mapping search: the fold bound " + Str(fb.Cycles(sm, sn, sk)) +
                               " exceeds the exact cycles " + Str(tc.cycles) + " of a " + Str(sm) +
                               "x" + Str(sn) + "x" + Str(sk) + " tile of " + am.name);
      r.sum_array = CheckedAdd(r.sum_array, CheckedMul(n, tc.cycles, kCount), kCount);
      r.buffer_bits += static_cast<double>(n) *
                       static_cast<double>(tc.buffer_read_bits_a + tc.buffer_read_bits_b +
                                           tc.buffer_write_bits_c);
    });
    full = am.tile_cost(x.dm.tile, x.dn.tile, x.dk.tile);
  } catch (const std::invalid_argument& e) {
    r.status = EvalStatus::Fail(e.what());
    return r;
  }
  if (fb.applies && full.active_pes > fb.ActivePes(x.dm.tile, x.dn.tile, x.dk.tile))
    throw std::logic_error("mapping search: active PEs above the fold bound's on " + am.name);
  r.extra = CeilCycles(w.extra_ops, static_cast<double>(std::max<int64_t>(1, full.active_pes)) *
                                        am.ops_per_pe_per_cycle);
  r.ff = FirstFetch(w, mem, x);
  return r;
}

// ---- The model: the exact cost of one candidate. ----------------------------------------

struct Evaluation {
  EvalStatus status;
  MemoryMetrics metrics;
  EnergyBreakdown energy;
};

// AnalyzeMemory and CallEnergy of a candidate; AnalyzeMemory's refusal (the candidate is not
// a mapping) comes back as a failed status with its reason.
Evaluation Evaluate(const GemmWorkload& w, const ArrayModel& am, const MemoryHierarchy& mem,
                    const MacSpec& mac, const TileMapping& cand) {
  Evaluation e;
  try {
    e.metrics = AnalyzeMemory(w, am, mem, cand);
  } catch (const std::invalid_argument& err) {
    e.status = EvalStatus::Fail(err.what());
    return e;
  }
  e.energy = CallEnergy(w, e.metrics, mem, mac);
  return e;
}

// ---- The search driver: items in visiting order over threads, the best so far. ---------

class SearchDriver {
 public:
  SearchDriver(const GemmWorkload& w, const MemoryHierarchy& mem, const MacSpec& mac,
               MappingObjective objective, const MapSpace& space,
               const std::vector<ArrayModel>& arrays, const std::vector<FoldBound>& folds,
               const CallBounds& call)
      : w_(w),
        mem_(mem),
        mac_(mac),
        objective_(objective),
        space_(space),
        arrays_(arrays),
        folds_(folds),
        call_(call) {}

  // Visits `visit` (item ids, most promising first) on `threads` threads; `bounds[id]` are
  // the items' first bounds.
  void Run(const std::vector<int64_t>& visit, const std::vector<ItemBounds>& bounds, int threads) {
    std::atomic<int64_t> next{0};
    const auto n = static_cast<int64_t>(visit.size());
    auto worker = [&]() {
      for (;;) {
        const int64_t i = next.fetch_add(1);
        if (i >= n) return;
        try {
          RunItem(visit[i], bounds[visit[i]]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu_);
          if (!failure_) failure_ = std::current_exception();
          next.store(n);
          return;
        }
      }
    };
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    if (failure_) std::rethrow_exception(failure_);
  }

  bool found() const { return best_d_ >= 0; }
  const std::string& refused_reason() const { return refused_reason_; }
  int64_t refused() const { return refused_.load(); }

  // Moves the best candidate into `r` with the counts.
  void Fill(MappingChoice* r) {
    r->dataflow = space_.dataflows[best_d_];
    r->tiles = best_t_;
    r->metrics = std::move(best_.metrics);
    r->energy = best_.energy;
    r->objective = best_key_.primary;
    r->index = best_key_.index;
    r->evaluated = evaluated_.load();
    r->pruned = pruned_.load();
  }

 private:
  Key Snapshot() {
    std::lock_guard<std::mutex> lock(mu_);
    return best_key_;
  }
  void Refuse(int64_t count, const std::string& why) {
    refused_.fetch_add(count);
    std::lock_guard<std::mutex> lock(mu_);
    refused_reason_ = why;
  }

  // One item: each candidate is pruned by its first bound, then (with the item's exact tile
  // costs, computed once) by its second, else evaluated exactly and offered as the best.
  void RunItem(int64_t id, const ItemBounds& first) {
    const int d = space_.DataflowOf(id);
    const ArrayModel& am = arrays_[d];
    const FoldBound& fb = folds_[d];
    const TileMapping t = space_.TilesOf(id);
    const ItemNest x(w_, am, t);
    bool have_tiles = false;
    ItemTiles tiles;
    for (int c = 0; c < kPerItem; ++c) {
      const int64_t index = id * kPerItem + c;
      auto obj = Objectives(objective_, double(first.cycles[c]), first.pj[c]);
      if (CannotBeat(obj.first, obj.second, index, Snapshot())) {
        pruned_.fetch_add(1);
        continue;
      }
      if (!have_tiles) {
        tiles = ExactTiles(w_, mem_, am, fb, x);
        have_tiles = true;
        if (!tiles.status.success) {
          // This and the item's later candidates are not mappings.
          Refuse(kPerItem - c, tiles.status.fail_reason);
          return;
        }
      }
      const TileMapping cand = MapSpace::Candidate(t, c);
      const auto [cyc, dram] = CandidateCycles(
          w_, mem_, x.dm, x.dn, x.dk, cand.order.c_str(), cand.accumulate_in_buffer, x.chunk,
          tiles.ff, tiles.sum_array, CheckedAdd(tiles.extra, am.prologue_cycles, kCount));
      const double pj = call_.Pj(mem_, dram, tiles.buffer_bits);
      obj = Objectives(objective_, double(cyc), pj);
      if (CannotBeat(obj.first, obj.second, index, Snapshot())) {
        pruned_.fetch_add(1);
        continue;
      }
      Evaluation e = Evaluate(w_, am, mem_, mac_, cand);
      if (!e.status.success) {
        Refuse(1, e.status.fail_reason);
        continue;
      }
      evaluated_.fetch_add(1);
      if (e.metrics.cycles < cyc || e.energy.total_pj < pj)
        throw std::logic_error("mapping search: a lower bound exceeds the exact cost of " +
                               e.metrics.mapping + " (cycles " + Str(e.metrics.cycles) +
                               " < bound " + Str(cyc) + ", or energy below its bound)");
      const auto exact = Objectives(objective_, double(e.metrics.cycles), e.energy.total_pj);
      const Key k{exact.first, exact.second, index};
      std::lock_guard<std::mutex> lock(mu_);
      if (Before(k, best_key_)) {
        best_key_ = k;
        best_ = std::move(e);
        best_t_ = cand;
        best_d_ = d;
      }
    }
  }

  const GemmWorkload& w_;
  const MemoryHierarchy& mem_;
  const MacSpec& mac_;
  const MappingObjective objective_;
  const MapSpace& space_;
  const std::vector<ArrayModel>& arrays_;
  const std::vector<FoldBound>& folds_;
  const CallBounds& call_;

  std::mutex mu_;  // guards the best and the refusal reason
  Key best_key_;
  Evaluation best_;
  TileMapping best_t_;
  int best_d_ = -1;
  std::atomic<int64_t> evaluated_{0}, pruned_{0}, refused_{0};
  std::string refused_reason_;
  std::exception_ptr failure_;
};

// Automatic: one thread unless the space is large. After pruning a GPT-2 call's search is
// ~1-10 ms of work, less than a second thread costs to start and join on a loaded machine
// (measured: 0.10 s for all 34 distinct GPT-2 calls on 1 thread, 0.26 s median on 2).
int ThreadCount(int requested, size_t items_to_visit) {
  int threads = requested;
  if (threads == 0)
    threads = items_to_visit >= kItemsPerExtraThread
                  ? static_cast<int>(
                        std::min<unsigned>(2, std::max(1u, std::thread::hardware_concurrency())))
                  : 1;
  if (items_to_visit < 32) threads = 1;
  return threads;
}

}  // namespace

MappingChoice SearchMapping(const GemmWorkload& w, const Hardware& hw, const MappingSpace& space,
                            const MemoryHierarchy& mem, const PrecisionTable& table,
                            const MappingSearchOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  Validate(w);
  Validate(hw);
  Validate(mem);
  Validate(space);
  if (options.threads < 0)
    throw std::invalid_argument("MappingSearchOptions.threads must be >= 0 (0 = automatic), got " +
                                Str(options.threads));
  const MacSpec mac = table.Lookup(w.bits_a, w.bits_b, w.float_codes);
  const MapSpace ms(space, w);

  // The array model of each dataflow, its tile costs cached across the call's candidates.
  std::vector<ArrayModel> arrays;
  auto shapes = std::make_shared<std::atomic<int64_t>>(0);
  for (const auto& df : ms.dataflows) {
    ArrayModel exact = ExactArrayModel(w, hw, df, mem);
    auto inner = exact.tile_cost;
    exact.tile_cost = [inner, shapes](int64_t m, int64_t n, int64_t k) {
      shapes->fetch_add(1);
      return inner(m, n, k);
    };
    arrays.push_back(CachedArrayModel(std::move(exact)));
  }
  std::vector<FoldBound> folds;
  for (size_t d = 0; d < ms.dataflows.size(); ++d)
    folds.push_back(MakeFoldBound(ms.dataflows[d], arrays[d], mem));
  const CallBounds call(w, mem, mac);

  // Capacity and first bounds of every item; the items that fit are visited, the most
  // promising first (a good best early prunes more). The result does not depend on the
  // visiting order (the key includes the candidate's index).
  const int64_t items = ms.Items();
  std::vector<ItemBounds> bounds(items);
  std::vector<int64_t> visit;
  int64_t unfit = 0;
  std::string last_unfit;
  for (int64_t id = 0; id < items; ++id) {
    const int d = ms.DataflowOf(id);
    const TileMapping t = ms.TilesOf(id);
    const EvalStatus fits = CheckFits(w, mem, ms.dataflows[d], t);
    if (!fits.success) {
      unfit += kPerItem;
      last_unfit = fits.fail_reason;
      continue;
    }
    bounds[id] = FirstBounds(w, mem, arrays[d], folds[d], call, options.objective,
                             ItemNest(w, arrays[d], t));
    visit.push_back(id);
  }
  std::stable_sort(visit.begin(), visit.end(),
                   [&](int64_t a, int64_t b) { return bounds[a].sort_key < bounds[b].sort_key; });

  SearchDriver driver(w, mem, mac, options.objective, ms, arrays, folds, call);
  driver.Run(visit, bounds, ThreadCount(options.threads, visit.size()));
  if (!driver.found()) {
    const std::string why = !driver.refused_reason().empty() ? driver.refused_reason() : last_unfit;
    throw std::invalid_argument("mapping search: no candidate of the space fits (" +
                                Str(items * kPerItem) + " candidates; last reason: " + why + ")");
  }
  MappingChoice r;
  driver.Fill(&r);
  r.candidates = items * kPerItem;
  r.unfit = unfit + driver.refused();
  r.tile_shapes = shapes->load();
  r.search_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

MappingSearch::MappingSearch(Hardware hw, MappingSpace space, MemoryHierarchy mem,
                             PrecisionTable table, MappingSearchOptions options)
    : hw_(std::move(hw)), space_(std::move(space)), mem_(mem), table_(std::move(table)),
      options_(options) {
  Validate(hw_);
  Validate(space_);
  Validate(mem_);
  Validate(table_);
}

MappingChoice MappingSearch::Best(const GemmWorkload& w) {
  Validate(w);
  const Key key{w.batch, w.m, w.n, w.k, w.bits_a, w.bits_b, w.bits_c,
                w.extra_read_bits, w.extra_ops, w.extra_register_bits, w.float_codes,
                w.mac_bits, w.a_on_chip, w.c_on_chip};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = done_.find(key);
    if (it != done_.end()) return *it->second;
  }
  // Outside the lock: other calls search meanwhile. Two threads asking for the same new call
  // both search; the results are equal (the search is deterministic) and the first is kept.
  auto choice = std::make_shared<const MappingChoice>(SearchMapping(w, hw_, space_, mem_, table_, options_));
  std::lock_guard<std::mutex> lock(mu_);
  return *done_.emplace(key, std::move(choice)).first->second;
}

int64_t MappingSearch::searches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(done_.size());
}

}  // namespace tenet
