// pybind11 binding of the cost model (tenet_byoc._cost_model); the Python-facing API is
// re-exported with keyword conveniences by tenet_byoc/cost_model.py.
#include <chrono>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cost_model/accelerator.h"
#include "cost_model/charge.h"
#include "cost_model/cost_model.h"
#include "cost_model/relation.h"

namespace py = pybind11;
using namespace tenet;

void BindMemory(py::module_& m);  // python_memory.cc
void BindMapping(py::module_& m);  // python_mapping.cc
void BindValues(py::module_& m);   // python_values.cc
void BindVector(py::module_& m);   // python_vector.cc
void BindLink(py::module_& m);     // python_link.cc

AnalysisMethod ToMethod(const std::string& m) {
  if (m == "auto") return AnalysisMethod::kAuto;
  if (m == "fast") return AnalysisMethod::kFast;
  if (m == "enumerate") return AnalysisMethod::kEnumerate;
  throw std::invalid_argument("method must be 'auto', 'fast' or 'enumerate', got '" + m + "'");
}

namespace {

// `text` with every byte that is not part of well-formed UTF-8 written as \\xNN.
std::string ReadableMessage(const std::string& text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = text[i];
    const size_t len = detail::Utf8CharLength(text, i);
    if (len > 0) {
      out.append(text, i, len);
      i += len;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
      ++i;
    }
  }
  return out;
}

// Python's form of a MAC rate: an int (every width) or a dict {operand bits: rate}.
MacRate ToMacRate(const py::object& rate) {
  MacRate r;
  if (py::isinstance<py::dict>(rate)) {
    for (auto kv : py::cast<py::dict>(rate)) {
      if (!py::isinstance<py::int_>(kv.first) || !py::isinstance<py::int_>(kv.second))
        throw std::invalid_argument("Hardware.macs_per_pe_per_cycle: a table maps operand "
                                    "widths (int bits) to MACs per cycle (int), got " +
                                    std::string(py::repr(rate)));
      r.by_bits[kv.first.cast<int>()] = kv.second.cast<int64_t>();
    }
  } else if (py::isinstance<py::int_>(rate) && !py::isinstance<py::bool_>(rate)) {
    r.base = rate.cast<int64_t>();
  } else {
    throw std::invalid_argument("Hardware.macs_per_pe_per_cycle must be an int or a dict "
                                "{operand bits: MACs per cycle}, got " +
                                std::string(py::repr(rate)));
  }
  return r;
}

py::object FromMacRate(const MacRate& r) {
  if (r.by_bits.empty()) return py::int_(r.base);
  return py::cast(r.by_bits);
}

// A struct's fields by name: the one table its read-only attributes and as_dict are made
// from.
template <typename T, typename... M>
class FieldTable {
 public:
  explicit FieldTable(std::pair<const char*, M T::*>... fields) : fields_(fields...) {}
  template <typename Class>
  Class& DefineOn(Class& cls) const {
    std::apply([&](const auto&... f) { (cls.def_readonly(f.first, f.second), ...); }, fields_);
    return cls;
  }
  py::dict AsDict(const T& x) const {
    py::dict d;
    std::apply([&](const auto&... f) { ((d[f.first] = x.*(f.second)), ...); }, fields_);
    return d;
  }

 private:
  std::tuple<std::pair<const char*, M T::*>...> fields_;
};

template <typename T, typename M>
std::pair<const char*, M T::*> F(const char* name, M T::*member) {
  return {name, member};
}

template <typename T, typename... M>
FieldTable<T, M...> Fields(std::pair<const char*, M T::*>... fields) {
  return FieldTable<T, M...>(fields...);
}

const auto kHardwareFields = Fields(
    F("name", &Hardware::name), F("pe_domain", &Hardware::pe_domain),
    F("interconnect", &Hardware::interconnect), F("bandwidth_bits", &Hardware::bandwidth_bits),
    F("avg_latency", &Hardware::avg_latency), F("clock_ghz", &Hardware::clock_ghz),
    F("l1_bytes", &Hardware::l1_bytes), F("l2_bytes", &Hardware::l2_bytes));
const auto kDataflowFields = Fields(
    F("name", &Dataflow::name), F("space", &Dataflow::space), F("time", &Dataflow::time),
    F("preset_name", &Dataflow::preset), F("rows", &Dataflow::rows), F("cols", &Dataflow::cols),
    F("tiling", &Dataflow::tiling));
using TM = TensorMetrics;
const auto kTensorMetricsFields = Fields(
    F("is_write", &TM::is_write), F("bits", &TM::bits), F("total", &TM::total),
    F("unique", &TM::unique), F("reuse_factor", &TM::reuse_factor),
    F("spatial_reuse", &TM::spatial_reuse), F("temporal_reuse", &TM::temporal_reuse),
    F("offchip_elements", &TM::offchip_elements), F("offchip_bits", &TM::offchip_bits),
    F("offchip_bytes", &TM::offchip_bytes));
// Every field of Metrics but the per-tensor map.
const auto kMetricsFields = Fields(
    F("macs", &Metrics::macs), F("time_steps", &Metrics::time_steps),
    F("active_pes", &Metrics::active_pes), F("num_pes", &Metrics::num_pes),
    F("macs_per_pe_per_cycle", &Metrics::macs_per_pe_per_cycle),
    F("avg_active_pes", &Metrics::avg_active_pes), F("ingress_delay", &Metrics::ingress_delay),
    F("egress_delay", &Metrics::egress_delay), F("compute_delay", &Metrics::compute_delay),
    F("compute_delay_exact", &Metrics::compute_delay_exact), F("delay", &Metrics::delay),
    F("compute_cycles", &Metrics::compute_cycles), F("stall_cycles", &Metrics::stall_cycles),
    F("cycles", &Metrics::cycles), F("folds", &Metrics::folds),
    F("offchip_read_bits", &Metrics::offchip_read_bits),
    F("offchip_write_bits", &Metrics::offchip_write_bits),
    F("array_utilization", &Metrics::array_utilization),
    F("bandwidth_bits_per_cycle", &Metrics::bandwidth_bits_per_cycle),
    F("latency_us", &Metrics::latency_us), F("method", &Metrics::method));

std::string Repr(const Hardware& h) {
  return "Hardware(name='" + h.name + "', pe_domain='" + h.pe_domain + "', interconnect='" +
         h.interconnect + "', bandwidth_bits=" + std::to_string(h.bandwidth_bits) + ")";
}

}  // namespace

// The accelerator of these parts. memory None: TENET's reading of the hardware's L1 / L2 /
// bandwidth (MemoryFromTenet); precision None: Horowitz's 45 nm units; precision rates are
// always the hardware's (WithMacRates: the one MAC-rate setting); mapping None or
// "default": DefaultTileMapping per call, "auto": a mapping search per call minimising
// `objective` (None: latency; only with "auto"), a TileMapping: that mapping for every call.
Accelerator MakeAccelerator(std::string name, Hardware hw, Dataflow df,
                            const py::object& memory, const py::object& precision,
                            const py::object& mapping, const py::object& objective) {
  Accelerator a;
  a.name = std::move(name);
  a.memory = memory.is_none() ? MemoryFromTenet(hw) : memory.cast<MemoryHierarchy>();
  a.precision = Accelerator::WithMacRates(
      precision.is_none() ? PrecisionTable::Horowitz45nm() : precision.cast<PrecisionTable>(),
      hw.macs_per_pe_per_cycle);
  const bool is_str = py::isinstance<py::str>(mapping);
  const std::string kind = is_str ? mapping.cast<std::string>() : "";
  if (py::isinstance<TileMapping>(mapping)) {
    a.mapping.kind = "given";
    a.mapping.tiles = mapping.cast<TileMapping>();
  } else if (is_str && kind == "auto") {
    a.mapping.kind = "auto";
  } else if (!mapping.is_none() && !(is_str && kind == "default")) {
    throw std::invalid_argument("Accelerator.mapping must be None or 'default' (DefaultTileMapping "
                                "per call), 'auto' (a mapping search per call) or a TileMapping, "
                                "got " + std::string(py::repr(mapping)));
  }
  if (!objective.is_none()) {
    if (a.mapping.kind != "auto")
      throw std::invalid_argument("Accelerator.objective applies only with mapping='auto' (got "
                                  "objective " + std::string(py::repr(objective)) +
                                  " with mapping " + std::string(py::repr(mapping)) + ")");
    if (!py::isinstance<py::str>(objective))
      throw std::invalid_argument("Accelerator.objective must be 'latency', 'energy' or 'edp', got " +
                                  std::string(py::repr(objective)));
    try {
      a.mapping.objective = ParseMappingObjective(objective.cast<std::string>());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("Accelerator.objective: ") + e.what());
    }
  }
  a.hardware = std::move(hw);
  a.dataflow = std::move(df);
  return a;
}

py::object MappingOf(const Accelerator& a) {
  if (a.mapping.kind == "given") return py::cast(a.mapping.tiles);
  return py::str(a.mapping.kind);
}

py::object ObjectiveOf(const Accelerator& a) {
  if (a.mapping.kind != "auto") return py::none();
  return py::str(MappingObjectiveName(a.mapping.objective));
}

PYBIND11_MODULE(_cost_model, m) {
  m.doc() = "TENET relation-centric cost model (C++ core)";
  // A count too large for int64 is a bad input like any other: one exception type
  // (ValueError) for every refusal, as the header's error contract says.
  // Messages quote user text, which may hold bytes that are not UTF-8 (or a cut
  // character); they are escaped so Python always gets a readable ValueError, never a
  // UnicodeDecodeError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, ReadableMessage(e.what()).c_str());
    } catch (const std::overflow_error& e) {
      PyErr_SetString(PyExc_ValueError, ReadableMessage(e.what()).c_str());
    }
  });
  BindMemory(m);
  BindMapping(m);

  py::class_<Hardware> hardware(m, "Hardware");
  hardware
      .def(py::init([](std::string pe_domain, std::string interconnect, double bandwidth_bits,
                       double avg_latency, double clock_ghz, int64_t l1_bytes, int64_t l2_bytes,
                       const py::object& macs_per_pe_per_cycle, std::string name) {
             Hardware h;
             h.pe_domain = std::move(pe_domain);
             h.interconnect = std::move(interconnect);
             h.bandwidth_bits = bandwidth_bits;
             h.avg_latency = avg_latency;
             h.clock_ghz = clock_ghz;
             h.l1_bytes = l1_bytes;
             h.l2_bytes = l2_bytes;
             h.macs_per_pe_per_cycle = ToMacRate(macs_per_pe_per_cycle);
             h.name = std::move(name);
             Validate(h);
             return h;
           }),
           py::arg("pe_domain"), py::arg("interconnect"), py::arg("bandwidth_bits") = 1024.0,
           py::arg("avg_latency") = 16.0, py::arg("clock_ghz") = 1.0, py::arg("l1_bytes") = 256,
           py::arg("l2_bytes") = 1 << 20, py::arg("macs_per_pe_per_cycle") = py::int_(1),
           py::arg("name") = "hardware")
      .def_static(
          "systolic",
          [](int64_t rows, int64_t cols, double bandwidth_bits, double avg_latency,
             double clock_ghz, int64_t l1_bytes, int64_t l2_bytes, const py::object& rate,
             const std::string& name) {
            Hardware h = Hardware::Systolic(rows, cols, bandwidth_bits, avg_latency, clock_ghz,
                                            l1_bytes, l2_bytes, ToMacRate(rate));
            if (!name.empty()) h.name = name;
            return h;
          },
          py::arg("rows"), py::arg("cols"), py::arg("bandwidth_bits") = 1024.0,
          py::arg("avg_latency") = 16.0, py::arg("clock_ghz") = 1.0, py::arg("l1_bytes") = 256,
          py::arg("l2_bytes") = 1 << 20, py::arg("macs_per_pe_per_cycle") = py::int_(1),
          py::arg("name") = "", "An R x C systolic array (TENET's systolic.p generalised); "
          "name defaults to 'systolic_RxC'.")
      .def_property_readonly(
          "macs_per_pe_per_cycle",
          [](const Hardware& h) { return FromMacRate(h.macs_per_pe_per_cycle); },
          "MACs per PE per cycle: an int (every operand width) or {bits: rate} (1 elsewhere)")
      .def("macs_per_pe_per_cycle_at", [](const Hardware& h, int bits) {
        return h.macs_per_pe_per_cycle.AtBits(bits);
      }, py::arg("bits"), "The rate of a call whose wider operand has `bits` bits.")
      .def_property_readonly("num_pes", &Hardware::NumPEs)
      .def("__repr__", &Repr);
  kHardwareFields.DefineOn(hardware);

  py::class_<Dataflow> dataflow(m, "Dataflow");
  kDataflowFields.DefineOn(dataflow)
      .def(py::init([](std::string space, std::string time, std::string name) {
             Dataflow d;
             d.space = std::move(space);
             d.time = std::move(time);
             d.name = std::move(name);
             Validate(d);
             return d;
           }),
           py::arg("space"), py::arg("time"), py::arg("name") = "dataflow")
      .def_static(
          "preset",
          [](const std::string& name, int64_t rows, int64_t cols, const py::kwargs& tiling) {
            std::map<std::string, int64_t> t;
            for (auto kv : tiling) t[kv.first.cast<std::string>()] = kv.second.cast<int64_t>();
            return Dataflow::Preset(name, rows, cols, t);
          },
          py::arg("name"), py::arg("rows"), py::arg("cols"),
          "A systolic preset: 'os', 'ws' or 'is' (TENET's matmul_systolic_*.m generalised) on "
          "a rows x cols array; optional tiling of the streamed dimension: k= for os, m= "
          "for ws, n= for is.")
      .def("__repr__", [](const Dataflow& d) {
        return "Dataflow(name='" + d.name + "', space='" + d.space + "', time='" + d.time + "')";
      });

  py::class_<TensorAccess>(m, "TensorAccess")
      .def(py::init([](std::string relation, bool is_write, int bits) {
             return TensorAccess{std::move(relation), is_write, bits};
           }),
           py::arg("relation"), py::arg("is_write") = false, py::arg("bits") = 32)
      .def_readonly("relation", &TensorAccess::relation)
      .def_readonly("is_write", &TensorAccess::is_write)
      .def_readonly("bits", &TensorAccess::bits);

  py::class_<Statement>(m, "Statement")
      .def(py::init([](std::string domain, std::vector<TensorAccess> accesses, std::string name) {
             Statement s;
             s.domain = std::move(domain);
             s.accesses = std::move(accesses);
             s.name = std::move(name);
             return s;
           }),
           py::arg("domain"), py::arg("accesses"), py::arg("name") = "statement")
      .def_static("gemm", &Statement::Gemm, py::arg("m"), py::arg("n"), py::arg("k"),
                  py::arg("bits_a") = 32, py::arg("bits_b") = 32, py::arg("bits_c") = 32)
      .def_readonly("name", &Statement::name)
      .def_readonly("domain", &Statement::domain)
      .def_readonly("accesses", &Statement::accesses);

  py::class_<TensorMetrics> tensor_metrics(m, "TensorMetrics");
  kTensorMetricsFields.DefineOn(tensor_metrics)
      .def("__repr__", [](const TensorMetrics& t) {
        return "TensorMetrics(total=" + std::to_string(t.total) + ", unique=" +
               std::to_string(t.unique) + ")";
      });

  py::class_<Metrics> metrics(m, "Metrics");
  kMetricsFields.DefineOn(metrics)
      .def_readonly("tensors", &Metrics::tensors)
      .def("as_dict", [](const Metrics& x) {
        py::dict d = kMetricsFields.AsDict(x);
        py::dict tensors;
        for (const auto& kv : x.tensors) tensors[py::str(kv.first)] = kTensorMetricsFields.AsDict(kv.second);
        d["tensors"] = tensors;
        return d;
      }, "All figures as a plain dict (tensors as nested dicts).")
      .def("__repr__", [](const Metrics& x) {
        return "Metrics(macs=" + std::to_string(x.macs) + ", time_steps=" +
               std::to_string(x.time_steps) + ", cycles=" + std::to_string(x.cycles) + ")";
      });

  // The array level alone on a dataflow that need not make an accelerator (the deprecated
  // analyze_gemm): the same AnalyzeGemm ChargeGemm fills Charge::array with.
  m.def(
      "_analyze_array",
      [](const GemmCall& call, const Hardware& hw, const Dataflow& df, const std::string& method) {
        return AnalyzeGemm(call.workload, hw, df, ToMethod(method));
      },
      py::arg("call"), py::arg("hardware"), py::arg("dataflow"), py::arg("method") = "auto",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "analyze",
      [](const Statement& st, const Hardware& hw, const Dataflow& df, const std::string& method) {
        return Analyze(st, hw, df, ToMethod(method));
      },
      "Cost of a general TENET statement (GEMMs on presets take the fast path).",
      py::arg("statement"), py::arg("hardware"), py::arg("dataflow"), py::arg("method") = "auto",
      py::call_guard<py::gil_scoped_release>());

  m.def("load_tenet_hardware", &LoadTenetHardware, py::arg("path"));
  m.def("load_tenet_mapping", &LoadTenetMapping, py::arg("path"));
  m.def("load_tenet_statement", &LoadTenetStatement, py::arg("path"));
  m.def("parse_tenet_hardware", &ParseTenetHardware, py::arg("text"), py::arg("name") = "hardware");
  m.def("parse_tenet_mapping", &ParseTenetMapping, py::arg("text"), py::arg("name") = "dataflow");
  m.def("parse_tenet_statement", &ParseTenetStatement, py::arg("text"), py::arg("name") = "statement");
  m.def("format_tenet_hardware", &FormatTenetHardware);
  m.def("format_tenet_mapping", &FormatTenetMapping);
  m.def("format_tenet_statement", &FormatTenetStatement);
  m.def("save_text_file", &SaveTextFile);
  m.attr("MAX_ENUMERATED_INSTANCES") = kMaxEnumeratedInstances;
  m.def("memory_from_tenet", &MemoryFromTenet, py::arg("hardware"),
        "The hierarchy TENET's .p line describes: L1 -> register_bytes, L2 -> buffer_bytes, "
        "bandwidth -> dram_bandwidth_bits.");
  // Wall time of each of `reps` analyses inside C++ (no Python overhead), for benchmarks.
  m.def(
      "_time_analyze_gemm",
      [](int64_t m_, int64_t n, int64_t k, const Hardware& hw, const Dataflow& df, int reps) {
        GemmWorkload w;
        w.m = m_;
        w.n = n;
        w.k = k;
        std::vector<double> seconds;
        int64_t sink = 0;
        for (int r = 0; r < reps; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          sink += AnalyzeGemm(w, hw, df).cycles;
          auto t1 = std::chrono::steady_clock::now();
          seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
        }
        if (sink < 0) seconds.clear();  // keeps the calls from being optimised away
        return seconds;
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("hardware"), py::arg("dataflow"),
      py::arg("reps"), py::call_guard<py::gil_scoped_release>());

  // The parser on its own, for tests: images of `point` under the relation (a set gives
  // [[]] when it contains the point, [] otherwise).
  m.def(
      "_apply_relation",
      [](const std::string& text, std::vector<int64_t> point,
         std::map<std::string, int64_t> params) {
        detail::Relation r = detail::ParseRelation(text, "relation", params);
        if (point.size() != r.in_arity)
          throw std::invalid_argument("point has " + std::to_string(point.size()) +
                                      " coordinates, relation '" + text + "' takes " +
                                      std::to_string(r.in_arity));
        std::vector<std::vector<int64_t>> out;
        if (r.is_map) r.Apply(point.data(), &out);
        else if (r.Contains(point.data())) out.push_back({});
        return out;
      },
      py::arg("text"), py::arg("point"), py::arg("params") = std::map<std::string, int64_t>{});
  BindVector(m);  // before BindValues: the Accelerator returns its units
  BindLink(m);
  BindValues(m);  // after Hardware, Dataflow and Metrics, which its values return

  // Pickle protocols 0 and 1 reduce an object through copyreg._reduce_ex, which makes an
  // instance of its pybind11 base class: pybind11 then throws where nothing can catch it
  // and the process aborts. Every class here takes protocol 2's reduction at any protocol
  // instead: a value with a pickled form round-trips, any other is refused with pickle's
  // TypeError ("cannot pickle ... object"), as at protocol 2.
  const py::object object_reduce_ex = py::module_::import("builtins").attr("object").attr(
      "__reduce_ex__");
  for (const auto& item : m.attr("__dict__").cast<py::dict>()) {
    if (!py::isinstance<py::type>(item.second)) continue;
    const py::object cls = py::reinterpret_borrow<py::object>(item.second);
    py::setattr(cls, "__reduce_ex__",
                py::cpp_function(
                    [object_reduce_ex](const py::object& self, int protocol) {
                      return object_reduce_ex(self, std::max(protocol, 2));
                    },
                    py::name("__reduce_ex__"), py::is_method(cls), py::arg("protocol")));
  }
}
