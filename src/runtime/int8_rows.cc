// Exact int8 x int8 -> int32 products for a few rows, with the weight widened to 16 bits.
#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/gemm.h"

namespace tenet {
namespace runtime {

namespace {

// A few-row product streams the weight once; split its columns over the threads only when
// the weight is large enough for that to pay (as the float32 few-row path does).
constexpr int64_t kMinParallelWeights = 1 << 18;

// Rows handled together: each 16-element slice of a weight row is widened once and
// multiplied with this many activation rows while it sits in a register.
constexpr int kRowBlock = 4;

template <int R>
__attribute__((target("avx2"))) void DotRowsAvx2(const int16_t* a16, int64_t kp, const int8_t* b,
                                                 int64_t k, int32_t* out) {
  __m256i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
  int64_t t = 0;
  for (; t + 16 <= k; t += 16) {
    // vpmaddwd multiplies 16-bit pairs into exact 32-bit sums: |(-128) x (-128) x 2| = 2^15
    // fits, unlike the 16-bit pair sums of vpmaddubsw that int8 kernels without VNNI use.
    const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + t)));
    for (int r = 0; r < R; ++r) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a16 + r * kp + t));
      acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(x, w));
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc[r]), _mm256_extracti128_si256(acc[r], 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    int32_t sum = _mm_cvtsi128_si32(s);
    for (int64_t u = t; u < k; ++u) sum += int32_t{a16[r * kp + u]} * b[u];
    out[r] = sum;
  }
}

void DotRowsScalar(int rows, const int16_t* a16, int64_t kp, const int8_t* b, int64_t k,
                   int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    int32_t sum = 0;
    for (int64_t t = 0; t < k; ++t) sum += int32_t{a16[r * kp + t]} * b[t];
    out[r] = sum;
  }
}

void DotRows(bool avx2, int rows, const int16_t* a16, int64_t kp, const int8_t* b, int64_t k,
             int32_t* out) {
  if (!avx2) return DotRowsScalar(rows, a16, kp, b, k, out);
  switch (rows) {
    case 1: return DotRowsAvx2<1>(a16, kp, b, k, out);
    case 2: return DotRowsAvx2<2>(a16, kp, b, k, out);
    case 3: return DotRowsAvx2<3>(a16, kp, b, k, out);
    default: return DotRowsAvx2<kRowBlock>(a16, kp, b, k, out);
  }
}

}  // namespace

void ExactInt8FewRows(int64_t rows, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                      int32_t* c) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  // The activation rows, widened once; padded so a row starts 32-byte apart.
  const int64_t kp = (k + 15) / 16 * 16;
  std::vector<int16_t> a16(static_cast<size_t>(rows * kp), 0);
  for (int64_t r = 0; r < rows; ++r) std::copy(a + r * k, a + (r + 1) * k, a16.data() + r * kp);
  const int parts = n * k >= kMinParallelWeights ? omp_get_max_threads() : 1;
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
  for (int64_t j = 0; j < n; ++j) {
    int32_t sums[kRowBlock];
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      const int block = static_cast<int>(std::min<int64_t>(kRowBlock, rows - r0));
      DotRows(avx2, block, a16.data() + r0 * kp, kp, b + j * k, k, sums);
      for (int r = 0; r < block; ++r) c[(r0 + r) * n + j] = sums[r];
    }
  }
}

}  // namespace runtime
}  // namespace tenet
