// The charging rule of one call (see charge.h).
#include "cost_model/charge.h"

#include "cost_model/json.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "cost_model/checked.h"

namespace tenet {

namespace {

constexpr const char* kPlaceNames[] = {"none", "weight", "k_group", "output"};
constexpr const char* kGranularityNames[] = {"none",      "tensor", "channel",
                                             "embedding", "group",  "group_n"};

void Require(bool ok, const std::string& field, int64_t value, const char* accepted) {
  if (!ok)
    throw std::invalid_argument("QuantRecipe." + field + " = " + std::to_string(value) +
                                "; expected " + accepted);
}

// Scales of one operand: weights [N, K] by output channel, activations [M, K] by token.
int64_t ScaleCount(Granularity g, int64_t group, int64_t rows, int64_t k) {
  switch (g) {
    case Granularity::kNone: return 0;
    case Granularity::kTensor: return 1;
    case Granularity::kChannel: return rows;
    case Granularity::kEmbedding: return k;
    case Granularity::kGroup: return rows * CeilDiv(k, group);
    case Granularity::kGroupN: return k * CeilDiv(rows, group);
  }
  return 0;
}

}  // namespace

const char* DequantizationName(Dequantization place) {
  return kPlaceNames[static_cast<int>(place)];
}

Dequantization ParseDequantization(const std::string& name) {
  for (int i = 0; i < 4; ++i)
    if (name == kPlaceNames[i]) return static_cast<Dequantization>(i);
  throw std::invalid_argument("unknown dequantization place '" + name +
                              "'; expected none, weight, k_group or output");
}

const char* GranularityName(Granularity g) { return kGranularityNames[static_cast<int>(g)]; }

Granularity ParseGranularity(const std::string& name) {
  for (int i = 0; i < 6; ++i)
    if (name == kGranularityNames[i]) return static_cast<Granularity>(i);
  throw std::invalid_argument("unknown quantization granularity '" + name +
                              "'; expected none, tensor, channel, embedding, group or group_n");
}

void Validate(const QuantRecipe& r) {
  Require(r.activation != Granularity::kGroupN, "activation", static_cast<int>(r.activation),
          "none, tensor, channel, embedding or group (group_n is a granularity of B)");
  const bool grouped_b = r.weight == Granularity::kGroup || r.weight == Granularity::kGroupN;
  Require(grouped_b == (r.weight_group > 0), "weight_group", r.weight_group,
          "> 0 exactly for group-wise weights (group or group_n)");
  Require((r.activation == Granularity::kGroup) == (r.activation_group > 0),
          "activation_group", r.activation_group, "> 0 exactly for group-wise activations");
  Require(!r.activation_static || r.activation == Granularity::kTensor ||
              r.activation == Granularity::kEmbedding,
          "activation_static", 1, "static scales only per tensor or per embedding");
  Require((r.place == Dequantization::kKGroup) == (r.k_group > 0), "k_group", r.k_group,
          "> 0 exactly when partial sums are rescaled per K-group");
  Require(r.scale_bits == 8 || r.scale_bits == 16 || r.scale_bits == 32, "scale_bits",
          r.scale_bits, "8 (e8m0), 16 (fp16) or 32 (fp32)");
  Require(r.zero_point_bits >= 0 && r.zero_point_bits <= 32, "zero_point_bits",
          r.zero_point_bits, "0 (symmetric) to 32");
  Require(r.accumulator_bits >= 1 && r.accumulator_bits <= 64, "accumulator_bits",
          r.accumulator_bits, "1 to 64");
  Require(r.dequant_rows >= 0, "dequant_rows", r.dequant_rows,
          ">= 0 (0: once per weight; R: again for every R output rows)");
  Require(r.dequant_rows == 0 || r.place == Dequantization::kWeight, "dequant_rows",
          r.dequant_rows, "0 unless place is 'weight' (only weights are dequantized per tile)");
}

namespace {

// A recipe field's JSON text and its reading, by the field's type.
std::string FieldJson(Dequantization v) { return detail::JsonQuote(DequantizationName(v)); }
std::string FieldJson(Granularity v) { return detail::JsonQuote(GranularityName(v)); }
std::string FieldJson(bool v) { return v ? "true" : "false"; }
std::string FieldJson(int64_t v) { return std::to_string(v); }
std::string FieldJson(int v) { return std::to_string(v); }

// The recipe's enumerations (Dequantization, Granularity), read from their names by each
// one's parser.
template <typename Enum, typename = std::enable_if_t<std::is_enum_v<Enum>>>
void ReadField(const detail::JsonValue& obj, const std::string& key, const std::string& where,
               Enum& out) {
  try {
    const std::string name = detail::StringMember(obj, key, where);
    if constexpr (std::is_same_v<Enum, Dequantization>) {
      out = ParseDequantization(name);
    } else {
      static_assert(std::is_same_v<Enum, Granularity>, "a recipe enumeration without a parser");
      out = ParseGranularity(name);
    }
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
}
void ReadField(const detail::JsonValue& obj, const std::string& key, const std::string& where,
               bool& out) {
  out = detail::BoolMember(obj, key, where);
}
void ReadField(const detail::JsonValue& obj, const std::string& key, const std::string& where,
               int64_t& out) {
  out = detail::IntegerMember(obj, key, where);
}
void ReadField(const detail::JsonValue& obj, const std::string& key, const std::string& where,
               int& out) {
  const int64_t v = detail::IntegerMember(obj, key, where);
  if (v < INT32_MIN || v > INT32_MAX)
    throw std::invalid_argument(where + "." + key + " = " + std::to_string(v) +
                                " is out of range");
  out = static_cast<int>(v);
}

}  // namespace

std::string SerializeQuantRecipe(const QuantRecipe& r) {
  std::ostringstream os;
  char sep = '{';
  ForEachRecipeField([&](const char* name, auto member, bool) {
    os << sep << detail::JsonQuote(name) << ':' << FieldJson(r.*member);
    sep = ',';
  });
  os << '}';
  return os.str();
}

QuantRecipe ParseQuantRecipe(const std::string& json, const std::string& where) {
  const detail::JsonValue obj = detail::ParseJson(json, where);
  std::vector<std::string> names;
  ForEachRecipeField([&](const char* name, auto, bool) { names.emplace_back(name); });
  detail::ExpectKeys(obj, names, where);
  QuantRecipe r;
  ForEachRecipeField([&](const char* name, auto member, bool required) {
    if (required || obj.contains(name)) ReadField(obj, name, where, r.*member);
  });
  Validate(r);
  return r;
}

GemmCall DescribeGemmCall(int64_t batch, int64_t m, int64_t n, int64_t k, int bits_a,
                          int bits_b, int bits_c, const QuantRecipe& recipe,
                          const std::string& scheme) {
  Validate(recipe);
  GemmCall call{{batch, m, n, k, bits_a, bits_b, bits_c}, scheme, recipe, {}};
  GemmWorkload& w = call.workload;
  w.float_codes = recipe.float_codes;
  Validate(w);  // before the products below, which it bounds
  QuantWork& q = call.quant;
  // A batched B (a KV cache) has its own scales in every batch element.
  const int64_t b_copies = recipe.weight_batched ? batch : 1;
  q.weight_side_bits = ScaleCount(recipe.weight, recipe.weight_group, n, k) *
                       (recipe.scale_bits + recipe.zero_point_bits) * b_copies;
  if (recipe.activation_static)
    q.activation_side_bits =
        ScaleCount(recipe.activation, recipe.activation_group, m, k) * recipe.scale_bits;
  if (recipe.activation != Granularity::kNone)
    q.quantize_ops = batch * m * k * (recipe.activation_static ? 1 : 2);
  switch (recipe.place) {
    case Dequantization::kNone: break;
    case Dequantization::kWeight:
      q.dequant_ops = n * k * b_copies;
      if (recipe.dequant_rows > 0)  // again per output tile of dequant_rows rows
        q.dequant_ops = CheckedMul(CheckedMul(n * k, batch, "dequant ops"),
                                   CeilDiv(m, recipe.dequant_rows), "dequant ops");
      break;
    case Dequantization::kKGroup:
      q.dequant_ops = batch * m * n * CeilDiv(k, recipe.k_group);
      q.accumulator_traffic_bits = 2 * q.dequant_ops * recipe.accumulator_bits;
      break;
    case Dequantization::kOutput: q.dequant_ops = batch * m * n; break;
  }
  w.extra_read_bits = q.weight_side_bits + q.activation_side_bits;
  w.extra_ops = q.quantize_ops + q.dequant_ops;
  w.extra_register_bits = q.accumulator_traffic_bits;
  return call;
}

bool OnEdge(const GemmCall& call, const Accelerator& accelerator) {
  return call.recipe.place == Dequantization::kWeight && call.quant.dequant_ops > 0 &&
         accelerator.edge_dequantizer.Converts(call.workload.bits_b);
}

int64_t EdgeCycles(const GemmCall& call, const Accelerator& accelerator) {
  return OnEdge(call, accelerator)
             ? CeilDiv(call.quant.dequant_ops, accelerator.edge_dequantizer.elements_per_cycle)
             : 0;
}

GemmWorkload PeWorkload(const GemmCall& call, const Accelerator& accelerator) {
  GemmWorkload w = call.workload;
  if (OnEdge(call, accelerator)) w.extra_ops -= call.quant.dequant_ops;
  // First, so an unsupported width is refused before any counting. Codes without a unit
  // of their own run emulated on a wider one, at its rate.
  accelerator.precision.Lookup(w.bits_a, w.bits_b, w.float_codes);
  w.mac_bits = EmulatedMacBits(w, accelerator.precision);
  return w;
}

GemmCall ComputedCall(const GemmCall& call, const Accelerator& accelerator) {
  GemmCall c = call;
  GemmWorkload& w = c.workload;
  const int64_t tile = accelerator.precision.Lookup(w.bits_a, w.bits_b, w.float_codes)
                           .RowTileFor(w.m);
  if (tile > 0) w.m = tile;
  if (accelerator.memory.whole_stationary_tiles) {
    const Dataflow& df = accelerator.dataflow;
    auto whole = [](int64_t& x, int64_t edge) {
      x = CheckedMul(CeilDiv(x, edge), edge, "whole stationary tiles");
    };
    // The stationary operand's dimension on the array's rows, then on its columns.
    int64_t& on_rows = df.preset == "os" ? w.m : w.k;
    int64_t& on_cols = df.preset == "is" ? w.m : w.n;
    whole(on_rows, df.rows);
    whole(on_cols, df.cols);
  }
  return c;
}

int64_t WorkloadMacs(const GemmWorkload& w, const char* what) {
  return CheckedMul(CheckedMul(CheckedMul(w.batch, w.m, what), w.n, what), w.k, what);
}

namespace {

// ChargeGemm with the arrays prepared (`array` and `tiles` both set) or not (both null).
Charge ChargeWith(const GemmCall& asked, const Accelerator& accelerator, AnalysisMethod method,
                  MappingSearch* search, const PreparedArray* array,
                  const std::shared_ptr<const PreparedArray>& tiles) {
  // An accelerator of cores spreads the call over them (core.h); one core is charged here.
  if (!IsOneCore(accelerator.cores)) return ChargeOnCores(asked, accelerator, method);
  const GemmCall call = ComputedCall(asked, accelerator);
  Charge charge;
  charge.call = asked;
  const Hardware& hw = accelerator.hardware;
  const MemoryHierarchy& mem = accelerator.memory;
  const GemmWorkload w = PeWorkload(call, accelerator);
  const MacSpec& mac = accelerator.precision.Lookup(w.bits_a, w.bits_b, w.float_codes);
  if (accelerator.mapping.kind == "auto") {
    const MappingChoice choice =
        search != nullptr ? search->Best(w)
                          : SearchMapping(w, hw, AutoMappingSpace(accelerator), mem,
                                          accelerator.precision,
                                          {accelerator.mapping.objective, 0});
    charge.array = AnalyzeGemm(w, hw, choice.dataflow, method);
    charge.memory = choice.metrics;
    charge.energy = choice.energy;
  } else {
    // One cached array model per call: every tile shape of the call is costed once.
    if (array != nullptr) {
      charge.array = AnalyzeGemm(w, *array, method);
      const ArrayModel model = CachedArrayModel(ExactArrayModel(w, tiles, mem));
      charge.memory = AnalyzeMemory(w, model, mem, ChooseMapping(w, accelerator));
    } else {
      charge.array = AnalyzeGemm(w, hw, accelerator.dataflow, method);
      const ArrayModel model = CachedArrayModel(ExactArrayModel(w, hw, accelerator.dataflow, mem));
      charge.memory = AnalyzeMemory(w, model, mem, ChooseMapping(w, accelerator));
    }
    charge.energy = CallEnergy(w, charge.memory, mem, mac);
  }
  if (OnEdge(call, accelerator)) {
    // The dequantizer streams the weights in as the array consumes them (overlapped): the
    // call takes the longer of the two.
    const EdgeDequantizer& edge = accelerator.edge_dequantizer;
    charge.edge_cycles = EdgeCycles(call, accelerator);
    charge.edge_pj = static_cast<double>(call.quant.dequant_ops) * edge.pj_per_element;
    if (charge.edge_cycles > charge.memory.cycles) {
      charge.memory.cycles = charge.edge_cycles;
      charge.memory.latency_us = static_cast<double>(charge.memory.cycles) / (hw.clock_ghz * 1e3);
    }
    charge.energy.total_pj += charge.edge_pj;
  }
  charge.array.macs = charge.memory.macs = WorkloadMacs(asked.workload, "MACs");
  // Each energy figure is finite, but its product with a call's counts can overflow (a
  // pj_per_mac of 5.5e303): refuse the call rather than charge it an infinite energy.
  if (!std::isfinite(charge.energy.total_pj))
    throw std::invalid_argument(
        "accelerator '" + accelerator.name + "': the energy of a " + std::to_string(call.workload.m) +
        " x " + std::to_string(call.workload.n) + " x " + std::to_string(call.workload.k) +
        " GEMM overflows a double (MACs " + std::to_string(charge.energy.mac_pj) +
        " pJ, registers " + std::to_string(charge.energy.register_pj) + ", buffer " +
        std::to_string(charge.energy.buffer_pj) + ", DRAM " +
        std::to_string(charge.energy.dram_pj) + ", edge dequantizer " +
        std::to_string(charge.edge_pj) + "): precision pj_per_mac, memory *_pj_per_bit or "
        "edge_dequantizer.pj_per_element is too large");
  return charge;
}

}  // namespace

Charge ChargeGemm(const GemmCall& call, const Accelerator& accelerator, AnalysisMethod method,
                  MappingSearch* search) {
  return ChargeWith(call, accelerator, method, search, nullptr, nullptr);
}

PreparedAccelerator PrepareAccelerator(const Accelerator& accelerator,
                                       std::shared_ptr<MappingSearch> search) {
  PreparedAccelerator p;
  p.accelerator = accelerator;
  if (accelerator.mapping.kind == "auto") {
    p.search = search ? std::move(search) : MakeMappingSearch(accelerator);
  } else {
    Validate(accelerator.memory);
    p.array = PrepareArray(accelerator.hardware, accelerator.dataflow);
    p.tiles = PrepareTileArray(accelerator.hardware, accelerator.dataflow, accelerator.memory);
  }
  return p;
}

Charge ChargeGemm(const GemmCall& call, const PreparedAccelerator& accelerator,
                  AnalysisMethod method) {
  return ChargeWith(call, accelerator.accelerator, method, accelerator.search.get(),
                    accelerator.array.get(), accelerator.tiles);
}

TileMapping ChooseMapping(const GemmWorkload& w, const Accelerator& accelerator) {
  const MappingPolicy& choice = accelerator.mapping;
  if (choice.kind == "given") return choice.tiles;
  if (choice.kind != "default")
    throw std::invalid_argument("ChooseMapping: Accelerator.mapping.kind '" + choice.kind +
                                "' has no fixed tiles (kind 'auto' is a MappingSearch's choice)");
  // A relation dataflow has no rows x cols: its PEs count as one row (the default mapping
  // only uses the edges to size tiles in whole array widths).
  const Dataflow& df = accelerator.dataflow;
  const int64_t rows = df.rows > 0 ? df.rows : 1;
  const int64_t cols = df.cols > 0 ? df.cols : accelerator.hardware.NumPEs();
  return DefaultTileMapping(w, accelerator.memory, rows, cols);
}

MappingSpace AutoMappingSpace(const Accelerator& accelerator) {
  MappingSpace space =
      MappingSpace::ForDataflow(accelerator.dataflow, accelerator.supported_dataflows);
  const int64_t edge = SpaceGranule(space);
  // Stream tilings are a preset's only (SearchedDataflows skips relations and tiled presets).
  for (int64_t edges : kAutoStreamTiles) space.stream_tiles.push_back(edges * edge);
  return space;
}

std::shared_ptr<MappingSearch> MakeMappingSearch(const Accelerator& accelerator) {
  if (accelerator.mapping.kind != "auto") return nullptr;
  return std::make_shared<MappingSearch>(accelerator.hardware, AutoMappingSpace(accelerator),
                                         accelerator.memory, accelerator.precision,
                                         MappingSearchOptions{accelerator.mapping.objective, 0});
}

ChargeCache::ChargeCache(Accelerator accelerator)
    : accelerator_(std::move(accelerator)), search_(MakeMappingSearch(accelerator_)) {}

std::shared_ptr<const Charge> ChargeCache::Get(const GemmCall& call) {
  {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    auto it = cache_.find(call);
    if (it != cache_.end()) return it->second;
  }
  auto charge = std::make_shared<const Charge>(ChargeGemm(call, accelerator_,
                                                          AnalysisMethod::kAuto, search_.get()));
  std::unique_lock<std::shared_mutex> lock(mutex_);
  return cache_.emplace(call, std::move(charge)).first->second;
}

LedgerFields ChargeLedgerFields(const Charge& c) {
  const GemmWorkload& w = c.call.workload;
  const QuantWork& q = c.call.quant;
  const Metrics& m = c.array;
  const MemoryMetrics& mm = c.memory;
  const EnergyBreakdown& en = c.energy;
  // The call's latency is the buffer level's (memory.cycles): its utilization is against it,
  // over the PEs those cycles hold (every core's) and with the call's own MACs.
  const double capacity = double(mm.cycles) * double(mm.num_pes) * double(m.macs_per_pe_per_cycle);
  auto i = [](int64_t v) { return LedgerValue(v); };
  auto d = [](double v) { return LedgerValue(v); };
  return {
      {"unit", LedgerValue(std::string("array"))},
      {"batch", i(w.batch)}, {"m", i(w.m)}, {"n", i(w.n)}, {"k", i(w.k)},
      {"bits_a", i(w.bits_a)}, {"bits_b", i(w.bits_b)}, {"bits_c", i(w.bits_c)},
      {"extra_read_bits", i(w.extra_read_bits)}, {"extra_ops", i(w.extra_ops)},
      {"extra_register_bits", i(w.extra_register_bits)},
      {"a_on_chip", LedgerValue(w.a_on_chip)}, {"c_on_chip", LedgerValue(w.c_on_chip)},
      {"dequant_place", LedgerValue(std::string(DequantizationName(c.call.recipe.place)))},
      {"scale_bits", i(c.call.recipe.scale_bits)},
      {"accumulator_bits", i(c.call.recipe.accumulator_bits)},
      {"weight_side_bits", i(q.weight_side_bits)},
      {"activation_side_bits", i(q.activation_side_bits)},
      {"quantize_ops", i(q.quantize_ops)}, {"dequant_ops", i(q.dequant_ops)},
      {"accumulator_traffic_bits", i(q.accumulator_traffic_bits)},
      {"macs", i(mm.macs)}, {"cycles", i(mm.cycles)},
      {"roofline_cycles", i(mm.roofline_cycles)}, {"array_cycles", i(m.cycles)},
      {"dram_stall_cycles", i(mm.dram_stall_cycles)}, {"edge_cycles", i(c.edge_cycles)},
      {"compute_cycles", i(m.compute_cycles)}, {"stall_cycles", i(m.stall_cycles)},
      {"tenet_delay", d(m.delay)}, {"ingress_delay", d(m.ingress_delay)},
      {"egress_delay", d(m.egress_delay)}, {"compute_delay", d(m.compute_delay)},
      {"compute_delay_exact", d(m.compute_delay_exact)}, {"time_steps", i(m.time_steps)},
      {"folds", i(m.folds)}, {"active_pes", i(m.active_pes)}, {"num_pes", i(mm.num_pes)},
      {"macs_per_pe_per_cycle", i(m.macs_per_pe_per_cycle)},
      {"avg_active_pes", d(m.avg_active_pes)},
      {"pe_utilization", d(capacity > 0 ? double(mm.macs) / capacity : 0.0)},
      {"bandwidth_bits_per_cycle", d(m.bandwidth_bits_per_cycle)},
      {"latency_us", d(mm.latency_us)},
      {"offchip_read_bytes", d(m.offchip_read_bits / 8.0)},
      {"offchip_write_bytes", d(m.offchip_write_bits / 8.0)},
      {"dram_read_bytes", d(mm.dram_read_bits / 8.0)},
      {"dram_write_bytes", d(mm.dram_write_bits / 8.0)},
      {"buffer_read_bytes", d(mm.buffer_read_bits / 8.0)},
      {"buffer_write_bytes", d(mm.buffer_write_bits / 8.0)},
      {"energy_pj", d(en.total_pj)}, {"mac_pj", d(en.mac_pj)},
      {"register_pj", d(en.register_pj)}, {"buffer_pj", d(en.buffer_pj)},
      {"dram_pj", d(en.dram_pj)}, {"edge_pj", d(c.edge_pj)}, {"mapping", LedgerValue(mm.mapping)},
      {"op", LedgerValue(std::string("matmul"))}, {"elements", i(w.batch * w.m * w.n)},
      {"vector_add_ops", i(0)}, {"vector_mul_ops", i(0)}, {"vector_exp_ops", i(0)},
      {"vector_recip_ops", i(0)}, {"vector_tanh_ops", i(0)}, {"spilled", LedgerValue(false)},
      {"schedule", LedgerValue(std::string(""))},
  };
}

LedgerFields VectorLedgerFields(const VectorCharge& c) {
  auto i = [](int64_t v) { return LedgerValue(v); };
  auto d = [](double v) { return LedgerValue(v); };
  const int64_t stall = c.cycles - c.compute_cycles;
  std::ostringstream mapping;
  mapping << "vector " << VectorOpName(c.call.op) << (c.spilled ? " | spilled to DRAM" : "");
  return {
      {"unit", LedgerValue(std::string("vector"))},
      {"batch", i(1)}, {"m", i(c.rows)}, {"n", i(c.call.shape.back())},
      {"k", i(c.call.operand_elements)},
      {"bits_a", i(c.call.bits_in)}, {"bits_b", i(c.call.operand_elements ? c.call.bits_in : 0)},
      {"bits_c", i(c.call.bits_out)},
      {"extra_read_bits", i(0)}, {"extra_ops", i(0)}, {"extra_register_bits", i(0)},
      {"a_on_chip", LedgerValue(false)}, {"c_on_chip", LedgerValue(false)},
      {"dequant_place", LedgerValue(std::string("none"))},
      {"scale_bits", i(0)}, {"accumulator_bits", i(0)},
      {"weight_side_bits", i(0)}, {"activation_side_bits", i(0)},
      {"quantize_ops", i(0)}, {"dequant_ops", i(0)}, {"accumulator_traffic_bits", i(0)},
      {"macs", i(0)}, {"cycles", i(c.cycles)},
      {"roofline_cycles", i(std::max(c.compute_cycles, c.dram_cycles))}, {"array_cycles", i(0)},
      {"dram_stall_cycles", i(stall)}, {"edge_cycles", i(0)},
      {"compute_cycles", i(c.compute_cycles)}, {"stall_cycles", i(stall)},
      {"tenet_delay", d(0)}, {"ingress_delay", d(0)}, {"egress_delay", d(0)},
      {"compute_delay", d(0)}, {"compute_delay_exact", d(0)}, {"time_steps", i(0)},
      {"folds", i(0)}, {"active_pes", i(0)}, {"num_pes", i(0)},
      {"macs_per_pe_per_cycle", i(0)}, {"avg_active_pes", d(0)}, {"pe_utilization", d(0)},
      {"bandwidth_bits_per_cycle", d(0)}, {"latency_us", d(c.latency_us)},
      // What crosses the unit's boundary: buffer <-> vector unit.
      {"offchip_read_bytes", d(c.buffer_read_bits / 8.0)},
      {"offchip_write_bytes", d(c.buffer_write_bits / 8.0)},
      {"dram_read_bytes", d(c.dram_read_bits / 8.0)},
      {"dram_write_bytes", d(c.dram_write_bits / 8.0)},
      {"buffer_read_bytes", d(c.buffer_read_bits / 8.0)},
      {"buffer_write_bytes", d(c.buffer_write_bits / 8.0)},
      {"energy_pj", d(c.total_pj)}, {"mac_pj", d(c.op_pj)},
      {"register_pj", d(0)}, {"buffer_pj", d(c.buffer_pj)},
      {"dram_pj", d(c.dram_pj)}, {"edge_pj", d(0)}, {"mapping", LedgerValue(mapping.str())},
      {"op", LedgerValue(std::string(VectorOpName(c.call.op)))}, {"elements", i(c.elements)},
      {"vector_add_ops", i(c.ops[0])}, {"vector_mul_ops", i(c.ops[1])},
      {"vector_exp_ops", i(c.ops[2])}, {"vector_recip_ops", i(c.ops[3])},
      {"vector_tanh_ops", i(c.ops[4])}, {"spilled", LedgerValue(c.spilled)},
      {"schedule", LedgerValue(std::string(VectorScheduleName(c.schedule)))},
  };
}

std::vector<std::pair<std::string, LedgerFields>> ChargeTensorFields(const Charge& c) {
  std::vector<std::pair<std::string, LedgerFields>> out;
  for (const auto& kv : c.array.tensors) {
    const TensorMetrics& t = kv.second;
    const auto traffic = c.memory.tensors.find(kv.first);
    const OperandTraffic o =
        traffic == c.memory.tensors.end() ? OperandTraffic{} : traffic->second;
    out.emplace_back(kv.first, LedgerFields{
        {"bits", LedgerValue(int64_t(t.bits))}, {"is_write", LedgerValue(t.is_write)},
        {"total", LedgerValue(t.total)}, {"unique", LedgerValue(t.unique)},
        {"reuse_factor", LedgerValue(t.reuse_factor)},
        {"spatial_reuse", LedgerValue(t.spatial_reuse)},
        {"temporal_reuse", LedgerValue(t.temporal_reuse)},
        {"offchip_elements", LedgerValue(t.offchip_elements)},
        {"offchip_bytes", LedgerValue(double(t.offchip_bytes))},
        {"dram_read_bytes", LedgerValue(o.dram_read_bits / 8.0)},
        {"dram_write_bytes", LedgerValue(o.dram_write_bits / 8.0)},
        {"buffer_read_bytes", LedgerValue(o.buffer_read_bits / 8.0)},
        {"buffer_write_bytes", LedgerValue(o.buffer_write_bits / 8.0)},
    });
  }
  return out;
}

bool operator==(const QuantRecipe& a, const QuantRecipe& b) {
  bool equal = true;
  ForEachRecipeField([&](const char*, auto member, bool) { equal = equal && a.*member == b.*member; });
  return equal;
}

bool operator==(const GemmCall& a, const GemmCall& b) {
  const GemmWorkload &x = a.workload, &y = b.workload;
  return x.batch == y.batch && x.m == y.m && x.n == y.n && x.k == y.k &&
         x.bits_a == y.bits_a && x.bits_b == y.bits_b && x.bits_c == y.bits_c &&
         x.extra_read_bits == y.extra_read_bits && x.extra_ops == y.extra_ops &&
         x.extra_register_bits == y.extra_register_bits && x.a_on_chip == y.a_on_chip &&
         x.c_on_chip == y.c_on_chip && a.scheme == b.scheme && a.recipe == b.recipe;
}

size_t GemmCallHash::operator()(const GemmCall& call) const {
  const GemmWorkload& g = call.workload;
  size_t h = std::hash<std::string>()(call.scheme);
  const QuantRecipe& r = call.recipe;
  for (int64_t v : {g.batch, g.m, g.n, g.k, int64_t(g.bits_a), int64_t(g.bits_b),
                    int64_t(g.bits_c), g.extra_read_bits, g.extra_ops, g.extra_register_bits,
                    int64_t(g.a_on_chip) + 2 * int64_t(g.c_on_chip)})
    h = (h ^ std::hash<int64_t>()(v)) * 1099511628211ull;
  ForEachRecipeField([&](const char*, auto member, bool) {
    h = (h ^ std::hash<int64_t>()(static_cast<int64_t>(r.*member))) * 1099511628211ull;
  });
  return h;
}

}  // namespace tenet
