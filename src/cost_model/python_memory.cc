// pybind11 binding of the memory hierarchy, tile mappings, roofline and energy (part of
// tenet_byoc._cost_model; re-exported by tenet_byoc.cost_model and tenet_byoc.memory).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "cost_model/cost_model.h"
#include "cost_model/energy.h"
#include "cost_model/charge.h"
#include "cost_model/memory.h"

namespace py = pybind11;
using namespace tenet;

namespace {

// Python's own repr of a float (shortest text that reads back to it: 4.6, not 4.600000).
std::string PyFloat(double v) { return py::repr(py::float_(v)).cast<std::string>(); }

// MacSpec::row_tiles as Python's (min_rows, rows) pairs.
std::vector<std::pair<int64_t, int64_t>> RowTiles(const MacSpec& u) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const MacSpec::RowTile& t : u.row_tiles) out.emplace_back(t.min_rows, t.rows);
  return out;
}

// The constructor's spelling: MacSpec(bits_a=8, bits_b=8, macs_per_pe_per_cycle=4.0, ...).
std::string MacSpecRepr(const MacSpec& u) {
  return "MacSpec(bits_a=" + std::to_string(u.bits_a) + ", bits_b=" + std::to_string(u.bits_b) +
         ", macs_per_pe_per_cycle=" + PyFloat(u.macs_per_pe_per_cycle) +
         ", pj_per_mac=" + PyFloat(u.pj_per_mac) +
         (u.format.empty() ? "" : ", format='" + u.format + "'") +
         (u.row_tiles.empty() ? "" : ", row_tiles=" + py::repr(py::cast(RowTiles(u))).cast<std::string>()) +
         ")";
}

py::dict TrafficDict(const OperandTraffic& t) {
  py::dict d;
  d["dram_read_bits"] = t.dram_read_bits;
  d["dram_write_bits"] = t.dram_write_bits;
  d["buffer_read_bits"] = t.buffer_read_bits;
  d["buffer_write_bits"] = t.buffer_write_bits;
  d["dram_fetches"] = t.dram_fetches;
  d["dram_read_bytes"] = t.dram_read_bits / 8.0;
  d["dram_write_bytes"] = t.dram_write_bits / 8.0;
  return d;
}

}  // namespace

void BindMemory(py::module_& m) {
  m.def("sram_pj_per_bit", &SramPjPerBit, py::arg("capacity_bytes"));

  py::class_<MemoryHierarchy>(m, "MemoryHierarchy")
      .def(py::init([](double dram_bandwidth_bits, bool dram_channel_per_operand,
                       double dram_pj_per_bit, int64_t buffer_bytes, double buffer_bandwidth_bits,
                       std::optional<double> buffer_pj_per_bit, bool buffer_double_buffered,
                       int64_t register_bytes, std::optional<double> register_pj_per_bit,
                       bool stationary_double_buffered, int psum_bits,
                       double dram_capacity_bytes, bool whole_stationary_tiles) {
             MemoryHierarchy h;
             h.dram_bandwidth_bits = dram_bandwidth_bits;
             h.dram_channel_per_operand = dram_channel_per_operand;
             h.dram_pj_per_bit = dram_pj_per_bit;
             h.buffer_bytes = buffer_bytes;
             h.buffer_bandwidth_bits = buffer_bandwidth_bits;
             h.buffer_double_buffered = buffer_double_buffered;
             h.register_bytes = register_bytes;
             h.stationary_double_buffered = stationary_double_buffered;
             h.psum_bits = psum_bits;
             h.dram_capacity_bytes = dram_capacity_bytes;
             h.whole_stationary_tiles = whole_stationary_tiles;
             Validate(h);  // before the capacities feed the energy defaults
             h.buffer_pj_per_bit = buffer_pj_per_bit ? *buffer_pj_per_bit : SramPjPerBit(buffer_bytes);
             h.register_pj_per_bit =
                 register_pj_per_bit ? *register_pj_per_bit : SramPjPerBit(register_bytes);
             Validate(h);
             return h;
           }),
           py::arg("dram_bandwidth_bits") = 256.0, py::arg("dram_channel_per_operand") = false,
           py::arg("dram_pj_per_bit") = kDramPjPerBit, py::arg("buffer_bytes") = 1 << 20,
           py::arg("buffer_bandwidth_bits") = 2048.0, py::arg("buffer_pj_per_bit") = py::none(),
           py::arg("buffer_double_buffered") = true, py::arg("register_bytes") = 64,
           py::arg("register_pj_per_bit") = py::none(),
           py::arg("stationary_double_buffered") = false, py::arg("psum_bits") = 32,
           py::arg("dram_capacity_bytes") = 0.0, py::arg("whole_stationary_tiles") = false)
      .def_readonly("dram_bandwidth_bits", &MemoryHierarchy::dram_bandwidth_bits)
      .def_readonly("dram_channel_per_operand", &MemoryHierarchy::dram_channel_per_operand)
      .def_readonly("dram_pj_per_bit", &MemoryHierarchy::dram_pj_per_bit)
      .def_readonly("buffer_bytes", &MemoryHierarchy::buffer_bytes)
      .def_readonly("buffer_bandwidth_bits", &MemoryHierarchy::buffer_bandwidth_bits)
      .def_readonly("buffer_pj_per_bit", &MemoryHierarchy::buffer_pj_per_bit)
      .def_readonly("buffer_double_buffered", &MemoryHierarchy::buffer_double_buffered)
      .def_readonly("register_bytes", &MemoryHierarchy::register_bytes)
      .def_readonly("register_pj_per_bit", &MemoryHierarchy::register_pj_per_bit)
      .def_readonly("stationary_double_buffered", &MemoryHierarchy::stationary_double_buffered)
      .def_readonly("psum_bits", &MemoryHierarchy::psum_bits)
      .def_readonly("dram_capacity_bytes", &MemoryHierarchy::dram_capacity_bytes)
      .def_readonly("whole_stationary_tiles", &MemoryHierarchy::whole_stationary_tiles)
      .def("__repr__", [](const MemoryHierarchy& h) {
        return "MemoryHierarchy(dram_bandwidth_bits=" + std::to_string(h.dram_bandwidth_bits) +
               ", buffer_bytes=" + std::to_string(h.buffer_bytes) + ", buffer_bandwidth_bits=" +
               std::to_string(h.buffer_bandwidth_bits) + ")";
      });

  py::class_<TileMapping>(m, "TileMapping")
      .def(py::init([](int64_t tm, int64_t tn, int64_t tk, std::string order,
                       bool accumulate_in_buffer, int64_t a_align_m, int64_t a_align_k,
                       int64_t b_align_k, int64_t b_align_n, int span_a, int span_b,
                       int span_c) {
             TileMapping t;
             t.a_align_m = a_align_m;
             t.a_align_k = a_align_k;
             t.b_align_k = b_align_k;
             t.b_align_n = b_align_n;
             t.span_a = span_a;
             t.span_b = span_b;
             t.span_c = span_c;
             t.tm = tm;
             t.tn = tn;
             t.tk = tk;
             t.order = std::move(order);
             t.accumulate_in_buffer = accumulate_in_buffer;
             Validate(t);
             return t;
           }),
           py::arg("tm"), py::arg("tn"), py::arg("tk"), py::arg("order") = "mnk",
           py::arg("accumulate_in_buffer") = true, py::arg("a_align_m") = 1,
           py::arg("a_align_k") = 1, py::arg("b_align_k") = 1, py::arg("b_align_n") = 1,
           py::arg("span_a") = 0, py::arg("span_b") = 0, py::arg("span_c") = 0)
      .def_readonly("tm", &TileMapping::tm)
      .def_readonly("tn", &TileMapping::tn)
      .def_readonly("tk", &TileMapping::tk)
      .def_readonly("order", &TileMapping::order)
      .def_readonly("accumulate_in_buffer", &TileMapping::accumulate_in_buffer)
      .def_readonly("a_align_m", &TileMapping::a_align_m)
      .def_readonly("a_align_k", &TileMapping::a_align_k)
      .def_readonly("b_align_k", &TileMapping::b_align_k)
      .def_readonly("b_align_n", &TileMapping::b_align_n)
      .def_readonly("span_a", &TileMapping::span_a)
      .def_readonly("span_b", &TileMapping::span_b)
      .def_readonly("span_c", &TileMapping::span_c)
      .def("describe", &TileMapping::Describe)
      .def("__repr__", [](const TileMapping& t) { return "TileMapping(" + t.Describe() + ")"; });

  py::class_<OperandTraffic>(m, "OperandTraffic")
      .def_readonly("dram_read_bits", &OperandTraffic::dram_read_bits)
      .def_readonly("dram_write_bits", &OperandTraffic::dram_write_bits)
      .def_readonly("buffer_read_bits", &OperandTraffic::buffer_read_bits)
      .def_readonly("buffer_write_bits", &OperandTraffic::buffer_write_bits)
      .def_readonly("dram_fetches", &OperandTraffic::dram_fetches)
      .def("as_dict", &TrafficDict);

  py::class_<MemoryMetrics>(m, "MemoryMetrics")
      .def_readonly("tensors", &MemoryMetrics::tensors)
      .def_readonly("dram_read_bits", &MemoryMetrics::dram_read_bits)
      .def_readonly("dram_write_bits", &MemoryMetrics::dram_write_bits)
      .def_readonly("buffer_read_bits", &MemoryMetrics::buffer_read_bits)
      .def_readonly("buffer_write_bits", &MemoryMetrics::buffer_write_bits)
      .def_readonly("register_access_bits", &MemoryMetrics::register_access_bits)
      .def_readonly("compulsory_dram_bits", &MemoryMetrics::compulsory_dram_bits)
      .def_readonly("buffer_bytes_used", &MemoryMetrics::buffer_bytes_used)
      .def_readonly("tile_steps", &MemoryMetrics::tile_steps)
      .def_readonly("distinct_tile_shapes", &MemoryMetrics::distinct_tile_shapes)
      .def_readonly("macs", &MemoryMetrics::macs)
      .def_readonly("num_pes", &MemoryMetrics::num_pes)
      .def_readonly("array_cycles", &MemoryMetrics::array_cycles)
      .def_readonly("first_fetch_cycles", &MemoryMetrics::first_fetch_cycles)
      .def_readonly("overlapped_cycles", &MemoryMetrics::overlapped_cycles)
      .def_readonly("last_writeback_cycles", &MemoryMetrics::last_writeback_cycles)
      .def_readonly("extra_op_cycles", &MemoryMetrics::extra_op_cycles)
      .def_readonly("dram_stall_cycles", &MemoryMetrics::dram_stall_cycles)
      .def_readonly("cycles", &MemoryMetrics::cycles)
      .def_readonly("roofline_cycles", &MemoryMetrics::roofline_cycles)
      .def_readonly("latency_us", &MemoryMetrics::latency_us)
      .def_readonly("mapping", &MemoryMetrics::mapping)
      .def_property_readonly("dram_read_bytes",
                             [](const MemoryMetrics& x) { return x.dram_read_bits / 8.0; })
      .def_property_readonly("dram_write_bytes",
                             [](const MemoryMetrics& x) { return x.dram_write_bits / 8.0; })
      .def_property_readonly("buffer_read_bytes",
                             [](const MemoryMetrics& x) { return x.buffer_read_bits / 8.0; })
      .def_property_readonly("buffer_write_bytes",
                             [](const MemoryMetrics& x) { return x.buffer_write_bits / 8.0; })
      .def("as_dict", [](const MemoryMetrics& x) {
        py::dict d;
        d["dram_read_bits"] = x.dram_read_bits; d["dram_write_bits"] = x.dram_write_bits;
        d["dram_read_bytes"] = x.dram_read_bits / 8.0;
        d["dram_write_bytes"] = x.dram_write_bits / 8.0;
        d["buffer_read_bits"] = x.buffer_read_bits; d["buffer_write_bits"] = x.buffer_write_bits;
        d["buffer_read_bytes"] = x.buffer_read_bits / 8.0;
        d["buffer_write_bytes"] = x.buffer_write_bits / 8.0;
        d["register_access_bits"] = x.register_access_bits;
        d["compulsory_dram_bits"] = x.compulsory_dram_bits;
        d["buffer_bytes_used"] = x.buffer_bytes_used; d["tile_steps"] = x.tile_steps;
        d["distinct_tile_shapes"] = x.distinct_tile_shapes; d["macs"] = x.macs;
        d["num_pes"] = x.num_pes;
        d["array_cycles"] = x.array_cycles; d["first_fetch_cycles"] = x.first_fetch_cycles;
        d["overlapped_cycles"] = x.overlapped_cycles;
        d["last_writeback_cycles"] = x.last_writeback_cycles;
        d["extra_op_cycles"] = x.extra_op_cycles; d["dram_stall_cycles"] = x.dram_stall_cycles;
        d["cycles"] = x.cycles; d["roofline_cycles"] = x.roofline_cycles;
        d["latency_us"] = x.latency_us; d["mapping"] = x.mapping;
        py::dict tensors;
        for (const auto& kv : x.tensors) tensors[py::str(kv.first)] = TrafficDict(kv.second);
        d["tensors"] = tensors;
        return d;
      })
      .def("__repr__", [](const MemoryMetrics& x) {
        return "MemoryMetrics(cycles=" + std::to_string(x.cycles) + ", dram_read_bits=" +
               std::to_string(x.dram_read_bits) + ", dram_write_bits=" +
               std::to_string(x.dram_write_bits) + ", mapping='" + x.mapping + "')";
      });

  m.def(
      "_analyze_memory",
      [](const GemmCall& call, const Hardware& hw, const Dataflow& df, const MemoryHierarchy& mem,
         const TileMapping& t) { return AnalyzeMemory(call.workload, hw, df, mem, t); },
      py::arg("call"), py::arg("hardware"), py::arg("dataflow"), py::arg("memory"),
      py::arg("mapping"), py::call_guard<py::gil_scoped_release>());
  // One call under many mappings with one cached array model (what a mapping search does).
  m.def(
      "_analyze_memory_many",
      [](int64_t m_, int64_t n, int64_t k, const Hardware& hw, const Dataflow& df,
         const MemoryHierarchy& mem, const std::vector<TileMapping>& mappings, int64_t batch,
         int bits_a, int bits_b, int bits_c) {
        const GemmWorkload w = MakeWorkload(m_, n, k, batch, bits_a, bits_b, bits_c, 0, 0);
        const ArrayModel array = CachedArrayModel(ExactArrayModel(w, hw, df, mem));
        std::vector<MemoryMetrics> out;
        out.reserve(mappings.size());
        for (const auto& t : mappings) out.push_back(AnalyzeMemory(w, array, mem, t));
        return out;
      },
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("hardware"), py::arg("dataflow"),
      py::arg("memory"), py::arg("mappings"), py::arg("batch"), py::arg("bits_a"),
      py::arg("bits_b"), py::arg("bits_c"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "_roofline_cycles",
      [](const GemmCall& call, int64_t num_pes, double rate, const MemoryHierarchy& mem,
         double ops_rate) { return RooflineCycles(call.workload, num_pes, rate, mem, ops_rate); },
      py::arg("call"), py::arg("num_pes"), py::arg("macs_per_pe_per_cycle"), py::arg("memory"),
      py::arg("ops_per_pe_per_cycle") = 0.0);
  m.def(
      "buffer_bytes_needed",
      [](int64_t m_, int64_t n, int64_t k, const MemoryHierarchy& mem, const TileMapping& t,
         int bits_a, int bits_b) {
        return BufferBytesNeeded(MakeWorkload(m_, n, k, 1, bits_a, bits_b, 32, 0, 0), mem, t);
      },
      "Bytes the buffer must hold: input tiles (x2 when double-buffered) + the C tile.",
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("memory"), py::arg("mapping"),
      py::arg("bits_a") = 32, py::arg("bits_b") = 32);

  m.def(
      "default_tile_mapping",
      [](int64_t m_, int64_t n, int64_t k, const MemoryHierarchy& mem, int64_t rows, int64_t cols,
         int bits, int64_t batch, std::optional<int> bits_a, std::optional<int> bits_b,
         std::optional<int> bits_c) {
        GemmWorkload w = MakeWorkload(m_, n, k, batch, bits_a.value_or(bits),
                                      bits_b.value_or(bits), bits_c.value_or(bits), 0, 0);
        return DefaultTileMapping(w, mem, rows, cols);
      },
      "A mapping without search: C's tile stays in the buffer while K streams (order \"mnk\"),\n"
      "as large as half the buffer allows; K tiles fill the rest (double-buffered), >= 4 steps.\n"
      "``bits`` is each operand's width unless ``bits_a`` / ``bits_b`` / ``bits_c`` say.",
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("memory"), py::arg("rows"),
      py::arg("cols"), py::arg("bits") = 32, py::kw_only(), py::arg("batch") = 1,
      py::arg("bits_a") = py::none(), py::arg("bits_b") = py::none(),
      py::arg("bits_c") = py::none());

  py::class_<MacSpec>(m, "MacSpec")
      .def(py::init([](int bits_a, int bits_b, double rate, double pj, std::string format,
                       const std::vector<std::pair<int64_t, int64_t>>& row_tiles) {
             MacSpec u{bits_a, bits_b, rate, pj, std::move(format), {}};
             for (const auto& [min_rows, rows] : row_tiles) u.row_tiles.push_back({min_rows, rows});
             return u;
           }),
           py::arg("bits_a"), py::arg("bits_b"), py::arg("macs_per_pe_per_cycle"),
           py::arg("pj_per_mac"), py::arg("format") = "",
           py::arg("row_tiles") = std::vector<std::pair<int64_t, int64_t>>{},
           "One MAC unit. ``row_tiles``: (min_rows, rows) pairs, ascending: a call of min_rows "
           "to rows rows is computed, and charged, as one tile of that many rows (its kernel's "
           "thread block); checked with the table.")
      .def_readonly("bits_a", &MacSpec::bits_a)
      .def_readonly("bits_b", &MacSpec::bits_b)
      .def_readonly("macs_per_pe_per_cycle", &MacSpec::macs_per_pe_per_cycle)
      .def_readonly("pj_per_mac", &MacSpec::pj_per_mac)
      .def_readonly("format", &MacSpec::format)
      .def_property_readonly("row_tiles", &RowTiles)
      .def("row_tile_for", &MacSpec::RowTileFor, py::arg("m"),
           "The rows of the tile a call of ``m`` rows runs in; 0 when no range holds ``m``.")
      .def("__repr__", &MacSpecRepr);

  py::class_<PrecisionTable>(m, "PrecisionTable")
      .def(py::init([](std::vector<MacSpec> units) {
             PrecisionTable t{std::move(units)};
             Validate(t);
             return t;
           }),
           py::arg("units"))
      .def_static("horowitz_45nm", &PrecisionTable::Horowitz45nm)
      .def_static("horowitz_45nm_packed", &PrecisionTable::Horowitz45nmPacked,
                  py::arg("int8_rate"), py::arg("int4_rate"))
      .def_readonly("units", &PrecisionTable::units)
      .def("lookup", &PrecisionTable::Lookup, py::arg("bits_a"), py::arg("bits_b"),
           py::arg("float_codes") = false, py::return_value_policy::copy)
      // One unit a line, in the constructor's own spelling (eval gives the table back).
      .def("__repr__", [](const PrecisionTable& t) {
        std::string s = "PrecisionTable(units=[";
        for (const MacSpec& u : t.units) s += "\n    " + MacSpecRepr(u) + ",";
        return s + (t.units.empty() ? "])" : "\n])");
      });

  m.def("integer_mac_pj", &IntegerMacPj, py::arg("bits_a"), py::arg("bits_b"),
        py::arg("accumulator_bits"));

  py::class_<EnergyBreakdown>(m, "EnergyBreakdown")
      .def_readonly("mac_pj", &EnergyBreakdown::mac_pj)
      .def_readonly("register_pj", &EnergyBreakdown::register_pj)
      .def_readonly("buffer_pj", &EnergyBreakdown::buffer_pj)
      .def_readonly("dram_pj", &EnergyBreakdown::dram_pj)
      .def_readonly("total_pj", &EnergyBreakdown::total_pj)
      .def("as_dict", [](const EnergyBreakdown& e) {
        py::dict d;
        d["mac_pj"] = e.mac_pj; d["register_pj"] = e.register_pj;
        d["buffer_pj"] = e.buffer_pj; d["dram_pj"] = e.dram_pj; d["total_pj"] = e.total_pj;
        return d;
      });

  m.def(
      "call_energy",
      [](const MemoryMetrics& mm, const MemoryHierarchy& mem, const MacSpec& mac,
         int64_t extra_ops, int64_t extra_register_bits) {
        GemmWorkload w;
        w.extra_ops = extra_ops;
        w.extra_register_bits = extra_register_bits;
        return CallEnergy(w, mm, mem, mac);
      },
      "Energy of one call by component (MACs, registers, buffer, DRAM), in pJ.\n\n"
      "``mac`` is the MAC unit the call runs on, e.g.\n"
      "``PrecisionTable.horowitz_45nm().lookup(bits_a, bits_b)``; ``extra_ops`` are charged one\n"
      "MAC each and ``extra_register_bits`` (partial sums rescaled per K-group) at the register\n"
      "file's energy per bit.",
      py::arg("metrics"), py::arg("memory"), py::arg("mac"), py::arg("extra_ops") = 0,
      py::arg("extra_register_bits") = 0);
}
