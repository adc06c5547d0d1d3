// Overflow-checked int64 arithmetic for the buffer level's and the mapping search's exact counts.
//
// Pure C++17, header-only, thread-safe. A result outside int64 throws std::overflow_error
// "<what> overflows int64 (a x b)" (or "+"), which the binding turns into a ValueError.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tenet {

inline int64_t CheckedMul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw std::overflow_error(std::string(what) + " overflows int64 (" + std::to_string(a) +
                              " x " + std::to_string(b) + ")");
  }
  return r;
}

inline int64_t CheckedAdd(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    throw std::overflow_error(std::string(what) + " overflows int64 (" + std::to_string(a) +
                              " + " + std::to_string(b) + ")");
  }
  return r;
}

}  // namespace tenet
