// The value types' constructors and validation, the presets, TENET file IO and the
// accelerator's JSON form.
#include <algorithm>
#include <cmath>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "cost_model/accelerator.h"
#include "cost_model/checked.h"
#include "cost_model/cost_model.h"
#include "cost_model/json.h"
#include "cost_model/relation.h"

namespace tenet {

using detail::ParseRelation;
using detail::Relation;

namespace {

void RequirePositive(int64_t v, const std::string& field) {
  if (v <= 0)
    throw std::invalid_argument(field + " must be a positive integer, got " + Str(v));
}

}  // namespace

Hardware Hardware::Systolic(int64_t rows, int64_t cols, double bandwidth_bits,
                            double avg_latency, double clock_ghz, int64_t l1_bytes,
                            int64_t l2_bytes, MacRate macs_per_pe_per_cycle) {
  RequirePositive(rows, "Hardware::Systolic rows");
  RequirePositive(cols, "Hardware::Systolic cols");
  Hardware hw;
  hw.name = "systolic_" + Str(rows) + "x" + Str(cols);
  hw.pe_domain = "{PE[p,q]: 0<=p<" + Str(rows) + " and 0<=q<" + Str(cols) + "}";
  hw.interconnect = "{PE[p,q]->PE[p-1,q]; PE[p,q]->PE[p,q-1]}";
  hw.bandwidth_bits = bandwidth_bits;
  hw.avg_latency = avg_latency;
  hw.clock_ghz = clock_ghz;
  hw.l1_bytes = l1_bytes;
  hw.l2_bytes = l2_bytes;
  hw.macs_per_pe_per_cycle = std::move(macs_per_pe_per_cycle);
  Validate(hw);
  return hw;
}

int64_t MacRate::AtBits(int bits) const {
  auto it = by_bits.find(bits);
  return it == by_bits.end() ? base : it->second;
}

void Validate(const Hardware& hw) {
  if (!(hw.bandwidth_bits > 0) || !std::isfinite(hw.bandwidth_bits))
    throw std::invalid_argument("Hardware.bandwidth_bits must be a positive number of bits "
                                "per cycle, got " + std::to_string(hw.bandwidth_bits));
  if (!(hw.avg_latency >= 0) || !std::isfinite(hw.avg_latency))
    throw std::invalid_argument("Hardware.avg_latency must be >= 0 cycles, got " +
                                std::to_string(hw.avg_latency));
  if (!(hw.clock_ghz > 0) || !std::isfinite(hw.clock_ghz))
    throw std::invalid_argument("Hardware.clock_ghz must be positive, got " +
                                std::to_string(hw.clock_ghz));
  if (hw.l1_bytes < 0)
    throw std::invalid_argument("Hardware.l1_bytes must be >= 0, got " + Str(hw.l1_bytes));
  if (hw.l2_bytes < 0)
    throw std::invalid_argument("Hardware.l2_bytes must be >= 0, got " + Str(hw.l2_bytes));
  const MacRate& rate = hw.macs_per_pe_per_cycle;
  RequirePositive(rate.base, "Hardware.macs_per_pe_per_cycle");
  if (!rate.by_bits.empty() && rate.base != 1)
    throw std::invalid_argument("Hardware.macs_per_pe_per_cycle: a table of rates by operand "
                                "width does 1 MAC per cycle at the widths it does not list, "
                                "got base rate " + Str(rate.base));
  for (const auto& kv : rate.by_bits) {
    if (kv.first < 1 || kv.first > 64)
      throw std::invalid_argument("Hardware.macs_per_pe_per_cycle: operand width " +
                                  Str(kv.first) + " is not in 1..64 bits");
    RequirePositive(kv.second, "Hardware.macs_per_pe_per_cycle[" + Str(kv.first) + "]");
    // p MACs per cycle are costed as one packed element of p x bits, and elements are at
    // most 1024 bits: a larger rate would only fail at the first call.
    if (kv.second > 1024 / kv.first)
      throw std::invalid_argument(
          "Hardware.macs_per_pe_per_cycle[" + Str(kv.first) + "]=" + Str(kv.second) + ": " +
          Str(kv.first) + " bits x " + Str(kv.second) + " MACs per cycle = " +
          Str(kv.first * kv.second) + " bits per packed element; at most 1024 (rate <= " +
          Str(1024 / kv.first) + " at " + Str(kv.first) + " bits)");
  }
  Relation dom = ParseRelation(hw.pe_domain, "Hardware.pe_domain");
  if (dom.is_map)
    throw std::invalid_argument("Hardware.pe_domain '" + hw.pe_domain +
                                "' must be a set such as {PE[p,q]: 0<=p<8 and 0<=q<8}, not a map");
  if (dom.in_arity != 1 && dom.in_arity != 2)
    throw std::invalid_argument("Hardware.pe_domain '" + hw.pe_domain +
                                "' must be 1-D or 2-D, got " + Str(dom.in_arity) + "-D");
  detail::Box box = detail::BoundingBox(dom, "Hardware.pe_domain");
  if (box.Volume() > 100'000'000)
    throw std::invalid_argument("Hardware.pe_domain '" + hw.pe_domain +
                                "' is too large (bounding box above 1e8 PEs)");
  if (!hw.interconnect.empty()) {
    Relation ic = ParseRelation(hw.interconnect, "Hardware.interconnect");
    if (!ic.is_map || ic.in_arity != dom.in_arity || ic.out_arity != dom.in_arity)
      throw std::invalid_argument("Hardware.interconnect '" + hw.interconnect +
                                  "' must be a map PE[..] -> PE[..] with the PE domain's "
                                  "arity (" + Str(dom.in_arity) + ")");
  }
}

int64_t Hardware::NumPEs() const {
  Validate(*this);
  return detail::CountPoints(ParseRelation(pe_domain, "Hardware.pe_domain"), "Hardware.pe_domain");
}

Dataflow Dataflow::Preset(const std::string& name, int64_t rows, int64_t cols,
                          const std::map<std::string, int64_t>& tiling) {
  RequirePositive(rows, "Dataflow::Preset rows");
  RequirePositive(cols, "Dataflow::Preset cols");
  std::string stream_key;
  if (name == "os") stream_key = "k";
  else if (name == "ws") stream_key = "m";
  else if (name == "is") stream_key = "n";
  else
    throw std::invalid_argument("unknown dataflow preset '" + name +
                                "' (known: 'os' output-stationary, 'ws' weight-stationary, "
                                "'is' input-stationary)");
  int64_t t = 0;
  for (const auto& kv : tiling) {
    if (kv.first != stream_key)
      throw std::invalid_argument("preset '" + name + "' takes one tiling factor '" +
                                  stream_key + "' (the streamed dimension), got '" +
                                  kv.first + "'");
    RequirePositive(kv.second, "tiling factor '" + kv.first + "'");
    t = kv.second;
  }
  const std::string R = Str(rows), C = Str(cols), T = Str(t);
  Dataflow df;
  df.preset = name;
  df.rows = rows;
  df.cols = cols;
  df.tiling = tiling;
  df.name = name + "_" + R + "x" + C + (t ? "_" + stream_key + T : "");
  // Canonical fold: PE row p, PE column q, stream position l; stamp p + q + l.
  std::string p, q, l;  // GEMM index feeding each
  std::string outer1, outer2;
  if (name == "os") { p = "i"; q = "j"; l = "k"; outer1 = "floor(i/" + R + ")"; outer2 = "floor(j/" + C + ")"; }
  if (name == "ws") { p = "k"; q = "j"; l = "i"; outer1 = "floor(j/" + C + ")"; outer2 = "floor(k/" + R + ")"; }
  if (name == "is") { p = "k"; q = "i"; l = "j"; outer1 = "floor(i/" + C + ")"; outer2 = "floor(k/" + R + ")"; }
  df.space = "{S[i,j,k]->PE[" + p + "%" + R + ", " + q + "%" + C + "]}";
  // The stamp is written in TENET's term order (os: i%R+j%C+k, ws: i+j%C+k%R), so TENET's
  // matmul_systolic_*.m files are recognised as presets.
  const std::string lt = t == 0 ? l : l + "%" + T;
  const std::string stamp = name == "os" ? p + "%" + R + "+" + q + "%" + C + "+" + lt
                                         : lt + "+" + q + "%" + C + "+" + p + "%" + R;
  if (t == 0) {
    df.time = "{S[i,j,k]->T[" + outer1 + ", " + outer2 + ", " + stamp + "]}";
  } else {
    df.time = "{S[i,j,k]->T[" + outer1 + ", " + outer2 + ", floor(" + l + "/" + T + "), " +
              stamp + "]}";
  }
  return df;
}

void Validate(const Dataflow& df) {
  Relation s = ParseRelation(df.space, "Dataflow.space");
  Relation t = ParseRelation(df.time, "Dataflow.time");
  if (!s.is_map) throw std::invalid_argument("Dataflow.space '" + df.space + "' must be a map S[..] -> PE[..]");
  if (!t.is_map) throw std::invalid_argument("Dataflow.time '" + df.time + "' must be a map S[..] -> T[..]");
  if (s.in_arity != t.in_arity)
    throw std::invalid_argument("Dataflow.space and Dataflow.time take different numbers of "
                                "iteration variables (" + Str(s.in_arity) + " and " +
                                Str(t.in_arity) + ")");
  if (t.out_arity == 0) throw std::invalid_argument("Dataflow.time '" + df.time + "' has no time dimension");
}

Statement Statement::Gemm(int64_t m, int64_t n, int64_t k, int bits_a, int bits_b, int bits_c) {
  RequirePositive(m, "GEMM m");
  RequirePositive(n, "GEMM n");
  RequirePositive(k, "GEMM k");
  Statement st;
  st.name = "gemm_" + Str(m) + "x" + Str(n) + "x" + Str(k);
  st.domain = "{S[i,j,k]: 0<=i<" + Str(m) + " and 0<=j<" + Str(n) + " and 0<=k<" + Str(k) + "}";
  st.accesses = {{"{S[i,j,k]->A[i,k]}", false, bits_a},
                 {"{S[i,j,k]->B[k,j]}", false, bits_b},
                 {"{S[i,j,k]->C[i,j]}", true, bits_c}};
  return st;
}

GemmWorkload MakeWorkload(int64_t m, int64_t n, int64_t k, int64_t batch, int bits_a, int bits_b,
                          int bits_c, int64_t extra_read_bits, int64_t extra_ops,
                          int64_t extra_register_bits) {
  GemmWorkload w;
  w.batch = batch;
  w.m = m;
  w.n = n;
  w.k = k;
  w.bits_a = bits_a;
  w.bits_b = bits_b;
  w.bits_c = bits_c;
  w.extra_read_bits = extra_read_bits;
  w.extra_ops = extra_ops;
  w.extra_register_bits = extra_register_bits;
  Validate(w);
  return w;
}

void Validate(const GemmWorkload& w) {
  RequirePositive(w.batch, "GemmWorkload.batch");
  RequirePositive(w.m, "GemmWorkload.m");
  RequirePositive(w.n, "GemmWorkload.n");
  RequirePositive(w.k, "GemmWorkload.k");
  for (auto [bits, f] : {std::pair<int, const char*>{w.bits_a, "bits_a"}, {w.bits_b, "bits_b"},
                         {w.bits_c, "bits_c"}})
    if (bits <= 0 || bits > 1024)
      throw std::invalid_argument(std::string("GemmWorkload.") + f +
                                  " must be in 1..1024, got " + Str(bits));
  if (w.extra_read_bits < 0) throw std::invalid_argument("GemmWorkload.extra_read_bits must be >= 0");
  if (w.extra_ops < 0) throw std::invalid_argument("GemmWorkload.extra_ops must be >= 0");
  if (w.extra_register_bits < 0)
    throw std::invalid_argument("GemmWorkload.extra_register_bits must be >= 0, got " +
                                Str(w.extra_register_bits));
  const int64_t lim = int64_t(1) << 31;
  if (w.m > lim || w.n > lim || w.k > lim || w.batch > lim)
    throw std::invalid_argument("GemmWorkload sizes must be below 2^31");
  int64_t macs = w.batch;
  if (__builtin_mul_overflow(macs, w.m, &macs) || __builtin_mul_overflow(macs, w.n, &macs) ||
      __builtin_mul_overflow(macs, w.k, &macs) || macs > (int64_t(1) << 60))
    throw std::invalid_argument("GemmWorkload batch*m*n*k exceeds 2^60 MACs");
}

// ---------------------------------------------------------------- TENET files

namespace {

std::vector<std::string> NonEmptyLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (detail::Normalize(line).empty()) continue;
    lines.push_back(line);
  }
  return lines;
}

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
size_t FirstBadUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = detail::Utf8CharLength(s, i);
    if (len == 0) return i;
    i += len;
  }
  return std::string::npos;
}

std::string ReadFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw std::invalid_argument("'" + path + "' is a directory, not a TENET file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("cannot read file '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  // Relations are text; bytes that are not UTF-8 would otherwise surface in Python as a
  // UnicodeDecodeError that names no file.
  const size_t bad = FirstBadUtf8(text);
  if (bad != std::string::npos) {
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<unsigned char>(text[bad]));
    throw std::invalid_argument("TENET file '" + path + "' is not UTF-8 text (byte " + byte +
                                " at offset " + Str(static_cast<int64_t>(bad)) + ")");
  }
  return text;
}

std::string BaseName(const std::string& path) {
  size_t s = path.find_last_of('/');
  std::string b = s == std::string::npos ? path : path.substr(s + 1);
  size_t d = b.find_last_of('.');
  return d == std::string::npos ? b : b.substr(0, d);
}

}  // namespace

Hardware ParseTenetHardware(const std::string& text, const std::string& name) {
  auto lines = NonEmptyLines(text);
  if (lines.size() != 3)
    throw std::invalid_argument("TENET .p file '" + name + "' must have 3 lines (PE domain, "
                                "interconnect, 'L1 L2 bandwidth avg_latency'), got " +
                                Str(lines.size()));
  Hardware hw;
  hw.name = name;
  hw.pe_domain = lines[0];
  hw.interconnect = lines[1];
  std::istringstream is(lines[2]);
  double l1, l2;
  std::string extra;
  if (!(is >> l1 >> l2 >> hw.bandwidth_bits >> hw.avg_latency) || (is >> extra))
    throw std::invalid_argument("TENET .p file '" + name + "': line 3 must be four numbers "
                                "'L1 L2 bandwidth avg_latency', got '" + lines[2] + "'");
  // Casting a double outside int64 is undefined; 2^62 bytes is far beyond any buffer.
  for (auto [v, field] : {std::pair<double, const char*>{l1, "L1"}, {l2, "L2"}})
    if (!(v >= 0 && v <= 4.6e18))
      throw std::invalid_argument("TENET .p file '" + name + "': line 3 " + field + " size " +
                                  std::to_string(v) +
                                  " bytes must be in [0, 2^62]");
  hw.l1_bytes = static_cast<int64_t>(l1);
  hw.l2_bytes = static_cast<int64_t>(l2);
  Validate(hw);
  return hw;
}

Dataflow ParseTenetMapping(const std::string& text, const std::string& name) {
  auto lines = NonEmptyLines(text);
  if (lines.size() != 2)
    throw std::invalid_argument("TENET .m file '" + name + "' must have 2 lines (space map, "
                                "time map), got " + Str(lines.size()));
  Dataflow df;
  df.name = name;
  df.space = lines[0];
  df.time = lines[1];
  Validate(df);
  return df;
}

Statement ParseTenetStatement(const std::string& text, const std::string& name) {
  auto lines = NonEmptyLines(text);
  if (lines.empty()) throw std::invalid_argument("TENET .s file '" + name + "' is empty");
  std::istringstream is(lines[0]);
  int64_t reads, writes;
  if (!(is >> reads >> writes) || reads < 0 || writes < 0)
    throw std::invalid_argument("TENET .s file '" + name + "': line 1 must be 'reads writes', got '" + lines[0] + "'");
  if (static_cast<int64_t>(lines.size()) != 2 + reads + writes)
    throw std::invalid_argument("TENET .s file '" + name + "': expected " + Str(2 + reads + writes) +
                                " lines (counts, domain, " + Str(reads) + " reads, " + Str(writes) +
                                " writes), got " + Str(lines.size()));
  Statement st;
  st.name = name;
  st.domain = lines[1];
  for (int64_t a = 0; a < reads + writes; ++a)
    st.accesses.push_back({lines[2 + a], a >= reads, 32});
  return st;
}

std::string FormatTenetHardware(const Hardware& hw) {
  std::ostringstream os;
  os.precision(17);
  os << hw.pe_domain << "\n" << hw.interconnect << "\n"
     << hw.l1_bytes << " " << hw.l2_bytes << " " << hw.bandwidth_bits << " " << hw.avg_latency << "\n";
  return os.str();
}

std::string FormatTenetMapping(const Dataflow& df) { return df.space + "\n" + df.time + "\n"; }

std::string FormatTenetStatement(const Statement& st) {
  int64_t reads = 0, writes = 0;
  std::string r, w;
  for (const auto& a : st.accesses) {
    if (a.is_write) { ++writes; w += a.relation + "\n"; }
    else { ++reads; r += a.relation + "\n"; }
  }
  return Str(reads) + " " + Str(writes) + "\n" + st.domain + "\n" + r + w;
}

Hardware LoadTenetHardware(const std::string& path) { return ParseTenetHardware(ReadFile(path), BaseName(path)); }
Dataflow LoadTenetMapping(const std::string& path) { return ParseTenetMapping(ReadFile(path), BaseName(path)); }
Statement LoadTenetStatement(const std::string& path) { return ParseTenetStatement(ReadFile(path), BaseName(path)); }

void SaveTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw std::invalid_argument("cannot write file '" + path + "'");
  f << text;
  if (!f) throw std::invalid_argument("failed writing file '" + path + "'");
}

// ---------------------------------------------------------------- accelerator

std::string MappingPolicy::Describe() const {
  if (kind == "given") return tiles.Describe();
  if (kind == "auto") return "auto (" + MappingObjectiveName(objective) + ")";
  return kind;
}

void Validate(const MappingPolicy& choice) {
  if (choice.kind == "given") {
    Validate(choice.tiles);
  } else if (choice.kind != "default" && choice.kind != "auto") {
    throw std::invalid_argument("Accelerator.mapping.kind must be 'default' (DefaultTileMapping "
                                "per call), 'given' (one TileMapping) or 'auto' (a mapping "
                                "search per call), got '" + choice.kind + "'");
  }
}

PrecisionTable Accelerator::WithMacRates(PrecisionTable energies, const MacRate& rate) {
  for (MacSpec& u : energies.units)
    u.macs_per_pe_per_cycle = static_cast<double>(rate.AtBits(std::max(u.bits_a, u.bits_b)));
  return energies;
}

MemoryHierarchy MemoryFromTenet(const Hardware& hw) {
  Validate(hw);
  MemoryHierarchy mem;
  mem.register_bytes = hw.l1_bytes;
  mem.buffer_bytes = hw.l2_bytes;
  mem.dram_bandwidth_bits = hw.bandwidth_bits;
  if (hw.l1_bytes > 0) mem.register_pj_per_bit = SramPjPerBit(hw.l1_bytes);
  if (hw.l2_bytes > 0) mem.buffer_pj_per_bit = SramPjPerBit(hw.l2_bytes);
  Validate(mem);  // a .p file with L1 or L2 of 0 is refused here, naming the field
  return mem;
}

std::vector<std::string> SupportedDataflowsFor(const Dataflow& df) {
  if (!df.preset.empty() && df.rows > 0 && df.cols > 0) return {"os", "ws", "is"};
  return {};
}

namespace {

std::string ListText(const std::vector<std::string>& names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", '" : "'") + names[i] + "'";
  return s + "]";
}

// The supported dataflows are known preset names, each once, and include the accelerator's
// own dataflow: an array cannot be charged with a dataflow it does not run.
void ValidateSupportedDataflows(const Accelerator& acc) {
  const std::vector<std::string>& s = acc.supported_dataflows;
  const std::string field = "Accelerator.supported_dataflows";
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != "os" && s[i] != "ws" && s[i] != "is")
      throw std::invalid_argument(field + "[" + Str(static_cast<int64_t>(i)) + "] must be 'os', "
                                  "'ws' or 'is', got '" + s[i] + "'");
    if (std::find(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(i), s[i]) !=
        s.begin() + static_cast<std::ptrdiff_t>(i))
      throw std::invalid_argument(field + " names '" + s[i] + "' twice: " + ListText(s));
  }
  const Dataflow& df = acc.dataflow;
  const bool preset = !df.preset.empty() && df.rows > 0 && df.cols > 0;
  if (!preset && !s.empty())
    throw std::invalid_argument(field + " must be empty for dataflow '" + df.name +
                                "' (the user's own relations, e.g. TENET files: the array runs "
                                "that relation alone), got " + ListText(s));
  if (preset && s.empty())
    throw std::invalid_argument(field + " is empty: list the presets the array runs ('os', "
                                "'ws', 'is'), including its own dataflow '" + df.preset + "'");
  if (preset && std::find(s.begin(), s.end(), df.preset) == s.end())
    throw std::invalid_argument("accelerator '" + acc.name + "': its dataflow '" + df.name +
                                "' (preset '" + df.preset + "') is not among " + field + " " +
                                ListText(s) + ": the array does not run it");
}

}  // namespace

void Validate(const Accelerator& acc) {
  if (acc.name.empty()) throw std::invalid_argument("Accelerator.name must not be empty");
  Validate(acc.hardware);
  Validate(acc.dataflow);
  Validate(acc.memory);
  Validate(acc.precision);
  Validate(acc.mapping);
  Validate(acc.vector);
  Validate(acc.edge_dequantizer);
  Validate(acc.cores);
  ValidateSupportedDataflows(acc);
  // Which operand is padded is the dataflow's: a search among several would change it.
  if (acc.memory.whole_stationary_tiles &&
      (acc.supported_dataflows.size() != 1 || acc.dataflow.rows < 1 || acc.dataflow.cols < 1))
    throw std::invalid_argument(
        "accelerator '" + acc.name + "': memory.whole_stationary_tiles needs an array of one "
        "preset dataflow (supported_dataflows one of 'os', 'ws', 'is', as tpu_v1's ['ws']), "
        "got supported_dataflows " + ListText(acc.supported_dataflows));
  // The MAC rate has one setting, the hardware's: a table whose rates differ would charge
  // two different speeds for one call.
  for (const MacSpec& u : acc.precision.units) {
    const int64_t rate = acc.hardware.macs_per_pe_per_cycle.AtBits(std::max(u.bits_a, u.bits_b));
    if (u.macs_per_pe_per_cycle != static_cast<double>(rate))
      throw std::invalid_argument(
          "Accelerator.precision: the unit for " + Str(u.bits_a) + " x " + Str(u.bits_b) +
          " bits does " + std::to_string(u.macs_per_pe_per_cycle) +
          " MACs per cycle, but the hardware's macs_per_pe_per_cycle gives " + Str(rate) +
          " at " + Str(std::max(u.bits_a, u.bits_b)) +
          " bits: set the rate there (Accelerator::WithMacRates fills the table from it)");
  }
  // A GEMM larger than the array in every dimension (capped so enumeration stays fast)
  // reaches every PE the dataflow uses and shows a conflict of its time map.
  const int64_t side = std::min<int64_t>(2 * acc.hardware.NumPEs() + 3, 259);
  GemmWorkload probe;
  probe.m = probe.n = side;
  probe.k = 3;
  try {
    AnalyzeGemm(probe, acc.hardware, acc.dataflow);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("accelerator '" + acc.name + "': dataflow '" + acc.dataflow.name +
                                "' does not run on hardware '" + acc.hardware.name + "': " +
                                e.what());
  }
}

namespace {

// MemoryHierarchy's and TileMapping's fields by JSON key: the one table both the writer
// and the reader use, so the two cannot drift apart.
const std::pair<const char*, double MemoryHierarchy::*> kMemoryNumbers[] = {
    {"dram_bandwidth_bits", &MemoryHierarchy::dram_bandwidth_bits},
    {"dram_pj_per_bit", &MemoryHierarchy::dram_pj_per_bit},
    {"buffer_bandwidth_bits", &MemoryHierarchy::buffer_bandwidth_bits},
    {"buffer_pj_per_bit", &MemoryHierarchy::buffer_pj_per_bit},
    {"register_pj_per_bit", &MemoryHierarchy::register_pj_per_bit}};
const std::pair<const char*, int64_t MemoryHierarchy::*> kMemoryIntegers[] = {
    {"buffer_bytes", &MemoryHierarchy::buffer_bytes},
    {"register_bytes", &MemoryHierarchy::register_bytes}};
const std::pair<const char*, bool MemoryHierarchy::*> kMemoryBools[] = {
    {"dram_channel_per_operand", &MemoryHierarchy::dram_channel_per_operand},
    {"buffer_double_buffered", &MemoryHierarchy::buffer_double_buffered},
    {"stationary_double_buffered", &MemoryHierarchy::stationary_double_buffered}};
const std::pair<const char*, int64_t TileMapping::*> kTileIntegers[] = {
    {"tm", &TileMapping::tm}, {"tn", &TileMapping::tn}, {"tk", &TileMapping::tk},
    {"a_align_m", &TileMapping::a_align_m}, {"a_align_k", &TileMapping::a_align_k},
    {"b_align_k", &TileMapping::b_align_k}, {"b_align_n", &TileMapping::b_align_n}};
const std::pair<const char*, int TileMapping::*> kTileInts[] = {
    {"span_a", &TileMapping::span_a}, {"span_b", &TileMapping::span_b},
    {"span_c", &TileMapping::span_c}};

// The accelerator's JSON text is refused above this size before it is parsed: four relation
// texts at their limit and the rest of the fields fit well within it.
constexpr int64_t kMaxAcceleratorJsonChars = 1 << 20;

// A string member that is (or, for names, sits beside) a relation text: refused, naming the
// field, above the relation parser's limit before anything reads it.
std::string RelationTextMember(const detail::JsonValue& obj, const std::string& key,
                               const std::string& where) {
  std::string text = detail::StringMember(obj, key, where);
  if (static_cast<int64_t>(text.size()) > detail::kMaxRelationChars)
    throw std::invalid_argument(where + "." + key + " is " +
                                Str(static_cast<int64_t>(text.size())) + " characters; at most " +
                                Str(detail::kMaxRelationChars) + " are accepted");
  return text;
}

}  // namespace

std::string SerializeAccelerator(const Accelerator& acc) {
  using J = detail::OrderedJson;
  const Hardware& hw = acc.hardware;
  const Dataflow& df = acc.dataflow;
  J rate;
  if (hw.macs_per_pe_per_cycle.by_bits.empty()) {
    rate = hw.macs_per_pe_per_cycle.base;
  } else {
    rate = J::object();
    for (const auto& kv : hw.macs_per_pe_per_cycle.by_bits) rate[Str(kv.first)] = kv.second;
  }
  J hardware = {{"name", hw.name},
                {"pe_domain", hw.pe_domain},
                {"interconnect", hw.interconnect},
                {"bandwidth_bits", hw.bandwidth_bits},
                {"avg_latency", hw.avg_latency},
                {"clock_ghz", hw.clock_ghz},
                {"l1_bytes", hw.l1_bytes},
                {"l2_bytes", hw.l2_bytes},
                {"macs_per_pe_per_cycle", rate}};
  J tiling = J::object();
  for (const auto& kv : df.tiling) tiling[kv.first] = kv.second;
  J dataflow = {{"name", df.name}, {"space", df.space}, {"time", df.time}, {"preset", df.preset},
                {"rows", df.rows}, {"cols", df.cols}, {"tiling", tiling}};
  J memory = {{"psum_bits", acc.memory.psum_bits}};
  for (const auto& [key, field] : kMemoryNumbers) memory[key] = acc.memory.*field;
  if (acc.memory.dram_capacity_bytes > 0)  // absent: not known
    memory["dram_capacity_bytes"] = acc.memory.dram_capacity_bytes;
  for (const auto& [key, field] : kMemoryIntegers) memory[key] = acc.memory.*field;
  for (const auto& [key, field] : kMemoryBools) memory[key] = acc.memory.*field;
  if (acc.memory.whole_stationary_tiles) memory["whole_stationary_tiles"] = true;  // absent: false
  J precision = J::array();
  for (const MacSpec& u : acc.precision.units) {
    J unit = {{"bits_a", u.bits_a}, {"bits_b", u.bits_b}, {"pj_per_mac", u.pj_per_mac}};
    if (!u.format.empty()) unit["format"] = u.format;  // absent: any codes of its width
    if (!u.row_tiles.empty()) {  // absent: none
      unit["row_tiles"] = J::array();
      for (const MacSpec::RowTile& t : u.row_tiles)
        unit["row_tiles"].push_back({{"min_rows", t.min_rows}, {"rows", t.rows}});
    }
    precision.push_back(std::move(unit));
  }
  J mapping = {{"kind", acc.mapping.kind}};
  if (acc.mapping.kind == "given") {
    const TileMapping& t = acc.mapping.tiles;
    mapping["order"] = t.order;
    mapping["accumulate_in_buffer"] = t.accumulate_in_buffer;
    for (const auto& [key, field] : kTileIntegers) mapping[key] = t.*field;
    for (const auto& [key, field] : kTileInts) mapping[key] = t.*field;
  } else if (acc.mapping.kind == "auto") {
    mapping["objective"] = MappingObjectiveName(acc.mapping.objective);
  }
  J supported = J::array();
  for (const auto& d : acc.supported_dataflows) supported.push_back(d);
  const J root = {{"name", acc.name},         {"hardware", hardware}, {"dataflow", dataflow},
                  {"memory", memory},         {"precision", precision},
                  {"mapping", mapping},       {"supported_dataflows", supported},
                  {"vector", detail::VectorUnitJson(acc.vector)},
                  {"edge_dequantizer", detail::EdgeDequantizerJson(acc.edge_dequantizer)}};
  J full = root;
  if (!(acc.cores == Cores{})) full["cores"] = detail::CoresJson(acc.cores);  // core.h
  return detail::Dump(full, "accelerator '" + acc.name + "'");
}

Accelerator ParseAccelerator(const std::string& json) {
  using detail::BoolMember;
  using detail::IntegerMember;
  using detail::JsonValue;
  using detail::NumberMember;
  using detail::StringMember;
  // Checked before any parsing: a relation text of megabytes took a minute and gigabytes.
  if (json.size() > kMaxAcceleratorJsonChars)
    throw std::invalid_argument("accelerator JSON is " + Str(static_cast<int64_t>(json.size())) +
                                " characters; at most " + Str(kMaxAcceleratorJsonChars) +
                                " are accepted (each relation text at most " +
                                Str(detail::kMaxRelationChars) + ")");
  const JsonValue root = detail::ParseJson(json, "accelerator");
  detail::ExpectKeys(root, {"name", "hardware", "dataflow", "memory", "precision", "mapping",
                            "supported_dataflows", "vector", "edge_dequantizer", "cores"},
                     "accelerator");
  Accelerator acc;
  acc.name = StringMember(root, "name", "accelerator");
  const JsonValue& h = detail::Member(root, "hardware", "accelerator");
  detail::ExpectKeys(h, {"name", "pe_domain", "interconnect", "bandwidth_bits", "avg_latency",
                         "clock_ghz", "l1_bytes", "l2_bytes", "macs_per_pe_per_cycle"},
                     "accelerator.hardware");
  const std::string hw_where = "accelerator.hardware";
  Hardware& hw = acc.hardware;
  for (auto [key, field] : {std::pair{"name", &Hardware::name}, {"pe_domain", &Hardware::pe_domain},
                            {"interconnect", &Hardware::interconnect}})
    hw.*field = RelationTextMember(h, key, hw_where);
  for (auto [key, field] : {std::pair{"bandwidth_bits", &Hardware::bandwidth_bits},
                            {"avg_latency", &Hardware::avg_latency}, {"clock_ghz", &Hardware::clock_ghz}})
    hw.*field = NumberMember(h, key, hw_where);
  hw.l1_bytes = IntegerMember(h, "l1_bytes", hw_where);
  hw.l2_bytes = IntegerMember(h, "l2_bytes", hw_where);
  const JsonValue& rate = detail::Member(h, "macs_per_pe_per_cycle", hw_where);
  const std::string rate_where = hw_where + ".macs_per_pe_per_cycle";
  if (rate.is_object()) {
    for (const auto& kv : rate.items()) {
      int64_t bits = 0;
      try {
        size_t used = 0;
        bits = std::stoll(kv.key(), &used);
        if (used != kv.key().size()) bits = 0;
      } catch (const std::exception&) {
        bits = 0;
      }
      if (bits < 1 || bits > 64)
        throw std::invalid_argument(rate_where + ": key '" + kv.key() +
                                    "' is not an operand width in 1..64 bits");
      hw.macs_per_pe_per_cycle.by_bits[static_cast<int>(bits)] =
          detail::AsInteger(kv.value(), rate_where + "[" + kv.key() + "]");
    }
  } else {
    hw.macs_per_pe_per_cycle.base = detail::AsInteger(rate, rate_where);
  }
  const JsonValue& d = detail::Member(root, "dataflow", "accelerator");
  const std::string df_where = "accelerator.dataflow";
  detail::ExpectKeys(d, {"name", "space", "time", "preset", "rows", "cols", "tiling"}, df_where);
  Dataflow& df = acc.dataflow;
  for (auto [key, field] : {std::pair{"name", &Dataflow::name}, {"space", &Dataflow::space},
                            {"time", &Dataflow::time}, {"preset", &Dataflow::preset}})
    df.*field = RelationTextMember(d, key, df_where);
  df.rows = IntegerMember(d, "rows", df_where);
  df.cols = IntegerMember(d, "cols", df_where);
  const JsonValue& tiling = detail::Member(d, "tiling", df_where);
  if (!tiling.is_object())
    throw std::invalid_argument(df_where + ".tiling must be an object of integers");
  for (const auto& kv : tiling.items())
    df.tiling[kv.key()] = detail::AsInteger(kv.value(), df_where + ".tiling." + kv.key());

  const std::string mem_where = "accelerator.memory";
  const JsonValue& m = detail::Member(root, "memory", "accelerator");
  std::vector<std::string> mem_keys{"psum_bits", "dram_capacity_bytes", "whole_stationary_tiles"};
  for (const auto& kv : kMemoryNumbers) mem_keys.push_back(kv.first);
  for (const auto& kv : kMemoryIntegers) mem_keys.push_back(kv.first);
  for (const auto& kv : kMemoryBools) mem_keys.push_back(kv.first);
  detail::ExpectKeys(m, mem_keys, mem_where);
  const int64_t psum = IntegerMember(m, "psum_bits", mem_where);
  if (psum < 1 || psum > 64)
    throw std::invalid_argument(mem_where + ".psum_bits must be in 1..64, got " + Str(psum));
  acc.memory.psum_bits = static_cast<int>(psum);
  for (const auto& [key, field] : kMemoryNumbers) acc.memory.*field = NumberMember(m, key, mem_where);
  for (const auto& [key, field] : kMemoryIntegers) acc.memory.*field = IntegerMember(m, key, mem_where);
  for (const auto& [key, field] : kMemoryBools) acc.memory.*field = BoolMember(m, key, mem_where);
  if (m.contains("whole_stationary_tiles"))
    acc.memory.whole_stationary_tiles = BoolMember(m, "whole_stationary_tiles", mem_where);
  if (m.contains("dram_capacity_bytes")) {
    const double capacity = NumberMember(m, "dram_capacity_bytes", mem_where);
    if (!(capacity >= 0) || !std::isfinite(capacity))
      throw std::invalid_argument(mem_where + ".dram_capacity_bytes must be a finite number " +
                                  "of bytes >= 0 (0 or absent: not known), got " +
                                  detail::Dump(detail::OrderedJson(capacity), mem_where));
    acc.memory.dram_capacity_bytes = capacity;
  }

  const std::string prec_where = "accelerator.precision";
  const JsonValue& p = detail::Member(root, "precision", "accelerator");
  if (!p.is_array())
    throw std::invalid_argument(prec_where + " must be a list of {bits_a, bits_b, pj_per_mac}");
  PrecisionTable energies;
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string at = prec_where + "[" + Str(static_cast<int64_t>(i)) + "]";
    detail::ExpectKeys(p[i], {"bits_a", "bits_b", "pj_per_mac", "format", "row_tiles"}, at);
    MacSpec u;
    for (auto [key, field] : {std::pair{"bits_a", &MacSpec::bits_a}, {"bits_b", &MacSpec::bits_b}}) {
      const int64_t bits = IntegerMember(p[i], key, at);
      if (bits < 1 || bits > 64)
        throw std::invalid_argument(at + "." + key + " must be in 1..64 bits, got " + Str(bits));
      u.*field = static_cast<int>(bits);
    }
    u.pj_per_mac = NumberMember(p[i], "pj_per_mac", at);
    if (p[i].contains("format")) u.format = StringMember(p[i], "format", at);
    if (p[i].contains("row_tiles")) {
      const JsonValue& tiles = p[i]["row_tiles"];
      if (!tiles.is_array())
        throw std::invalid_argument(at + ".row_tiles must be a list of {min_rows, rows}");
      for (size_t j = 0; j < tiles.size(); ++j) {
        const std::string tile_at = at + ".row_tiles[" + Str(static_cast<int64_t>(j)) + "]";
        detail::ExpectKeys(tiles[j], {"min_rows", "rows"}, tile_at);
        u.row_tiles.push_back({IntegerMember(tiles[j], "min_rows", tile_at),
                               IntegerMember(tiles[j], "rows", tile_at)});
      }
    }
    energies.units.push_back(u);
  }
  acc.precision = Accelerator::WithMacRates(std::move(energies), hw.macs_per_pe_per_cycle);

  const std::string map_where = "accelerator.mapping";
  const JsonValue& mp = detail::Member(root, "mapping", "accelerator");
  acc.mapping.kind = StringMember(mp, "kind", map_where);
  if (acc.mapping.kind == "given") {
    std::vector<std::string> keys{"kind", "order", "accumulate_in_buffer"};
    for (const auto& kv : kTileIntegers) keys.push_back(kv.first);
    for (const auto& kv : kTileInts) keys.push_back(kv.first);
    detail::ExpectKeys(mp, keys, map_where);
    TileMapping& t = acc.mapping.tiles;
    t.order = StringMember(mp, "order", map_where);
    t.accumulate_in_buffer = BoolMember(mp, "accumulate_in_buffer", map_where);
    for (const auto& [key, field] : kTileIntegers) t.*field = IntegerMember(mp, key, map_where);
    for (const auto& [key, field] : kTileInts) {
      const int64_t v = IntegerMember(mp, key, map_where);
      if (v < 0 || v > 3)
        throw std::invalid_argument(map_where + "." + key + " must be in 0..3, got " + Str(v));
      t.*field = static_cast<int>(v);
    }
  } else if (acc.mapping.kind == "auto") {
    detail::ExpectKeys(mp, {"kind", "objective"}, map_where);
    const std::string objective = StringMember(mp, "objective", map_where);
    try {
      acc.mapping.objective = ParseMappingObjective(objective);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(map_where + ".objective: " + e.what());
    }
  } else {
    detail::ExpectKeys(mp, {"kind"}, map_where);
  }

  // Absent in JSON written before dataflows were a field: what the search then used.
  if (root.contains("supported_dataflows")) {
    const std::string sd_where = "accelerator.supported_dataflows";
    const JsonValue& sd = detail::Member(root, "supported_dataflows", "accelerator");
    if (!sd.is_array())
      throw std::invalid_argument(sd_where + " must be a list of 'os', 'ws', 'is'");
    for (size_t i = 0; i < sd.size(); ++i) {
      if (!sd[i].is_string())
        throw std::invalid_argument(sd_where + "[" + Str(static_cast<int64_t>(i)) +
                                    "] must be a string ('os', 'ws' or 'is')");
      acc.supported_dataflows.push_back(sd[i].get<std::string>());
    }
  } else {
    acc.supported_dataflows = SupportedDataflowsFor(acc.dataflow);
  }
  // The units beside the array (vector.h); absent in JSON written before they were fields:
  // the defaults (VectorUnit{}, no edge dequantizer).
  if (root.contains("vector"))
    acc.vector = detail::ParseVectorUnitJson(detail::Member(root, "vector", "accelerator"),
                                             "accelerator.vector");
  if (root.contains("edge_dequantizer"))
    acc.edge_dequantizer = detail::ParseEdgeDequantizerJson(
        detail::Member(root, "edge_dequantizer", "accelerator"), "accelerator.edge_dequantizer");
  if (root.contains("cores"))
    acc.cores = detail::ParseCoresJson(detail::Member(root, "cores", "accelerator"),
                                       "accelerator.cores");
  Validate(acc);
  return acc;
}

}  // namespace tenet
