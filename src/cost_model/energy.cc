// Precision-aware MAC units and the energy of one call by component.
#include "cost_model/energy.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cost_model/checked.h"

namespace tenet {

namespace {

// Horowitz, ISSCC 2014 (45 nm), pJ per operation.
constexpr double kInt8Mul = 0.2, kInt8Add = 0.03, kInt32Add = 0.1;
constexpr double kFp16Mul = 1.1, kFp16Add = 0.4, kFp32Mul = 3.7, kFp32Add = 0.9;

// A sum of published figures rounded to 12 significant digits, so that it prints as the
// sum is written (3.7 + 0.9 is 4.6 in a design file, not 4.6000000000000005); the figures
// themselves have two or three.
double Figure(double pj) {
  if (pj == 0 || !std::isfinite(pj)) return pj;
  const double scale = std::pow(10.0, 11 - std::floor(std::log10(std::fabs(pj))));
  return std::round(pj * scale) / scale;
}

}  // namespace

double IntegerMacPj(int bits_a, int bits_b, int accumulator_bits) {
  if (bits_a < 1 || bits_b < 1 || accumulator_bits < 1)
    throw std::invalid_argument("IntegerMacPj: widths must be >= 1 bit, got " + Str(bits_a) +
                                ", " + Str(bits_b) + ", " + Str(accumulator_bits));
  return Figure(kInt8Mul * bits_a * bits_b / 64.0 + kInt8Add * accumulator_bits / 8.0);
}

PrecisionTable PrecisionTable::Horowitz45nm() {
  PrecisionTable t;
  t.units = {
      {32, 32, 1, Figure(kFp32Mul + kFp32Add)},
      {16, 16, 1, Figure(kFp16Mul + kFp16Add)},
      // int8 x int8 into a 32-bit accumulator: 0.2 + 0.1 (Horowitz's 32-bit add).
      {8, 8, 1, Figure(kInt8Mul + kInt32Add)},
  };
  return t;
}

PrecisionTable PrecisionTable::Horowitz45nmPacked(double int8_rate, double int4_rate) {
  PrecisionTable t = Horowitz45nm();
  t.units[2].macs_per_pe_per_cycle = int8_rate;
  // A 4 x 4 multiply is a quarter of an 8 x 8 one; the 32-bit accumulate stays.
  t.units.push_back({4, 4, int4_rate, Figure(kInt8Mul * 16.0 / 64.0 + kInt32Add)});
  Validate(t);
  return t;
}

void Validate(const PrecisionTable& table) {
  if (table.units.empty())
    throw std::invalid_argument("PrecisionTable.units is empty: list at least one MAC unit "
                                "(bits_a, bits_b, macs_per_pe_per_cycle, pj_per_mac)");
  for (size_t i = 0; i < table.units.size(); ++i) {
    const MacSpec& u = table.units[i];
    const std::string at = "PrecisionTable.units[" + Str(static_cast<int64_t>(i)) + "]";
    if (u.bits_a < 1 || u.bits_a > 64 || u.bits_b < 1 || u.bits_b > 64)
      throw std::invalid_argument(at + " widths must be in 1..64 bits, got (" + Str(u.bits_a) +
                                  ", " + Str(u.bits_b) + ")");
    if (!std::isfinite(u.macs_per_pe_per_cycle) || u.macs_per_pe_per_cycle <= 0)
      throw std::invalid_argument(at + ".macs_per_pe_per_cycle must be > 0, got " +
                                  std::to_string(u.macs_per_pe_per_cycle));
    if (!std::isfinite(u.pj_per_mac) || u.pj_per_mac < 0)
      throw std::invalid_argument(at + ".pj_per_mac must be >= 0, got " +
                                  std::to_string(u.pj_per_mac));
    if (!u.format.empty() && u.format != "int" && u.format != "float")
      throw std::invalid_argument(at + ".format must be \"int\", \"float\" or \"\" (any codes "
                                  "of its width), got \"" + u.format + "\"");
    int64_t above = 0;  // the previous range's last row
    for (size_t j = 0; j < u.row_tiles.size(); ++j) {
      const MacSpec::RowTile& t = u.row_tiles[j];
      if (t.min_rows <= above || t.rows < t.min_rows)
        throw std::invalid_argument(
            at + ".row_tiles[" + Str(static_cast<int64_t>(j)) + "] = (min_rows " +
            Str(t.min_rows) + ", rows " + Str(t.rows) + "): need 1 <= min_rows <= rows, each "
            "range above the previous one's rows (" + Str(above) + ")");
      above = t.rows;
    }
  }
}

int64_t MacSpec::RowTileFor(int64_t m) const {
  for (const RowTile& t : row_tiles)
    if (t.min_rows <= m && m <= t.rows) return t.rows;
  return 0;
}

namespace {
// Whether unit `u` multiplies codes of these widths and kind (MacSpec::format).
bool TakesCodes(const MacSpec& u, bool float_codes) {
  if (u.format == "int") return !float_codes;
  if (u.format == "float") return float_codes || std::max(u.bits_a, u.bits_b) > 8;
  return true;
}
}  // namespace

const MacSpec& PrecisionTable::Lookup(int bits_a, int bits_b, bool float_codes) const {
  Validate(*this);
  const MacSpec* best = nullptr;
  for (const MacSpec& u : units) {
    if (u.bits_a < bits_a || u.bits_b < bits_b || !TakesCodes(u, float_codes)) continue;
    if (!best || u.macs_per_pe_per_cycle > best->macs_per_pe_per_cycle ||
        (u.macs_per_pe_per_cycle == best->macs_per_pe_per_cycle && u.pj_per_mac < best->pj_per_mac))
      best = &u;
  }
  if (!best) {
    std::string have;
    for (const MacSpec& u : units)
      have += (have.empty() ? "" : ", ") + std::string("(") + Str(u.bits_a) + ", " +
              Str(u.bits_b) + (u.format.empty() ? "" : ", " + u.format) + ")";
    throw std::invalid_argument("the PEs do not support " + Str(bits_a) + "-bit A x " +
                                Str(bits_b) + "-bit B" + (float_codes ? " float codes" : "") +
                                ": no MAC unit is that wide" +
                                (float_codes ? " and takes float codes" : "") + " (units: " +
                                have + ")");
  }
  return *best;
}

int EmulatedMacBits(const GemmWorkload& w, const PrecisionTable& table) {
  const MacSpec& u = table.Lookup(w.bits_a, w.bits_b, w.float_codes);
  const int unit = std::max(u.bits_a, u.bits_b);
  return u.format == "float" && unit > std::max(w.bits_a, w.bits_b) ? unit : 0;
}

EnergyBreakdown CallEnergy(const GemmWorkload& w, const MemoryMetrics& mm,
                           const MemoryHierarchy& mem, const MacSpec& mac) {
  Validate(w);
  Validate(mem);
  EnergyBreakdown e;
  e.mac_pj = static_cast<double>(mm.macs + w.extra_ops) * mac.pj_per_mac;
  e.register_pj = (static_cast<double>(mm.register_access_bits) +
                   static_cast<double>(w.extra_register_bits)) *
                  mem.register_pj_per_bit;
  // The array reads and writes the buffer; every DRAM transfer also writes (fetch) or reads
  // (write-back) it once.
  const double buffer_bits = static_cast<double>(mm.buffer_read_bits) + mm.buffer_write_bits +
                             mm.dram_read_bits + mm.dram_write_bits;
  e.buffer_pj = buffer_bits * mem.buffer_pj_per_bit;
  e.dram_pj = (static_cast<double>(mm.dram_read_bits) + mm.dram_write_bits) * mem.dram_pj_per_bit;
  e.total_pj = e.mac_pj + e.register_pj + e.buffer_pj + e.dram_pj;
  return e;
}

}  // namespace tenet
