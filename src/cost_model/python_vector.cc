// The vector unit, the edge dequantizer, a vector call and its charge (vector.h) bound to
// Python; cost_model.charge_vector is bound beside cost_model.charge (python_values.cc).
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "cost_model/charge.h"
#include "cost_model/vector.h"

namespace py = pybind11;
using namespace tenet;

namespace {

py::dict ClassDict(const VectorOpFigures& v) {
  py::dict d;
  for (int c = 0; c < kVectorOpClasses; ++c)
    d[VectorOpClassName(static_cast<VectorOpClass>(c))] = v[c];
  return d;
}

py::dict CountDict(const VectorOpCounts& v) {
  py::dict d;
  for (int c = 0; c < kVectorOpClasses; ++c)
    d[VectorOpClassName(static_cast<VectorOpClass>(c))] = v[c];
  return d;
}

// `given` (a dict by op class, or None) over `defaults`; an unknown class is refused by name.
VectorOpFigures ClassFigures(const py::object& given, VectorOpFigures defaults,
                             const std::string& field) {
  if (given.is_none()) return defaults;
  if (!py::isinstance<py::dict>(given))
    throw py::type_error("VectorUnit." + field + " must be a dict by op class (add, mul, exp, "
                         "recip, tanh), got " + std::string(py::repr(given)));
  for (const auto& kv : given.cast<py::dict>()) {
    const std::string key = py::str(kv.first);
    int found = -1;
    for (int c = 0; c < kVectorOpClasses; ++c)
      if (key == VectorOpClassName(static_cast<VectorOpClass>(c))) found = c;
    if (found < 0)
      throw std::invalid_argument("VectorUnit." + field + ": unknown op class '" + key +
                                  "'; expected add, mul, exp, recip or tanh");
    defaults[found] = kv.second.cast<double>();
  }
  return defaults;
}

std::string Repr(double v) { return py::repr(py::float_(v)); }

py::dict Fields(const LedgerFields& fields) {
  py::dict d;
  for (const auto& f : fields) {
    const LedgerValue& v = f.second;
    if (const auto* i = std::get_if<int64_t>(&v)) d[f.first] = py::int_(*i);
    else if (const auto* x = std::get_if<double>(&v)) d[f.first] = py::float_(*x);
    else if (const auto* b = std::get_if<bool>(&v)) d[f.first] = py::bool_(*b);
    else d[f.first] = py::str(std::get<std::string>(v));
  }
  return d;
}

}  // namespace

void BindVector(py::module_& m) {
  py::class_<VectorUnit>(
      m, "VectorUnit",
      "The vector unit beside the array (vector.h): float32 lanes charged for non-GEMM "
      "operators. cycles_per_op / pj_per_op are dicts by op class (add, mul, exp, recip, tanh); "
      "classes not given keep the defaults (1, 1, 4, 4, 8 lane cycles; Horowitz ISSCC 2014 "
      "45 nm float32 energies: add 0.9 pJ, multiply 3.7 pJ, the rest as the multiply-adds of "
      "their approximations). buffer_bandwidth_bits None: lanes x 64 (one float32 in and one "
      "out per lane per cycle). schedule: 'pipelined' (overlaps the array, behind the GEMM that "
      "produces its input) or 'serial' (after it). A vector kernel as a GPU runs it: "
      "launch_cycles (fixed per kernel), dram_efficiency (the share of DRAM bandwidth its "
      "streams reach), streams_from_dram (activations read from and output written to DRAM "
      "every kernel), softmax_passes / norm_passes (reads of the input), row_bits_per_cycle "
      "(> 0: one row's passes on one core bound a row-reducing kernel).")
      .def(py::init([](int64_t lanes, const py::object& cycles, const py::object& pj,
                       const py::object& bandwidth, const std::string& schedule,
                       int64_t launch_cycles, double dram_efficiency, bool streams_from_dram,
                       int64_t softmax_passes, int64_t norm_passes, double row_bits_per_cycle) {
             VectorUnit u;
             u.lanes = lanes;
             u.cycles_per_op = ClassFigures(cycles, kVectorCyclesPerOp, "cycles_per_op");
             u.pj_per_op = ClassFigures(pj, kVectorPjPerOp45nm, "pj_per_op");
             u.buffer_bandwidth_bits =
                 bandwidth.is_none() ? double(lanes) * 64 : bandwidth.cast<double>();
             try {
               u.schedule = ParseVectorSchedule(schedule);
             } catch (const std::invalid_argument& e) {
               throw std::invalid_argument(std::string("VectorUnit.schedule: ") + e.what());
             }
             u.launch_cycles = launch_cycles;
             u.dram_efficiency = dram_efficiency;
             u.streams_from_dram = streams_from_dram;
             u.softmax_passes = softmax_passes;
             u.norm_passes = norm_passes;
             u.row_bits_per_cycle = row_bits_per_cycle;
             Validate(u);
             return u;
           }),
           py::arg("lanes") = 16, py::arg("cycles_per_op") = py::none(),
           py::arg("pj_per_op") = py::none(), py::arg("buffer_bandwidth_bits") = py::none(),
           py::arg("schedule") = "pipelined", py::arg("launch_cycles") = 0,
           py::arg("dram_efficiency") = 1.0, py::arg("streams_from_dram") = false,
           py::arg("softmax_passes") = 1, py::arg("norm_passes") = 1,
           py::arg("row_bits_per_cycle") = 0.0)
      .def_readonly("lanes", &VectorUnit::lanes)
      .def_readonly("launch_cycles", &VectorUnit::launch_cycles)
      .def_readonly("dram_efficiency", &VectorUnit::dram_efficiency)
      .def_readonly("streams_from_dram", &VectorUnit::streams_from_dram)
      .def_readonly("softmax_passes", &VectorUnit::softmax_passes)
      .def_readonly("norm_passes", &VectorUnit::norm_passes)
      .def_readonly("row_bits_per_cycle", &VectorUnit::row_bits_per_cycle)
      .def_property_readonly("cycles_per_op",
                             [](const VectorUnit& u) { return ClassDict(u.cycles_per_op); })
      .def_property_readonly("pj_per_op", [](const VectorUnit& u) { return ClassDict(u.pj_per_op); })
      .def_readonly("buffer_bandwidth_bits", &VectorUnit::buffer_bandwidth_bits)
      .def_property_readonly("schedule",
                             [](const VectorUnit& u) { return VectorScheduleName(u.schedule); })
      .def("__eq__", [](const VectorUnit& a, const VectorUnit& b) {
        return a.lanes == b.lanes && a.cycles_per_op == b.cycles_per_op &&
               a.pj_per_op == b.pj_per_op && a.buffer_bandwidth_bits == b.buffer_bandwidth_bits &&
               a.schedule == b.schedule && a.launch_cycles == b.launch_cycles &&
               a.dram_efficiency == b.dram_efficiency &&
               a.streams_from_dram == b.streams_from_dram &&
               a.softmax_passes == b.softmax_passes && a.norm_passes == b.norm_passes &&
               a.row_bits_per_cycle == b.row_bits_per_cycle;
      }, py::is_operator())
      .def("__repr__", [](const VectorUnit& u) {
        return "VectorUnit(lanes=" + std::to_string(u.lanes) + ", buffer_bandwidth_bits=" +
               Repr(u.buffer_bandwidth_bits) + ", schedule='" + VectorScheduleName(u.schedule) +
               "'" + (u.launch_cycles ? ", launch_cycles=" + std::to_string(u.launch_cycles) : "") +
               (u.dram_efficiency != 1 ? ", dram_efficiency=" + Repr(u.dram_efficiency) : "") +
               (u.streams_from_dram ? ", streams_from_dram=True" : "") +
               (u.softmax_passes != 1 ? ", softmax_passes=" + std::to_string(u.softmax_passes) : "") +
               (u.norm_passes != 1 ? ", norm_passes=" + std::to_string(u.norm_passes) : "") +
               (u.row_bits_per_cycle ? ", row_bits_per_cycle=" + Repr(u.row_bits_per_cycle) : "") +
               ")";
      });

  py::class_<EdgeDequantizer>(
      m, "EdgeDequantizer",
      "A dequantizer between the buffer and the array edge (vector.h): weight codes of the "
      "widths in `bits` are turned into the values the PEs multiply, elements_per_cycle per "
      "cycle, in parallel with the array. elements_per_cycle 0: none (dequantization with "
      "place 'weight' runs on the PEs). pj_per_element default: a float16 multiply and add, "
      "Horowitz ISSCC 2014 45 nm (1.1 + 0.4 pJ).")
      .def(py::init([](int64_t elements, std::vector<int> bits, double pj) {
             EdgeDequantizer e{elements, std::move(bits), pj};
             Validate(e);
             return e;
           }),
           py::arg("elements_per_cycle") = 0, py::arg("bits") = std::vector<int>{},
           py::arg("pj_per_element") = 1.1 + 0.4)
      .def_readonly("elements_per_cycle", &EdgeDequantizer::elements_per_cycle)
      .def_property_readonly("bits", [](const EdgeDequantizer& e) { return py::tuple(py::cast(e.bits)); })
      .def_readonly("pj_per_element", &EdgeDequantizer::pj_per_element)
      .def("converts", &EdgeDequantizer::Converts, py::arg("code_bits"),
           "Whether weight codes of this width are dequantized here.")
      .def("__eq__", [](const EdgeDequantizer& a, const EdgeDequantizer& b) {
        return a.elements_per_cycle == b.elements_per_cycle && a.bits == b.bits &&
               a.pj_per_element == b.pj_per_element;
      }, py::is_operator())
      .def("__repr__", [](const EdgeDequantizer& e) {
        std::string bits;
        for (size_t i = 0; i < e.bits.size(); ++i) bits += (i ? ", " : "") + std::to_string(e.bits[i]);
        return "EdgeDequantizer(elements_per_cycle=" + std::to_string(e.elements_per_cycle) +
               ", bits=(" + bits + (e.bits.size() == 1 ? ",)" : ")") + ", pj_per_element=" +
               Repr(e.pj_per_element) + ")";
      });

  py::class_<Cores>(
      m, "Cores",
      "An accelerator of cores (core.h): count cores of the accelerator's array, local buffer "
      "and registers, sharing an on-chip level of shared_bandwidth_bits per cycle (and "
      "shared_bytes), launch_cycles per kernel launch, K split at most max_split_k ways. "
      "Cores() (one core, no launch cost) is charged as an accelerator of one array.")
      .def(py::init([](int64_t count, double shared_bw, int64_t shared_bytes, int64_t launch,
                       int64_t max_split_k) {
             Cores c{count, shared_bw, shared_bytes, launch, max_split_k};
             Validate(c);
             return c;
           }),
           py::arg("count") = 1, py::arg("shared_bandwidth_bits") = 0.0,
           py::arg("shared_bytes") = 0, py::arg("launch_cycles") = 0, py::arg("max_split_k") = 1)
      .def_readonly("count", &Cores::count)
      .def_readonly("shared_bandwidth_bits", &Cores::shared_bandwidth_bits)
      .def_readonly("shared_bytes", &Cores::shared_bytes)
      .def_readonly("launch_cycles", &Cores::launch_cycles)
      .def_readonly("max_split_k", &Cores::max_split_k)
      .def("__eq__", [](const Cores& a, const Cores& b) { return a == b; }, py::is_operator())
      .def("__repr__", [](const Cores& c) {
        return "Cores(count=" + std::to_string(c.count) + ", shared_bandwidth_bits=" +
               Repr(c.shared_bandwidth_bits) + ", shared_bytes=" + std::to_string(c.shared_bytes) +
               ", launch_cycles=" + std::to_string(c.launch_cycles) + ", max_split_k=" +
               std::to_string(c.max_split_k) + ")";
      });

  py::class_<VectorCall>(
      m, "VectorCall",
      "One non-GEMM operator call (vector.h): op (layer_norm, rms_norm, softmax, gelu_tanh, "
      "gelu_erf, silu, add, multiply, divide, rotary, take, mask, quantize, kv_write, relu, tanh), the "
      "output's shape (its last axis is the row), bits_in (activations and parameters read), "
      "bits_out (None: bits_in), operand_elements (add / multiply / divide: the second "
      "operand's elements, None: the output's; rotary: the cos and sin tables' elements, "
      "required; other kinds: 0).")
      .def(py::init([](const std::string& op, std::vector<int64_t> shape, int bits_in,
                       const py::object& bits_out, const py::object& operand_elements) {
             VectorCall c;
             try {
               c.op = ParseVectorOp(op);
             } catch (const std::invalid_argument& e) {
               throw std::invalid_argument(std::string("VectorCall.op: ") + e.what());
             }
             c.shape = std::move(shape);
             c.bits_in = bits_in;
             c.bits_out = bits_out.is_none() ? bits_in : bits_out.cast<int>();
             if (!operand_elements.is_none()) {
               c.operand_elements = operand_elements.cast<int64_t>();
             } else if (c.op == VectorOp::kAdd || c.op == VectorOp::kMultiply ||
                        c.op == VectorOp::kDivide) {
               int64_t n = 1;
               for (int64_t d : c.shape) n = d >= 1 && n <= (INT64_MAX / d) ? n * d : 0;
               c.operand_elements = n;
             }
             Validate(c);
             return c;
           }),
           py::arg("op"), py::arg("shape"), py::arg("bits_in") = 32,
           py::arg("bits_out") = py::none(), py::arg("operand_elements") = py::none())
      .def_property_readonly("op", [](const VectorCall& c) { return VectorOpName(c.op); })
      .def_property_readonly("shape", [](const VectorCall& c) { return py::tuple(py::cast(c.shape)); })
      .def_readonly("bits_in", &VectorCall::bits_in)
      .def_readonly("bits_out", &VectorCall::bits_out)
      .def_readonly("operand_elements", &VectorCall::operand_elements)
      .def_property_readonly("ops", [](const VectorCall& c) { return CountDict(VectorOps(c)); },
                             "Operations by class (add, mul, exp, recip, tanh).")
      .def("to_json", &SerializeVectorCall)
      // Crosses to worker processes (dse, serving) by its fields, checked again on arrival.
      .def(py::pickle(
          [](const VectorCall& c) {
            return py::make_tuple(VectorOpName(c.op), c.shape, c.bits_in, c.bits_out,
                                  c.operand_elements);
          },
          [](const py::tuple& t) {
            if (t.size() != 5) throw std::invalid_argument("VectorCall: a pickled VectorCall has 5 fields");
            VectorCall c;
            c.op = ParseVectorOp(t[0].cast<std::string>());
            c.shape = t[1].cast<std::vector<int64_t>>();
            c.bits_in = t[2].cast<int>();
            c.bits_out = t[3].cast<int>();
            c.operand_elements = t[4].cast<int64_t>();
            Validate(c);
            return c;
          }))
      .def("__eq__", [](const VectorCall& a, const VectorCall& b) { return a == b; },
           py::is_operator())
      .def("__hash__", [](const VectorCall& c) { return py::hash(py::str(SerializeVectorCall(c))); })
      .def("__repr__", [](const VectorCall& c) {
        std::string shape;
        for (size_t i = 0; i < c.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(c.shape[i]);
        return std::string("VectorCall(op='") + VectorOpName(c.op) + "', shape=(" + shape +
               (c.shape.size() == 1 ? ",)" : ")") + ", bits_in=" + std::to_string(c.bits_in) +
               ", bits_out=" + std::to_string(c.bits_out) + ", operand_elements=" +
               std::to_string(c.operand_elements) + ")";
      });

  py::class_<VectorCharge>(m, "VectorCharge",
                           "What a VectorCall costs on an accelerator's vector unit (unit "
                           "'vector'): elements, ops by class, bytes by level, cycles, energy.")
      .def_readonly("call", &VectorCharge::call)
      .def_property_readonly("unit", [](const VectorCharge&) { return "vector"; })
      .def_readonly("elements", &VectorCharge::elements)
      .def_readonly("rows", &VectorCharge::rows)
      .def_property_readonly("ops", [](const VectorCharge& c) { return CountDict(c.ops); })
      .def_property_readonly("buffer_read_bytes",
                             [](const VectorCharge& c) { return c.buffer_read_bits / 8.0; })
      .def_property_readonly("buffer_write_bytes",
                             [](const VectorCharge& c) { return c.buffer_write_bits / 8.0; })
      .def_property_readonly("dram_read_bytes",
                             [](const VectorCharge& c) { return c.dram_read_bits / 8.0; })
      .def_property_readonly("dram_write_bytes",
                             [](const VectorCharge& c) { return c.dram_write_bits / 8.0; })
      .def_readonly("spilled", &VectorCharge::spilled)
      .def_readonly("compute_cycles", &VectorCharge::compute_cycles)
      .def_readonly("buffer_cycles", &VectorCharge::buffer_cycles)
      .def_readonly("dram_cycles", &VectorCharge::dram_cycles)
      .def_readonly("cores", &VectorCharge::cores)
      .def_readonly("shared_cycles", &VectorCharge::shared_cycles)
      .def_readonly("passes", &VectorCharge::passes)
      .def_readonly("row_cycles", &VectorCharge::row_cycles)
      .def_readonly("launch_cycles", &VectorCharge::launch_cycles)
      .def_readonly("cycles", &VectorCharge::cycles)
      .def_readonly("latency_us", &VectorCharge::latency_us)
      .def_property_readonly("schedule",
                             [](const VectorCharge& c) { return VectorScheduleName(c.schedule); })
      .def_readonly("op_pj", &VectorCharge::op_pj)
      .def_readonly("buffer_pj", &VectorCharge::buffer_pj)
      .def_readonly("dram_pj", &VectorCharge::dram_pj)
      .def_readonly("energy_pj", &VectorCharge::total_pj)
      .def("ledger_fields", [](const VectorCharge& c) {
        py::dict d = Fields(VectorLedgerFields(c));
        d["tensors"] = py::dict();
        return d;
      }, "The charge as the ledger's named fields (charge.h VectorLedgerFields: the same names "
         "as Charge.ledger_fields), tensors empty.");
  m.def("_vector_ledger_field_names", []() {
    VectorCharge c;
    c.call.shape = {1};
    std::vector<std::string> names;
    for (const auto& f : VectorLedgerFields(c)) names.push_back(f.first);
    return names;
  });
}
