// Collectives over links (link.h): the formulas, one per topology and collective.
#include "cost_model/link.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace tenet {
namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

const char* CollectiveName(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kP2P: return "p2p";
  }
  return "?";
}

Collective ParseCollective(const std::string& name) {
  for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kAllToAll,
                       Collective::kP2P})
    if (name == CollectiveName(k)) return k;
  throw std::invalid_argument("collective must be one of all_reduce, all_gather, all_to_all, "
                              "p2p, got '" + name + "'");
}

const char* LinkTopologyName(LinkTopology topology) {
  switch (topology) {
    case LinkTopology::kRing: return "ring";
    case LinkTopology::kTorus2d: return "torus2d";
    case LinkTopology::kSwitch: return "switch";
  }
  return "?";
}

LinkTopology ParseLinkTopology(const std::string& name) {
  for (LinkTopology t : {LinkTopology::kRing, LinkTopology::kTorus2d, LinkTopology::kSwitch})
    if (name == LinkTopologyName(t)) return t;
  throw std::invalid_argument("Link.topology must be one of ring, torus2d, switch, got '" +
                              name + "'");
}

void Validate(const Link& link) {
  if (!(std::isfinite(link.bandwidth_gbps) && link.bandwidth_gbps > 0))
    throw std::invalid_argument("Link.bandwidth_gbps must be > 0 and finite, got " +
                                Num(link.bandwidth_gbps));
  if (!(std::isfinite(link.latency_us) && link.latency_us >= 0))
    throw std::invalid_argument("Link.latency_us must be >= 0 and finite, got " +
                                Num(link.latency_us));
  if (!(std::isfinite(link.pj_per_bit) && link.pj_per_bit >= 0))
    throw std::invalid_argument("Link.pj_per_bit must be >= 0 and finite, got " +
                                Num(link.pj_per_bit));
}

void Validate(const LinkCall& call) {
  if (!(std::isfinite(call.bytes) && call.bytes >= 0))
    throw std::invalid_argument("LinkCall.nbytes must be >= 0 and finite, got " +
                                Num(call.bytes));
  if (call.chips < 1)
    throw std::invalid_argument("LinkCall.chips must be >= 1, got " +
                                std::to_string(call.chips));
}

bool operator==(const LinkCall& a, const LinkCall& b) {
  return a.kind == b.kind && a.bytes == b.bytes && a.chips == b.chips;
}

std::pair<int64_t, int64_t> TorusShape(int64_t chips) {
  int64_t rows = 1;
  for (int64_t d = 1; d * d <= chips; ++d)
    if (chips % d == 0) rows = d;
  return {rows, chips / rows};
}

LinkCharge ChargeLinkCall(const LinkCall& call, const Link& link) {
  Validate(call);
  Validate(link);
  LinkCharge out;
  out.call = call;
  const double s = call.bytes;
  const int64_t t = call.chips;
  double bytes = 0;
  int64_t hops = 0;
  if (call.kind == Collective::kP2P) {
    bytes = s;
    hops = 1;
  } else if (t > 1) {
    const auto [r, c] = TorusShape(t);
    const double share = double(t - 1) / double(t) * s;  // what leaves of each chip's own data
    LinkTopology topology = link.topology;
    if (topology == LinkTopology::kTorus2d && r == 1) topology = LinkTopology::kRing;
    switch (topology) {
      case LinkTopology::kRing:
        switch (call.kind) {
          case Collective::kAllReduce: bytes = 2 * share; hops = 2 * (t - 1); break;
          case Collective::kAllGather: bytes = share; hops = t - 1; break;
          default: bytes = double(t - 1) / 2 * s; hops = t - 1; break;  // all-to-all
        }
        break;
      case LinkTopology::kSwitch:
        bytes = call.kind == Collective::kAllReduce ? 2 * share : share;
        hops = call.kind == Collective::kAllReduce ? 2 : 1;
        break;
      case LinkTopology::kTorus2d: {
        const double rr = double(r), cc = double(c);
        switch (call.kind) {
          case Collective::kAllReduce:
            bytes = 2 * (rr - 1) / rr * s + 2 * (cc - 1) / cc * s / rr;
            hops = 2 * (r - 1 + c - 1);
            break;
          case Collective::kAllGather:
            bytes = (rr - 1) / rr * s / cc + (cc - 1) / cc * s;
            hops = r - 1 + c - 1;
            break;
          default:  // all-to-all: a ring all-to-all along each dimension
            bytes = double(r - 1 + c - 1) / 2 * s;
            hops = r - 1 + c - 1;
            break;
        }
        break;
      }
    }
  }
  out.link_bytes = bytes;
  out.hops = hops;
  out.seconds = bytes / (link.bandwidth_gbps * 1e9) + double(hops) * link.latency_us * 1e-6;
  if (!std::isfinite(out.seconds))
    throw std::invalid_argument("a " + std::string(CollectiveName(call.kind)) + " of " +
                                Num(s) + " bytes over this link takes no finite time "
                                "(Link.bandwidth_gbps / Link.latency_us)");
  out.latency_us = out.seconds * 1e6;
  out.energy_pj = bytes * 8 * link.pj_per_bit;
  return out;
}

}  // namespace tenet
