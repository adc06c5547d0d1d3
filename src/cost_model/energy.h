// Precision-aware PEs (MACs per PE per cycle and energy per MAC by operand widths) and the
// energy of one call by component: MACs, registers, buffer, DRAM.
//
// Pure C++17; no TVM, no Python. Every function is thread-safe (no shared mutable state).
// Every bad input throws std::invalid_argument with a message naming the field, the value
// and what is accepted; widths the PEs do not support are refused the same way.
//
// Default figures are Horowitz, "Computing's energy problem (and what we can do about it)",
// ISSCC 2014, 45 nm, 0.9 V: 8-bit integer add 0.03 pJ, multiply 0.2 pJ; 32-bit integer add
// 0.1 pJ, multiply 3.1 pJ; 16-bit float add 0.4 pJ, multiply 1.1 pJ; 32-bit float add
// 0.9 pJ, multiply 3.7 pJ; SRAM and DRAM per bit in memory.h. Every figure is overridable.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/memory.h"

namespace tenet {

// What a PE does at one pair of operand widths, in one number format.
struct MacSpec {
  int bits_a = 32, bits_b = 32;       // operand widths this MAC unit takes, 1..64
  double macs_per_pe_per_cycle = 1;   // > 0
  double pj_per_mac = 0;              // multiply + accumulate, >= 0
  // The codes it multiplies: "" any of its width (integers and floats alike); "int" integer
  // codes only; "float" float codes (fp8, fp4) and, when wider than 8 bits, any narrower
  // operand widened to it. A data sheet's int8 and fp8 peaks are two units of 8 bits.
  std::string format;
  // The rows the unit's kernel computes a call in, by the call's rows M: a call of
  // `min_rows` to `rows` rows runs as one tile of `rows` rows, and is charged so
  // (ComputedCall, charge.h), e.g. cuBLAS's SGEMM on a GPU's CUDA cores, 32-row thread
  // blocks for 9 to 32 rows. Ascending, disjoint; empty, or M in no range: M rows.
  struct RowTile {
    int64_t min_rows = 1, rows = 1;  // 1 <= min_rows <= rows
  };
  std::vector<RowTile> row_tiles;
  // The rows of the tile a call of `m` rows runs in; 0 when no range holds m.
  int64_t RowTileFor(int64_t m) const;
};

// MAC units of a PE by operand widths and format. Operands narrower than a unit run on it (a
// 4-bit weight on an 8-bit multiplier); Lookup picks, among the units at least as wide as
// both operands that take their codes (MacSpec::format), the one with the most MACs per
// cycle, then the least energy. No such unit: the widths are not supported (refused with a
// message). Float codes of 8 bits or fewer on a chip without a float unit of their width run
// emulated on its narrowest wider float unit, at that unit's rate (MacBits).
struct PrecisionTable {
  std::vector<MacSpec> units;

  // Horowitz's figures: float32 (3.7 + 0.9 pJ), float16 (1.1 + 0.4), int8 with a 32-bit
  // accumulator (0.2 + 0.1), each one MAC per PE per cycle. The int8 entry also serves
  // int4 operands; (16, 8) / (16, 4) mixed operands run on the float16 unit.
  static PrecisionTable Horowitz45nm();
  // Like Horowitz45nm, with `int8_rate` / `int4_rate` MACs per cycle at 8 / 4 bits (a
  // multiplier split into narrower lanes), and an int4 unit whose multiply takes 1/4 of
  // int8's energy (integer multiply energy grows with the product of the widths).
  static PrecisionTable Horowitz45nmPacked(double int8_rate, double int4_rate);

  const MacSpec& Lookup(int bits_a, int bits_b, bool float_codes = false) const;
};

// The operand width whose MAC rate (Hardware::macs_per_pe_per_cycle) the call runs at on
// `table`'s unit for it: the unit's width when the unit is a wider "float" unit than the
// call's operands (codes emulated on it), else 0 (the wider operand's: RateBits).
int EmulatedMacBits(const GemmWorkload& w, const PrecisionTable& table);
void Validate(const PrecisionTable& table);

// Integer MAC energy in pJ at these widths, scaled from Horowitz's 8-bit figures: multiply
// 0.2 pJ x (a x b) / 64 (an array multiplier's area grows with the product of the widths;
// 32 x 32 gives 3.2 against his 3.1), plus an add of accumulator_bits at 0.03 pJ per 8 bits.
double IntegerMacPj(int bits_a, int bits_b, int accumulator_bits);

struct EnergyBreakdown {
  double mac_pj = 0;       // (macs + extra_ops) x pj_per_mac
  double register_pj = 0;  // (register_access_bits + extra_register_bits) x register_pj_per_bit
  double buffer_pj = 0;    // (array-side buffer bits + DRAM-side fills and drains) x pj/bit
  double dram_pj = 0;      // (DRAM read + write bits) x dram_pj_per_bit
  double total_pj = 0;
};

// Energy of one call from its memory metrics (AnalyzeMemory) and the MAC unit it runs on.
// Extra (dequantization) ops are charged one MAC each; the workload's extra register bits
// (partial sums rescaled per K-group) at the register energy per bit, beside the MACs' own.
EnergyBreakdown CallEnergy(const GemmWorkload& w, const MemoryMetrics& mm,
                           const MemoryHierarchy& mem, const MacSpec& mac);

}  // namespace tenet
