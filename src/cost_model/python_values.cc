// The cost model's values bound to Python (QuantRecipe, GemmCall, Accelerator) and the entry
// points that take them: charge, analyze_array, analyze_memory, roofline, search_mapping.
// A call and an accelerator cross the seam as one value each, so a new field goes into one
// of them and no signature changes.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cost_model/accelerator.h"
#include "cost_model/attention.h"
#include "cost_model/charge.h"
#include "cost_model/core.h"
#include "cost_model/cost_model.h"
#include "cost_model/json.h"
#include "cost_model/mapping.h"
#include "cost_model/memory.h"
#include "cost_model/vector.h"

namespace py = pybind11;
using namespace tenet;

// python_module.cc: the accelerator of loose parts (its Python keyword form), the mapping as
// Python shows it, the analysis method by name.
Accelerator MakeAccelerator(std::string name, Hardware hw, Dataflow df, const py::object& memory,
                            const py::object& precision, const py::object& mapping,
                            const py::object& objective);
py::object MappingOf(const Accelerator& a);
py::object ObjectiveOf(const Accelerator& a);
AnalysisMethod ToMethod(const std::string& m);

namespace {

// Serialized JSON text read from Python is bounded: a relation of 50 MB took a minute and
// gigabytes to parse. The largest shipped accelerator's JSON is a few kB.
constexpr size_t kMaxAcceleratorJsonBytes = 1 << 20;

// The accelerator as Python holds it: the value and, under mapping "auto", the one mapping
// search it charges through (shared by copies, so each distinct call is searched once).
struct BoundAccelerator {
  Accelerator value;
  std::string json;  // SerializeAccelerator(value): equality, hashing and pickling
  std::shared_ptr<MappingSearch> search;
  // The value with its arrays prepared once (charge.h): every charge on it goes through this.
  std::shared_ptr<const PreparedAccelerator> prepared;
};

// Searches by accelerator JSON, so the same accelerator made twice (a preset asked for
// again) shares its searched calls, as the runtime's one ChargeCache per module does.
// Bounded: the oldest accelerator's search is dropped past kKeptSearches.
std::mutex kept_searches_mutex;
// The searches SharedSearch keeps, newest first (clear_mapping_searches empties it).
std::list<std::pair<std::string, std::shared_ptr<MappingSearch>>> kept_searches;

std::shared_ptr<MappingSearch> SharedSearch(const Accelerator& acc, const std::string& json) {
  if (acc.mapping.kind != "auto") return nullptr;
  constexpr size_t kKeptSearches = 64;
  std::lock_guard<std::mutex> lock(kept_searches_mutex);
  for (auto it = kept_searches.begin(); it != kept_searches.end(); ++it) {
    if (it->first == json) {
      kept_searches.splice(kept_searches.begin(), kept_searches, it);
      return it->second;
    }
  }
  kept_searches.emplace_front(json, MakeMappingSearch(acc));
  if (kept_searches.size() > kKeptSearches) kept_searches.pop_back();
  return kept_searches.front().second;
}

BoundAccelerator Bind(Accelerator acc) {
  {
    py::gil_scoped_release release;
    Validate(acc);
  }
  BoundAccelerator b;
  b.json = SerializeAccelerator(acc);
  // The name plays no part in a search: accelerators that differ only by name share one.
  Accelerator unnamed = acc;
  unnamed.name = "-";
  unnamed.hardware.name = "-";
  b.search = SharedSearch(acc, SerializeAccelerator(unnamed));
  {
    py::gil_scoped_release release;
    b.prepared = std::make_shared<const PreparedAccelerator>(PrepareAccelerator(acc, b.search));
  }
  b.value = std::move(acc);
  return b;
}

// Accelerator(supported_dataflows=...): None is SupportedDataflowsFor(df); else a list or
// tuple of preset names (Validate(Accelerator) checks the names against the dataflow).
std::vector<std::string> SupportedDataflowsOf(const py::object& given, const Dataflow& df) {
  if (given.is_none()) return SupportedDataflowsFor(df);
  if (py::isinstance<py::str>(given) ||
      !(py::isinstance<py::list>(given) || py::isinstance<py::tuple>(given)))
    throw std::invalid_argument("Accelerator.supported_dataflows must be None or a list of "
                                "'os', 'ws', 'is', got " + std::string(py::repr(given)));
  std::vector<std::string> out;
  for (const auto& item : given) {
    if (!py::isinstance<py::str>(item))
      throw std::invalid_argument("Accelerator.supported_dataflows must hold 'os', 'ws' or 'is', "
                                  "got " + std::string(py::repr(item)));
    out.push_back(item.cast<std::string>());
  }
  return out;
}

std::string CheckedText(const py::handle& text, const std::string& what, size_t limit) {
  if (!py::isinstance<py::str>(text))
    throw py::type_error(what + " must be a str, got " +
                         std::string(py::str(py::type::of(text).attr("__name__"))));
  // A lone surrogate has no UTF-8 form: say so instead of pybind11's signature mismatch.
  PyObject* bytes = PyUnicode_AsEncodedString(text.ptr(), "utf-8", "strict");
  if (bytes == nullptr) {
    PyErr_Clear();
    throw std::invalid_argument(what + " is not valid Unicode text (it holds a lone surrogate, "
                                "which has no UTF-8 form)");
  }
  std::string out(PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes)));
  Py_DECREF(bytes);
  if (out.size() > limit)
    throw std::invalid_argument(what + " is " + std::to_string(out.size()) +
                                " bytes; at most " + std::to_string(limit) +
                                " are accepted (an accelerator's JSON is a few kB)");
  return out;
}

// A recipe from what Python passes: a QuantRecipe, its dict form (QuantScheme.recipe()), or
// an object with a recipe() method (a QuantScheme).
QuantRecipe ToRecipe(const py::object& recipe) {
  if (py::isinstance<QuantRecipe>(recipe)) return recipe.cast<QuantRecipe>();
  if (py::isinstance<py::dict>(recipe)) {
    const std::string json = py::module_::import("json").attr("dumps")(recipe).cast<std::string>();
    return ParseQuantRecipe(json, "recipe");
  }
  if (py::hasattr(recipe, "recipe")) return ToRecipe(recipe.attr("recipe")());
  throw py::type_error("recipe must be a cost_model.QuantRecipe, its dict form or a "
                       "QuantScheme, got " +
                       std::string(py::str(py::type::of(recipe).attr("__name__"))));
}

py::object RecipeDict(const QuantRecipe& r) {
  return py::module_::import("json").attr("loads")(SerializeQuantRecipe(r));
}

// The one way a call is made from its fields: with a recipe (its side data and extra work
// derived from it, DescribeGemmCall) or, for a float call, explicit extra work.
GemmCall MakeCall(int64_t m, int64_t n, int64_t k, int64_t batch, int bits_a, int bits_b,
                  int bits_c, const std::string& scheme, const QuantRecipe& recipe,
                  int64_t extra_read_bits, int64_t extra_ops, int64_t extra_register_bits,
                  bool a_on_chip, bool c_on_chip) {
  const bool extras = extra_read_bits != 0 || extra_ops != 0 || extra_register_bits != 0;
  if (!extras) {
    GemmCall call = DescribeGemmCall(batch, m, n, k, bits_a, bits_b, bits_c, recipe, scheme);
    call.workload.a_on_chip = a_on_chip;
    call.workload.c_on_chip = c_on_chip;
    return call;
  }
  if (!(recipe == QuantRecipe{}))
    throw std::invalid_argument(
        "GemmCall: give either a quantization recipe or extra_read_bits / extra_ops / "
        "extra_register_bits, not both (the recipe determines them)");
  GemmCall call;
  call.workload = MakeWorkload(m, n, k, batch, bits_a, bits_b, bits_c, extra_read_bits,
                               extra_ops, extra_register_bits);
  call.workload.a_on_chip = a_on_chip;
  call.workload.c_on_chip = c_on_chip;
  call.scheme = scheme;
  return call;
}

std::string CallJson(const GemmCall& c) {
  const GemmWorkload& w = c.workload;
  const bool explicit_extras = c.recipe == QuantRecipe{};
  std::string s = "{\"m\":" + std::to_string(w.m) + ",\"n\":" + std::to_string(w.n) +
                  ",\"k\":" + std::to_string(w.k) + ",\"batch\":" + std::to_string(w.batch) +
                  ",\"bits_a\":" + std::to_string(w.bits_a) +
                  ",\"bits_b\":" + std::to_string(w.bits_b) +
                  ",\"bits_c\":" + std::to_string(w.bits_c) +
                  ",\"scheme\":" + detail::JsonQuote(c.scheme) +
                  ",\"recipe\":" + SerializeQuantRecipe(c.recipe);
  if (explicit_extras)
    s += ",\"extra_read_bits\":" + std::to_string(w.extra_read_bits) +
         ",\"extra_ops\":" + std::to_string(w.extra_ops) +
         ",\"extra_register_bits\":" + std::to_string(w.extra_register_bits);
  if (w.a_on_chip) s += ",\"a_on_chip\":true";
  if (w.c_on_chip) s += ",\"c_on_chip\":true";
  return s + "}";
}

GemmCall ParseCall(const std::string& text) {
  const std::string where = "GemmCall";
  const detail::JsonValue v = detail::ParseJson(text, where);
  detail::ExpectKeys(v, {"m", "n", "k", "batch", "bits_a", "bits_b", "bits_c", "scheme", "recipe",
                         "extra_read_bits", "extra_ops", "extra_register_bits", "a_on_chip",
                         "c_on_chip"},
                     where);
  auto flag = [&](const char* key) { return v.contains(key) && detail::BoolMember(v, key, where); };
  auto integer = [&](const char* key, int64_t fallback) {
    return v.contains(key) ? detail::IntegerMember(v, key, where) : fallback;
  };
  auto width = [&](const char* key) {
    const int64_t b = detail::IntegerMember(v, key, where);
    if (b < 1 || b > 64)
      throw std::invalid_argument(where + "." + key + " = " + std::to_string(b) +
                                  "; expected 1 to 64");
    return static_cast<int>(b);
  };
  // The recipe member is re-read by the one recipe parser from its own text.
  const detail::JsonValue& r = detail::Member(v, "recipe", where);
  if (!r.is_object()) throw std::invalid_argument(where + ".recipe must be an object");
  const std::string recipe_json = r.dump();
  return MakeCall(detail::IntegerMember(v, "m", where), detail::IntegerMember(v, "n", where),
                  detail::IntegerMember(v, "k", where), detail::IntegerMember(v, "batch", where),
                  width("bits_a"), width("bits_b"), width("bits_c"),
                  detail::StringMember(v, "scheme", where),
                  ParseQuantRecipe(recipe_json, where + ".recipe"), integer("extra_read_bits", 0),
                  integer("extra_ops", 0), integer("extra_register_bits", 0),
                  flag("a_on_chip"), flag("c_on_chip"));
}

std::string Quote(const std::string& s) { return py::repr(py::str(s)).cast<std::string>(); }

// A recipe field as Python sees it (places and granularities by their names).
py::object FieldValue(Dequantization v) { return py::str(DequantizationName(v)); }
py::object FieldValue(Granularity v) { return py::str(GranularityName(v)); }
template <typename T>
py::object FieldValue(T v) {
  return py::cast(v);
}

// QuantRecipe(f=v, ...) of the fields off their defaults.
std::string RecipeRepr(const QuantRecipe& r) {
  const QuantRecipe defaults;
  std::string s;
  ForEachRecipeField([&](const char* name, auto member, bool) {
    if (r.*member == defaults.*member) return;
    s += (s.empty() ? "" : ", ") + std::string(name) + "=" +
         std::string(py::str(py::repr(FieldValue(r.*member))));
  });
  return "QuantRecipe(" + s + ")";
}

// `base` with the fields of `changes` replaced, read by the one parser (an unknown name or
// a value of the wrong type is refused, naming it).
QuantRecipe ReplaceFields(const QuantRecipe& base, const py::kwargs& changes) {
  py::dict d = RecipeDict(base);
  for (const auto& item : changes) d[item.first] = item.second;
  return ToRecipe(d);
}

py::dict WorkloadDict(const GemmWorkload& w) {
  py::dict d;
  d["batch"] = w.batch; d["m"] = w.m; d["n"] = w.n; d["k"] = w.k;
  d["bits_a"] = w.bits_a; d["bits_b"] = w.bits_b; d["bits_c"] = w.bits_c;
  d["extra_read_bits"] = w.extra_read_bits; d["extra_ops"] = w.extra_ops;
  d["extra_register_bits"] = w.extra_register_bits;
  d["a_on_chip"] = w.a_on_chip; d["c_on_chip"] = w.c_on_chip;
  return d;
}

py::dict QuantDict(const GemmCall& c) {
  const QuantWork& q = c.quant;
  py::dict d;
  d["dequant_place"] = DequantizationName(c.recipe.place);
  d["scale_bits"] = c.recipe.scale_bits;
  d["accumulator_bits"] = c.recipe.accumulator_bits;
  d["weight_side_bits"] = q.weight_side_bits;
  d["activation_side_bits"] = q.activation_side_bits;
  d["quantize_ops"] = q.quantize_ops;
  d["dequant_ops"] = q.dequant_ops;
  d["accumulator_traffic_bits"] = q.accumulator_traffic_bits;
  return d;
}

py::object LedgerValueToPy(const LedgerValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return py::int_(*i);
  if (const auto* d = std::get_if<double>(&v)) return py::float_(*d);
  if (const auto* b = std::get_if<bool>(&v)) return py::bool_(*b);
  return py::str(std::get<std::string>(v));
}

py::dict FieldsDict(const LedgerFields& fields) {
  py::dict d;
  for (const auto& f : fields) d[f.first] = LedgerValueToPy(f.second);
  return d;
}

}  // namespace

void BindValues(py::module_& m) {
  py::class_<QuantRecipe> recipe(
      m, "QuantRecipe",
      "How a call is quantized (charge.h QuantRecipe): where it dequantizes, the granularity "
      "of each operand's scales, widths of scales, zero points and partial sums. Made by "
      "keyword from the fields QuantRecipe.FIELDS names (charge.h's one field list; places "
      "and granularities by name), the others at their defaults.");
  recipe
      .def(py::init([](const py::kwargs& fields) { return ReplaceFields(QuantRecipe{}, fields); }))
      .def("replace", &ReplaceFields, "This recipe with the given fields replaced.")
      .def_static("from_dict", [](const py::dict& d) { return ToRecipe(d); }, py::arg("recipe"),
                  "The recipe of its dict form (as_dict(); optional fields may be left out).")
      .def_static(
          "from_json",
          [](const py::object& text) {
            return ParseQuantRecipe(CheckedText(text, "QuantRecipe JSON", 1 << 16), "recipe");
          },
          py::arg("text"))
      .def("to_json", &SerializeQuantRecipe)
      .def("as_dict", &RecipeDict)
      .def("__eq__", [](const QuantRecipe& a, const QuantRecipe& b) { return a == b; },
           py::is_operator())
      .def("__hash__", [](const QuantRecipe& r) { return py::hash(py::str(SerializeQuantRecipe(r))); })
      .def("__repr__", &RecipeRepr)
      .def(py::pickle([](const QuantRecipe& r) { return SerializeQuantRecipe(r); },
                      [](const std::string& s) { return ParseQuantRecipe(s); }));
  py::list field_names;
  ForEachRecipeField([&](const char* name, auto member, bool) {
    recipe.def_property_readonly(name, [member](const QuantRecipe& r) { return FieldValue(r.*member); });
    field_names.append(name);
  });
  recipe.attr("FIELDS") = py::tuple(field_names);

  py::class_<GemmCall>(m, "GemmCall",
                       "One GEMM call C[m, n] = A[m, k] @ B[k, n] (batch times) as the cost model "
                       "charges it: shape, operand widths, scheme and quantization recipe; its "
                       "side data and extra work follow from the recipe.")
      .def(py::init([](int64_t m_, int64_t n, int64_t k, int64_t batch, int bits_a, int bits_b,
                       int bits_c, const std::string& scheme, const py::object& recipe,
                       int64_t extra_read_bits, int64_t extra_ops, int64_t extra_register_bits,
                       bool a_on_chip, bool c_on_chip) {
             const QuantRecipe r = recipe.is_none() ? QuantRecipe{} : ToRecipe(recipe);
             return MakeCall(m_, n, k, batch, bits_a, bits_b, bits_c, scheme, r,
                             extra_read_bits, extra_ops, extra_register_bits, a_on_chip,
                             c_on_chip);
           }),
           py::kw_only(), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("batch") = 1,
           py::arg("bits_a") = 32, py::arg("bits_b") = 32, py::arg("bits_c") = 32,
           py::arg("scheme") = "none", py::arg("recipe") = py::none(),
           py::arg("extra_read_bits") = 0, py::arg("extra_ops") = 0,
           py::arg("extra_register_bits") = 0, py::arg("a_on_chip") = false,
           py::arg("c_on_chip") = false,
           "recipe: a QuantRecipe, its dict form or a QuantScheme (side data and extra work "
           "derived from it); extra_read_bits / extra_ops / extra_register_bits only without "
           "one. a_on_chip: A is the previous call's output, already in the on-chip level; "
           "c_on_chip: C stays there for the next call (no DRAM traffic when they fit).")
      .def_static("from_json", [](const py::object& text) {
        return ParseCall(CheckedText(text, "GemmCall JSON", 1 << 16));
      }, py::arg("text"))
      .def("to_json", &CallJson)
      .def_property_readonly("m", [](const GemmCall& c) { return c.workload.m; })
      .def_property_readonly("n", [](const GemmCall& c) { return c.workload.n; })
      .def_property_readonly("k", [](const GemmCall& c) { return c.workload.k; })
      .def_property_readonly("batch", [](const GemmCall& c) { return c.workload.batch; })
      .def_property_readonly("bits_a", [](const GemmCall& c) { return c.workload.bits_a; })
      .def_property_readonly("bits_b", [](const GemmCall& c) { return c.workload.bits_b; })
      .def_property_readonly("bits_c", [](const GemmCall& c) { return c.workload.bits_c; })
      .def_property_readonly("a_on_chip", [](const GemmCall& c) { return c.workload.a_on_chip; })
      .def_property_readonly("c_on_chip", [](const GemmCall& c) { return c.workload.c_on_chip; })
      .def_readonly("scheme", &GemmCall::scheme)
      .def_readonly("recipe", &GemmCall::recipe)
      .def_property_readonly("workload", [](const GemmCall& c) { return WorkloadDict(c.workload); },
                             "The workload's figures (shape, widths, side-data bits, extra ops "
                             "and register bits), as the cost model sees them.")
      .def_property_readonly("quant", &QuantDict,
                             "What the recipe adds (the ledger's quantization fields).")
      .def("__eq__", [](const GemmCall& a, const GemmCall& b) { return a == b; },
           py::is_operator())
      .def("__hash__", [](const GemmCall& c) { return GemmCallHash{}(c); })
      .def("__repr__", [](const GemmCall& c) {
        const GemmWorkload& w = c.workload;
        std::string s = "GemmCall(m=" + std::to_string(w.m) + ", n=" + std::to_string(w.n) +
                        ", k=" + std::to_string(w.k);
        if (w.batch != 1) s += ", batch=" + std::to_string(w.batch);
        s += ", bits_a=" + std::to_string(w.bits_a) + ", bits_b=" + std::to_string(w.bits_b) +
             ", bits_c=" + std::to_string(w.bits_c);
        if (c.scheme != "none") s += ", scheme=" + Quote(c.scheme);
        if (!(c.recipe == QuantRecipe{})) s += ", recipe=" + RecipeRepr(c.recipe);
        else if (w.extra_read_bits || w.extra_ops || w.extra_register_bits)
          s += ", extra_read_bits=" + std::to_string(w.extra_read_bits) + ", extra_ops=" +
               std::to_string(w.extra_ops) + ", extra_register_bits=" +
               std::to_string(w.extra_register_bits);
        if (w.a_on_chip) s += ", a_on_chip=True";
        if (w.c_on_chip) s += ", c_on_chip=True";
        return s + ")";
      })
      .def(py::pickle([](const GemmCall& c) { return CallJson(c); },
                      [](const std::string& s) { return ParseCall(s); }));

  py::class_<BoundAccelerator>(
      m, "Accelerator",
      "The one accelerator value (accelerator.h): name, hardware (PE array, interconnect, "
      "clock, MAC rates), dataflow, memory hierarchy, precision table and mapping policy, "
      "validated when made. memory None: TENET's reading of the hardware (memory_from_tenet); "
      "precision None: Horowitz's 45 nm units (rates are always the hardware's); mapping None "
      "or 'default': the default tiles per call, 'auto': a mapping search per distinct call "
      "minimising objective (latency, energy or edp), a TileMapping: those tiles for every "
      "call.")
      .def(py::init([](const std::string& name, const Hardware& hw, const Dataflow& df,
                       const py::object& memory, const py::object& precision,
                       const py::object& mapping, const py::object& objective,
                       const py::object& supported_dataflows, const py::object& vector,
                       const py::object& edge_dequantizer, const py::object& cores) {
             if (name.empty())
               throw std::invalid_argument("Accelerator.name must be a non-empty string, got ''");
             Accelerator a = MakeAccelerator(name, hw, df, memory, precision, mapping, objective);
             a.supported_dataflows = SupportedDataflowsOf(supported_dataflows, df);
             // The units beside the array (vector.h): None keeps the defaults.
             if (!vector.is_none()) a.vector = vector.cast<VectorUnit>();
             if (!edge_dequantizer.is_none())
               a.edge_dequantizer = edge_dequantizer.cast<EdgeDequantizer>();
             if (!cores.is_none()) a.cores = cores.cast<Cores>();  // core.h
             return Bind(std::move(a));
           }),
           py::arg("name"), py::arg("hardware"), py::arg("dataflow"),
           py::arg("memory") = py::none(), py::arg("precision") = py::none(),
           py::arg("mapping") = py::none(), py::arg("objective") = py::none(),
           py::arg("supported_dataflows") = py::none(), py::arg("vector") = py::none(),
           py::arg("edge_dequantizer") = py::none(), py::arg("cores") = py::none())
      .def(py::init([](const BoundAccelerator& other) { return other; }), py::arg("accelerator"),
           "A copy of an accelerator value (shares its mapping search).")
      .def_static(
          "_parse_json",
          [](const py::object& text) {
            const std::string json = CheckedText(text, "Accelerator JSON", kMaxAcceleratorJsonBytes);
            Accelerator a;
            {
              py::gil_scoped_release release;
              a = ParseAccelerator(json);
            }
            return Bind(std::move(a));
          },
          py::arg("text"))
      .def("to_json", [](const BoundAccelerator& a) { return a.json; },
           "The cost model's one serialized form (what the runtime reads).")
      .def_property_readonly("name", [](const BoundAccelerator& a) { return a.value.name; })
      .def_property_readonly("hardware", [](const BoundAccelerator& a) { return a.value.hardware; })
      .def_property_readonly("dataflow", [](const BoundAccelerator& a) { return a.value.dataflow; })
      .def_property_readonly("memory", [](const BoundAccelerator& a) { return a.value.memory; })
      .def_property_readonly("precision",
                             [](const BoundAccelerator& a) { return a.value.precision; })
      .def_property_readonly("vector", [](const BoundAccelerator& a) { return a.value.vector; },
                             "The vector unit non-GEMM operators are charged on.")
      .def_property_readonly(
          "edge_dequantizer", [](const BoundAccelerator& a) { return a.value.edge_dequantizer; },
          "The dequantizer at the array edge (elements_per_cycle 0: none).")
      .def_property_readonly("cores", [](const BoundAccelerator& a) { return a.value.cores; },
                             "The cores and what they share (core.h); Cores(): one array.")
      .def_property_readonly("mapping", [](const BoundAccelerator& a) { return MappingOf(a.value); },
                             "'default', 'auto' or the TileMapping every call uses.")
      .def_property_readonly(
          "supported_dataflows",
          [](const BoundAccelerator& a) { return py::tuple(py::cast(a.value.supported_dataflows)); },
          "The presets the array runs ('os', 'ws', 'is'), what mapping 'auto' chooses among; "
          "() for the user's own relations (the array runs that dataflow alone).")
      .def_property_readonly("objective",
                             [](const BoundAccelerator& a) { return ObjectiveOf(a.value); },
                             "What mapping 'auto' minimises; None for the other mappings.")
      .def_property_readonly(
          "mapping_searches",
          [](const BoundAccelerator& a) { return a.search ? a.search->searches() : 0; },
          "Distinct calls this accelerator's mapping search has searched (0 unless 'auto').")
      .def_property_readonly(
          "_mapping_search", [](const BoundAccelerator& a) { return a.search; },
          "The search mapping 'auto' charges through (None for other mappings).")
      .def("__eq__", [](const BoundAccelerator& a, const BoundAccelerator& b) {
        return a.json == b.json;
      }, py::is_operator())
      .def("__hash__", [](const BoundAccelerator& a) { return py::hash(py::str(a.json)); })
      .def("__repr__", [](const BoundAccelerator& a) {
        const Accelerator& v = a.value;
        std::string s = "Accelerator(name=" + Quote(v.name) + ", hardware=" +
                        Quote(v.hardware.name) + ", dataflow=" + Quote(v.dataflow.name) +
                        ", mapping=" + Quote(v.mapping.Describe()) + ")";
        return s;
      })
      .def(py::pickle([](const BoundAccelerator& a) { return a.json; },
                      [](const std::string& s) { return Bind(ParseAccelerator(s)); }));

  // Charge.ledger_fields: the ledger's one schema (charge.h ChargeLedgerFields).
  py::class_<Charge>(m, "Charge")
      .def_readonly("call", &Charge::call, "The call charged (a GemmCall).")
      .def_property_readonly("scheme", [](const Charge& c) { return c.call.scheme; })
      .def_property_readonly("quant", [](const Charge& c) { return QuantDict(c.call); },
                             "What the quantization recipe adds to the call (the ledger's "
                             "quantization fields).")
      .def_readonly("array", &Charge::array, "The PE array level: TENET's metrics and cycles.")
      .def_readonly("memory", &Charge::memory,
                    "The buffer level: DRAM/buffer traffic, cycles (the call's latency), "
                    "roofline_cycles, mapping.")
      .def_readonly("energy", &Charge::energy, "Energy by component, pJ.")
      .def("ledger_fields", [](const Charge& c) {
        py::dict d = FieldsDict(ChargeLedgerFields(c));
        py::dict tensors;
        for (const auto& t : ChargeTensorFields(c)) tensors[py::str(t.first)] = FieldsDict(t.second);
        d["tensors"] = tensors;
        return d;
      }, "The charge as the ledger's named fields (the runtime's ledger JSON writes the same), "
         "tensors as {name: fields}.");
  m.def(
      "clear_mapping_searches",
      []() {
        std::lock_guard<std::mutex> lock(kept_searches_mutex);
        kept_searches.clear();
      },
      "Forget the shared mapping searches: an accelerator made afterwards searches every "
      "distinct call again (one made before keeps its own). For timing a search from empty.");
  m.def("_ledger_field_names", []() {
    std::vector<std::string> names;
    for (const auto& f : ChargeLedgerFields(Charge{})) names.push_back(f.first);
    return names;
  });
  m.def("_ledger_tensor_field_names", []() {
    Charge c;
    c.array.tensors["A"] = TensorMetrics{};
    std::vector<std::string> names;
    const auto tensors = ChargeTensorFields(c);  // kept alive while its names are read
    for (const auto& f : tensors.front().second) names.push_back(f.first);
    return names;
  });

  m.def(
      "charge",
      [](const GemmCall& call, const BoundAccelerator& acc, const std::string& method,
         bool exhaustive_splits) {
        const AnalysisMethod how = ToMethod(method);
        py::gil_scoped_release release;
        if (exhaustive_splits && !IsOneCore(acc.value.cores))
          return ChargeOnCores(call, acc.value, how, /*prune=*/false);
        return ChargeGemm(call, *acc.prepared, how);
      },
      py::arg("call"), py::arg("accelerator"), py::arg("method") = "auto",
      py::arg("exhaustive_splits") = false,
      "What the runtime's ledger charges `call` on `accelerator` (the one rule, charge.h): "
      ".array (PE array), .memory (buffer level; .cycles is the call's latency), .energy. "
      "With mapping 'auto' each distinct call is searched once per accelerator. "
      "exhaustive_splits: on an accelerator of cores, charge every split of the call over "
      "them (no pruning by the lower bound; the same charge, slower: for tests).");
  m.def(
      "computed_call",
      [](const GemmCall& call, const BoundAccelerator& acc) { return ComputedCall(call, acc.value); },
      py::arg("call"), py::arg("accelerator"),
      "The call as `accelerator` computes and charges it: M in its MAC unit's row tile "
      "(MacSpec.row_tiles), the stationary operand in whole array tiles "
      "(MemoryHierarchy.whole_stationary_tiles); else the call itself.");
  py::class_<AttentionCall>(
      m, "AttentionCall",
      "One fused attention kernel (attention.h): batch sequences, heads query heads over "
      "kv_heads key/value heads, queries x keys of head_dim, operands of bits, causal (the "
      "queries are the last positions), q_tile query rows per work unit.")
      .def(py::init([](int64_t batch, int64_t heads, int64_t kv_heads, int64_t queries,
                       int64_t keys, int64_t head_dim, int bits, bool causal, int64_t q_tile) {
             AttentionCall c{batch, heads, kv_heads == 0 ? heads : kv_heads, queries, keys,
                             head_dim, bits, causal, q_tile};
             Validate(c);
             return c;
           }),
           py::kw_only(), py::arg("batch") = 1, py::arg("heads"), py::arg("kv_heads") = 0,
           py::arg("queries"), py::arg("keys"), py::arg("head_dim"), py::arg("bits") = 16,
           py::arg("causal") = false, py::arg("q_tile") = 128)
      .def_readonly("batch", &AttentionCall::batch)
      .def_readonly("heads", &AttentionCall::heads)
      .def_readonly("kv_heads", &AttentionCall::kv_heads)
      .def_readonly("queries", &AttentionCall::queries)
      .def_readonly("keys", &AttentionCall::keys)
      .def_readonly("head_dim", &AttentionCall::head_dim)
      .def_readonly("bits", &AttentionCall::bits)
      .def_readonly("causal", &AttentionCall::causal)
      .def_readonly("q_tile", &AttentionCall::q_tile)
      .def("to_json", &SerializeAttentionCall)
      .def("__eq__", [](const AttentionCall& a, const AttentionCall& b) {
        return SerializeAttentionCall(a) == SerializeAttentionCall(b);
      }, py::is_operator())
      .def(py::pickle(
          [](const AttentionCall& c) {
            return py::make_tuple(c.batch, c.heads, c.kv_heads, c.queries, c.keys, c.head_dim,
                                  c.bits, c.causal, c.q_tile);
          },
          [](const py::tuple& t) {
            if (t.size() != 9) throw std::invalid_argument("AttentionCall: a pickle of 9 fields");
            AttentionCall c{t[0].cast<int64_t>(), t[1].cast<int64_t>(), t[2].cast<int64_t>(),
                            t[3].cast<int64_t>(), t[4].cast<int64_t>(), t[5].cast<int64_t>(),
                            t[6].cast<int>(),     t[7].cast<bool>(),    t[8].cast<int64_t>()};
            Validate(c);
            return c;
          }))
      .def("__repr__", [](const AttentionCall& c) {
        return "AttentionCall(" + SerializeAttentionCall(c) + ")";
      });
  py::class_<AttentionCharge>(m, "AttentionCharge",
                              "What a fused attention kernel costs (attention.h): work units, "
                              "waves, one unit's MMA, softmax and stream cycles, DRAM, cycles.")
      .def_readonly("call", &AttentionCharge::call)
      .def_readonly("units", &AttentionCharge::units)
      .def_readonly("active_cores", &AttentionCharge::active_cores)
      .def_readonly("waves", &AttentionCharge::waves)
      .def_readonly("macs", &AttentionCharge::macs)
      .def_readonly("num_pes", &AttentionCharge::num_pes)
      .def_readonly("macs_per_pe_per_cycle", &AttentionCharge::macs_per_pe_per_cycle)
      .def_readonly("scores", &AttentionCharge::scores)
      .def_readonly("mma_cycles", &AttentionCharge::mma_cycles)
      .def_readonly("softmax_cycles", &AttentionCharge::softmax_cycles)
      .def_readonly("stream_cycles", &AttentionCharge::stream_cycles)
      .def_property_readonly("dram_read_bytes",
                             [](const AttentionCharge& c) { return c.dram_read_bits / 8.0; })
      .def_property_readonly("dram_write_bytes",
                             [](const AttentionCharge& c) { return c.dram_write_bits / 8.0; })
      .def_readonly("dram_cycles", &AttentionCharge::dram_cycles)
      .def_readonly("launch_cycles", &AttentionCharge::launch_cycles)
      .def_readonly("cycles", &AttentionCharge::cycles)
      .def_readonly("latency_us", &AttentionCharge::latency_us);
  m.def(
      "charge_attention",
      [](const AttentionCall& call, const BoundAccelerator& acc) {
        py::gil_scoped_release release;
        return ChargeAttention(call, acc.value);
      },
      py::arg("call"), py::arg("accelerator"),
      "What one fused attention kernel costs on the accelerator (attention.h).");
  m.def(
      "charge_vector",
      [](const VectorCall& call, const BoundAccelerator& acc) {
        py::gil_scoped_release release;
        return ChargeVectorCall(call, acc.value.vector, acc.value.memory,
                                acc.value.hardware.clock_ghz, acc.value.cores);
      },
      py::arg("call"), py::arg("accelerator"),
      "What a non-GEMM operator call costs on the accelerator's vector unit (vector.h): "
      "elements, ops by class, bytes by level, cycles, energy (unit 'vector').");
  m.def(
      "analyze_array",
      [](const GemmCall& call, const BoundAccelerator& acc, const std::string& method) {
        const AnalysisMethod how = ToMethod(method);
        py::gil_scoped_release release;
        return AnalyzeGemm(call.workload, acc.value.hardware, acc.value.dataflow, how);
      },
      py::arg("call"), py::arg("accelerator"), py::arg("method") = "auto",
      "The PE array level alone on the accelerator's dataflow (TENET's relations, one off-chip "
      "bandwidth): calls the buffer level or the precision table would refuse still get it.");
  m.def(
      "analyze_memory",
      [](const GemmCall& call, const BoundAccelerator& acc, const py::object& mapping) {
        const Accelerator& a = acc.value;
        if (mapping.is_none()) {
          py::gil_scoped_release release;
          return ChargeGemm(call, a, AnalysisMethod::kAuto, acc.search.get()).memory;
        }
        const TileMapping t = mapping.cast<TileMapping>();
        py::gil_scoped_release release;
        return AnalyzeMemory(call.workload, a.hardware, a.dataflow, a.memory, t);
      },
      py::arg("call"), py::arg("accelerator"), py::arg("mapping") = py::none(),
      "The buffer level of `call` with the accelerator's dataflow cut into `mapping`'s tiles "
      "(None: the accelerator's own mapping choice, what charge(...).memory holds).");
  m.def(
      "roofline",
      [](const GemmCall& call, const BoundAccelerator& acc) {
        const Hardware& hw = acc.value.hardware;
        const GemmWorkload& w = call.workload;
        const int64_t rate = hw.macs_per_pe_per_cycle.AtBits(RateBits(w));
        return RooflineCycles(w, hw.NumPEs(), static_cast<double>(rate), acc.value.memory,
                              static_cast<double>(hw.macs_per_pe_per_cycle.base));
      },
      py::arg("call"), py::arg("accelerator"),
      "max(MACs / MAC rate of all PEs, compulsory DRAM bits / bandwidth) in cycles: no "
      "mapping of the call on the accelerator is faster.");
  m.def(
      "search_mapping",
      [](const GemmCall& call, const BoundAccelerator& acc, const py::object& objective,
         int threads) {
        const Accelerator& a = acc.value;
        MappingSearchOptions options{a.mapping.kind == "auto" ? a.mapping.objective
                                                               : MappingObjective::kLatency,
                                     threads};
        if (!objective.is_none()) {
          try {
            options.objective = ParseMappingObjective(objective.cast<std::string>());
          } catch (const std::invalid_argument& e) {
            throw std::invalid_argument(std::string("search_mapping objective: ") + e.what());
          }
        }
        // The accelerator's own search (cached) answers when it searches the same objective.
        if (acc.search && options.objective == a.mapping.objective) {
          py::gil_scoped_release release;
          return acc.search->Best(call.workload);
        }
        const MappingSpace space = AutoMappingSpace(a);
        py::gil_scoped_release release;
        return SearchMapping(call.workload, a.hardware, space, a.memory, a.precision, options);
      },
      py::arg("call"), py::arg("accelerator"), py::arg("objective") = py::none(),
      py::arg("threads") = 0,
      "The mapping 'auto' would choose for `call` on `accelerator`: its dataflow (os/ws/is on "
      "the array for a preset; the user's relations alone otherwise), buffer tiles and loop "
      "order minimising `objective` (None: the accelerator's own, else latency).");
}
