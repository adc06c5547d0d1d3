// Fused attention's charge (see attention.h).
#include "cost_model/attention.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "cost_model/accelerator.h"
#include "cost_model/checked.h"
#include "cost_model/vector.h"

namespace tenet {

void Validate(const AttentionCall& c) {
  for (auto [name, v] : {std::pair{"batch", c.batch}, {"heads", c.heads},
                         {"kv_heads", c.kv_heads}, {"queries", c.queries}, {"keys", c.keys},
                         {"head_dim", c.head_dim}, {"q_tile", c.q_tile}})
    if (v < 1)
      throw std::invalid_argument(std::string("AttentionCall.") + name + " = " + Str(v) +
                                  "; expected >= 1");
  if (c.heads % c.kv_heads != 0)
    throw std::invalid_argument("AttentionCall.kv_heads = " + Str(c.kv_heads) +
                                " must divide heads = " + Str(c.heads));
  if (c.bits < 1 || c.bits > 64)
    throw std::invalid_argument("AttentionCall.bits = " + Str(c.bits) + "; expected 1..64");
  if (c.causal && c.queries > c.keys)
    throw std::invalid_argument("AttentionCall.queries = " + Str(c.queries) +
                                " exceeds keys = " + Str(c.keys) +
                                " in a causal call (queries are the last positions)");
  // The counts below are products of these.
  CheckedMul(CheckedMul(CheckedMul(CheckedMul(c.batch, c.heads, "AttentionCall size"),
                                   c.queries, "AttentionCall size"),
                        CheckedMul(c.keys, c.head_dim, "AttentionCall size"),
                        "AttentionCall size"),
             2 * 64, "AttentionCall size");
}

std::string SerializeAttentionCall(const AttentionCall& c) {
  std::ostringstream os;
  os << "{\"batch\":" << c.batch << ",\"heads\":" << c.heads << ",\"kv_heads\":" << c.kv_heads
     << ",\"queries\":" << c.queries << ",\"keys\":" << c.keys << ",\"head_dim\":"
     << c.head_dim << ",\"bits\":" << c.bits << ",\"causal\":" << (c.causal ? "true" : "false")
     << ",\"q_tile\":" << c.q_tile << '}';
  return os.str();
}

AttentionCharge ChargeAttention(const AttentionCall& call, const Accelerator& acc) {
  Validate(call);
  AttentionCharge ch;
  ch.call = call;
  const int64_t b = call.batch, h = call.heads, kv = call.kv_heads, s = call.queries,
                n = call.keys, d = call.head_dim, g = h / kv;
  // (query, key) pairs of one query head: all S x keys, or causal: query i (of the last S
  // positions) sees keys - S + i + 1 keys.
  const int64_t pairs = call.causal ? s * n - s * (s - 1) / 2 : s * n;
  ch.scores = CheckedMul(CheckedMul(b, h, "attention"), pairs, "attention");
  ch.macs = CheckedMul(CheckedMul(2, ch.scores, "attention"), d, "attention");
  const int64_t tiles = CeilDiv(g * s, call.q_tile);
  ch.units = CheckedMul(CheckedMul(b, kv, "attention"), tiles, "attention");
  const int64_t cores = std::max<int64_t>(1, acc.cores.count);
  ch.active_cores = std::min(ch.units, cores);
  ch.waves = CeilDiv(ch.units, cores);
  const double units = static_cast<double>(ch.units);
  const int64_t core_pes = PrepareArray(acc.hardware, acc.dataflow)->num_pes;
  ch.num_pes = CheckedMul(core_pes, cores, "attention: PEs");
  ch.macs_per_pe_per_cycle = acc.hardware.macs_per_pe_per_cycle.AtBits(call.bits);
  ch.mma_cycles = static_cast<double>(ch.macs) / units /
                  (static_cast<double>(core_pes) * static_cast<double>(ch.macs_per_pe_per_cycle));
  const VectorUnit& v = acc.vector;
  const double per_score = 3 * v.cycles_per_op[static_cast<int>(VectorOpClass::kAdd)] +
                           v.cycles_per_op[static_cast<int>(VectorOpClass::kMul)] +
                           v.cycles_per_op[static_cast<int>(VectorOpClass::kExp)];
  const double lanes = std::max(1.0, static_cast<double>(v.lanes) / static_cast<double>(cores));
  ch.softmax_cycles = static_cast<double>(ch.scores) / units * per_score / lanes;
  // Each unit reads the K and V rows its queries see (on average pairs / S per query row).
  const double kv_bits = 2.0 * static_cast<double>(pairs) / static_cast<double>(s) *
                         static_cast<double>(d) * call.bits;
  const double core_share = cores > 1 ? acc.cores.shared_bandwidth_bits / static_cast<double>(cores)
                                      : acc.memory.dram_bandwidth_bits;
  ch.stream_cycles = kv_bits / core_share;
  ch.dram_read_bits = CheckedMul(CheckedAdd(CheckedMul(b * h, s * d, "attention"),
                                            CheckedMul(2 * b * kv, n * d, "attention"),
                                            "attention"),
                                 call.bits, "attention");
  ch.dram_write_bits = CheckedMul(b * h, s * d * call.bits, "attention");
  ch.dram_cycles = CeilCycles(ch.dram_read_bits + ch.dram_write_bits,
                              acc.memory.dram_bandwidth_bits);
  const double unit = std::max(ch.mma_cycles + ch.softmax_cycles, ch.stream_cycles);
  const double waves = std::ceil(static_cast<double>(ch.waves) * unit);
  if (!(waves < 9.2e18)) throw std::overflow_error("cost model: attention cycles overflow int64");
  ch.launch_cycles = acc.cores.launch_cycles;
  ch.cycles = CheckedAdd(ch.launch_cycles,
                         std::max(static_cast<int64_t>(waves), ch.dram_cycles), "attention");
  ch.latency_us = static_cast<double>(ch.cycles) / (acc.hardware.clock_ghz * 1e3);
  return ch;
}

}  // namespace tenet
