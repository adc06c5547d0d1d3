// Weight-only quantized GEMMs for a few rows, reading each weight once in its stored width.
#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/gemm.h"

namespace tenet {
namespace runtime {

namespace {

// As for the other few-row kernels: split the columns over the threads only for a weight
// large enough for that to pay.
constexpr int64_t kMinParallelWeights = 1 << 18;

__attribute__((target("avx2,fma"))) inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// sums[r] = a[r, :] . float(q[:]) for R rows; U independent 8-wide chains per row hide the
// latency of the fused multiply-add.
template <int R, int U>
__attribute__((target("avx2,fma"))) void Int8DotAvx2(const float* a, int64_t k, const int8_t* q,
                                                     float* sums) {
  __m256 acc[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) acc[r][u] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 * U <= k; t += 8 * U) {
    for (int u = 0; u < U; ++u) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + t + 8 * u));
      const __m256 w = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
      for (int r = 0; r < R; ++r) {
        acc[r][u] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * k + t + 8 * u), w, acc[r][u]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 total = acc[r][0];
    for (int u = 1; u < U; ++u) total = _mm256_add_ps(total, acc[r][u]);
    float sum = HorizontalSum(total);
    for (int64_t v = t; v < k; ++v) sum += a[r * k + v] * static_cast<float>(q[v]);
    sums[r] = sum;
  }
}

// sums[r] = sum_g scale[g] * (a[r, g-th group] . (float(u) - zp[g])) over the packed int4
// row, with a split into its even (ae) and odd (ao) elements: byte i holds element 2i in its
// low nibble and 2i + 1 in its high one. Needs G / 2 to be a multiple of 8.
template <int R>
__attribute__((target("avx2,fma"))) void Int4DotAvx2(const float* ae, const float* ao,
                                                     int64_t half_k, const uint8_t* packed,
                                                     const float* scale, const float* zp,
                                                     int64_t groups, int64_t half_group,
                                                     float* sums) {
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  const __m256i low_nibble = _mm256_set1_epi32(15);
  for (int64_t g = 0; g < groups; ++g) {
    const __m256 z = _mm256_set1_ps(zp[g]);
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t i = g * half_group; i < (g + 1) * half_group; i += 8) {
      const __m256i bytes =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + i)));
      // (u - zp) is exact in float32, as in the Relax form's subtract.
      const __m256 lo = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(bytes, low_nibble)), z);
      const __m256 hi = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(bytes, 4)), z);
      for (int r = 0; r < R; ++r) {
        acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(ae + r * half_k + i), lo, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(ao + r * half_k + i), hi, acc[r][1]);
      }
    }
    const __m256 s = _mm256_set1_ps(scale[g]);
    for (int r = 0; r < R; ++r) {
      total[r] = _mm256_fmadd_ps(_mm256_add_ps(acc[r][0], acc[r][1]), s, total[r]);
    }
  }
  for (int r = 0; r < R; ++r) sums[r] = HorizontalSum(total[r]);
}

// sums[r] = a[r, :] . (codes[:] * scale[g of the element]): each weight is formed in a
// register as the Relax form's multiply forms it (codes * scale in float32), never stored.
template <int R>
__attribute__((target("avx2,fma"))) void CodesDotAvx2(const float* a, int64_t k,
                                                      const float* codes, const float* scale,
                                                      int64_t group_size, float* sums) {
  __m256 acc[R][2];
  float tail[R];
  for (int r = 0; r < R; ++r) {
    acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    tail[r] = 0.f;
  }
  for (int64_t start = 0, g = 0; start < k; start += group_size, ++g) {
    const __m256 s = _mm256_set1_ps(scale[g]);
    const int64_t end = start + group_size;
    int64_t t = start;
    for (; t + 16 <= end; t += 16) {
      const __m256 w0 = _mm256_mul_ps(_mm256_loadu_ps(codes + t), s);
      const __m256 w1 = _mm256_mul_ps(_mm256_loadu_ps(codes + t + 8), s);
      for (int r = 0; r < R; ++r) {
        acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * k + t), w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * k + t + 8), w1, acc[r][1]);
      }
    }
    for (; t < end; ++t) {
      const float w = codes[t] * scale[g];
      for (int r = 0; r < R; ++r) tail[r] += a[r * k + t] * w;
    }
  }
  for (int r = 0; r < R; ++r) sums[r] = HorizontalSum(_mm256_add_ps(acc[r][0], acc[r][1])) + tail[r];
}

void CodesDotScalar(int rows, const float* a, int64_t k, const float* codes, const float* scale,
                    int64_t group_size, float* sums) {
  for (int r = 0; r < rows; ++r) {
    float sum = 0.f;
    for (int64_t t = 0; t < k; ++t) sum += a[r * k + t] * (codes[t] * scale[t / group_size]);
    sums[r] = sum;
  }
}

void Int8DotScalar(int rows, const float* a, int64_t k, const int8_t* q, float* sums) {
  for (int r = 0; r < rows; ++r) {
    float sum = 0.f;
    for (int64_t t = 0; t < k; ++t) sum += a[r * k + t] * static_cast<float>(q[t]);
    sums[r] = sum;
  }
}

void Int4DotScalar(int rows, const float* ae, const float* ao, int64_t half_k,
                   const uint8_t* packed, const float* scale, const float* zp, int64_t groups,
                   int64_t half_group, float* sums) {
  for (int r = 0; r < rows; ++r) {
    float sum = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      float part = 0.f;
      for (int64_t i = g * half_group; i < (g + 1) * half_group; ++i) {
        part += ae[r * half_k + i] * (static_cast<float>(packed[i] & 15) - zp[g]);
        part += ao[r * half_k + i] * (static_cast<float>(packed[i] >> 4) - zp[g]);
      }
      sum += part * scale[g];
    }
    sums[r] = sum;
  }
}

bool HasAvx2Fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

void Int8Dot(int rows, const float* a, int64_t k, const int8_t* q, float* sums) {
  if (!HasAvx2Fma()) return Int8DotScalar(rows, a, k, q, sums);
  switch (rows) {
    case 1: return Int8DotAvx2<1, 4>(a, k, q, sums);
    case 2: return Int8DotAvx2<2, 4>(a, k, q, sums);
    case 3: return Int8DotAvx2<3, 2>(a, k, q, sums);
    default: return Int8DotAvx2<4, 2>(a, k, q, sums);
  }
}

void Int4Dot(int rows, const float* ae, const float* ao, int64_t half_k, const uint8_t* packed,
             const float* scale, const float* zp, int64_t groups, int64_t half_group,
             float* sums) {
  if (!HasAvx2Fma() || half_group % 8 != 0) {
    return Int4DotScalar(rows, ae, ao, half_k, packed, scale, zp, groups, half_group, sums);
  }
  switch (rows) {
    case 1: return Int4DotAvx2<1>(ae, ao, half_k, packed, scale, zp, groups, half_group, sums);
    case 2: return Int4DotAvx2<2>(ae, ao, half_k, packed, scale, zp, groups, half_group, sums);
    case 3: return Int4DotAvx2<3>(ae, ao, half_k, packed, scale, zp, groups, half_group, sums);
    default: return Int4DotAvx2<4>(ae, ao, half_k, packed, scale, zp, groups, half_group, sums);
  }
}

void CodesDot(int rows, const float* a, int64_t k, const float* codes, const float* scale,
              int64_t group_size, float* sums) {
  if (!HasAvx2Fma()) return CodesDotScalar(rows, a, k, codes, scale, group_size, sums);
  switch (rows) {
    case 1: return CodesDotAvx2<1>(a, k, codes, scale, group_size, sums);
    case 2: return CodesDotAvx2<2>(a, k, codes, scale, group_size, sums);
    case 3: return CodesDotAvx2<3>(a, k, codes, scale, group_size, sums);
    default: return CodesDotAvx2<4>(a, k, codes, scale, group_size, sums);
  }
}

// Applies the per-column tail: (sum [* channel scale]) + bias, then the epilogue.
float Finish(float sum, const DequantRowsArgs& g, int64_t j) {
  if (g.channel_scale) sum *= g.channel_scale[j];
  if (g.bias) sum += g.bias[j];
  return ApplyEpilogue(g.epilogue, sum);
}

}  // namespace

void DequantGemmRows(const DequantRowsArgs& g) {
  const int64_t rows = g.rows, n = g.n, k = g.k;
  const int parts = n * k >= kMinParallelWeights ? TeamThreads() : 1;
  if (g.q8) {
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
    for (int64_t j = 0; j < n; ++j) {
      float sums[kMaxDequantRows];
      Int8Dot(static_cast<int>(rows), g.a, k, g.q8 + j * k, sums);
      for (int64_t r = 0; r < rows; ++r) g.c[r * n + j] = Finish(sums[r], g, j);
    }
    return;
  }
  if (g.codes) {
    const int64_t groups = k / g.group_size;
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
    for (int64_t j = 0; j < n; ++j) {
      float sums[kMaxDequantRows];
      CodesDot(static_cast<int>(rows), g.a, k, g.codes + j * k, g.group_scale + j * groups,
               g.group_size, sums);
      for (int64_t r = 0; r < rows; ++r) g.c[r * n + j] = Finish(sums[r], g, j);
    }
    return;
  }
  // Packed int4: the activation rows split into even and odd elements once per call.
  const int64_t half_k = k / 2, groups = k / g.group_size, half_group = g.group_size / 2;
  std::vector<float> even(static_cast<size_t>(rows * half_k)), odd(even.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half_k; ++i) {
      even[r * half_k + i] = g.a[r * k + 2 * i];
      odd[r * half_k + i] = g.a[r * k + 2 * i + 1];
    }
  }
#pragma omp parallel for schedule(static) num_threads(parts) if (parts > 1)
  for (int64_t j = 0; j < n; ++j) {
    float sums[kMaxDequantRows];
    std::vector<float> zp_row;
    const float* zp = g.zero_point + (g.zp_per_group ? j * groups : 0);
    if (!g.zp_per_group) {
      zp_row.assign(static_cast<size_t>(groups), g.zero_point[0]);
      zp = zp_row.data();
    }
    Int4Dot(static_cast<int>(rows), even.data(), odd.data(), half_k, g.q4 + j * half_k,
            g.group_scale + j * groups, zp, groups, half_group, sums);
    for (int64_t r = 0; r < rows; ++r) g.c[r * n + j] = Finish(sums[r], g, j);
  }
}

}  // namespace runtime
}  // namespace tenet
