// The small integer helpers the cost model's .cc files share: overflow-checked int64
// arithmetic, ceiling division, transfer cycles, one tile-loop dimension, number text.
//
// Pure C++17, header-only, thread-safe. A result outside int64 throws std::overflow_error
// "<what> overflows int64 (a x b); ..." (or "+"), which the binding turns into a ValueError;
// callers name the count in `what` (analysis.cc prefixes "cost model: ").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tenet {

inline int64_t CheckedMul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw std::overflow_error(std::string(what) + " overflows int64 (" + std::to_string(a) + " x " +
                              std::to_string(b) + "); the call is too large to count exactly");
  }
  return r;
}

inline int64_t CheckedAdd(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    throw std::overflow_error(std::string(what) + " overflows int64 (" + std::to_string(a) + " + " +
                              std::to_string(b) + "); the call is too large to count exactly");
  }
  return r;
}

// ceil(a / b) for a >= 0 and b > 0, without the a + b - 1 that can leave int64.
inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// ceil(bits / per_cycle) cycles of a transfer; exact integer arithmetic when the rate is a
// whole number (the usual case), so that sums of transfers compare exactly against the
// roofline and the mapping search's bounds equal the model's counts.
inline int64_t CeilCycles(int64_t bits, double per_cycle) {
  if (bits <= 0) return 0;
  if (per_cycle == std::floor(per_cycle) && per_cycle < 9.0e18)
    return CeilDiv(bits, static_cast<int64_t>(per_cycle));
  const double c = std::ceil(static_cast<double>(bits) / per_cycle);
  if (!(c < 9.2e18)) throw std::overflow_error("transfer cycles overflow int64");
  return static_cast<int64_t>(c);
}

inline std::string Str(int64_t v) { return std::to_string(v); }

namespace detail {

// One dimension of a tile loop nest (memory.cc's model, mapping.cc's closed forms):
// extent, tile, number of tiles, size of the last one.
struct Dim {
  char name;
  int64_t extent, tile, count, last;
  int64_t Size(int64_t idx) const { return idx == count - 1 ? last : tile; }
};

// The tile is clipped to the extent (a tile larger than the dimension is the dimension).
inline Dim MakeDim(char name, int64_t extent, int64_t tile) {
  Dim d{name, extent, std::min(tile, extent), 0, 0};
  d.count = CeilDiv(extent, d.tile);
  d.last = extent - (d.count - 1) * d.tile;
  return d;
}

}  // namespace detail
}  // namespace tenet
