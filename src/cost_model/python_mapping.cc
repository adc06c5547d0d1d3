// pybind11 binding of the mapping search (part of tenet_byoc._cost_model; re-exported by
// tenet_byoc.mapping and tenet_byoc.cost_model).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "cost_model/cost_model.h"
#include "cost_model/energy.h"
#include "cost_model/charge.h"
#include "cost_model/mapping.h"
#include "cost_model/memory.h"

namespace py = pybind11;
using namespace tenet;

namespace {

MappingSpace Space(std::vector<Dataflow> dataflows, std::vector<int64_t> stream_tiles,
                   int64_t granule, int max_even_split) {
  MappingSpace s;
  s.dataflows = std::move(dataflows);
  s.stream_tiles = std::move(stream_tiles);
  s.granule = granule;
  s.max_even_split = max_even_split;
  Validate(s);
  return s;
}

MappingSearchOptions Options(const std::string& objective, int threads) {
  MappingSearchOptions o;
  o.objective = ParseMappingObjective(objective);
  o.threads = threads;
  return o;
}

}  // namespace

void BindMapping(py::module_& m) {
  py::class_<MappingChoice>(m, "MappingChoice")
      .def_readonly("dataflow", &MappingChoice::dataflow)
      .def_readonly("tiles", &MappingChoice::tiles)
      .def_readonly("metrics", &MappingChoice::metrics)
      .def_readonly("energy", &MappingChoice::energy)
      .def_readonly("objective", &MappingChoice::objective)
      .def_readonly("index", &MappingChoice::index)
      .def_readonly("candidates", &MappingChoice::candidates)
      .def_readonly("evaluated", &MappingChoice::evaluated)
      .def_readonly("pruned", &MappingChoice::pruned)
      .def_readonly("unfit", &MappingChoice::unfit)
      .def_readonly("tile_shapes", &MappingChoice::tile_shapes)
      .def_readonly("search_seconds", &MappingChoice::search_seconds)
      .def_property_readonly("mapping", &MappingChoice::Describe)
      .def("__repr__", [](const MappingChoice& c) {
        return "MappingChoice('" + c.Describe() + "', cycles=" + std::to_string(c.metrics.cycles) +
               ", roofline_cycles=" + std::to_string(c.metrics.roofline_cycles) + ")";
      });

  m.def("auto_mapping_dataflows", [](const Dataflow& df) {
    return MappingSpace::ForDataflow(df).dataflows;
  }, "What ``mapping=\"auto\"`` searches for an accelerator with ``dataflow``: os, ws and is\n"
     "on its array when it is a preset; the dataflow alone (its tiles and tile orders\n"
     "searched) when it is the user's own relations (TENET files): a user-given dataflow\n"
     "still wins.", py::arg("dataflow"));
  m.def("tile_size_candidates", &TileSizeCandidates, py::arg("extent"), py::arg("granule"),
        py::arg("max_even_split"));
  m.def("_mapping_tile_orders", []() {
    std::vector<std::string> v(std::begin(kTileOrders), std::end(kTileOrders));
    return v;
  });
  m.def(
      "_search_mapping",
      [](const GemmCall& call, const Hardware& hw, const MemoryHierarchy& mem,
         std::vector<Dataflow> dataflows, const PrecisionTable& table, const std::string& objective,
         std::vector<int64_t> stream_tiles, int64_t granule, int max_even_split, int threads) {
        const MappingSpace s = Space(std::move(dataflows), std::move(stream_tiles), granule, max_even_split);
        const MappingSearchOptions o = Options(objective, threads);
        py::gil_scoped_release release;
        return SearchMapping(call.workload, hw, s, mem, table, o);
      },
      py::arg("call"), py::arg("hardware"), py::arg("memory"), py::arg("dataflows"),
      py::arg("precision"), py::arg("objective"), py::arg("stream_tiles"), py::arg("granule"),
      py::arg("max_even_split"), py::arg("threads"));

  py::class_<MappingSearch, std::shared_ptr<MappingSearch>>(m, "_MappingSearch")
      .def(py::init([](const Hardware& hw, const MemoryHierarchy& mem, std::vector<Dataflow> dataflows,
                       const PrecisionTable& table, const std::string& objective,
                       std::vector<int64_t> stream_tiles, int64_t granule, int max_even_split,
                       int threads) {
             return std::make_shared<MappingSearch>(
                 hw, Space(std::move(dataflows), std::move(stream_tiles), granule, max_even_split),
                 mem, table, Options(objective, threads));
           }),
           py::arg("hardware"), py::arg("memory"), py::arg("dataflows"), py::arg("precision"),
           py::arg("objective"), py::arg("stream_tiles"), py::arg("granule"),
           py::arg("max_even_split"), py::arg("threads"))
      .def(
          "best",
          [](MappingSearch& s, const GemmCall& call) {
            py::gil_scoped_release release;
            return s.Best(call.workload);
          },
          py::arg("call"))
      .def_property_readonly("searches", &MappingSearch::searches);
}
