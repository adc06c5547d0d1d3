// The buffer level of a GEMM call: tile-loop DRAM traffic in closed form, the capacity
// check, and the double-buffered latency summed over representative steps of the loop nest.
#include "cost_model/memory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <mutex>
#include <tuple>
#include <stdexcept>
#include <string>
#include <vector>

#include "cost_model/checked.h"

namespace tenet {

namespace {

std::string Num(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

using detail::Dim;
using detail::MakeDim;

void CheckRate(double v, const char* field, bool allow_zero) {
  if (!std::isfinite(v) || v < 0 || (!allow_zero && v == 0))
    throw std::invalid_argument(std::string("MemoryHierarchy.") + field + " must be " +
                                (allow_zero ? "a finite number >= 0" : "a finite number > 0") +
                                ", got " + Num(v));
}


// Operands: which loop dims (b, m, n, k) index their tile.
constexpr int kA = 0, kB = 1, kC = 2;
bool Relevant(int op, char dim) {
  if (dim == 'b') return true;
  if (op == kA) return dim == 'm' || dim == 'k';
  if (op == kB) return dim == 'k' || dim == 'n';
  return dim == 'm' || dim == 'n';
}

// The loop nest: level 0 = batch, levels 1..3 = mapping.order.
struct Nest {
  std::array<Dim, 4> lv;
  int level_of_k = 0, level_of_m = 0, level_of_n = 0;

  using Idx = std::array<int64_t, 4>;
  bool Next(Idx& i) const {  // false past the last step
    for (int l = 3; l >= 0; --l) {
      if (++i[l] < lv[l].count) return true;
      i[l] = 0;
    }
    return false;
  }
  bool Prev(Idx& i) const {
    for (int l = 3; l >= 0; --l) {
      if (i[l]-- > 0) return true;
      i[l] = lv[l].count - 1;
    }
    return false;
  }
  // Levels 0..outer[op] index op's buffer tile; the loops below are spanned by it (its
  // tile covers their whole range: TileMapping::span_*).
  std::array<int, 3> outer{3, 3, 3};
  bool Spanned(int op, int l) const { return l > outer[op]; }
  bool SameTile(int op, const Idx& x, const Idx& y) const {
    for (int l = 0; l <= outer[op]; ++l)
      if (Relevant(op, lv[l].name) && x[l] != y[l]) return false;
    return true;
  }
  int64_t Elems(int op, const Idx& i) const {
    int64_t e = 1;
    for (int l = 1; l < 4; ++l)
      if (Relevant(op, lv[l].name)) e *= Spanned(op, l) ? lv[l].extent : lv[l].Size(i[l]);
    return e;
  }
  // Elements a transfer of op's tile occupies on the DRAM interface (array-aligned lines).
  int64_t PaddedElems(int op, const Idx& i) const {
    int64_t e = 1;
    for (int l = 1; l < 4; ++l)
      if (Relevant(op, lv[l].name)) {
        const int64_t size = Spanned(op, l) ? lv[l].extent : lv[l].Size(i[l]);
        e = CheckedMul(e, CheckedMul(CeilDiv(size, align[op][l]), align[op][l], "padded tile"),
                       "padded tile");
      }
    return e;
  }
  std::array<std::array<int64_t, 4>, 3> align{};  // [operand][level]
  // Innermost level whose loop moves (count > 1) and indexes op's tile; -1 if none.
  int InnermostMoving(int op) const {
    int r = -1;
    for (int l = 0; l <= outer[op]; ++l)
      if (lv[l].count > 1 && Relevant(op, lv[l].name)) r = l;
    return r;
  }
  // Closed form: how many times op's tiles are (re)visited as a whole = product of the
  // counts of the loops that do not index it and sit outside its innermost moving loop.
  int64_t Revisits(int op) const {
    const int r = InnermostMoving(op);
    int64_t v = 1;
    for (int l = 0; l < r; ++l)
      if (!Relevant(op, lv[l].name)) v = CheckedMul(v, lv[l].count, "tile revisits");
    return v;
  }
  // Transfers of op's tiles = runs of its tile index = product of counts down to its
  // innermost moving loop.
  int64_t Runs(int op) const {
    const int r = InnermostMoving(op);
    int64_t v = 1;
    for (int l = 0; l <= r; ++l) v = CheckedMul(v, lv[l].count, "tile transfers");
    return v;
  }
};

struct ShapeCost {
  int64_t m, n, k;
  TileCost cost;
};

}  // namespace

double SramPjPerBit(int64_t capacity_bytes) {
  if (capacity_bytes <= 0)
    throw std::invalid_argument("SRAM capacity must be > 0 bytes, got " + Str(capacity_bytes));
  return 5.0 / 32.0 * std::sqrt(static_cast<double>(capacity_bytes) / 8192.0);
}

void Validate(const MemoryHierarchy& mem) {
  CheckRate(mem.dram_bandwidth_bits, "dram_bandwidth_bits (bits per cycle)", false);
  CheckRate(mem.dram_pj_per_bit, "dram_pj_per_bit", true);
  CheckRate(mem.buffer_bandwidth_bits, "buffer_bandwidth_bits (bits per cycle)", false);
  CheckRate(mem.buffer_pj_per_bit, "buffer_pj_per_bit", true);
  CheckRate(mem.register_pj_per_bit, "register_pj_per_bit", true);
  if (mem.buffer_bytes <= 0)
    throw std::invalid_argument("MemoryHierarchy.buffer_bytes must be > 0, got " +
                                Str(mem.buffer_bytes));
  if (mem.register_bytes <= 0)
    throw std::invalid_argument("MemoryHierarchy.register_bytes must be > 0, got " +
                                Str(mem.register_bytes));
  CheckRate(mem.dram_capacity_bytes, "dram_capacity_bytes (bytes; 0: not known)", true);
  if (mem.psum_bits < 1 || mem.psum_bits > 128)
    throw std::invalid_argument("MemoryHierarchy.psum_bits must be in 1..128, got " +
                                Str(mem.psum_bits));
}

std::string TileMapping::Describe() const {
  std::string s = "tiles m" + Str(tm) + " n" + Str(tn) + " k" + Str(tk) + " order " + order;
  if (!accumulate_in_buffer) s += " psums to DRAM";
  if (span_a || span_b || span_c)
    s += " spans A" + Str(span_a) + " B" + Str(span_b) + " C" + Str(span_c);
  if (a_align_m > 1 || a_align_k > 1 || b_align_k > 1 || b_align_n > 1)
    s += " lines A m" + Str(a_align_m) + " k" + Str(a_align_k) + ", B k" + Str(b_align_k) +
         " n" + Str(b_align_n);
  return s;
}

void Validate(const TileMapping& t) {
  const std::pair<const char*, int64_t> tiles[] = {{"tm", t.tm}, {"tn", t.tn}, {"tk", t.tk}};
  for (const auto& [name, v] : tiles)
    if (v < 1)
      throw std::invalid_argument(std::string("TileMapping.") + name +
                                  " must be a tile size >= 1 (elements), got " + Str(v));
  const std::pair<const char*, int64_t> aligns[] = {
      {"a_align_m", t.a_align_m}, {"a_align_k", t.a_align_k}, {"b_align_k", t.b_align_k},
      {"b_align_n", t.b_align_n}};
  for (const auto& [name, v] : aligns)
    if (v < 1 || v > (1 << 20))
      throw std::invalid_argument(std::string("TileMapping.") + name +
                                  " must be in 1..2^20 (elements; 1 = no padding), got " + Str(v));
  std::string sorted = t.order;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != "kmn")
    throw std::invalid_argument("TileMapping.order must be a permutation of \"mnk\" (tile loops, "
                                "outermost first), got \"" + t.order + "\"");
  const std::pair<const char*, int> spans[] = {
      {"span_a", t.span_a}, {"span_b", t.span_b}, {"span_c", t.span_c}};
  for (const auto& [name, v] : spans)
    if (v < 0 || v > 3)
      throw std::invalid_argument(std::string("TileMapping.") + name +
                                  " must be 0..3 (innermost tile loops the tile covers), got " +
                                  Str(v));
  if (t.span_c > 0 && !t.accumulate_in_buffer)
    throw std::invalid_argument("TileMapping.span_c = " + Str(t.span_c) +
                                " keeps C in the buffer, which needs accumulate_in_buffer");
}

namespace {
// Elements of each operand's buffer tile (A, B, C): a dimension whose loop the operand's
// span covers counts whole.
std::array<int64_t, 3> BufferTileElems(const GemmWorkload& w, const TileMapping& t) {
  auto level = [&](char d) { return static_cast<int>(t.order.find(d)) + 1; };
  auto size = [&](char d, int span) {
    const int64_t extent = d == 'm' ? w.m : d == 'n' ? w.n : w.k;
    const int64_t tile = d == 'm' ? t.tm : d == 'n' ? t.tn : t.tk;
    return level(d) > 3 - span ? extent : std::min(tile, extent);
  };
  return {CheckedMul(size('m', t.span_a), size('k', t.span_a), "A tile"),
          CheckedMul(size('k', t.span_b), size('n', t.span_b), "B tile"),
          CheckedMul(size('m', t.span_c), size('n', t.span_c), "C tile")};
}
}  // namespace

int64_t OnChipBytes(const GemmWorkload& w) {
  int64_t bits = 0;
  if (w.a_on_chip) bits = CheckedMul(CheckedMul(w.m, w.k, "A elements"), w.bits_a, "A bits");
  if (w.c_on_chip)
    bits = CheckedAdd(bits, CheckedMul(CheckedMul(w.m, w.n, "C elements"), w.bits_c, "C bits"),
                      "on-chip bits");
  return CeilDiv(CheckedMul(bits, w.batch, "on-chip bits"), 8);
}

GemmWorkload OnChipFitted(const GemmWorkload& w, int64_t capacity_bytes) {
  GemmWorkload out = w;
  if (OnChipBytes(w) > capacity_bytes) out.a_on_chip = out.c_on_chip = false;
  return out;
}

int64_t CompulsoryDramBits(const GemmWorkload& w) {
  int64_t per = 0;
  if (!w.a_on_chip)
    per = CheckedAdd(per, CheckedMul(CheckedMul(w.m, w.k, "A elements"), w.bits_a, "A bits"),
                     "compulsory bits");
  per = CheckedAdd(per, CheckedMul(CheckedMul(w.k, w.n, "B elements"), w.bits_b, "B bits"),
                   "compulsory bits");
  if (!w.c_on_chip)
    per = CheckedAdd(per, CheckedMul(CheckedMul(w.m, w.n, "C elements"), w.bits_c, "C bits"),
                     "compulsory bits");
  return CheckedAdd(CheckedMul(per, w.batch, "compulsory bits"), w.extra_read_bits,
                    "compulsory bits");
}

int64_t RooflineCycles(const GemmWorkload& w, int64_t num_pes, double rate,
                       const MemoryHierarchy& mem, double ops_rate) {
  Validate(w);
  Validate(mem);
  if (num_pes <= 0) throw std::invalid_argument("num_pes must be > 0, got " + Str(num_pes));
  if (!std::isfinite(rate) || rate <= 0)
    throw std::invalid_argument("macs_per_pe_per_cycle must be > 0, got " + Num(rate));
  if (!(ops_rate > 0)) ops_rate = rate;
  if (!std::isfinite(ops_rate))
    throw std::invalid_argument("ops_per_pe_per_cycle must be finite, got " + Num(ops_rate));
  const int64_t macs =
      CheckedMul(CheckedMul(CheckedMul(w.m, w.n, "MACs"), w.k, "MACs"), w.batch, "MACs");
  int64_t compute;
  if (rate == std::floor(rate) && ops_rate == std::floor(ops_rate) && rate < 1e9 &&
      ops_rate < 1e9) {
    // ceil(macs / (P r) + ops / (P b)) = ceil((macs b + ops r) / (P r b)), exactly.
    const int64_t r = static_cast<int64_t>(rate), b = static_cast<int64_t>(ops_rate);
    compute = CeilDiv(CheckedAdd(CheckedMul(macs, b, "MACs x rate"),
                                 CheckedMul(w.extra_ops, r, "ops x rate"), "work"),
                      CheckedMul(CheckedMul(num_pes, r, "lanes"), b, "lanes"));
  } else {
    compute = static_cast<int64_t>(std::ceil(static_cast<double>(macs) / (num_pes * rate) +
                                             static_cast<double>(w.extra_ops) /
                                                 (num_pes * ops_rate)));
  }
  int64_t memory;
  if (mem.dram_channel_per_operand) {
    const int64_t a = CheckedAdd(
        w.a_on_chip ? 0
                    : CheckedMul(CheckedMul(CheckedMul(w.m, w.k, "A"), w.bits_a, "A"), w.batch, "A"),
        w.extra_read_bits, "A");
    const int64_t b =
        CheckedMul(CheckedMul(CheckedMul(w.k, w.n, "B"), w.bits_b, "B"), w.batch, "B");
    const int64_t c = w.c_on_chip ? 0
        : CheckedMul(CheckedMul(CheckedMul(w.m, w.n, "C"), w.bits_c, "C"), w.batch, "C");
    memory = CeilCycles(std::max({a, b, c}), mem.dram_bandwidth_bits);
  } else {
    memory = CeilCycles(CompulsoryDramBits(w), mem.dram_bandwidth_bits);
  }
  return std::max(compute, memory);
}

int64_t BufferBytesNeeded(const GemmWorkload& w, const MemoryHierarchy& mem,
                          const TileMapping& t) {
  Validate(t);
  const auto e = BufferTileElems(w, t);
  const int64_t copies = mem.buffer_double_buffered ? 2 : 1;
  int64_t in = CheckedAdd(CheckedMul(e[0], w.bits_a, "A tile bits"),
                          CheckedMul(e[1], w.bits_b, "B tile bits"), "input tile bits");
  int64_t bits = CheckedAdd(CheckedMul(in, copies, "input tile bits"),
                            CheckedMul(e[2], mem.psum_bits, "C tile bits"), "tile bits");
  return CeilDiv(bits, 8);
}

TileMapping DefaultTileMapping(const GemmWorkload& w, const MemoryHierarchy& mem, int64_t rows,
                               int64_t cols) {
  Validate(w);
  Validate(mem);
  if (rows < 1 || cols < 1)
    throw std::invalid_argument("DefaultTileMapping: rows and cols must be >= 1, got " +
                                Str(rows) + " x " + Str(cols));
  const int64_t cap_bits = CheckedMul(mem.buffer_bytes, 8, "buffer bits");
  const int64_t copies = mem.buffer_double_buffered ? 2 : 1;
  auto shrink = [](int64_t t, int64_t step) {  // next smaller multiple of step, >= min(step, t)
    if (t <= step) return t;
    const int64_t r = (t - 1) / step * step;
    return std::max(step, r);
  };
  // K tiles long enough that a fold's fill and drain (rows + cols - 2 stamps) is ~1/16 of
  // it, at least 4 K steps when K allows (so the first fetch is a small part of the call), K
  // cut evenly; then C's tile as wide as the rest of the buffer allows.
  int64_t tm = w.m, tn = 0;
  const int64_t target = std::min(w.k, std::max(CeilDiv(w.k, 4), 16 * (rows + cols - 2)));
  int64_t tk = CeilDiv(w.k, CeilDiv(w.k, std::max<int64_t>(1, target)));
  for (;;) {
    const int64_t inputs =
        CheckedMul(CheckedMul(copies, tm, "A tile"), CheckedMul(tk, w.bits_a, "A tile"), "A tile");
    const int64_t per_n =
        CheckedAdd(CheckedMul(CheckedMul(copies, tk, "B tile"), w.bits_b, "B tile"),
                   CheckedMul(tm, mem.psum_bits, "C tile"), "tile bits per n");
    tn = inputs < cap_bits ? (cap_bits - inputs) / per_n : 0;
    if (tn >= cols) tn = tn / cols * cols;
    tn = std::min(tn, w.n);
    if (tn >= std::min(cols, w.n)) break;
    if (tk > 1) { tk = (tk + 1) / 2; continue; }
    if (tm > 1) { tm = tm > rows ? shrink(tm, rows) : (tm + 1) / 2; continue; }
    if (tn >= 1) break;
    throw std::invalid_argument(
        "DefaultTileMapping: MemoryHierarchy.buffer_bytes " + Str(mem.buffer_bytes) +
        " cannot hold one element each of A, B and C (at " + Str(mem.psum_bits) +
        " bits): use a larger buffer");
  }
  TileMapping t;
  t.tm = tm;
  t.tn = tn;
  t.tk = tk;
  t.order = "mnk";
  return t;
}

ArrayModel ExactArrayModel(const GemmWorkload& w, const Hardware& hw, const Dataflow& df,
                           const MemoryHierarchy& mem) {
  Validate(w);
  Validate(hw);
  Validate(df);
  Validate(mem);
  return ExactArrayModel(w, PrepareTileArray(hw, df, mem), mem);
}

std::shared_ptr<const PreparedArray> PrepareTileArray(const Hardware& hw, const Dataflow& df,
                                                      const MemoryHierarchy& mem) {
  Hardware tile_hw = hw;
  tile_hw.bandwidth_bits = mem.buffer_bandwidth_bits;
  return PrepareArray(tile_hw, df);
}

int64_t SteadyFoldCycles(char preset, int64_t rows, int64_t cols, int64_t stream_tile,
                         int64_t rate, int64_t m, int64_t n, int64_t k) {
  // The preset's canonical fold plan (analysis.cc FoldPlan) of the tile, K packed by the
  // MAC rate (an r-wide dot product per PE): SP x SQ on the array, SL streamed in chunks.
  const int64_t kp = CeilDiv(k, std::max<int64_t>(1, rate));
  int64_t sp = m, sq = n, sl = kp;
  if (preset == 'w') { sp = kp; sq = n; sl = m; }
  else if (preset == 'i') { sp = kp; sq = m; sl = n; }
  const int64_t folds_pq = CheckedMul(CeilDiv(sp, rows), CeilDiv(sq, cols), "folds");
  const int64_t t = stream_tile > 0 ? std::min(stream_tile, sl) : sl;
  const int64_t full = sl / t, rem = sl % t;
  int64_t c = CheckedMul(CheckedMul(folds_pq, full, "folds"), std::max(t, rows), "cycles");
  if (rem) c = CheckedAdd(c, CheckedMul(folds_pq, std::max(rem, rows), "cycles"), "cycles");
  return c;
}

ArrayModel ExactArrayModel(const GemmWorkload& w, std::shared_ptr<const PreparedArray> tiles,
                           const MemoryHierarchy& mem) {
  Validate(w);
  Validate(mem);
  if (!tiles || tiles->hardware.bandwidth_bits != mem.buffer_bandwidth_bits)
    throw std::invalid_argument("ExactArrayModel: the tiles' array must be PrepareTileArray of "
                                "the hardware, dataflow and this memory hierarchy");
  const Hardware& hw = tiles->hardware;
  const Dataflow& df = tiles->dataflow;
  ArrayModel a;
  a.num_pes = tiles->num_pes;
  a.macs_per_pe_per_cycle =
      static_cast<double>(hw.macs_per_pe_per_cycle.AtBits(RateBits(w)));
  a.ops_per_pe_per_cycle = static_cast<double>(hw.macs_per_pe_per_cycle.base);
  a.clock_ghz = hw.clock_ghz;
  a.name = df.preset.empty() ? df.name
                             : df.preset + " " + Str(df.rows) + "x" + Str(df.cols);
  const bool ws = df.preset == "ws", is = df.preset == "is";
  if ((ws || is) && df.rows > 0) a.k_pass = df.rows;
  if (df.preset == "os") {
    auto it = df.tiling.find("k");
    if (it != df.tiling.end()) a.k_pass = it->second;
  }
  a.stationary_bits = ws ? w.bits_b : is ? w.bits_a : df.preset == "os" ? mem.psum_bits : 0;
  // Folds in steady state (README "Folds in steady state"): with the stationary operand
  // double-buffered (ws: B, is: A, os: the accumulators of C), the next fold's stationary
  // operand shifts in (os: the last fold's sums shift out) while the current fold streams,
  // so consecutive folds overlap their fill and drain: a fold holds the array for max(L, R)
  // cycles (its stream of L, or the R-cycle load / drain beside it when longer), and the
  // call pays once the first load (ws / is: R) and one fill and drain (R + C - 2), as
  // prologue_cycles.
  const bool steady = mem.stationary_double_buffered && (ws || is || df.preset == "os") &&
                      df.rows > 0 && df.cols > 0;
  if (steady)
    a.prologue_cycles = CheckedAdd((ws || is) ? df.rows : 0, df.rows + df.cols - 2, "cycles");
  const double buffer_bw = mem.buffer_bandwidth_bits;
  const int64_t rows = df.rows, cols = df.cols;
  const char preset = df.preset.empty() ? ' ' : df.preset[0];
  const int64_t stream_tile = df.tiling.empty() ? 0 : df.tiling.begin()->second;
  const int64_t rate = hw.macs_per_pe_per_cycle.AtBits(RateBits(w));
  const int bits_a = w.bits_a, bits_b = w.bits_b, bits_c = w.bits_c;
  a.tile_cost = [tiles, buffer_bw, rows, cols, preset, stream_tile, rate, steady, bits_a,
                 bits_b, bits_c](int64_t m, int64_t n, int64_t k) {
    GemmWorkload tw;
    tw.m = m; tw.n = n; tw.k = k;
    tw.bits_a = bits_a; tw.bits_b = bits_b; tw.bits_c = bits_c;
    Metrics x = AnalyzeGemm(tw, *tiles);
    TileCost c;
    c.cycles = x.cycles;
    c.active_pes = x.active_pes;
    if (steady) {
      c.cycles = std::max(SteadyFoldCycles(preset, rows, cols, stream_tile, rate, m, n, k),
                          CeilCycles(x.offchip_read_bits + x.offchip_write_bits, buffer_bw));
    }
    for (const auto& kv : x.tensors) {
      if (kv.first == "A") c.buffer_read_bits_a = kv.second.offchip_bits;
      else if (kv.first == "B") c.buffer_read_bits_b = kv.second.offchip_bits;
      else c.buffer_write_bits_c = kv.second.offchip_bits;
    }
    return c;
  };
  return a;
}

ArrayModel CachedArrayModel(ArrayModel model) {
  struct Memo {
    std::mutex mu;
    std::map<std::tuple<int64_t, int64_t, int64_t>, TileCost> costs;
  };
  auto memo = std::make_shared<Memo>();
  auto inner = std::move(model.tile_cost);
  if (!inner) throw std::invalid_argument("CachedArrayModel: ArrayModel.tile_cost is empty");
  model.tile_cost = [memo, inner](int64_t m, int64_t n, int64_t k) {
    const auto key = std::make_tuple(m, n, k);
    {
      std::lock_guard<std::mutex> lock(memo->mu);
      auto it = memo->costs.find(key);
      if (it != memo->costs.end()) return it->second;
    }
    TileCost c = inner(m, n, k);  // outside the lock: analyses of other shapes run in parallel
    std::lock_guard<std::mutex> lock(memo->mu);
    return memo->costs.emplace(key, c).first->second;
  };
  return model;
}

MemoryMetrics AnalyzeMemory(const GemmWorkload& w, const Hardware& hw, const Dataflow& df,
                            const MemoryHierarchy& mem, const TileMapping& t) {
  return AnalyzeMemory(w, ExactArrayModel(w, hw, df, mem), mem, t);
}

MemoryMetrics AnalyzeMemory(const GemmWorkload& asked, const ArrayModel& array,
                            const MemoryHierarchy& mem, const TileMapping& t) {
  Validate(asked);
  Validate(mem);
  Validate(t);
  if (!array.tile_cost) throw std::invalid_argument("ArrayModel.tile_cost is empty");
  if (array.num_pes <= 0 || !(array.macs_per_pe_per_cycle > 0) ||
      !(array.ops_per_pe_per_cycle > 0) || !(array.clock_ghz > 0) || array.k_pass < 0 ||
      array.prologue_cycles < 0)
    throw std::invalid_argument("ArrayModel '" + array.name + "': num_pes, the MAC and op rates "
                                "and clock_ghz must be > 0, k_pass and prologue_cycles >= 0");
  MemoryMetrics mm;

  // Capacity: the buffer, then the registers of one PE. Operands kept on chip take their
  // whole size beside the tiles, when that fits.
  mm.buffer_bytes_used = BufferBytesNeeded(asked, mem, t);
  const GemmWorkload w = OnChipFitted(asked, mem.buffer_bytes - mm.buffer_bytes_used);
  mm.buffer_bytes_used += OnChipBytes(w);
  const int64_t tm = std::min(t.tm, w.m), tn = std::min(t.tn, w.n), tk = std::min(t.tk, w.k);
  if (mm.buffer_bytes_used > mem.buffer_bytes) {
    const int64_t copies = mem.buffer_double_buffered ? 2 : 1;
    const auto e = BufferTileElems(w, t);
    throw std::invalid_argument(
        "TileMapping tm=" + Str(tm) + " tn=" + Str(tn) + " tk=" + Str(tk) + " needs " +
        Str(mm.buffer_bytes_used) + " bytes of buffer (" + Str(copies) + " x (A tile " +
        Str(CeilDiv(e[0] * w.bits_a, 8)) + " + B tile " + Str(CeilDiv(e[1] * w.bits_b, 8)) +
        ") + C tile " + Str(CeilDiv(e[2] * mem.psum_bits, 8)) + " at " + Str(mem.psum_bits) +
        " bits); MemoryHierarchy.buffer_bytes is " + Str(mem.buffer_bytes) +
        ": use smaller tiles or a larger buffer");
  }
  {
    int64_t reg_bits = w.bits_a + w.bits_b + mem.psum_bits;
    if (mem.stationary_double_buffered) reg_bits += array.stationary_bits;
    if (CeilDiv(reg_bits, 8) > mem.register_bytes)
      throw std::invalid_argument(
          "a PE needs " + Str(CeilDiv(reg_bits, 8)) + " bytes of registers (one A, B and "
          "accumulator element" + std::string(mem.stationary_double_buffered
                                                   ? " and a second stationary one" : "") +
          "); MemoryHierarchy.register_bytes is " + Str(mem.register_bytes));
  }

  // The loop nest.
  Nest nest;
  nest.lv[0] = MakeDim('b', w.batch, 1);
  for (int l = 0; l < 3; ++l) {
    const char d = t.order[l];
    nest.lv[l + 1] = d == 'm' ? MakeDim('m', w.m, tm) : d == 'n' ? MakeDim('n', w.n, tn)
                                                                 : MakeDim('k', w.k, tk);
    (d == 'm' ? nest.level_of_m : d == 'n' ? nest.level_of_n : nest.level_of_k) = l + 1;
    nest.align[kA][l + 1] = d == 'm' ? t.a_align_m : d == 'k' ? t.a_align_k : 1;
    nest.align[kB][l + 1] = d == 'k' ? t.b_align_k : d == 'n' ? t.b_align_n : 1;
    nest.align[kC][l + 1] = 1;
  }
  nest.outer = {3 - static_cast<int>(t.span_a), 3 - static_cast<int>(t.span_b),
                3 - static_cast<int>(t.span_c)};
  const bool k_spanned_by_c = nest.Spanned(kC, nest.level_of_k);
  const Dim& dk = nest.lv[nest.level_of_k];
  const Dim& dm = nest.lv[nest.level_of_m];
  const Dim& dn = nest.lv[nest.level_of_n];
  mm.tile_steps =
      CheckedMul(CheckedMul(CheckedMul(w.batch, dm.count, "tile steps"), dn.count, "tile steps"),
                 dk.count, "tile steps");
  mm.macs = CheckedMul(CheckedMul(CheckedMul(w.m, w.n, "MACs"), w.k, "MACs"), w.batch, "MACs");

  // Array cost per distinct tile shape (at most 2 sizes per dimension).
  std::vector<ShapeCost> shapes;
  shapes.reserve(8);
  auto shape_cost = [&](int64_t m, int64_t n, int64_t k) -> const TileCost& {
    for (const auto& s : shapes)
      if (s.m == m && s.n == n && s.k == k) return s.cost;
    shapes.push_back({m, n, k, array.tile_cost(m, n, k)});
    return shapes.back().cost;
  };

  // Closed-form DRAM traffic per operand (elements), edge tiles exact: the sum over a
  // tile index of the tile sizes is the extent, so every visit of all of an operand's
  // tiles moves exactly its whole matrix.
  const int64_t a_elems = CheckedMul(CheckedMul(w.m, w.k, "A"), w.batch, "A");
  const int64_t b_elems = CheckedMul(CheckedMul(w.k, w.n, "B"), w.batch, "B");
  const int64_t c_elems = CheckedMul(CheckedMul(w.m, w.n, "C"), w.batch, "C");
  OperandTraffic& A = mm.tensors["A"];
  OperandTraffic& B = mm.tensors["B"];
  OperandTraffic& C = mm.tensors["C"];
  A.dram_read_bits = w.a_on_chip ? 0
      : CheckedMul(CheckedMul(a_elems, nest.Revisits(kA), "A traffic"), w.bits_a, "A bits");
  A.dram_fetches = w.a_on_chip ? 0 : nest.Runs(kA);
  const int64_t c_final_bits = w.c_on_chip ? 0 : w.bits_c;  // C's last values stay on chip
  B.dram_read_bits =
      CheckedMul(CheckedMul(b_elems, nest.Revisits(kB), "B traffic"), w.bits_b, "B bits");
  B.dram_fetches = nest.Runs(kB);
  const int64_t chunk = array.k_pass > 0 ? array.k_pass : tk;
  if (t.accumulate_in_buffer) {
    const int64_t visits = nest.Revisits(kC);  // visits of each C tile
    const int64_t partial = CheckedMul(c_elems, visits - 1, "C partial sums");
    C.dram_write_bits = CheckedAdd(CheckedMul(c_elems, c_final_bits, "C bits"),
                                   CheckedMul(partial, mem.psum_bits, "C partial bits"), "C bits");
    C.dram_read_bits = CheckedMul(partial, mem.psum_bits, "C partial bits");
    C.dram_fetches = nest.Runs(kC);
  } else {
    // Every array pass over a chunk of K writes its partial C; the last one is final.
    const int64_t passes = CheckedAdd(CheckedMul(dk.count - 1, CeilDiv(dk.tile, chunk), "K passes"),
                                      CeilDiv(dk.last, chunk), "K passes");
    const int64_t partial = CheckedMul(c_elems, passes - 1, "C partial sums");
    C.dram_write_bits = CheckedAdd(CheckedMul(c_elems, c_final_bits, "C bits"),
                                   CheckedMul(partial, mem.psum_bits, "C partial bits"), "C bits");
    C.dram_fetches = CheckedMul(mm.tile_steps, 1, "C write-backs");
  }

  // Array side: per tile shape class, times how many steps have that shape (full tiles
  // first, so shapes.front() is the full tile the extra ops are spread over).
  int64_t steps_checked = 0;
  for (int im = 1; im >= 0; --im)
    for (int in = 1; in >= 0; --in)
      for (int ik = 1; ik >= 0; --ik) {
        const int64_t cm = im ? (dm.count - 1) : 1, cn = in ? (dn.count - 1) : 1,
                      ck = ik ? (dk.count - 1) : 1;
        if (cm == 0 || cn == 0 || ck == 0) continue;
        const TileCost& s = shape_cost(im ? dm.tile : dm.last, in ? dn.tile : dn.last,
                                       ik ? dk.tile : dk.last);
        const int64_t n =
            CheckedMul(CheckedMul(CheckedMul(cm, cn, "steps"), ck, "steps"), w.batch, "steps");
        steps_checked += n;
        A.buffer_read_bits =
            CheckedAdd(A.buffer_read_bits, CheckedMul(n, s.buffer_read_bits_a, "A"), "A");
        B.buffer_read_bits =
            CheckedAdd(B.buffer_read_bits, CheckedMul(n, s.buffer_read_bits_b, "B"), "B");
        C.buffer_write_bits =
            CheckedAdd(C.buffer_write_bits, CheckedMul(n, s.buffer_write_bits_c, "C"), "C");
      }
  if (steps_checked != mm.tile_steps) throw std::logic_error("tile shape classes miscounted");
  mm.distinct_tile_shapes = static_cast<int64_t>(shapes.size());

  for (const auto& kv : mm.tensors) {
    mm.dram_read_bits = CheckedAdd(mm.dram_read_bits, kv.second.dram_read_bits, "DRAM reads");
    mm.dram_write_bits = CheckedAdd(mm.dram_write_bits, kv.second.dram_write_bits, "DRAM writes");
    mm.buffer_read_bits =
        CheckedAdd(mm.buffer_read_bits, kv.second.buffer_read_bits, "buffer reads");
    mm.buffer_write_bits =
        CheckedAdd(mm.buffer_write_bits, kv.second.buffer_write_bits, "buffer writes");
  }
  mm.dram_read_bits = CheckedAdd(mm.dram_read_bits, w.extra_read_bits, "DRAM reads");
  mm.compulsory_dram_bits = CompulsoryDramBits(w);
  mm.register_access_bits = CheckedMul(
      mm.macs, w.bits_a + w.bits_b + 2 * static_cast<int64_t>(mem.psum_bits), "register bits");

  // Latency. Transfers of one step, per DRAM channel (A, B, C).
  using Idx = Nest::Idx;
  const Idx first{0, 0, 0, 0};
  const Idx last{nest.lv[0].count - 1, nest.lv[1].count - 1, nest.lv[2].count - 1,
                 nest.lv[3].count - 1};
  auto ik_of = [&](const Idx& i) { return i[nest.level_of_k]; };
  auto fetch = [&](const Idx& s, std::array<int64_t, 3>& ch) {
    Idx p = s;
    const bool has_prev = nest.Prev(p);
    const char* what = "transfer bits";
    if (!w.a_on_chip && (!has_prev || !nest.SameTile(kA, s, p)))
      ch[0] = CheckedAdd(ch[0], CheckedMul(nest.PaddedElems(kA, s), w.bits_a, what), what);
    if (!has_prev || !nest.SameTile(kB, s, p))
      ch[1] = CheckedAdd(ch[1], CheckedMul(nest.PaddedElems(kB, s), w.bits_b, what), what);
    if (t.accumulate_in_buffer && (!has_prev || !nest.SameTile(kC, s, p)) && !k_spanned_by_c &&
        ik_of(s) != 0)  // partial sums come back
      ch[2] = CheckedAdd(ch[2], CheckedMul(nest.Elems(kC, s), mem.psum_bits, what), what);
    if (!has_prev) ch[0] = CheckedAdd(ch[0], w.extra_read_bits, what);
  };
  auto writeback = [&](const Idx& s, std::array<int64_t, 3>& ch) {
    const int64_t e = nest.Elems(kC, s);
    const bool final_k = k_spanned_by_c || ik_of(s) == dk.count - 1;
    if (t.accumulate_in_buffer) {
      Idx nx = s;
      if (nest.Next(nx) && nest.SameTile(kC, s, nx)) return;
      ch[2] = CheckedAdd(ch[2], CheckedMul(e, final_k ? c_final_bits : mem.psum_bits, "write bits"),
                         "write bits");
    } else {
      const int64_t passes = CeilDiv(dk.Size(ik_of(s)), chunk);
      const int64_t bits = CheckedAdd(CheckedMul(passes - 1, mem.psum_bits, "write bits"),
                                      final_k ? c_final_bits : mem.psum_bits, "write bits");
      ch[2] = CheckedAdd(ch[2], CheckedMul(e, bits, "write bits"), "write bits");
    }
  };
  auto time_of = [&](const std::array<int64_t, 3>& ch) {
    if (mem.dram_channel_per_operand)
      return std::max({CeilCycles(ch[0], mem.dram_bandwidth_bits),
                       CeilCycles(ch[1], mem.dram_bandwidth_bits),
                       CeilCycles(ch[2], mem.dram_bandwidth_bits)});
    return CeilCycles(CheckedAdd(CheckedAdd(ch[0], ch[1], "transfer bits"), ch[2], "transfer bits"),
                      mem.dram_bandwidth_bits);
  };
  auto array_of = [&](const Idx& s) {
    return shape_cost(dm.Size(s[nest.level_of_m]), dn.Size(s[nest.level_of_n]),
                      dk.Size(s[nest.level_of_k])).cycles;
  };
  // One step's contribution to the overlapped part (everything but the first fetch and
  // the last write-back).
  auto step_term = [&](const Idx& s) -> int64_t {
    const int64_t arr = array_of(s);
    if (!mem.buffer_double_buffered) {
      std::array<int64_t, 3> f{0, 0, 0}, wb{0, 0, 0};
      if (s != first) fetch(s, f);
      if (s != last) writeback(s, wb);
      return time_of(f) + arr + time_of(wb);
    }
    std::array<int64_t, 3> x{0, 0, 0};
    Idx nx = s, pv = s;
    if (nest.Next(nx)) fetch(nx, x);
    if (nest.Prev(pv)) writeback(pv, x);
    return std::max(arr, time_of(x));
  };
  {
    std::array<int64_t, 3> f{0, 0, 0}, wb{0, 0, 0};
    fetch(first, f);
    writeback(last, wb);
    mm.first_fetch_cycles = time_of(f);
    mm.last_writeback_cycles = time_of(wb);
  }
  // Sum over the steps by representatives: per level, indices 2..count-3 give identical
  // terms (none is first or last, nor next to an end), so index 2 stands for count-4 of them.
  auto reps = [](int64_t count) {
    std::vector<std::pair<int64_t, int64_t>> r;  // (index, weight)
    if (count <= 5) {
      for (int64_t i = 0; i < count; ++i) r.push_back({i, 1});
    } else {
      r = {{0, 1}, {1, 1}, {2, count - 4}, {count - 2, 1}, {count - 1, 1}};
    }
    return r;
  };
  std::array<std::vector<std::pair<int64_t, int64_t>>, 4> rep;
  for (int l = 0; l < 4; ++l) rep[l] = reps(nest.lv[l].count);
  int64_t overlapped = 0, array_total = 0;
  for (const auto& r0 : rep[0])
    for (const auto& r1 : rep[1])
      for (const auto& r2 : rep[2])
        for (const auto& r3 : rep[3]) {
          const Idx s{r0.first, r1.first, r2.first, r3.first};
          const int64_t weight =
              CheckedMul(CheckedMul(CheckedMul(r0.second, r1.second, "steps"), r2.second, "steps"),
                         r3.second, "steps");
          overlapped = CheckedAdd(overlapped, CheckedMul(weight, step_term(s), "cycles"), "cycles");
          array_total =
              CheckedAdd(array_total, CheckedMul(weight, array_of(s), "cycles"), "cycles");
        }
  array_total = CheckedAdd(array_total, array.prologue_cycles, "cycles");
  overlapped = CheckedAdd(overlapped, array.prologue_cycles, "cycles");
  mm.overlapped_cycles = overlapped;
  mm.array_cycles = array_total;
  // Extra (dequantization) ops run on the full tile's active PEs after the tiles, at the
  // base rate (as the array level charges them).
  const double lanes =
      static_cast<double>(std::max<int64_t>(1, shapes.front().cost.active_pes)) *
      array.ops_per_pe_per_cycle;
  mm.extra_op_cycles = CeilCycles(w.extra_ops, lanes);
  mm.cycles = CheckedAdd(CheckedAdd(CheckedAdd(mm.first_fetch_cycles, overlapped, "cycles"),
                                    mm.last_writeback_cycles, "cycles"),
                         mm.extra_op_cycles, "cycles");
  mm.dram_stall_cycles = mm.cycles - mm.array_cycles - mm.extra_op_cycles;
  mm.num_pes = array.num_pes;
  mm.roofline_cycles = RooflineCycles(w, array.num_pes, array.macs_per_pe_per_cycle, mem,
                                      array.ops_per_pe_per_cycle);
  mm.latency_us = static_cast<double>(mm.cycles) / (array.clock_ghz * 1e3);
  mm.mapping = array.name + " | " + t.Describe();
  return mm;
}

}  // namespace tenet
