// Fused attention (FlashAttention's structure, one kernel): softmax(Q K^T) V computed tile by
// tile on chip, the scores never leaving it. What one such kernel costs on an accelerator.
//
// Pure C++17, no TVM; every function is thread-safe (no state). Bad input throws
// std::invalid_argument naming the field ("AttentionCall.kv_heads").
//
// Model (README.md in this directory, "Fused attention"): B sequences, H query heads sharing
// KV key/value heads (GQA: g = H / KV query heads per KV head), S queries against `keys` keys
// of head_dim D. The kernel cuts each (sequence, KV head)'s g x S query rows (its query heads
// stacked, as GQA kernels do) into tiles of q_tile rows; each tile is a work unit on one core:
// its rows' products with the keys they see (causal: the last S of `keys` positions, query i
// seeing keys up to its own, so the upper triangle is skipped), 2 x rows x keys x D MACs at
// the core's PE rate, then the online softmax of its scores on the core's share of the vector
// lanes (VectorOps(softmax) per score: 3 adds, 1 multiply, 1 exp, at the unit's lane cycles),
// serial with the MMAs; it streams its K and V through the shared level at one core's share
// of its bandwidth (shared_bandwidth_bits / count; one core: the DRAM bandwidth). Units run in
// waves over the cores. DRAM moves Q, O and each KV head's K and V once. The call takes the
// launch + max(waves x max(MMA + softmax, stream) of the average unit, DRAM).
#pragma once

#include <cstdint>
#include <string>

namespace tenet {

struct Accelerator;

struct AttentionCall {
  int64_t batch = 1;       // sequences B, >= 1
  int64_t heads = 1;       // query heads H, >= 1
  int64_t kv_heads = 1;    // key/value heads KV, >= 1, dividing heads
  int64_t queries = 1;     // S, >= 1 (1: one decode step)
  int64_t keys = 1;        // keys per sequence, >= 1 (>= queries when causal)
  int64_t head_dim = 64;   // D, >= 1
  int bits = 16;           // Q, K, V, O and the MMA operands, 1..64
  bool causal = false;     // queries are the last S positions; each sees keys up to its own
  int64_t q_tile = 128;    // query rows per work unit (the kernel's tile), >= 1
};
void Validate(const AttentionCall& call);
std::string SerializeAttentionCall(const AttentionCall& call);

struct AttentionCharge {
  AttentionCall call;
  int64_t units = 0, active_cores = 0, waves = 0;
  int64_t macs = 0;              // 2 x B x H x (query, key) pairs x D
  // The PEs the kernel's cycles hold (the array's, times the cores) and their MAC rate at
  // `bits`: its MAC capacity is cycles x num_pes x macs_per_pe_per_cycle, as a GEMM's.
  int64_t num_pes = 0, macs_per_pe_per_cycle = 0;
  int64_t scores = 0;            // B x H x pairs: the softmax's elements
  double mma_cycles = 0;         // one average unit's products on one core
  double softmax_cycles = 0;     // its scores' softmax on one core's lanes
  double stream_cycles = 0;      // its K and V through one core's share of the shared level
  int64_t dram_read_bits = 0, dram_write_bits = 0;
  int64_t dram_cycles = 0;
  int64_t launch_cycles = 0;
  int64_t cycles = 0;            // launch + max(waves x unit, DRAM)
  double latency_us = 0;
};
AttentionCharge ChargeAttention(const AttentionCall& call, const Accelerator& accelerator);

}  // namespace tenet
