// The metrics: brute-force enumeration of TENET's definitions (ground truth, any
// statement and dataflow of bounded size) and the fast exact fold-class method for GEMM
// on the os/ws/is presets. See README.md in this directory for the method.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "cost_model/checked.h"
#include "cost_model/cost_model.h"
#include "cost_model/relation.h"

namespace tenet {

using detail::Box;
using detail::CountPoints;
using detail::IsBoxSet;
using detail::Expr;
using detail::ExprNode;
using detail::ParseRelation;
using detail::Relation;

namespace {

std::string Tuple(const std::string& name, const int64_t* v, size_t n) {
  std::string s = name + "[";
  for (size_t d = 0; d < n; ++d) s += (d ? "," : "") + Str(v[d]);
  return s + "]";
}

// Derived counts of a huge call can leave int64; a wrapped count would reach the ledger as
// a plausible (or negative) number, so every product and sum below is checked (CheckedMul,
// CheckedAdd, their `what` prefixed "cost model: ").

// A non-negative double that must fit an int64 count (cycles from bits / bandwidth).
int64_t ToCount(double v, const char* what) {
  if (!(v >= 0 && v < 9.2e18)) {
    throw std::overflow_error(std::string("cost model: ") + what +
                              " overflows int64; the call is too large to count exactly");
  }
  return static_cast<int64_t>(v);
}
// A figure written to the ledger as JSON, where inf and NaN have no spelling.
double Finite(double v, const char* what) {
  if (!std::isfinite(v)) {
    throw std::overflow_error(std::string("cost model: ") + what + " is not finite (" +
                              std::to_string(v) + "); check the hardware's clock and bandwidth");
  }
  return v;
}

// Per-tensor counts of one statement execution (before batch scaling).
struct TensorCounts {
  std::string name;
  bool is_write = false;
  int bits = 32;
  int64_t total = 0, unique = 0, spatial = 0, temporal = 0;
};

// Everything Finish() needs about one execution.
struct Core {
  int64_t macs = 0, time_steps = 0, active_pes = 0, st_points = 0;
  int64_t stamp_max_sum = 0;       // sum over stamps of the most instances on one PE
  int64_t exact_stamp_cycles = 0;  // sum over stamps of ceil(that / mpc)
  int64_t systolic_cycles = -1;    // presets: sum over folds of per-fold cycles
  int64_t folds = 0;
  std::vector<TensorCounts> tensors;
  std::string method;
};

// ---------------------------------------------------------------- hardware helpers

bool VarOffset(const Expr& e, int var, int64_t* off) {
  const ExprNode& r = e.Root();
  auto is_var = [&](int i) { return e.nodes[i].kind == ExprNode::kVar && e.nodes[i].var == var; };
  auto is_const = [&](int i) { return e.nodes[i].kind == ExprNode::kConst; };
  if (r.kind == ExprNode::kVar && r.var == var) { *off = 0; return true; }
  if (r.kind == ExprNode::kAdd && is_var(r.lhs) && is_const(r.rhs)) { *off = e.nodes[r.rhs].value; return true; }
  if (r.kind == ExprNode::kAdd && is_const(r.lhs) && is_var(r.rhs)) { *off = e.nodes[r.lhs].value; return true; }
  if (r.kind == ExprNode::kSub && is_var(r.lhs) && is_const(r.rhs)) { *off = -e.nodes[r.rhs].value; return true; }
  return false;
}

// Is the interconnect exactly "receive from the PE above and from the PE to the left"?
bool IsSystolicInterconnect(const Relation& ic) {
  if (ic.in_arity != 2 || ic.out_arity != 2) return false;
  std::set<std::pair<int64_t, int64_t>> offs;
  for (const auto& p : ic.pieces) {
    if (!p.constraints.empty()) return false;
    int64_t a, b;
    if (!VarOffset(p.out[0], 0, &a) || !VarOffset(p.out[1], 1, &b)) return false;
    offs.insert({a, b});
  }
  return offs == std::set<std::pair<int64_t, int64_t>>{{-1, 0}, {0, -1}};
}

// ---------------------------------------------------------------- GEMM recognition

struct GemmMatch {
  int64_t m = 0, n = 0, k = 0;
  std::string name_a = "A", name_b = "B", name_c = "C";
  int bits_a = 32, bits_b = 32, bits_c = 32;
  int rate_bits = 0;  // GemmWorkload::mac_bits: the width the MAC rate is read at (0: A's, B's)
};

bool IsVarTuple(const Relation& r, int v0, int v1) {
  if (!r.is_map || r.pieces.size() != 1 || !r.pieces[0].constraints.empty() || r.out_arity != 2)
    return false;
  const auto& o = r.pieces[0].out;
  return o[0].Root().kind == ExprNode::kVar && o[0].Root().var == v0 &&
         o[1].Root().kind == ExprNode::kVar && o[1].Root().var == v1;
}

bool MatchGemmStatement(const Statement& st, GemmMatch* g) {
  Relation dom = ParseRelation(st.domain, "Statement.domain");
  Box box;
  if (dom.is_map || dom.in_arity != 3 || !IsBoxSet(dom, &box)) return false;
  const auto& vars = dom.pieces[0].in_vars;
  if (vars != std::vector<std::string>{"i", "j", "k"}) return false;
  for (int d = 0; d < 3; ++d)
    if (box.lo[d] != 0 || box.hi[d] <= 0) return false;
  if (st.accesses.size() != 3) return false;
  int reads = 0, writes = 0;
  bool have_a = false, have_b = false, have_c = false;
  for (const auto& a : st.accesses) {
    Relation r = ParseRelation(a.relation, "Statement access");
    if (r.in_arity != 3 || r.pieces[0].in_vars != vars) return false;
    if (a.is_write) {
      ++writes;
      if (!IsVarTuple(r, 0, 1)) return false;
      have_c = true; g->name_c = r.out_name; g->bits_c = a.bits;
    } else {
      ++reads;
      if (IsVarTuple(r, 0, 2)) { have_a = true; g->name_a = r.out_name; g->bits_a = a.bits; }
      else if (IsVarTuple(r, 2, 1)) { have_b = true; g->name_b = r.out_name; g->bits_b = a.bits; }
      else return false;
    }
  }
  if (reads != 2 || writes != 1 || !have_a || !have_b || !have_c) return false;
  if (g->name_a == g->name_b || g->name_a == g->name_c || g->name_b == g->name_c) return false;
  g->m = box.hi[0];
  g->n = box.hi[1];
  g->k = box.hi[2];
  return true;
}

// Which preset (if any) the dataflow is, recovered from its relations.
bool MatchPreset(const Dataflow& df, Dataflow* preset) {
  Relation s = ParseRelation(df.space, "Dataflow.space");
  Relation t = ParseRelation(df.time, "Dataflow.time");
  if (s.out_arity != 2 || s.pieces.size() != 1 || t.pieces.size() != 1) return false;
  const ExprNode& a = s.pieces[0].out[0].Root();
  const ExprNode& b = s.pieces[0].out[1].Root();
  if (a.kind != ExprNode::kMod || b.kind != ExprNode::kMod) return false;
  std::vector<int64_t> tiles = {0};
  if (t.out_arity == 4 && t.pieces[0].out[2].Root().kind == ExprNode::kFloorDiv)
    tiles.push_back(t.pieces[0].out[2].Root().value);
  const std::string ns = detail::Normalize(df.space), nt = detail::Normalize(df.time);
  for (const char* name : {"os", "ws", "is"}) {
    for (int64_t tile : tiles) {
      std::map<std::string, int64_t> tiling;
      if (tile) tiling[name[0] == 'o' ? "k" : name[0] == 'w' ? "m" : "n"] = tile;
      Dataflow p = Dataflow::Preset(name, a.value, b.value, tiling);
      if (detail::Normalize(p.space) == ns && detail::Normalize(p.time) == nt) {
        *preset = p;
        return true;
      }
    }
  }
  return false;
}

// ---------------------------------------------------------------- fold structure

// Canonical fold of a preset: PE row p <- P-dim, PE column q <- Q-dim, stream l <- L-dim,
// stamp p + q + l. Stationary tensor indexed by (p,q), horizontal (flows along q) by
// (p,l), vertical (flows along p) by (q,l).
struct FoldPlan {
  std::string preset;
  int64_t R, C, SP, SQ, SL, t;
  bool p_outer;  // fold order (P-block, Q-block, L-block) if true, else (Q, P, L)
  int64_t load;  // cycles to load the stationary operand before each fold
  // roles: which GEMM tensor (0=A, 1=B, 2=C) is stationary, horizontal, vertical
  int stationary, horizontal, vertical;

  // GEMM indices (i,j,k) of canonical position (P, Q, L).
  void ToIJK(int64_t P, int64_t Q, int64_t L, int64_t* i, int64_t* j, int64_t* k) const {
    if (preset == "os") { *i = P; *j = Q; *k = L; }
    else if (preset == "ws") { *k = P; *j = Q; *i = L; }
    else { *k = P; *i = Q; *j = L; }
  }
};

FoldPlan MakePlan(const Dataflow& preset, int64_t m, int64_t n, int64_t k) {
  FoldPlan f;
  f.preset = preset.preset;
  f.R = preset.rows;
  f.C = preset.cols;
  int64_t tile = preset.tiling.empty() ? 0 : preset.tiling.begin()->second;
  if (f.preset == "os") {
    f.SP = m; f.SQ = n; f.SL = k; f.p_outer = true; f.load = 0;
    f.stationary = 2; f.horizontal = 0; f.vertical = 1;
  } else if (f.preset == "ws") {
    f.SP = k; f.SQ = n; f.SL = m; f.p_outer = false; f.load = f.R;
    f.stationary = 1; f.horizontal = 0; f.vertical = 2;
  } else {
    f.SP = k; f.SQ = m; f.SL = n; f.p_outer = false; f.load = f.R;
    f.stationary = 0; f.horizontal = 1; f.vertical = 2;
  }
  f.t = tile ? tile : f.SL;
  return f;
}

struct SizeClass {
  int64_t size, count;
};
std::vector<SizeClass> Classes(int64_t extent, int64_t block) {
  std::vector<SizeClass> out;
  int64_t full = extent / block, rem = extent % block;
  if (full) out.push_back({block, full});
  if (rem) out.push_back({rem, 1});
  return out;
}

// Systolic cycles: every fold runs as long as a full R x C one (SCALE-Sim's model).
int64_t SystolicCycles(const FoldPlan& f, int64_t* folds) {
  int64_t cycles = 0, nf = 0;
  int64_t nP = CeilDiv(f.SP, f.R), nQ = CeilDiv(f.SQ, f.C);
  for (auto lc : Classes(f.SL, f.t)) {
    int64_t cnt =
        CheckedMul(CheckedMul(nP, nQ, "cost model: folds"), lc.count, "cost model: folds");
    nf = CheckedAdd(nf, cnt, "cost model: folds");
    cycles =
        CheckedAdd(cycles, CheckedMul(cnt, f.load + lc.size + f.R + f.C - 2, "cost model: cycles"),
                   "cost model: cycles");
  }
  *folds = nf;
  return cycles;
}

Core FastGemm(const FoldPlan& f, const GemmMatch& g) {
  Core core;
  core.method = "fast";
  TensorCounts tc[3];
  tc[0] = {g.name_a, false, g.bits_a};
  tc[1] = {g.name_b, false, g.bits_b};
  tc[2] = {g.name_c, true, g.bits_c};
  TensorCounts& S = tc[f.stationary];
  TensorCounts& H = tc[f.horizontal];
  TensorCounts& V = tc[f.vertical];
  core.macs = CheckedMul(CheckedMul(f.SP, f.SQ, "cost model: MACs"), f.SL, "cost model: MACs");
  // Every term below is at most a count of instances (<= MACs), so checking the sums
  // and the products that could exceed MACs is enough.
  for (auto pc : Classes(f.SP, f.R))
    for (auto qc : Classes(f.SQ, f.C))
      for (auto lc : Classes(f.SL, f.t)) {
        const int64_t cnt = pc.count * qc.count * lc.count;
        const int64_t r = pc.size, c = qc.size, L = lc.size;
        core.time_steps =
            CheckedAdd(core.time_steps, CheckedMul(cnt, r + c + L - 2, "cost model: time steps"),
                       "cost model: time steps");
        S.unique += cnt * r * c;
        H.unique += cnt * r * L;
        V.unique += cnt * c * L;
        H.spatial += cnt * r * (c - 1) * L;
        V.spatial += cnt * c * (r - 1) * L;
        S.temporal += cnt * r * c * (L - 1);
      }
  // Between folds: the first stamp of a fold (PE (0,0) only) has the last stamp of the
  // previous fold (PE (r-1,c-1) only) as its previous stamp; they are the same PE, hence
  // neighbours, only when that fold is 1x1. Then the two instances share the stationary
  // element iff they share (P, Q), the row-flowing one iff (P, L), the column-flowing one
  // iff (Q, L). Counted in closed form over the 1x1 folds (no loop over folds).
  const int64_t nP = CeilDiv(f.SP, f.R), nQ = CeilDiv(f.SQ, f.C), nL = CeilDiv(f.SL, f.t);
  const bool lastP1 = f.SP - (nP - 1) * f.R == 1, lastQ1 = f.SQ - (nQ - 1) * f.C == 1;
  const int64_t nps = f.R == 1 ? nP : (lastP1 ? 1 : 0);  // P blocks one row high
  const int64_t nqs = f.C == 1 ? nQ : (lastQ1 ? 1 : 0);  // Q blocks one column wide
  const int64_t nps_not_last = nps - (lastP1 ? 1 : 0);
  const int64_t nqs_not_last = nqs - (lastQ1 ? 1 : 0);
  auto reuse = [&](TensorCounts& x, int64_t count) {
    x.unique -= count;
    x.temporal += count;
  };
  // Next fold is the next stream chunk: same P and Q, stream position L -> L+1.
  reuse(S, nps * nqs * (nL - 1));
  if (f.SL == 1) {  // the last chunk ends and the next starts at stream position 0
    if (f.p_outer) {  // order (P, Q, L)
      reuse(H, nps * nqs_not_last);                    // next Q block, same P
      if (nQ == 1) reuse(V, nps_not_last * (lastQ1 ? 1 : 0));  // next P block, Q = 0
    } else {  // order (Q, P, L)
      reuse(V, nps_not_last * nqs);                    // next P block, same Q
      if (nP == 1) reuse(H, (lastP1 ? 1 : 0) * nqs_not_last);  // next Q block, P = 0
    }
  }
  for (auto& t : tc) t.total = core.macs;
  core.active_pes = std::min(f.R, f.SP) * std::min(f.C, f.SQ);
  core.st_points = core.macs;
  core.stamp_max_sum = core.exact_stamp_cycles = core.time_steps;  // one per PE per stamp
  core.systolic_cycles = SystolicCycles(f, &core.folds);
  core.tensors.assign(tc, tc + 3);
  return core;
}

// ---------------------------------------------------------------- enumeration

struct VecHash {
  size_t operator()(const std::vector<int64_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : v) { h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }
    return h;
  }
};
struct PairKey {
  int32_t pe, t, e;
  bool operator==(const PairKey& o) const { return pe == o.pe && t == o.t && e == o.e; }
};
struct PairHash {
  size_t operator()(const PairKey& k) const {
    uint64_t h = (static_cast<uint64_t>(static_cast<uint32_t>(k.pe)) * 0x9E3779B97F4A7C15ull) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(k.t)) * 0xC2B2AE3D27D4EB4Full) ^
                 (static_cast<uint64_t>(static_cast<uint32_t>(k.e)) * 0x165667B19E3779F9ull);
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

// `capacity`: the most instances one PE may run at one stamp (the MAC rate).
Core Enumerate(const Statement& st, const Hardware& hw, const Dataflow& df, int64_t capacity) {
  Core core;
  core.method = "enumerate";
  Relation dom = ParseRelation(st.domain, "Statement.domain");
  if (dom.is_map) throw std::invalid_argument("Statement.domain '" + st.domain + "' must be a set");
  Box box = detail::BoundingBox(dom, "Statement.domain");
  const int64_t volume = box.Volume();
  if (volume > kMaxEnumeratedInstances)
    throw std::invalid_argument(
        "statement '" + st.name + "' has up to " + Str(volume) +
        " instances; enumeration (used for dataflows other than the os/ws/is presets on a "
        "systolic interconnect) is limited to " + Str(kMaxEnumeratedInstances));
  Relation space = ParseRelation(df.space, "Dataflow.space");
  Relation time = ParseRelation(df.time, "Dataflow.time");
  Relation pe_dom = ParseRelation(hw.pe_domain, "Hardware.pe_domain");
  const size_t nd = dom.in_arity;
  if (space.in_arity != nd || time.in_arity != nd)
    throw std::invalid_argument("Dataflow maps take " + Str(space.in_arity) +
                                " iteration variables but the statement domain has " + Str(nd));
  if (space.out_arity != pe_dom.in_arity)
    throw std::invalid_argument("Dataflow.space yields " + Str(space.out_arity) +
                                "-D PE coordinates but Hardware.pe_domain is " +
                                Str(pe_dom.in_arity) + "-D");
  std::vector<Relation> acc;
  for (const auto& a : st.accesses) {
    acc.push_back(ParseRelation(a.relation, "Statement access"));
    if (!acc.back().is_map || acc.back().in_arity != nd)
      throw std::invalid_argument("Statement access '" + a.relation + "' must be a map from the " +
                                  Str(nd) + "-D domain to a tensor");
  }
  const size_t na = acc.size();
  const size_t td = time.out_arity;

  std::vector<int32_t> inst_pe;
  std::vector<int64_t> inst_t;      // td per instance
  std::vector<int32_t> inst_e;      // na per instance, -1 if no element
  std::unordered_map<std::vector<int64_t>, int32_t, VecHash> pe_ids;
  std::vector<std::vector<int64_t>> pe_coords;
  std::vector<std::unordered_map<std::vector<int64_t>, int32_t, VecHash>> elem_ids(na);
  std::vector<std::vector<int64_t>> img;

  if (volume > 0) {
    std::vector<int64_t> pt(box.lo);
    for (bool done = false; !done;) {
      if (dom.Contains(pt.data())) {
        space.Apply(pt.data(), &img);
        if (img.size() != 1)
          throw std::invalid_argument("Dataflow.space '" + df.space + "' maps instance " +
                                      Tuple(dom.in_name, pt.data(), nd) + " to " +
                                      Str(img.size()) + " PEs (it must be a function)");
        if (!pe_dom.Contains(img[0].data()))
          throw std::invalid_argument("Dataflow.space sends instance " + Tuple(dom.in_name, pt.data(), nd) +
                                      " to " + Tuple("PE", img[0].data(), img[0].size()) +
                                      ", outside Hardware.pe_domain '" + hw.pe_domain + "'");
        auto it = pe_ids.find(img[0]);
        if (it == pe_ids.end()) {
          it = pe_ids.emplace(img[0], static_cast<int32_t>(pe_coords.size())).first;
          pe_coords.push_back(img[0]);
        }
        inst_pe.push_back(it->second);
        time.Apply(pt.data(), &img);
        if (img.size() != 1)
          throw std::invalid_argument("Dataflow.time '" + df.time + "' maps instance " +
                                      Tuple(dom.in_name, pt.data(), nd) + " to " +
                                      Str(img.size()) + " time stamps (it must be a function)");
        inst_t.insert(inst_t.end(), img[0].begin(), img[0].end());
        for (size_t a = 0; a < na; ++a) {
          acc[a].Apply(pt.data(), &img);
          if (img.size() > 1)
            throw std::invalid_argument("Statement access '" + st.accesses[a].relation +
                                        "' maps instance " + Tuple(dom.in_name, pt.data(), nd) +
                                        " to several elements (supported: at most one)");
          if (img.empty()) { inst_e.push_back(-1); continue; }
          auto& ids = elem_ids[a];
          auto e = ids.emplace(img[0], static_cast<int32_t>(ids.size())).first;
          inst_e.push_back(e->second);
        }
      }
      size_t d = nd;
      for (;;) {
        if (d == 0) { done = true; break; }
        --d;
        if (++pt[d] < box.hi[d]) break;
        pt[d] = box.lo[d];
      }
    }
  }
  const size_t n = inst_pe.size();
  core.macs = static_cast<int64_t>(n);
  core.active_pes = static_cast<int64_t>(pe_coords.size());

  // Time stamps ranked lexicographically.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto tless = [&](int32_t a, int32_t b) {
    for (size_t d = 0; d < td; ++d) {
      int64_t x = inst_t[a * td + d], y = inst_t[b * td + d];
      if (x != y) return x < y;
    }
    return inst_pe[a] < inst_pe[b];
  };
  std::sort(order.begin(), order.end(), tless);
  std::vector<int32_t> inst_tid(n);
  int32_t tid = -1;
  for (size_t x = 0; x < n; ++x) {
    bool new_t = x == 0 || !std::equal(&inst_t[order[x] * td], &inst_t[order[x] * td] + td,
                                       &inst_t[order[x - 1] * td]);
    if (new_t) ++tid;
    inst_tid[order[x]] = tid;
  }
  core.time_steps = tid + 1;
  // (PE, time) points, conflicts and the exact compute delay.
  const int64_t mpc = capacity;
  int64_t stamp_max = 0;
  for (size_t x = 0; x < n;) {
    size_t y = x;
    while (y < n && inst_tid[order[y]] == inst_tid[order[x]] && inst_pe[order[y]] == inst_pe[order[x]]) ++y;
    const int64_t count = static_cast<int64_t>(y - x);
    if (count > mpc) {
      int32_t a = order[x], b = order[x + 1];
      throw std::invalid_argument(
          "Dataflow.time puts " + Str(count) + " instances on " +
          Tuple("PE", pe_coords[inst_pe[a]].data(), pe_coords[inst_pe[a]].size()) + " at " +
          Tuple(time.out_name, &inst_t[a * td], td) + " (instances #" + Str(a) + " and #" +
          Str(b) + " in domain order); Hardware.macs_per_pe_per_cycle allows " + Str(mpc) +
          " at this operand width");
    }
    ++core.st_points;
    stamp_max = std::max(stamp_max, count);
    const bool last_of_stamp = y == n || inst_tid[order[y]] != inst_tid[order[x]];
    if (last_of_stamp) {
      core.stamp_max_sum += stamp_max;
      core.exact_stamp_cycles += CeilDiv(stamp_max, mpc);
      stamp_max = 0;
    }
    x = y;
  }

  // Interconnect neighbours among the used PEs (excluding the PE itself).
  std::vector<std::vector<int32_t>> nbrs(pe_coords.size());
  if (!hw.interconnect.empty()) {
    Relation ic = ParseRelation(hw.interconnect, "Hardware.interconnect");
    for (size_t p = 0; p < pe_coords.size(); ++p) {
      ic.Apply(pe_coords[p].data(), &img);
      for (const auto& q : img) {
        auto it = pe_ids.find(q);
        if (it != pe_ids.end() && it->second != static_cast<int32_t>(p) &&
            std::find(nbrs[p].begin(), nbrs[p].end(), it->second) == nbrs[p].end())
          nbrs[p].push_back(it->second);
      }
    }
  }

  for (size_t a = 0; a < na; ++a) {
    TensorCounts tc;
    tc.name = acc[a].out_name;
    tc.is_write = st.accesses[a].is_write;
    tc.bits = st.accesses[a].bits;
    std::unordered_set<PairKey, PairHash> pairs;
    pairs.reserve(n * 2);
    for (size_t x = 0; x < n; ++x) {
      int32_t e = inst_e[x * na + a];
      if (e >= 0) pairs.insert({inst_pe[x], inst_tid[x], e});
    }
    tc.total = static_cast<int64_t>(pairs.size());
    for (const PairKey& k : pairs) {
      const bool has_prev = k.t > 0;
      const bool temporal = has_prev && pairs.count({k.pe, k.t - 1, k.e});
      bool spatial = false;
      for (int32_t q : nbrs[k.pe]) {
        if (pairs.count({q, k.t, k.e}) || (has_prev && pairs.count({q, k.t - 1, k.e}))) {
          spatial = true;
          break;
        }
      }
      if (temporal) ++tc.temporal;
      if (spatial) ++tc.spatial;
      if (!temporal && !spatial) ++tc.unique;
    }
    core.tensors.push_back(tc);
  }
  // A tensor both read and written appears twice; keep the names apart.
  for (size_t a = 0; a < core.tensors.size(); ++a)
    for (size_t b = 0; b < a; ++b)
      if (core.tensors[a].name == core.tensors[b].name)
        core.tensors[a].name += core.tensors[a].is_write ? ":write" : ":read";
  return core;
}

// ---------------------------------------------------------------- finishing

// `mpc`: the MAC rate of the call's operand width.
Metrics Finish(const Core& core, const Hardware& hw, int64_t batch, int64_t extra_read_bits,
               int64_t extra_ops, int64_t num_pes, int64_t mpc) {
  Metrics m;
  m.method = core.method;
  m.macs_per_pe_per_cycle = mpc;
  m.macs = CheckedMul(core.macs, batch, "cost model: MACs");
  m.time_steps = CheckedMul(core.time_steps, batch, "cost model: time steps");
  m.active_pes = core.active_pes;
  m.num_pes = num_pes;
  m.avg_active_pes = core.time_steps ? static_cast<double>(core.st_points) / core.time_steps : 0;
  m.folds = CheckedMul(core.folds, batch, "cost model: folds");
  bool any_write = false;
  for (const auto& t : core.tensors) {
    TensorMetrics tm;
    tm.is_write = t.is_write;
    tm.bits = t.bits;
    tm.total = CheckedMul(t.total, batch, "cost model: total volume");
    tm.unique = CheckedMul(t.unique, batch, "cost model: unique volume");
    tm.reuse_factor = t.unique ? static_cast<double>(t.total) / t.unique : 0;
    tm.spatial_reuse = core.macs ? static_cast<double>(t.spatial) / core.macs : 0;
    tm.temporal_reuse = core.macs ? static_cast<double>(t.temporal) / core.macs : 0;
    tm.offchip_elements = tm.unique;
    tm.offchip_bits = CheckedMul(tm.unique, t.bits, "cost model: off-chip bits");
    tm.offchip_bytes = tm.offchip_bits / 8.0;
    if (t.is_write) {
      m.offchip_write_bits =
          CheckedAdd(m.offchip_write_bits, tm.offchip_bits, "cost model: off-chip write bits");
      any_write = true;
    } else {
      m.offchip_read_bits =
          CheckedAdd(m.offchip_read_bits, tm.offchip_bits, "cost model: off-chip read bits");
    }
    m.tensors[t.name] = tm;
  }
  m.offchip_read_bits =
      CheckedAdd(m.offchip_read_bits, extra_read_bits, "cost model: off-chip read bits");
  const double bw = hw.bandwidth_bits;
  m.ingress_delay = Finite(m.offchip_read_bits / bw + hw.avg_latency - 1, "ingress delay");
  m.egress_delay =
      any_write ? Finite(m.offchip_write_bits / bw + hw.avg_latency - 1, "egress delay") : 0;
  // MACs run at the call's rate; non-MAC ops (float dequantization, max-abs) at the
  // hardware's base rate, which a rate table by width leaves at 1.
  const int64_t pes = std::max<int64_t>(1, core.active_pes);
  const int64_t lanes = CheckedMul(pes, hw.macs_per_pe_per_cycle.base, "cost model: active lanes");
  m.compute_delay = static_cast<double>(m.macs) / (static_cast<double>(pes) * mpc) +
                    static_cast<double>(extra_ops) / lanes;
  m.delay = std::max({m.ingress_delay, m.egress_delay, m.compute_delay});
  const int64_t extra_cycles = CeilDiv(extra_ops, lanes);
  m.compute_delay_exact = static_cast<double>(core.stamp_max_sum) * batch / mpc +
                          static_cast<double>(extra_ops) / lanes;
  m.compute_cycles = CheckedAdd(
      CheckedMul(core.systolic_cycles >= 0 ? core.systolic_cycles : core.exact_stamp_cycles, batch,
                 "cost model: compute cycles"),
      extra_cycles, "cost model: compute cycles");
  const int64_t bits =
      CheckedAdd(m.offchip_read_bits, m.offchip_write_bits, "cost model: off-chip bits");
  const int64_t transfer =
      ToCount(std::ceil(bits / bw), "transfer cycles (off-chip bits / bandwidth)");
  m.stall_cycles = std::max<int64_t>(0, transfer - m.compute_cycles);
  m.cycles = CheckedAdd(m.compute_cycles, m.stall_cycles, "cost model: cycles");
  m.array_utilization = m.cycles && num_pes ? static_cast<double>(m.macs) / (static_cast<double>(m.cycles) * num_pes * mpc) : 0;
  m.bandwidth_bits_per_cycle = m.compute_cycles ? static_cast<double>(bits) / m.compute_cycles : 0;
  m.latency_us = Finite(m.cycles / (hw.clock_ghz * 1e3), "latency_us (cycles / clock)");
  return m;
}

// Checks the used rectangle [0,rows) x [0,cols) lies in the PE domain (a box's bounds were
// read by PrepareArray; another domain is read again and its points tested).
void CheckRectangleInDomain(const PreparedArray& pa, int64_t rows, int64_t cols) {
  const std::string& text = pa.hardware.pe_domain;
  auto fail = [&](int64_t p, int64_t q) {
    throw std::invalid_argument("Dataflow.space sends instances to PE[" + Str(p) + "," + Str(q) +
                                "], outside Hardware.pe_domain '" + text + "'");
  };
  if (pa.pe_box) {
    if (pa.pe_lo[0] > 0 || pa.pe_lo[1] > 0) fail(0, 0);
    if (pa.pe_hi[0] < rows) fail(pa.pe_hi[0], 0);
    if (pa.pe_hi[1] < cols) fail(0, pa.pe_hi[1]);
    return;
  }
  Relation pe_dom = ParseRelation(text, "Hardware.pe_domain");
  if (pe_dom.in_arity != 2)
    throw std::invalid_argument("Dataflow.space yields 2-D PE coordinates but Hardware.pe_domain '" +
                                text + "' is " + Str(pe_dom.in_arity) + "-D");
  int64_t pt[2];
  for (pt[0] = 0; pt[0] < rows; ++pt[0])
    for (pt[1] = 0; pt[1] < cols; ++pt[1])
      if (!pe_dom.Contains(pt)) fail(pt[0], pt[1]);
}

// A PE doing r MACs per cycle on a preset (whose time map gives it one instance per stamp)
// is an r-wide dot product along K: the GEMM runs with ceil(K / r) packed elements of
// r x bits. Back from packed vectors to elements: real MACs, A and B counted per element
// (their bits already are), the stamp sum in MACs so that dividing by r gives stamps.
GemmMatch Packed(const GemmMatch& g, int64_t r) {
  GemmMatch p = g;
  p.k = CeilDiv(g.k, r);
  p.bits_a = g.bits_a * static_cast<int>(r);
  p.bits_b = g.bits_b * static_cast<int>(r);
  return p;
}

void Unpack(const GemmMatch& g, int64_t r, Core* core) {
  core->macs = g.m * g.n * g.k;
  core->stamp_max_sum *= r;
  for (TensorCounts& t : core->tensors) {
    if (t.name != g.name_a && t.name != g.name_b) continue;
    t.total *= r;
    t.unique *= r;
    t.spatial *= r;
    t.temporal *= r;
    t.bits /= static_cast<int>(r);
  }
}

// `st` may be null for a GEMM (`gemm` set): its statement is made only if it is enumerated.
Metrics Run(const Statement* st, const GemmMatch* gemm, int64_t batch, int64_t extra_read_bits,
            int64_t extra_ops, const PreparedArray& pa, AnalysisMethod method) {
  const Hardware& hw = pa.hardware;
  const Dataflow& df = pa.dataflow;
  const int64_t num_pes = pa.num_pes;
  int width = 0;
  if (st != nullptr) {
    for (const auto& a : st->accesses)
      if (!a.is_write) width = std::max(width, a.bits);
  } else {
    width = gemm->rate_bits > 0 ? gemm->rate_bits  // codes emulated on a wider unit
                                : std::max(gemm->bits_a, gemm->bits_b);  // Statement::Gemm's reads
  }
  const int64_t rate = hw.macs_per_pe_per_cycle.AtBits(width);
  if (gemm && !pa.preset_error.empty()) throw std::invalid_argument(pa.preset_error);
  const bool is_preset = gemm && pa.is_preset;
  const Dataflow& preset = pa.preset;
  bool fast_ok = false;
  std::string why_not = "the statement is not a GEMM {S[i,j,k]->A[i,k]}, {S[i,j,k]->B[k,j]}, "
                        "{S[i,j,k]->C[i,j]} over a box from 0";
  if (gemm) {
    why_not = "the dataflow is not an os/ws/is preset (Dataflow::Preset)";
    if (is_preset) {
      why_not = "the interconnect is not the systolic {PE[p,q]->PE[p-1,q]; PE[p,q]->PE[p,q-1]}";
      fast_ok = pa.systolic;
    }
  }
  if (method == AnalysisMethod::kFast && !fast_ok)
    throw std::invalid_argument("the fast method does not apply: " + why_not +
                                "; use method 'enumerate' or 'auto'");
  const bool pack = is_preset && rate > 1;
  // A preset packs the rate's MACs into one element of rate x width bits, and elements are
  // at most 1024 bits (TensorAccess.bits): past that the packed widths would overflow.
  if (pack && rate > 1024 / std::max(width, 1))
    throw std::invalid_argument(
        "Hardware.macs_per_pe_per_cycle gives " + Str(rate) + " MACs per cycle at " +
        Str(width) + "-bit operands: a preset dataflow packs them into one element of " +
        Str(width) + " x " + Str(rate) + " bits, at most 1024 (a rate of at most " +
        Str(1024 / std::max(width, 1)) + " at " + Str(width) + " bits)");
  const GemmMatch g = pack ? Packed(*gemm, rate) : gemm ? *gemm : GemmMatch{};
  Core core;
  if (fast_ok && method != AnalysisMethod::kEnumerate) {
    FoldPlan plan = MakePlan(preset, g.m, g.n, g.k);
    CheckRectangleInDomain(pa, std::min(plan.R, plan.SP), std::min(plan.C, plan.SQ));
    core = FastGemm(plan, g);
  } else {
    Statement own;
    if (st == nullptr) {
      own = Statement::Gemm(gemm->m, gemm->n, gemm->k, gemm->bits_a, gemm->bits_b, gemm->bits_c);
      st = &own;
    }
    if (pack) {
      Statement packed = Statement::Gemm(g.m, g.n, g.k, g.bits_a, g.bits_b, g.bits_c);
      packed.accesses = {{"{S[i,j,k]->" + g.name_a + "[i,k]}", false, g.bits_a},
                         {"{S[i,j,k]->" + g.name_b + "[k,j]}", false, g.bits_b},
                         {"{S[i,j,k]->" + g.name_c + "[i,j]}", true, g.bits_c}};
      core = Enumerate(packed, hw, df, 1);
    } else {
      core = Enumerate(*st, hw, df, rate);
    }
    if (fast_ok) {
      FoldPlan plan = MakePlan(preset, g.m, g.n, g.k);
      core.systolic_cycles = SystolicCycles(plan, &core.folds);
    }
  }
  if (pack) Unpack(*gemm, rate, &core);
  return Finish(core, hw, batch, extra_read_bits, extra_ops, num_pes, rate);
}

}  // namespace

std::shared_ptr<const PreparedArray> PrepareArray(const Hardware& hw, const Dataflow& df) {
  Validate(hw);
  Validate(df);
  auto pa = std::make_shared<PreparedArray>();
  pa->hardware = hw;
  pa->dataflow = df;
  Relation pe_dom = ParseRelation(hw.pe_domain, "Hardware.pe_domain");
  pa->num_pes = CountPoints(pe_dom, "Hardware.pe_domain");
  Box box;
  if (pe_dom.in_arity == 2 && IsBoxSet(pe_dom, &box)) {
    pa->pe_box = true;
    for (int d = 0; d < 2; ++d) {
      pa->pe_lo[d] = box.lo[d];
      pa->pe_hi[d] = box.hi[d];
    }
  }
  try {
    pa->is_preset = MatchPreset(df, &pa->preset);
  } catch (const std::invalid_argument& e) {
    pa->preset_error = e.what();  // only a GEMM asks which preset it is
  }
  if (pa->is_preset) {
    Relation ic = ParseRelation(hw.interconnect.empty() ? "{PE[p,q]->PE[p,q]}" : hw.interconnect,
                                "Hardware.interconnect");
    pa->systolic = IsSystolicInterconnect(ic);
  }
  return pa;
}

Metrics AnalyzeGemm(const GemmWorkload& w, const PreparedArray& array, AnalysisMethod method) {
  Validate(w);
  GemmMatch g;
  g.m = w.m;
  g.n = w.n;
  g.k = w.k;
  g.bits_a = w.bits_a;
  g.bits_b = w.bits_b;
  g.bits_c = w.bits_c;
  g.rate_bits = w.mac_bits;
  return Run(nullptr, &g, w.batch, w.extra_read_bits, w.extra_ops, array, method);
}

Metrics AnalyzeGemm(const GemmWorkload& w, const Hardware& hw, const Dataflow& df,
                    AnalysisMethod method) {
  Validate(w);
  return AnalyzeGemm(w, *PrepareArray(hw, df), method);
}

Metrics Analyze(const Statement& st, const Hardware& hw, const Dataflow& df,
                AnalysisMethod method) {
  for (const auto& a : st.accesses)
    if (a.bits <= 0 || a.bits > 1024)
      throw std::invalid_argument("TensorAccess.bits must be in 1..1024, got " + Str(a.bits));
  if (st.accesses.empty()) throw std::invalid_argument("Statement has no access relations");
  GemmMatch g;
  const bool is_gemm = MatchGemmStatement(st, &g);
  return Run(&st, is_gemm ? &g : nullptr, 1, 0, 0, *PrepareArray(hw, df), method);
}

}  // namespace tenet
