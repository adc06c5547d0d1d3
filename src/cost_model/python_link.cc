// Collectives over links (link.h) bound to Python: cost_model.Link, LinkCall, LinkCharge and
// charge_link, beside charge (GemmCall) and charge_vector (VectorCall).
#include <cstdint>
#include <string>

#include <pybind11/pybind11.h>

#include "cost_model/link.h"

namespace py = pybind11;
using namespace tenet;

namespace {

std::string Repr(double v) { return py::repr(py::float_(v)); }

// A Python int or float (not a bool), as a double, or a TypeError naming the field.
double Number(const py::object& value, const char* field) {
  if (py::isinstance<py::bool_>(value) ||
      !(py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)))
    throw py::type_error(std::string(field) + " must be a number, got " +
                         std::string(py::str(py::type::of(value).attr("__name__"))) + " " +
                         std::string(py::repr(value)));
  return value.cast<double>();
}

int64_t Integer(const py::object& value, const char* field) {
  if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value))
    throw py::type_error(std::string(field) + " must be an integer, got " +
                         std::string(py::str(py::type::of(value).attr("__name__"))) + " " +
                         std::string(py::repr(value)));
  return value.cast<int64_t>();
}

Link MakeLink(const py::object& bandwidth, const py::object& latency,
              const std::string& topology, const py::object& pj) {
  Link l;
  l.bandwidth_gbps = Number(bandwidth, "Link.bandwidth_gbps");
  l.latency_us = Number(latency, "Link.latency_us");
  l.topology = ParseLinkTopology(topology);
  l.pj_per_bit = Number(pj, "Link.pj_per_bit");
  Validate(l);
  return l;
}

LinkCall MakeCall(const std::string& kind, const py::object& nbytes, const py::object& chips) {
  LinkCall c;
  c.kind = ParseCollective(kind);
  c.bytes = Number(nbytes, "LinkCall.nbytes");
  c.chips = Integer(chips, "LinkCall.chips");
  Validate(c);
  return c;
}

}  // namespace

void BindLink(py::module_& m) {
  m.attr("NVLINK_C2C_PJ_PER_BIT") = kNvlinkC2cPjPerBit;
  py::class_<Link>(
      m, "Link",
      "The links between chips (link.h): bandwidth_gbps (GB/s each chip sends per direction), "
      "latency_us per hop, topology ('ring', 'torus2d', 'switch') and pj_per_bit (energy of "
      "a bit sent; default NVLink-C2C's 1.3 pJ/bit, NVIDIA Grace Hopper whitepaper 2022).")
      .def(py::init(&MakeLink), py::arg("bandwidth_gbps") = 100.0, py::arg("latency_us") = 1.0,
           py::arg("topology") = "ring", py::arg("pj_per_bit") = kNvlinkC2cPjPerBit)
      .def_readonly("bandwidth_gbps", &Link::bandwidth_gbps)
      .def_readonly("latency_us", &Link::latency_us)
      .def_property_readonly("topology", [](const Link& l) { return LinkTopologyName(l.topology); })
      .def_readonly("pj_per_bit", &Link::pj_per_bit)
      .def("__eq__", [](const Link& a, const Link& b) {
        return a.bandwidth_gbps == b.bandwidth_gbps && a.latency_us == b.latency_us &&
               a.topology == b.topology && a.pj_per_bit == b.pj_per_bit;
      }, py::is_operator())
      .def("__hash__", [](const Link& l) {
        return py::hash(py::make_tuple(l.bandwidth_gbps, l.latency_us,
                                       LinkTopologyName(l.topology), l.pj_per_bit));
      })
      .def("__repr__", [](const Link& l) {
        return "Link(bandwidth_gbps=" + Repr(l.bandwidth_gbps) + ", latency_us=" +
               Repr(l.latency_us) + ", topology='" + LinkTopologyName(l.topology) +
               "', pj_per_bit=" + Repr(l.pj_per_bit) + ")";
      })
      .def(py::pickle(
          [](const Link& l) {
            return py::make_tuple(l.bandwidth_gbps, l.latency_us, LinkTopologyName(l.topology),
                                  l.pj_per_bit);
          },
          [](const py::tuple& t) {
            if (t.size() != 4) throw std::invalid_argument("Link: a pickled Link has 4 fields");
            return MakeLink(t[0], t[1], t[2].cast<std::string>(), t[3]);
          }));

  py::class_<LinkCall>(
      m, "LinkCall",
      "One collective (link.h): kind ('all_reduce', 'all_gather', 'all_to_all', 'p2p') of a "
      "tensor of nbytes bytes (the whole result each chip ends with; for an all-to-all the "
      "bytes each chip holds before the exchange) among chips chips.")
      .def(py::init(&MakeCall), py::arg("kind"), py::arg("nbytes"), py::arg("chips"))
      .def_property_readonly("kind", [](const LinkCall& c) { return CollectiveName(c.kind); })
      .def_readonly("nbytes", &LinkCall::bytes)
      .def_readonly("chips", &LinkCall::chips)
      .def("__eq__", [](const LinkCall& a, const LinkCall& b) { return a == b; },
           py::is_operator())
      .def("__hash__", [](const LinkCall& c) {
        return py::hash(py::make_tuple(CollectiveName(c.kind), c.bytes, c.chips));
      })
      .def("__repr__", [](const LinkCall& c) {
        return std::string("LinkCall(kind='") + CollectiveName(c.kind) + "', nbytes=" +
               Repr(c.bytes) + ", chips=" + std::to_string(c.chips) + ")";
      })
      .def(py::pickle(
          [](const LinkCall& c) {
            return py::make_tuple(CollectiveName(c.kind), c.bytes, c.chips);
          },
          [](const py::tuple& t) {
            if (t.size() != 3)
              throw std::invalid_argument("LinkCall: a pickled LinkCall has 3 fields");
            return MakeCall(t[0].cast<std::string>(), t[1], t[2]);
          }));

  py::class_<LinkCharge>(m, "LinkCharge",
                         "What a LinkCall costs on a Link (unit 'link'): bytes each chip puts "
                         "on its links, sequential hops, seconds, one chip's energy.")
      .def_readonly("call", &LinkCharge::call)
      .def_property_readonly("unit", [](const LinkCharge&) { return "link"; })
      .def_readonly("link_bytes", &LinkCharge::link_bytes)
      .def_readonly("hops", &LinkCharge::hops)
      .def_readonly("seconds", &LinkCharge::seconds)
      .def_readonly("latency_us", &LinkCharge::latency_us)
      .def_readonly("energy_pj", &LinkCharge::energy_pj)
      .def("__repr__", [](const LinkCharge& c) {
        return std::string("LinkCharge(") + CollectiveName(c.call.kind) + ", link_bytes=" +
               Repr(c.link_bytes) + ", hops=" + std::to_string(c.hops) + ", seconds=" +
               Repr(c.seconds) + ", energy_pj=" + Repr(c.energy_pj) + ")";
      });

  m.def("charge_link", &ChargeLinkCall, py::arg("call"), py::arg("link"),
        "What a collective costs on a link (link.h's formulas): a LinkCharge.");
}
