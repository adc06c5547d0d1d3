// An accelerator: the one named value a model is charged to. Hardware (PE array,
// interconnect, clock, MAC rates by width) and dataflow (TENET's space and time maps), plus
// the memory hierarchy the array sits in, what its PEs cost by operand widths, and how a
// call is cut into buffer tiles. Serialized in one JSON form (SerializeAccelerator), parsed
// in one place (ParseAccelerator), validated when made (Validate).
//
// Pure C++17, thread-safe (no state), errors as std::invalid_argument naming the field.
#pragma once

#include <string>
#include <vector>

#include "cost_model/core.h"
#include "cost_model/cost_model.h"
#include "cost_model/energy.h"
#include "cost_model/mapping.h"
#include "cost_model/memory.h"
#include "cost_model/vector.h"

namespace tenet {

// How a call's dataflow and buffer tiles are chosen: one field of the accelerator.
struct MappingPolicy {
  // "default": the accelerator's dataflow with DefaultTileMapping of each call (no search);
  // "given": its dataflow with `tiles` for every call; "auto": a mapping search per distinct
  // call over AutoMappingSpace(accelerator) minimising `objective` (charge.h). A dataflow of
  // the user's own relations (TENET files) stays the one dataflow under "auto".
  std::string kind = "default";
  TileMapping tiles;  // used when kind == "given"
  MappingObjective objective = MappingObjective::kLatency;  // used when kind == "auto"
  // "default", "auto (<objective>)" or tiles.Describe(): what the choice is, for messages.
  std::string Describe() const;
};
void Validate(const MappingPolicy& choice);

struct Accelerator {
  std::string name = "accelerator";
  Hardware hardware;
  Dataflow dataflow;
  // DRAM -> buffer -> array -> registers. Made from TENET's .p line by MemoryFromTenet.
  MemoryHierarchy memory;
  // The PEs' MAC units: which operand widths they take ("not supported" otherwise) and pJ
  // per MAC. Their MACs per cycle are not a second setting: they must equal
  // hardware.macs_per_pe_per_cycle at the wider width (WithMacRates fills them; the JSON
  // form does not store them).
  PrecisionTable precision = WithMacRates(PrecisionTable::Horowitz45nm(), MacRate{});
  MappingPolicy mapping;
  // The array dataflows the hardware can run, by preset name ("os", "ws", "is"): what
  // mapping "auto" may choose among. Empty: the accelerator's own dataflow alone (the only
  // value for the user's own relations, e.g. a TENET-file accelerator). A preset dataflow
  // must be among a non-empty list (SupportedDataflowsFor gives the usual default).
  std::vector<std::string> supported_dataflows;

  // Beside the array (vector.h): the vector unit non-GEMM operators are charged on, and the
  // edge dequantizer weight dequantization (Dequantization::kWeight) runs on when it
  // converts the weight width (none by default: it then runs on the PEs).
  VectorUnit vector;
  EdgeDequantizer edge_dequantizer;

  // How many of this (hardware, dataflow, memory) core there are, the on-chip level they
  // share and the launch cost (core.h). The default, one core without a launch cost, is
  // charged exactly as an accelerator of one array. With several, `memory`'s buffer and
  // registers are one core's and its dram_bandwidth_bits the whole accelerator's.
  Cores cores;

  // `energies`'s units with their rates set from `rate` at max(bits_a, bits_b).
  static PrecisionTable WithMacRates(PrecisionTable energies, const MacRate& rate);
};
// Checks the parts, that the precision table's rates are the hardware's, and that the
// dataflow runs on the hardware (a probe GEMM larger than the array is costed), so a bad
// accelerator fails where it is made, not at the first call.
void Validate(const Accelerator& acc);

// What an accelerator of dataflow `df` supports when nothing else is said: os, ws and is on
// the array for a preset (the mapping search's space before dataflows were a field), the
// relation itself (empty) otherwise.
std::vector<std::string> SupportedDataflowsFor(const Dataflow& df);

// The hierarchy TENET's .p line "L1 L2 bandwidth avg_latency" describes: register_bytes =
// L1 (per-PE buffer), buffer_bytes = L2 (shared buffer), dram_bandwidth_bits = bandwidth;
// SRAM energies follow the capacities (SramPjPerBit); avg_latency stays TENET's delay figure.
// The other fields keep MemoryHierarchy's defaults.
MemoryHierarchy MemoryFromTenet(const Hardware& hw);

// The one serialized form of an accelerator, JSON, round-trip exact:
//   {"name": str, "hardware": {"name", "pe_domain", "interconnect", "bandwidth_bits",
//    "avg_latency", "clock_ghz", "l1_bytes", "l2_bytes",
//    "macs_per_pe_per_cycle": int | {"<bits>": int, ...}},
//    "dataflow": {"name", "space", "time", "preset", "rows", "cols", "tiling": {str: int}},
//    "memory": {every MemoryHierarchy field by name; dram_capacity_bytes only when > 0,
//               whole_stationary_tiles only when true},
//    "precision": [{"bits_a", "bits_b", "pj_per_mac", "format"?, "row_tiles"?: [{"min_rows",
//                   "rows"}, ...]}, ...]   (rates: the hardware's),
//    "mapping": {"kind": "default"} | {"kind": "given", every TileMapping field by name}
//               | {"kind": "auto", "objective": "latency" | "energy" | "edp"},
//    "supported_dataflows": ["os" | "ws" | "is", ...]   (absent: SupportedDataflowsFor),
//    "vector": {"lanes", "cycles_per_op": {"add", "mul", "exp", "recip", "tanh"},
//               "pj_per_op": {same keys}, "buffer_bandwidth_bits", "schedule"},
//    "edge_dequantizer": {"elements_per_cycle", "bits": [int, ...], "pj_per_element"},
//    "cores": {"count", "shared_bandwidth_bits", "shared_bytes", "launch_cycles",
//              "max_split_k"}}
//   (vector, edge_dequantizer, cores absent: their defaults, no dequantizer, one core)
// ParseAccelerator(SerializeAccelerator(a)) == a; it validates (Validate(Accelerator)) and
// names the key of any bad or missing field.
std::string SerializeAccelerator(const Accelerator& acc);
Accelerator ParseAccelerator(const std::string& json);

}  // namespace tenet
