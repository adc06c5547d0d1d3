// The mapping search: for one GEMM call, the array dataflow, buffer tiles and tile-loop order
// that minimise latency, energy or their product, over a declared space, exactly.
//
// Pure C++17; no TVM, no Python. SearchMapping is a pure function (its worker threads share
// only its own state); MappingSearch (the per-call cache) is thread-safe behind a mutex.
// Units are in the field names (cycles, pJ, elements, bytes). Every bad input throws
// std::invalid_argument naming the field, the value and what is accepted; a space in which
// no candidate fits the buffer or registers is refused the same way, with the last reason.
// An exact count that would overflow int64 throws std::overflow_error (Python: ValueError).
//
// The declared space (README.md in this directory, "The mapping search"):
//  * Array dataflows: MappingSpace::dataflows in order (the os/ws/is presets on the array,
//    tiled or not, and any TENET relations), plus, for every untiled preset, the preset with
//    its streamed dimension (os k, ws m, is n) cut into chunks of each of
//    MappingSpace::stream_tiles smaller than the call's extent of that dimension. Double
//    buffered stationary loading is used wherever MemoryHierarchy has it (ExactArrayModel).
//  * Tile sizes per dimension of extent D, granule g (the array edge by default):
//    TileSizeCandidates(D, g, max_even_split) = every power-of-two multiple of g below D, the
//    smallest multiple of g that covers D in c even tiles for c = 1..max_even_split, and D
//    itself, each clamped to D (a tile larger than D covers it), ascending, distinct.
//    Relations (Dataflow::preset empty) keep only tiles of at most kMaxEnumeratedInstances
//    MACs (their tiles are enumerated).
//  * The 6 orders of the tile loops (kTileOrders) and accumulate_in_buffer true/false.
//  * No spans (an operand resident over inner loops), no transfer-line padding.
//  Candidates are numbered in the order dataflow, tm, tn, tk, order, accumulate (true first);
//  a candidate whose tiles do not fit is not a mapping (AnalyzeMemory refuses it).
//
// Result: the candidate with the least (objective, secondary, index), where the secondary is
// energy for latency and cycles for energy and EDP: the same mapping whatever the threads.
// Pruning keeps that exactly: a candidate is skipped only when a lower bound of its
// (objective, secondary) is already worse than the best found (or equal, with a later index):
//   cycles >= extra_op_cycles + prologue + max(first fetch + sum of tile array cycles + last
//            write-back, busiest DRAM channel's bits / bandwidth)
// (each step lasts at least its array time and at least its transfers; sums of ceilings bound
// the ceiling of the sum), first with sum of array cycles >= MACs / (PEs x rate), then with
// the exact tile costs; energy >= its exact fixed parts + DRAM bits x (DRAM + buffer pJ/bit).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/energy.h"
#include "cost_model/memory.h"

namespace tenet {

enum class MappingObjective { kLatency, kEnergy, kEdp };
// "latency", "energy", "edp" (anything else is refused with the accepted names).
MappingObjective ParseMappingObjective(const std::string& name);
std::string MappingObjectiveName(MappingObjective objective);

// The tile-loop orders, outermost first, in the order candidates are numbered.
extern const char* const kTileOrders[6];

// What the search may choose from.
struct MappingSpace {
  std::vector<Dataflow> dataflows;    // presets (tiled or not) or relations, >= 1
  std::vector<int64_t> stream_tiles;  // extra stream tilings of each untiled preset, >= 1
  int64_t granule = 0;                // tile granule, elements; 0 = max(rows, cols) of the
                                      // preset dataflows (1 without presets)
  int max_even_split = 8;             // even splits tried per dimension, 1..64

  // os, ws and is (or those named) on a rows x cols array, untiled.
  static MappingSpace Presets(int64_t rows, int64_t cols,
                              const std::vector<std::string>& presets = {"os", "ws", "is"});
  // What mapping="auto" searches for an accelerator whose dataflow is `df`: os, ws and is on
  // its array when `df` is a preset (tiled or not); `df` alone (tiles and orders searched)
  // when it is the user's own relations, so a user-given dataflow still wins.
  // `supported` (preset names, accelerator.h supported_dataflows) narrows the presets to
  // those the array can run; empty: `df` alone, tiles and orders searched.
  static MappingSpace ForDataflow(const Dataflow& df);
  static MappingSpace ForDataflow(const Dataflow& df, const std::vector<std::string>& supported);
};
void Validate(const MappingSpace& space);

// Tile sizes of one dimension (the declared rule above), ascending and distinct.
std::vector<int64_t> TileSizeCandidates(int64_t extent, int64_t granule, int max_even_split);
// The dataflows of `space` for call `w`: the listed ones, then the stream-tiled variants.
std::vector<Dataflow> SearchedDataflows(const MappingSpace& space, const GemmWorkload& w);
// The granule `space` uses.
int64_t SpaceGranule(const MappingSpace& space);

struct MappingSearchOptions {
  MappingObjective objective = MappingObjective::kLatency;
  int threads = 0;  // worker threads, >= 0; 0 = 1, or 2 for spaces of >= 50,000 tile-size items
};

// The chosen mapping of one call, its costs and what the search did.
struct MappingChoice {
  Dataflow dataflow;         // the array dataflow every tile runs with
  TileMapping tiles;         // buffer tiles and tile-loop order
  MemoryMetrics metrics;     // AnalyzeMemory of the choice (metrics.mapping is readable)
  EnergyBreakdown energy;    // CallEnergy of the choice
  double objective = 0;      // cycles, pJ or cycles x pJ
  int64_t index = 0;         // the candidate's number in the declared order
  int64_t candidates = 0;    // candidates in the space (fitting or not)
  int64_t evaluated = 0;     // analysed in full (AnalyzeMemory)
  int64_t pruned = 0;        // skipped by a lower bound
  int64_t unfit = 0;         // tiles that do not fit the buffer (or analyses refused)
  int64_t tile_shapes = 0;   // distinct (dataflow, tile shape) array analyses run
  double search_seconds = 0; // wall time of the search
  std::string Describe() const { return metrics.mapping; }
};

// The best mapping of `w` over `space` on `hw` with `mem`; MAC energy from `table` at the
// call's widths. Refuses an empty or bad space, and a space where nothing fits.
MappingChoice SearchMapping(const GemmWorkload& w, const Hardware& hw, const MappingSpace& space,
                            const MemoryHierarchy& mem, const PrecisionTable& table,
                            const MappingSearchOptions& options = {});

// SearchMapping remembered per distinct call (shape, batch, widths, side data, extra ops,
// extra register bits):
// one per accelerator; thread-safe; a call is searched once however often it is charged.
class MappingSearch {
 public:
  MappingSearch(Hardware hw, MappingSpace space, MemoryHierarchy mem, PrecisionTable table,
                MappingSearchOptions options = {});
  // The cached choice for `w` (searched on the first request).
  MappingChoice Best(const GemmWorkload& w);
  int64_t searches() const;  // distinct calls searched so far

 private:
  using Key =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int, int, int, int64_t, int64_t, int64_t,
                 bool, int, bool, bool>;
  Hardware hw_;
  MappingSpace space_;
  MemoryHierarchy mem_;
  PrecisionTable table_;
  MappingSearchOptions options_;
  mutable std::mutex mu_;
  std::map<Key, std::shared_ptr<const MappingChoice>> done_;
};

}  // namespace tenet
