// pybind11 binding of the cost model (tenet_byoc._cost_model); the Python-facing API is
// re-exported with keyword conveniences by tenet_byoc/cost_model.py.
#include <chrono>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cost_model/cost_model.h"
#include "cost_model/relation.h"

namespace py = pybind11;
using namespace tenet;

void BindMemory(py::module_& m);  // python_memory.cc
void BindMapping(py::module_& m);  // python_mapping.cc

namespace {

AnalysisMethod ToMethod(const std::string& m) {
  if (m == "auto") return AnalysisMethod::kAuto;
  if (m == "fast") return AnalysisMethod::kFast;
  if (m == "enumerate") return AnalysisMethod::kEnumerate;
  throw std::invalid_argument("method must be 'auto', 'fast' or 'enumerate', got '" + m + "'");
}

std::string Repr(const Hardware& h) {
  return "Hardware(name='" + h.name + "', pe_domain='" + h.pe_domain + "', interconnect='" +
         h.interconnect + "', bandwidth_bits=" + std::to_string(h.bandwidth_bits) + ")";
}

}  // namespace

PYBIND11_MODULE(_cost_model, m) {
  m.doc() = "TENET relation-centric cost model (C++ core)";
  BindMemory(m);
  BindMapping(m);

  py::class_<Hardware>(m, "Hardware")
      .def(py::init([](std::string pe_domain, std::string interconnect, double bandwidth_bits,
                       double avg_latency, double clock_ghz, int64_t l1_bytes, int64_t l2_bytes,
                       int64_t macs_per_pe_per_cycle, std::string name) {
             Hardware h;
             h.pe_domain = std::move(pe_domain);
             h.interconnect = std::move(interconnect);
             h.bandwidth_bits = bandwidth_bits;
             h.avg_latency = avg_latency;
             h.clock_ghz = clock_ghz;
             h.l1_bytes = l1_bytes;
             h.l2_bytes = l2_bytes;
             h.macs_per_pe_per_cycle = macs_per_pe_per_cycle;
             h.name = std::move(name);
             Validate(h);
             return h;
           }),
           py::arg("pe_domain"), py::arg("interconnect"), py::arg("bandwidth_bits") = 1024.0,
           py::arg("avg_latency") = 16.0, py::arg("clock_ghz") = 1.0, py::arg("l1_bytes") = 256,
           py::arg("l2_bytes") = 1 << 20, py::arg("macs_per_pe_per_cycle") = 1,
           py::arg("name") = "hardware")
      .def_static("systolic", &Hardware::Systolic, py::arg("rows"), py::arg("cols"),
                  py::arg("bandwidth_bits") = 1024.0, py::arg("avg_latency") = 16.0,
                  py::arg("clock_ghz") = 1.0, py::arg("l1_bytes") = 256,
                  py::arg("l2_bytes") = 1 << 20, py::arg("macs_per_pe_per_cycle") = 1)
      .def_readonly("name", &Hardware::name)
      .def_readonly("pe_domain", &Hardware::pe_domain)
      .def_readonly("interconnect", &Hardware::interconnect)
      .def_readonly("bandwidth_bits", &Hardware::bandwidth_bits)
      .def_readonly("avg_latency", &Hardware::avg_latency)
      .def_readonly("clock_ghz", &Hardware::clock_ghz)
      .def_readonly("l1_bytes", &Hardware::l1_bytes)
      .def_readonly("l2_bytes", &Hardware::l2_bytes)
      .def_readonly("macs_per_pe_per_cycle", &Hardware::macs_per_pe_per_cycle)
      .def_property_readonly("num_pes", &Hardware::NumPEs)
      .def("__repr__", &Repr);

  py::class_<Dataflow>(m, "Dataflow")
      .def(py::init([](std::string space, std::string time, std::string name) {
             Dataflow d;
             d.space = std::move(space);
             d.time = std::move(time);
             d.name = std::move(name);
             Validate(d);
             return d;
           }),
           py::arg("space"), py::arg("time"), py::arg("name") = "dataflow")
      .def_static("_preset", &Dataflow::Preset, py::arg("name"), py::arg("rows"), py::arg("cols"),
                  py::arg("tiling") = std::map<std::string, int64_t>{})
      .def_readonly("name", &Dataflow::name)
      .def_readonly("space", &Dataflow::space)
      .def_readonly("time", &Dataflow::time)
      .def_readonly("preset_name", &Dataflow::preset)
      .def_readonly("rows", &Dataflow::rows)
      .def_readonly("cols", &Dataflow::cols)
      .def_readonly("tiling", &Dataflow::tiling)
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

  py::class_<TensorMetrics>(m, "TensorMetrics")
      .def_readonly("is_write", &TensorMetrics::is_write)
      .def_readonly("bits", &TensorMetrics::bits)
      .def_readonly("total", &TensorMetrics::total)
      .def_readonly("unique", &TensorMetrics::unique)
      .def_readonly("reuse_factor", &TensorMetrics::reuse_factor)
      .def_readonly("spatial_reuse", &TensorMetrics::spatial_reuse)
      .def_readonly("temporal_reuse", &TensorMetrics::temporal_reuse)
      .def_readonly("offchip_elements", &TensorMetrics::offchip_elements)
      .def_readonly("offchip_bits", &TensorMetrics::offchip_bits)
      .def_readonly("offchip_bytes", &TensorMetrics::offchip_bytes)
      .def("__repr__", [](const TensorMetrics& t) {
        return "TensorMetrics(total=" + std::to_string(t.total) + ", unique=" +
               std::to_string(t.unique) + ")";
      });

  py::class_<Metrics>(m, "Metrics")
      .def_readonly("macs", &Metrics::macs)
      .def_readonly("time_steps", &Metrics::time_steps)
      .def_readonly("active_pes", &Metrics::active_pes)
      .def_readonly("num_pes", &Metrics::num_pes)
      .def_readonly("avg_active_pes", &Metrics::avg_active_pes)
      .def_readonly("ingress_delay", &Metrics::ingress_delay)
      .def_readonly("egress_delay", &Metrics::egress_delay)
      .def_readonly("compute_delay", &Metrics::compute_delay)
      .def_readonly("compute_delay_exact", &Metrics::compute_delay_exact)
      .def_readonly("delay", &Metrics::delay)
      .def_readonly("compute_cycles", &Metrics::compute_cycles)
      .def_readonly("stall_cycles", &Metrics::stall_cycles)
      .def_readonly("cycles", &Metrics::cycles)
      .def_readonly("folds", &Metrics::folds)
      .def_readonly("offchip_read_bits", &Metrics::offchip_read_bits)
      .def_readonly("offchip_write_bits", &Metrics::offchip_write_bits)
      .def_readonly("pe_utilization", &Metrics::pe_utilization)
      .def_readonly("bandwidth_bits_per_cycle", &Metrics::bandwidth_bits_per_cycle)
      .def_readonly("latency_us", &Metrics::latency_us)
      .def_readonly("method", &Metrics::method)
      .def_readonly("tensors", &Metrics::tensors)
      .def("as_dict", [](const Metrics& x) {
        py::dict d;
        d["macs"] = x.macs; d["time_steps"] = x.time_steps; d["active_pes"] = x.active_pes;
        d["num_pes"] = x.num_pes; d["avg_active_pes"] = x.avg_active_pes;
        d["ingress_delay"] = x.ingress_delay; d["egress_delay"] = x.egress_delay;
        d["compute_delay"] = x.compute_delay; d["compute_delay_exact"] = x.compute_delay_exact;
        d["delay"] = x.delay; d["compute_cycles"] = x.compute_cycles;
        d["stall_cycles"] = x.stall_cycles; d["cycles"] = x.cycles; d["folds"] = x.folds;
        d["offchip_read_bits"] = x.offchip_read_bits;
        d["offchip_write_bits"] = x.offchip_write_bits;
        d["pe_utilization"] = x.pe_utilization;
        d["bandwidth_bits_per_cycle"] = x.bandwidth_bits_per_cycle;
        d["latency_us"] = x.latency_us; d["method"] = x.method;
        py::dict tensors;
        for (const auto& kv : x.tensors) {
          const TensorMetrics& t = kv.second;
          py::dict td;
          td["is_write"] = t.is_write; td["bits"] = t.bits; td["total"] = t.total;
          td["unique"] = t.unique; td["reuse_factor"] = t.reuse_factor;
          td["spatial_reuse"] = t.spatial_reuse; td["temporal_reuse"] = t.temporal_reuse;
          td["offchip_elements"] = t.offchip_elements; td["offchip_bits"] = t.offchip_bits;
          td["offchip_bytes"] = t.offchip_bytes;
          tensors[py::str(kv.first)] = td;
        }
        d["tensors"] = tensors;
        return d;
      }, "All figures as a plain dict (tensors as nested dicts).")
      .def("__repr__", [](const Metrics& x) {
        return "Metrics(macs=" + std::to_string(x.macs) + ", time_steps=" +
               std::to_string(x.time_steps) + ", cycles=" + std::to_string(x.cycles) + ")";
      });

  m.def(
      "analyze_gemm",
      [](int64_t m_, int64_t n, int64_t k, const Hardware& hw, const Dataflow& df, int64_t batch,
         int bits_a, int bits_b, int bits_c, int64_t extra_read_bits, int64_t extra_ops,
         const std::string& method) {
        GemmWorkload w;
        w.batch = batch;
        w.m = m_;
        w.n = n;
        w.k = k;
        w.bits_a = bits_a;
        w.bits_b = bits_b;
        w.bits_c = bits_c;
        w.extra_read_bits = extra_read_bits;
        w.extra_ops = extra_ops;
        return AnalyzeGemm(w, hw, df, ToMethod(method));
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("hardware"), py::arg("dataflow"),
      py::arg("batch"), py::arg("bits_a"), py::arg("bits_b"), py::arg("bits_c"),
      py::arg("extra_read_bits"), py::arg("extra_ops"), py::arg("method"),
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "analyze",
      [](const Statement& st, const Hardware& hw, const Dataflow& df, const std::string& method) {
        return Analyze(st, hw, df, ToMethod(method));
      },
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
  m.def("serialize_config", &SerializeConfig, py::arg("hardware"), py::arg("dataflow"));
  m.def("parse_config", &ParseConfig, py::arg("text"));

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
                                      " coordinates, relation takes " +
                                      std::to_string(r.in_arity));
        std::vector<std::vector<int64_t>> out;
        if (r.is_map) r.Apply(point.data(), &out);
        else if (r.Contains(point.data())) out.push_back({});
        return out;
      },
      py::arg("text"), py::arg("point"), py::arg("params") = std::map<std::string, int64_t>{});
}
