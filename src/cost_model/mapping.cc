// The mapping search: enumerate the declared space of one call, prune by lower bounds that
// cannot drop the optimum, analyse the rest with AnalyzeMemory and keep the least key.
#include "cost_model/mapping.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

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
  std::array<int64_t, 3> bits{};
  bits[0] = CheckedAdd(CheckedMul(CheckedMul(a_elems, revisits(0), kCount), w.bits_a, kCount),
                       w.extra_read_bits, kCount);
  bits[1] = CheckedMul(CheckedMul(b_elems, revisits(1), kCount), w.bits_b, kCount);
  int64_t partial;
  if (accumulate) {
    partial = CheckedMul(c_elems, revisits(2) - 1, kCount);
    bits[2] = CheckedAdd(CheckedMul(c_elems, w.bits_c, kCount),
                         CheckedMul(CheckedMul(partial, mem.psum_bits, kCount), 2, kCount), kCount);
  } else {
    const int64_t passes = CheckedAdd(CheckedMul(dk.count - 1, CeilDiv(dk.tile, chunk), kCount),
                                      CeilDiv(dk.last, chunk), kCount);
    partial = CheckedMul(c_elems, passes - 1, kCount);
    bits[2] = CheckedAdd(CheckedMul(c_elems, w.bits_c, kCount),
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
  const int64_t lw_bits =
      accumulate
          ? CheckedMul(last_c, w.bits_c, kCount)
          : CheckedMul(last_c,
                       CheckedAdd(CheckedMul(CeilDiv(dk.last, chunk) - 1, mem.psum_bits, kCount),
                                  w.bits_c, kCount),
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

  // (SP, SQ, SL) of a tile in the preset's canonical form.
  void Canon(int64_t m, int64_t n, int64_t k, int64_t* sp, int64_t* sq, int64_t* sl) const {
    if (preset == 'o') { *sp = m; *sq = n; *sl = k; }
    else if (preset == 'w') { *sp = k; *sq = n; *sl = m; }
    else { *sp = k; *sq = m; *sl = n; }
  }
  int64_t Cycles(int64_t m, int64_t n, int64_t k) const {
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
  const MacSpec mac = table.Lookup(w.bits_a, w.bits_b);

  const std::vector<Dataflow> dfs = SearchedDataflows(space, w);
  std::vector<ArrayModel> arrays;
  auto shapes = std::make_shared<std::atomic<int64_t>>(0);
  for (const auto& df : dfs) {
    ArrayModel exact = ExactArrayModel(w, hw, df, mem);
    auto inner = exact.tile_cost;
    exact.tile_cost = [inner, shapes](int64_t m, int64_t n, int64_t k) {
      shapes->fetch_add(1);
      return inner(m, n, k);
    };
    arrays.push_back(CachedArrayModel(std::move(exact)));
  }
  std::vector<FoldBound> folds;
  for (size_t d = 0; d < dfs.size(); ++d) folds.push_back(MakeFoldBound(dfs[d], arrays[d], mem));
  const int64_t g = SpaceGranule(space);
  const auto tms = TileSizeCandidates(w.m, g, space.max_even_split);
  const auto tns = TileSizeCandidates(w.n, g, space.max_even_split);
  const auto tks = TileSizeCandidates(w.k, g, space.max_even_split);
  const int64_t nm = tms.size(), nn = tns.size(), nk = tks.size();
  const int64_t items = static_cast<int64_t>(dfs.size()) * nm * nn * nk;
  const int64_t macs =
      CheckedMul(CheckedMul(CheckedMul(w.m, w.n, kCount), w.k, kCount), w.batch, kCount);
  // What every candidate pays alike: MACs and extra ops, and the registers (the MACs' own
  // accesses and the call's extra ones, e.g. partial sums rescaled per K-group), summed as
  // CallEnergy sums them. A constant here still moves the EDP optimum (cycles x pJ).
  const double pj_fixed = static_cast<double>(macs + w.extra_ops) * mac.pj_per_mac +
                          (static_cast<double>(CheckedMul(
                               macs, w.bits_a + w.bits_b + 2 * int64_t(mem.psum_bits), kCount)) +
                           static_cast<double>(w.extra_register_bits)) *
                              mem.register_pj_per_bit;
  // Lower bounds on energy are computed in another summation order than CallEnergy: keep
  // them a hair below, so rounding never lets a bound pass the exact value.
  constexpr double kEnergyBoundScale = 1.0 - 1e-9;

  // One work item = (dataflow, tm, tn, tk); its 12 candidates share capacity and tile costs.
  struct Item {
    int64_t id;
    int d, im, in, ik;
    bool fits = true;
    std::array<int64_t, 12> lb_cycles{};  // without tile costs
    std::array<double, 12> lb_pj{};
    double sort_key = 0;
  };
  std::vector<Item> work;
  work.reserve(items);
  int64_t unfit = 0;
  std::string last_unfit;
  for (int d = 0; d < static_cast<int>(dfs.size()); ++d)
    for (int im = 0; im < nm; ++im)
      for (int in = 0; in < nn; ++in)
        for (int ik = 0; ik < nk; ++ik) {
          Item it{static_cast<int64_t>(work.size()), d, im, in, ik};
          TileMapping t;
          t.tm = tms[im]; t.tn = tns[in]; t.tk = tks[ik];
          const ArrayModel& am = arrays[d];
          if (dfs[d].preset.empty() &&
              CheckedMul(CheckedMul(t.tm, t.tn, kCount), t.tk, kCount) > kMaxEnumeratedInstances) {
            it.fits = false;
            last_unfit = "relation tiles above " + Str(kMaxEnumeratedInstances) + " MACs";
          } else if (BufferBytesNeeded(w, mem, t) > mem.buffer_bytes) {
            it.fits = false;
            last_unfit = "tiles m" + Str(t.tm) + " n" + Str(t.tn) + " k" + Str(t.tk) + " need " +
                         Str(BufferBytesNeeded(w, mem, t)) + " bytes of buffer, it has " +
                         Str(mem.buffer_bytes);
          }
          if (!it.fits) {
            unfit += 12;
            work.push_back(it);
            continue;
          }
          const Dim dm = MakeDim('m', w.m, t.tm), dn = MakeDim('n', w.n, t.tn),
                    dk = MakeDim('k', w.k, t.tk);
          const int64_t chunk = am.k_pass > 0 ? am.k_pass : dk.tile;
          int64_t array_lb = CeilCycles(macs, static_cast<double>(am.num_pes) * am.macs_per_pe_per_cycle);
          int64_t extra_lb = CeilCycles(w.extra_ops, static_cast<double>(am.num_pes) * am.ops_per_pe_per_cycle);
          const FoldBound& fb = folds[d];
          if (fb.applies) {
            int64_t sum = 0;
            for (int a = 1; a >= 0; --a)
              for (int b = 1; b >= 0; --b)
                for (int e = 1; e >= 0; --e) {
                  const int64_t cm = a ? dm.count - 1 : 1, cn = b ? dn.count - 1 : 1,
                                ck = e ? dk.count - 1 : 1;
                  if (cm == 0 || cn == 0 || ck == 0) continue;
                  sum = CheckedAdd(
                      sum,
                      CheckedMul(CheckedMul(CheckedMul(CheckedMul(cm, cn, kCount), ck, kCount),
                                            w.batch, kCount),
                                 fb.Cycles(a ? dm.tile : dm.last, b ? dn.tile : dn.last,
                                           e ? dk.tile : dk.last),
                                 kCount),
                      kCount);
                }
            array_lb = std::max(array_lb, sum);
            extra_lb = CeilCycles(w.extra_ops,
                                  static_cast<double>(std::max<int64_t>(
                                      1, fb.ActivePes(dm.tile, dn.tile, dk.tile))) *
                                      am.ops_per_pe_per_cycle);
          }
          const int64_t ff = TimeOf(
              mem, {CheckedAdd(CheckedMul(CheckedMul(dm.tile, dk.tile, kCount), w.bits_a, kCount),
                               w.extra_read_bits, kCount),
                    CheckedMul(CheckedMul(dk.tile, dn.tile, kCount), w.bits_b, kCount), 0});
          double best_sort = std::numeric_limits<double>::infinity();
          for (int o = 0; o < 6; ++o)
            for (int acc = 0; acc < 2; ++acc) {
              const bool accumulate = acc == 0;
              const auto [cyc, dram] =
                  CandidateCycles(w, mem, dm, dn, dk, kTileOrders[o], accumulate, chunk, ff,
                                  array_lb, CheckedAdd(extra_lb, am.prologue_cycles, kCount));
              const double pj = (pj_fixed + dram * (mem.dram_pj_per_bit + mem.buffer_pj_per_bit)) *
                                kEnergyBoundScale;
              it.lb_cycles[o * 2 + acc] = cyc;
              it.lb_pj[o * 2 + acc] = pj;
              best_sort = std::min(best_sort, Objectives(options.objective, double(cyc), pj).first);
            }
          it.sort_key = best_sort;
          work.push_back(it);
        }

  // Visit the most promising items first (a good best early prunes more); the result does
  // not depend on the visiting order (the key includes the candidate's index).
  std::vector<int64_t> visit;
  for (const auto& it : work)
    if (it.fits) visit.push_back(it.id);
  std::stable_sort(visit.begin(), visit.end(),
                   [&](int64_t a, int64_t b) { return work[a].sort_key < work[b].sort_key; });

  std::mutex mu;
  Key best;
  MemoryMetrics best_mm;
  EnergyBreakdown best_e;
  TileMapping best_t;
  int best_d = -1;
  std::atomic<int64_t> next{0}, evaluated{0}, pruned{0}, refused{0};
  std::exception_ptr failure;
  std::string refused_reason;

  auto run_item = [&](const Item& it) {
    const ArrayModel& am = arrays[it.d];
    TileMapping t;
    t.tm = tms[it.im]; t.tn = tns[it.in]; t.tk = tks[it.ik];
    const Dim dm = MakeDim('m', w.m, t.tm), dn = MakeDim('n', w.n, t.tn),
              dk = MakeDim('k', w.k, t.tk);
    const int64_t chunk = am.k_pass > 0 ? am.k_pass : dk.tile;
    const int64_t base = it.id * 12;
    bool have_tiles = false;
    int64_t sum_array = 0, extra = 0, ff = 0;
    double buffer_bits = 0;
    for (int o = 0; o < 6; ++o)
      for (int acc = 0; acc < 2; ++acc) {
        const int c = o * 2 + acc;
        const int64_t index = base + c;
        Key snap;
        {
          std::lock_guard<std::mutex> lock(mu);
          snap = best;
        }
        auto obj = Objectives(options.objective, double(it.lb_cycles[c]), it.lb_pj[c]);
        if (CannotBeat(obj.first, obj.second, index, snap)) { pruned.fetch_add(1); continue; }
        const bool accumulate = acc == 0;
        if (!have_tiles) {
          // Exact array cycles and buffer traffic summed over the tile shape classes.
          for (int a = 1; a >= 0; --a)
            for (int b = 1; b >= 0; --b)
              for (int e = 1; e >= 0; --e) {
                const int64_t cm = a ? dm.count - 1 : 1, cn = b ? dn.count - 1 : 1,
                              ck = e ? dk.count - 1 : 1;
                if (cm == 0 || cn == 0 || ck == 0) continue;
                const int64_t sm = a ? dm.tile : dm.last, sn = b ? dn.tile : dn.last,
                              sk = e ? dk.tile : dk.last;
                const TileCost tc = am.tile_cost(sm, sn, sk);
                const FoldBound& fb = folds[it.d];
                if (fb.applies && tc.cycles < fb.Cycles(sm, sn, sk))
                  throw std::logic_error("mapping search: the fold bound " +
                                         Str(fb.Cycles(sm, sn, sk)) + " exceeds the exact cycles " +
                                         Str(tc.cycles) + " of a " + Str(sm) + "x" + Str(sn) + "x" +
                                         Str(sk) + " tile of " + am.name);
                const int64_t n =
                    CheckedMul(CheckedMul(CheckedMul(cm, cn, kCount), ck, kCount), w.batch, kCount);
                sum_array = CheckedAdd(sum_array, CheckedMul(n, tc.cycles, kCount), kCount);
                buffer_bits += static_cast<double>(n) *
                               static_cast<double>(tc.buffer_read_bits_a + tc.buffer_read_bits_b +
                                                   tc.buffer_write_bits_c);
              }
          const TileCost full = am.tile_cost(dm.tile, dn.tile, dk.tile);
          if (folds[it.d].applies && full.active_pes > folds[it.d].ActivePes(dm.tile, dn.tile, dk.tile))
            throw std::logic_error("mapping search: active PEs above the fold bound's on " + am.name);
          extra = CeilCycles(w.extra_ops, static_cast<double>(std::max<int64_t>(1, full.active_pes)) *
                                              am.ops_per_pe_per_cycle);
          ff = TimeOf(
              mem, {CheckedAdd(CheckedMul(CheckedMul(dm.tile, dk.tile, kCount), w.bits_a, kCount),
                               w.extra_read_bits, kCount),
                    CheckedMul(CheckedMul(dk.tile, dn.tile, kCount), w.bits_b, kCount), 0});
          have_tiles = true;
        }
        const auto [cyc, dram] =
            CandidateCycles(w, mem, dm, dn, dk, kTileOrders[o], accumulate, chunk, ff, sum_array,
                            CheckedAdd(extra, am.prologue_cycles, kCount));
        const double pj = (pj_fixed + dram * (mem.dram_pj_per_bit + mem.buffer_pj_per_bit) +
                           buffer_bits * mem.buffer_pj_per_bit) * kEnergyBoundScale;
        obj = Objectives(options.objective, double(cyc), pj);
        {
          std::lock_guard<std::mutex> lock(mu);
          snap = best;
        }
        if (CannotBeat(obj.first, obj.second, index, snap)) { pruned.fetch_add(1); continue; }
        TileMapping cand = t;
        cand.order = kTileOrders[o];
        cand.accumulate_in_buffer = accumulate;
        MemoryMetrics mm;
        try {
          mm = AnalyzeMemory(w, am, mem, cand);
        } catch (const std::invalid_argument& e) {
          refused.fetch_add(1);
          std::lock_guard<std::mutex> lock(mu);
          refused_reason = e.what();
          continue;
        }
        evaluated.fetch_add(1);
        const EnergyBreakdown en = CallEnergy(w, mm, mem, mac);
        if (mm.cycles < cyc || en.total_pj < pj)
          throw std::logic_error("mapping search: a lower bound exceeds the exact cost of " +
                                 mm.mapping + " (cycles " + Str(mm.cycles) + " < bound " +
                                 Str(cyc) + ", or energy below its bound)");
        const auto exact = Objectives(options.objective, double(mm.cycles), en.total_pj);
        Key k{exact.first, exact.second, index};
        std::lock_guard<std::mutex> lock(mu);
        if (Before(k, best)) {
          best = k;
          best_mm = std::move(mm);
          best_e = en;
          best_t = cand;
          best_d = it.d;
        }
      }
  };
  auto worker = [&]() {
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= static_cast<int64_t>(visit.size())) return;
      try {
        run_item(work[visit[i]]);
      } catch (const std::invalid_argument& e) {
        // A tile the array analysis refuses (e.g. relations outside the PE domain): its
        // candidates are not mappings.
        refused.fetch_add(12);
        std::lock_guard<std::mutex> lock(mu);
        refused_reason = e.what();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
        next.store(static_cast<int64_t>(visit.size()));
        return;
      }
    }
  };
  // Automatic: one thread unless the space is large. After pruning a GPT-2 call's search is
  // ~1-10 ms of work, less than a second thread costs to start and join on a loaded machine
  // (measured: 0.10 s for all 34 distinct GPT-2 calls on 1 thread, 0.26 s median on 2).
  int threads = options.threads;
  if (threads == 0)
    threads = visit.size() >= kItemsPerExtraThread
                  ? static_cast<int>(std::min<unsigned>(2, std::max(1u, std::thread::hardware_concurrency())))
                  : 1;
  if (visit.size() < 32) threads = 1;
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
  if (best_d < 0) {
    std::string why = !refused_reason.empty() ? refused_reason : last_unfit;
    throw std::invalid_argument("mapping search: no candidate of the space fits (" + Str(items * 12) +
                                " candidates; last reason: " + why + ")");
  }
  MappingChoice r;
  r.dataflow = dfs[best_d];
  r.tiles = best_t;
  r.metrics = std::move(best_mm);
  r.energy = best_e;
  r.objective = best.primary;
  r.index = best.index;
  r.candidates = items * 12;
  r.evaluated = evaluated.load();
  r.pruned = pruned.load();
  r.unfit = unfit + refused.load();
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
                w.extra_read_bits, w.extra_ops, w.extra_register_bits};
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
