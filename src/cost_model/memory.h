// The buffer level of one GEMM call: a memory hierarchy (DRAM, a global buffer, per-PE
// registers), a tiling of the call into buffer tiles with a tile-loop order, the exact DRAM
// traffic per operand of that loop nest, and the latency of running it with double-buffered
// transfers overlapping the array's work.
//
// Pure C++17; no TVM, no Python. Every function is thread-safe (no shared mutable state;
// CachedArrayModel's memo is behind a mutex). The units are in the field names (bits, bytes,
// cycles, pJ).
// Every bad input throws std::invalid_argument with a message naming the field, the value
// and what is accepted; an exact count that would overflow int64 throws std::overflow_error.
//
// Model (README.md in this directory, "The memory hierarchy", has a worked example):
//  * The call C[M,N] (+)= A[M,K] B[K,N] (batch times) is cut into tiles of Tm x Tn x Tk
//    (edge tiles smaller) visited by three nested tile loops in TileMapping::order, inside a
//    batch loop. At each step the array computes one tile; an operand's tile is fetched from
//    DRAM when its tile index differs from the previous step's. C's tile is written back
//    when the next step has another C tile (or at the end); when it will be visited again
//    (K is not innermost) the partial sums go out and come back at psum_bits.
//  * Latency: fetch(0) + sum over steps s of max(array(s), fetch(s+1) + writeback(s-1))
//    + writeback(last): while the array works on tile s, the next step's inputs come in and
//    the previous step's output goes out (double-buffered buffer).
//  * array(s) comes from an ArrayModel, by default the existing exact analysis
//    (AnalyzeGemm) of the tile shape with the buffer <-> array bandwidth as its bandwidth
//    (so its stall model is today's), run once per distinct tile shape (at most 8).
//  * An operand's tile may span the innermost tile loops (TileMapping::span_*): it then
//    stays in the buffer while they move.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "cost_model/cost_model.h"

namespace tenet {

// Energy of one bit read from or written to an SRAM of `capacity_bytes`, in pJ: Horowitz
// (ISSCC 2014, 45 nm) gives 5 pJ for a 32-bit read from an 8 KB SRAM; the energy of an
// access grows with the wire length, ~ sqrt(capacity) (his 8 KB / 32 KB / 1 MB cache
// figures grow about so), hence 5/32 * sqrt(capacity / 8 KiB) pJ per bit.
double SramPjPerBit(int64_t capacity_bytes);

// Horowitz, ISSCC 2014: 640 pJ for a 32-bit DRAM access, i.e. 20 pJ per bit.
constexpr double kDramPjPerBit = 640.0 / 32.0;

// DRAM -> global buffer -> array, with per-PE registers. Units are in the names.
struct MemoryHierarchy {
  // DRAM <-> buffer bandwidth, bits per cycle, > 0.
  double dram_bandwidth_bits = 256;
  // false: A, B and C share one DRAM channel of dram_bandwidth_bits. true: each operand has
  // its own channel of dram_bandwidth_bits (SCALE-Sim's USER-bandwidth model: one backing
  // interface per SRAM); side data (extra_read_bits) travels with A.
  bool dram_channel_per_operand = false;
  double dram_pj_per_bit = kDramPjPerBit;  // >= 0
  // The global buffer, shared by A, B and C tiles.
  int64_t buffer_bytes = 1 << 20;        // > 0
  // Buffer <-> array, bits per cycle, > 0. An R x C array fed an edge of A and one of B per
  // cycle needs (R + C) x width (16 x 16 at 32 bits: 1,024), plus C leaving.
  double buffer_bandwidth_bits = 2048;
  double buffer_pj_per_bit = SramPjPerBit(1 << 20);  // >= 0
  // Double-buffered: input tiles take twice their size (the next step's tiles load while the
  // current ones are used); transfers overlap compute. Not double-buffered: transfers and
  // compute alternate (no overlap).
  bool buffer_double_buffered = true;
  // Per-PE registers: one element of each operand (two stationary ones when
  // stationary_double_buffered), at their widths, must fit.
  int64_t register_bytes = 64;           // per PE, > 0
  double register_pj_per_bit = SramPjPerBit(64);  // >= 0
  // The next fold's stationary operand (ws: B, is: A; os: C's accumulators) shifts in (os:
  // out) while the current fold computes (the TPU's weight FIFO): folds run in steady state,
  // each max(stream length, rows) cycles, and the load, fill and drain are paid once per
  // call (SteadyFoldCycles, ExactArrayModel).
  bool stationary_double_buffered = false;
  // The stationary operand (ws: B, K x N; is: A, K x M; os: C, M x N) is fetched from DRAM,
  // and computed, in whole array tiles of rows x cols (TPU v1's 256 x 256 weight tiles,
  // Jouppi et al. 2017 Sec. 2, 7): a call is charged with those two dimensions rounded up
  // to whole tiles (ComputedCall, charge.h). Needs one preset dataflow (Validate(Accelerator)).
  bool whole_stationary_tiles = false;
  // Width of partial sums of C (the accumulator) when they are stored and moved, bits.
  int psum_bits = 32;
  // DRAM (HBM) the chip holds, bytes; 0: not known. It changes no charge, only whether a
  // model's weights, KV cache and activations fit the chip (>= 0, finite).
  double dram_capacity_bytes = 0;
};
// Throws std::invalid_argument naming the bad field.
void Validate(const MemoryHierarchy& mem);

// How one call is cut into buffer tiles and in which order the tiles are visited.
struct TileMapping {
  // Tile sizes in elements, >= 1. A tile larger than its dimension covers it whole.
  int64_t tm = 1, tn = 1, tk = 1;
  // The three tile loops, outermost first: a permutation of "mnk", e.g. "mnk" keeps the C
  // tile while K is walked (output-stationary in the buffer), "kmn" walks all of C per K
  // tile (partial sums spill).
  std::string order = "mnk";
  // true: C's tile stays in the buffer while the array adds each K chunk into it. false:
  // the buffer holds no accumulator: every array pass over a K chunk (a fold of ws/is, a
  // stream tile of os) writes its partial C to DRAM, where it is summed later; nothing is
  // read back (SCALE-Sim's ofmap model).
  bool accumulate_in_buffer = true;
  // Input tiles move between DRAM and the buffer in array-aligned lines: A's m and k and
  // B's k and n are padded to multiples of these (>= 1; 1 = no padding). Padding takes DRAM
  // transfer cycles but carries no data (not in the *_bits counts). SCALE-Sim pads the
  // operand dimension that maps onto an array edge: os A m -> rows, B n -> cols; ws A k ->
  // rows, B n -> cols; is A m -> cols, B k -> rows.
  int64_t a_align_m = 1, a_align_k = 1, b_align_k = 1, b_align_n = 1;
  // How many of the innermost tile loops an operand's buffer tile covers whole (0..3): 0 =
  // a new tile with every step that changes its index; 1 = the tile spans the innermost
  // loop (e.g. order "mnk", span_a = 1: A's tile holds all of K for its m, fetched once per
  // m tile however the n loop moves); 3 = the whole operand stays in the buffer, fetched
  // once. Larger spans take more buffer (capacity check) and save refetches. C's span
  // needs accumulate_in_buffer.
  int span_a = 0, span_b = 0, span_c = 0;

  // "tiles m128 n176 k384 order mnk" (+ psum, line and span settings when not default);
  // MemoryMetrics::mapping prefixes the dataflow: "os 16x16 | tiles ...".
  std::string Describe() const;
};
void Validate(const TileMapping& mapping);

// DRAM and buffer traffic of one operand over the call, bits.
struct OperandTraffic {
  int64_t dram_read_bits = 0;    // fetched from DRAM (C: partial sums read back)
  int64_t dram_write_bits = 0;   // written to DRAM (C only)
  int64_t buffer_read_bits = 0;  // read from the buffer by the array (TENET unique volume)
  int64_t buffer_write_bits = 0; // written into the buffer by the array (C)
  int64_t dram_fetches = 0;      // tile transfers from DRAM (C: write-backs)
};

struct MemoryMetrics {
  std::map<std::string, OperandTraffic> tensors;  // "A", "B", "C"
  int64_t dram_read_bits = 0, dram_write_bits = 0;      // all operands + extra_read_bits
  int64_t buffer_read_bits = 0, buffer_write_bits = 0;  // array side (SCALE-Sim's SRAM reads)
  int64_t register_access_bits = 0;  // per MAC: A and B read, accumulator read and written
  int64_t compulsory_dram_bits = 0;  // every element once at its width + extra_read_bits
  int64_t buffer_bytes_used = 0;     // what the capacity check found the tiles need
  int64_t tile_steps = 0;            // steps of the tile loop nest (times batch)
  int64_t distinct_tile_shapes = 0;
  int64_t macs = 0;
  // The PEs the call's cycles hold: the array's (ChargeOnCores: every core's, busy or idle).
  // The MAC capacity a utilisation divides by is cycles x num_pes x the MAC rate.
  int64_t num_pes = 0;
  // Latency: cycles = first_fetch_cycles + overlapped_cycles + last_writeback_cycles
  // + extra_op_cycles; array_cycles is the sum over steps of the array's cycles on its tile
  // (buffer <-> array stalls included), dram_stall_cycles = cycles - array_cycles - extra_op_cycles.
  int64_t array_cycles = 0;
  int64_t first_fetch_cycles = 0;
  int64_t overlapped_cycles = 0;
  int64_t last_writeback_cycles = 0;
  int64_t extra_op_cycles = 0;
  int64_t dram_stall_cycles = 0;
  int64_t cycles = 0;
  int64_t roofline_cycles = 0;  // RooflineCycles at the array's MAC rate
  double latency_us = 0;        // cycles / clock
  std::string mapping;          // dataflow, tiles and order, readable
};

// The latency no mapping can beat: max(ceil(macs / (num_pes x rate) + extra_ops / (num_pes
// x ops rate)), ceil(compulsory DRAM bits / DRAM bandwidth)); with a channel per operand,
// the busiest channel's compulsory bits. `ops_per_pe_per_cycle` is the rate of non-MAC ops
// (the hardware's base rate, MacRate::base); <= 0 means the MAC rate. Throws on a rate <= 0
// or num_pes <= 0.
int64_t RooflineCycles(const GemmWorkload& w, int64_t num_pes, double macs_per_pe_per_cycle,
                       const MemoryHierarchy& mem, double ops_per_pe_per_cycle = 0);

// Compulsory DRAM bits: A, B and C once each at their widths (times batch), plus
// extra_read_bits; an operand kept on chip (GemmWorkload::a_on_chip, c_on_chip) counts 0.
int64_t CompulsoryDramBits(const GemmWorkload& w);

// Operands kept on chip between calls. OnChipBytes: what the on-chip operands of `w` take
// (all of A at bits_a when a_on_chip, all of C at bits_c when c_on_chip, times batch).
// OnChipFitted: `w` as charged on an on-chip level of `capacity_bytes`: its flags kept when
// its on-chip operands fit there, both cleared (charged through DRAM) when they do not.
// The level is the accelerator's shared one (Cores::shared_bytes) on an accelerator of
// cores, else its buffer, where AnalyzeMemory counts them beside the mapping's tiles.
int64_t OnChipBytes(const GemmWorkload& w);
GemmWorkload OnChipFitted(const GemmWorkload& w, int64_t capacity_bytes);

// Bytes the buffer must hold for `mapping`: input tiles (x2 when double-buffered) plus the
// accumulator tile at psum_bits.
int64_t BufferBytesNeeded(const GemmWorkload& w, const MemoryHierarchy& mem,
                          const TileMapping& mapping);

// A mapping that needs no search: C's tile stays in the buffer while K streams through it
// (order "mnk", K innermost, so no partial sums leave). K tiles are cut evenly, long enough
// that a fold's fill and drain (rows + cols - 2) is about 1/16 of the stream, and at least 4
// of them when K allows (the first fetch stays a small part of the call); C's tile takes all
// of M and as many multiples of cols of N as the rest of the buffer holds (inputs
// double-buffered); K, then M, shrink when not even cols columns fit. Refuses (with a
// message) a buffer that cannot hold one element of each operand.
TileMapping DefaultTileMapping(const GemmWorkload& w, const MemoryHierarchy& mem, int64_t rows,
                               int64_t cols);

// The array's work on one buffer tile (one step of the tile loop nest).
struct TileCost {
  int64_t cycles = 0;  // including buffer <-> array bandwidth stalls
  int64_t buffer_read_bits_a = 0, buffer_read_bits_b = 0;  // what the array reads (TENET unique)
  int64_t buffer_write_bits_c = 0;                         // and writes
  int64_t active_pes = 1;
};

// What the buffer level needs from the array: the cost of any tile shape, plus a few facts.
// AnalyzeMemory calls tile_cost once per distinct tile shape (at most 8) of a mapping; a
// mapping search can wrap it in a cache shared across mappings (it must then be
// thread-safe if the search is).
struct ArrayModel {
  std::function<TileCost(int64_t m, int64_t n, int64_t k)> tile_cost;
  int64_t num_pes = 1;
  double macs_per_pe_per_cycle = 1;  // MACs at the call's widths (the roofline's rate)
  double ops_per_pe_per_cycle = 1;   // non-MAC (extra) ops: the hardware's base rate
  double clock_ghz = 1;
  // K elements one array pass adds into C before its partial C leaves the array (ws/is: the
  // array's rows; tiled os: the stream tile); 0 = the whole K tile. Used when the buffer
  // does not accumulate (TileMapping::accumulate_in_buffer = false).
  int64_t k_pass = 0;
  // Cycles paid once per call outside the overlap (the first stationary load when the
  // stationary registers are double-buffered).
  int64_t prologue_cycles = 0;
  // Width in bits of the operand that stays in the PEs (for the register check; 0 = none).
  int stationary_bits = 0;
  std::string name = "array";  // dataflow, for MemoryMetrics::mapping
};

// The array cycles of one buffer tile (m x n x k) with folds in steady state: each fold of
// the preset ('o', 'w', 'i': os / ws / is on a `rows`-row array, the streamed dimension cut
// into `stream_tile` chunks, 0 = uncut, K packed by the MAC `rate`) holds the array for
// max(L, rows) cycles, L its stream length: the next fold's stationary operand shifts in (os:
// the last fold's sums shift out) beside the current fold's stream. The call's first load
// and its one fill and drain are not in it (ExactArrayModel's prologue_cycles).
int64_t SteadyFoldCycles(char preset, int64_t rows, int64_t cols, int64_t stream_tile,
                         int64_t rate, int64_t m, int64_t n, int64_t k);

// The existing exact analysis as an ArrayModel: AnalyzeGemm of each tile with `df` on `hw`,
// the buffer <-> array bandwidth as its bandwidth (today's stall model). With
// mem.stationary_double_buffered (os, ws, is presets) folds run in steady state
// (SteadyFoldCycles): a tile costs max(its folds' steady cycles, its buffer transfer), and
// prologue_cycles is the first stationary load (ws / is: rows) plus one fill and drain
// (rows + cols - 2).
ArrayModel ExactArrayModel(const GemmWorkload& w, const Hardware& hw, const Dataflow& df,
                           const MemoryHierarchy& mem);
// The array every tile of a call on (hw, df) runs on: hw at the buffer <-> array bandwidth,
// prepared once (PrepareArray) so that the tiles of many calls do not parse it again.
std::shared_ptr<const PreparedArray> PrepareTileArray(const Hardware& hw, const Dataflow& df,
                                                      const MemoryHierarchy& mem);
// ExactArrayModel(w, hw, df, mem) with `tiles` = PrepareTileArray(hw, df, mem): equal.
ArrayModel ExactArrayModel(const GemmWorkload& w, std::shared_ptr<const PreparedArray> tiles,
                           const MemoryHierarchy& mem);

// `model` with its tile costs remembered per shape, shared by all copies of the result and
// thread-safe (a mutex around the memo): give one to every mapping a search tries for a call.
ArrayModel CachedArrayModel(ArrayModel model);

// The whole buffer level of one call. Refuses (std::invalid_argument) a mapping whose tiles
// do not fit the buffer or registers. Operands kept on chip (a_on_chip, c_on_chip) are held
// whole in the buffer beside the mapping's tiles when both fit (OnChipFitted with the buffer
// left by the tiles): no DRAM traffic for A, none for C's final values (partial sums that
// leave still do); else they are charged through DRAM.
MemoryMetrics AnalyzeMemory(const GemmWorkload& w, const ArrayModel& array,
                            const MemoryHierarchy& mem, const TileMapping& mapping);
// = AnalyzeMemory(w, ExactArrayModel(w, hw, df, mem), mem, mapping). `df` is the array
// dataflow every tile runs with (a preset, or relations on tiles small enough to enumerate).
MemoryMetrics AnalyzeMemory(const GemmWorkload& w, const Hardware& hw, const Dataflow& df,
                            const MemoryHierarchy& mem, const TileMapping& mapping);

}  // namespace tenet
