// Collectives over the links between chips: what an all-reduce, an all-gather, an
// all-to-all or a point-to-point hand-over costs in time and energy, charged like a GEMM
// (charge.h) or a vector call (vector.h).
//
// Pure C++17, no TVM, no Python; every function is thread-safe (no state). Bad input throws
// std::invalid_argument naming the field, the value and what is accepted.
//
// Model (README.md in this directory, "Links"): every chip sends over its links at `bw`
// bytes/s per direction, each hop costs `a` seconds. A collective of S bytes (the tensor each
// chip holds or ends with) among T chips puts `link_bytes` bytes on each chip's links
// (forwarded bytes included) in `hops` sequential hops, and takes
//   seconds = link_bytes / bw + hops x a.
// Ring (reduce-scatter then all-gather around one ring; all-to-all: each chip's T - 1 blocks
// of S / T travel 1 .. T - 1 hops, so each link carries (T - 1) / 2 x S):
//   all-reduce  2 (T-1)/T S in 2 (T-1) hops;  all-gather (T-1)/T S in T-1 hops;
//   all-to-all  (T-1)/2 S in T-1 hops.
// 2-D torus T = r x c (r the largest divisor of T not above sqrt(T); r = 1 is a ring): along
// rows then columns (an all-reduce: reduce-scatter along rows, all-reduce of the S / r left
// along columns, all-gather along rows):
//   all-reduce  2 (r-1)/r S + 2 (c-1)/c S / r in 2 (r-1 + c-1) hops;
//   all-gather  (r-1)/r S / c + (c-1)/c S in r-1 + c-1 hops;
//   all-to-all  ((r-1) + (c-1)) / 2 S in r-1 + c-1 hops (a ring all-to-all per dimension).
// Switch (every chip one port on a non-blocking switch): all-reduce 2 (T-1)/T S in 2 hops,
//   all-gather and all-to-all (T-1)/T S in 1 hop.
// Point to point (a pipeline stage's hand-over): S in 1 hop, whatever the topology.
// With T = 1 nothing moves (0 s, 0 pJ) but for point to point.
// Energy: each chip's link_bytes x 8 x pj_per_bit (the energy of one chip, as a GEMM's).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace tenet {

// The collectives a system charges.
enum class Collective { kAllReduce, kAllGather, kAllToAll, kP2P };
const char* CollectiveName(Collective kind);  // "all_reduce", "all_gather", "all_to_all", "p2p"
Collective ParseCollective(const std::string& name);

enum class LinkTopology { kRing, kTorus2d, kSwitch };
const char* LinkTopologyName(LinkTopology topology);  // "ring", "torus2d", "switch"
LinkTopology ParseLinkTopology(const std::string& name);

// Energy per bit sent over a chip-to-chip link: NVIDIA's NVLink-C2C, 1.3 pJ/bit (NVIDIA
// Grace Hopper Superchip Architecture whitepaper, 2022; NVIDIA blog "What Is NVLink?", 2023:
// "consumes just 1.3 picojoules per bit"). A link
// off the package (NVLink over a board, PCIe) costs several times more.
constexpr double kNvlinkC2cPjPerBit = 1.3;

// The links between chips: one bandwidth and latency for every hop, one topology.
struct Link {
  double bandwidth_gbps = 100.0;  // > 0: GB/s (10^9 bytes/s) each chip sends per direction
  double latency_us = 1.0;        // >= 0: per hop
  LinkTopology topology = LinkTopology::kRing;
  double pj_per_bit = kNvlinkC2cPjPerBit;  // >= 0
};
void Validate(const Link& link);

// One collective as the cost model sees it.
struct LinkCall {
  Collective kind = Collective::kAllReduce;
  double bytes = 0;    // >= 0, finite: S
  int64_t chips = 1;   // >= 1: T
};
void Validate(const LinkCall& call);
bool operator==(const LinkCall& a, const LinkCall& b);

// What a collective costs on a link.
struct LinkCharge {
  LinkCall call;
  double link_bytes = 0;  // bytes each chip puts on its links
  int64_t hops = 0;       // sequential hops, each of the link's latency
  double seconds = 0;     // link_bytes / bandwidth + hops x latency
  double latency_us = 0;  // seconds x 10^6
  double energy_pj = 0;   // one chip's: link_bytes x 8 x pj_per_bit
};
LinkCharge ChargeLinkCall(const LinkCall& call, const Link& link);

// (r, c) of a 2-D torus of `chips` chips: r the largest divisor not above sqrt(chips).
std::pair<int64_t, int64_t> TorusShape(int64_t chips);

}  // namespace tenet
