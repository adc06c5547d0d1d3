// Exact int8 x int8 -> int32 GEMMs for CPUs without VNNI: 16-bit operands, vpmaddwd tiles.
#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/gemm.h"

namespace tenet {
namespace runtime {

namespace {

// A register tile: kTileRows activation rows x kTileCols weight rows, each of the 12 outputs
// an int32 vector of 8 partial sums along K. Per 16 values of K a tile issues 12 vpmaddwd,
// 12 vpaddd and 2 widenings (vpmovsxbw) for 192 multiply-adds: 26 vector uops on three
// ports, ~22 multiply-adds a cycle against float32 FMA's 16 (measured on one Sapphire
// Rapids core held to AVX2: 95-120 GOP/s against numpy float32's 65-80 GFLOP/s). The 12
// accumulators and 2 widened weight slices leave 2 of AVX2's 16 registers free; the
// activations come straight from memory as vpmaddwd's second operand.
constexpr int kTileRows = 6;
constexpr int kTileCols = 2;

// K is walked in blocks of at most this many values: a tile's widened activations (6 x
// 2048 x 2 bytes = 24 KB) stay in the 32-48 KB L1, and a column block's weight slice
// (kBlockCols x 2048 bytes = 512 KB) in L2 while every tile of rows passes over it.
constexpr int64_t kBlockK = 2048;
constexpr int64_t kBlockCols = 256;

// Rows taken by one task; tasks are (column block, row chunk) pairs run in column-block
// order, so both cores work on the same weight block at a time.
constexpr int64_t kChunkRows = 16 * kTileRows;

// The sums of the eight int32 lanes of each of v0..v3: {sum v0, sum v1, sum v2, sum v3}.
__attribute__((target("avx2"))) inline __m128i Sum4(__m256i v0, __m256i v1, __m256i v2,
                                                      __m256i v3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// dst[0:2] = (or +=, modulo 2^32) the low two lanes of v.
__attribute__((target("avx2"), always_inline)) inline void Put2(int32_t* dst, __m128i v,
                                                                bool accumulate) {
  if (accumulate) {
    v = _mm_add_epi32(v, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(dst)));
  }
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), v);
}

// acc[r][j] += a16[r, 0:16*steps] . widen(b[j, 0:16*steps]), in 16-bit pairs, for r < R
// and j < C (strides lda and ldb). Kept out of line with its accumulators in a local copy
// and its loops unrolled by pragma: GCC then holds all 12 in registers, where a tile
// written in one function spilled half of them to the stack on every step.
template <int R, int C>
__attribute__((target("avx2"), noinline)) void Accumulate(__m256i (&sums)[R][C],
                                                          const int16_t* a16, int64_t lda,
                                                          const int8_t* b, int64_t ldb,
                                                          int64_t steps) {
  __m256i acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) acc[r][j] = sums[r][j];
  }
  for (int64_t s = 0; s < steps; ++s) {
    __m256i w[C];
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) {
      w[j] = _mm256_cvtepi8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + j * ldb + 16 * s)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256i x =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a16 + r * lda + 16 * s));
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j) {
        acc[r][j] = _mm256_add_epi32(acc[r][j], _mm256_madd_epi16(x, w[j]));
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) sums[r][j] = acc[r][j];
  }
}

// c[r, j] (+)= a16[r, 0:16*steps + tail] . widen(b[j, 0:16*steps + tail]) for r < R, j < C,
// `tail` < 16, the activations in a16 zero from there to the next multiple of 16.
//
// vpmaddwd multiplies 16-bit pairs into exact 32-bit sums: |(-128) x (-128) x 2| = 2^15 fits,
// unlike the 16-bit pair sums of vpmaddubsw that int8 kernels without VNNI use. vpaddd then
// adds modulo 2^32, as int32 arithmetic does, so each sum is exact while it fits int32
// (always for K < 2^17: |sum| <= 2^14 K).
template <int R, int C>
__attribute__((target("avx2"))) void Tile(const int16_t* a16, int64_t lda, const int8_t* b,
                                          int64_t ldb, int64_t steps, int64_t tail, int32_t* c,
                                          int64_t ldc, bool accumulate) {
  __m256i acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < C; ++j) acc[r][j] = _mm256_setzero_si256();
  }
  Accumulate<R, C>(acc, a16, lda, b, ldb, steps);
  if (tail > 0) {
    // The weight's last values are copied out: a 16-byte load past them could leave the
    // buffer (the activations there are zero, so what the copy holds beyond does not count).
    alignas(16) int8_t last[C][16] = {};
    for (int j = 0; j < C; ++j) {
      std::memcpy(last[j], b + j * ldb + 16 * steps, static_cast<size_t>(tail));
    }
    Accumulate<R, C>(acc, a16 + 16 * steps, lda, &last[0][0], 16, 1);
  }
  // Each accumulator's 8 lanes summed, four at a time, and written straight from the
  // vector (through a scalar array, a 16-byte store read back as 32 stalled every tile).
  const __m256i zero = _mm256_setzero_si256();
  if constexpr (C == 2) {
#pragma GCC unroll 8
    for (int r = 0; r < R; r += 2) {
      if (r + 1 < R) {
        const __m128i s = Sum4(acc[r][0], acc[r][1], acc[r + 1][0], acc[r + 1][1]);
        Put2(c + r * ldc, s, accumulate);
        Put2(c + (r + 1) * ldc, _mm_unpackhi_epi64(s, s), accumulate);
      } else {
        Put2(c + r * ldc, Sum4(acc[r][0], acc[r][1], zero, zero), accumulate);
      }
    }
  } else {
#pragma GCC unroll 8
    for (int r = 0; r < R; r += 4) {
      alignas(16) int32_t sums[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(sums),
                      Sum4(acc[r][0], r + 1 < R ? acc[r + 1][0] : zero,
                           r + 2 < R ? acc[r + 2][0] : zero, r + 3 < R ? acc[r + 3][0] : zero));
      for (int i = 0; i < 4 && r + i < R; ++i) {
        int32_t& out = c[(r + i) * ldc];
        // Unsigned, so a sum past int32 wraps as vpaddd does instead of being UB.
        out = accumulate ? static_cast<int32_t>(static_cast<uint32_t>(out) +
                                                static_cast<uint32_t>(sums[i]))
                         : sums[i];
      }
    }
  }
}

using TileFn = void (*)(const int16_t*, int64_t, const int8_t*, int64_t, int64_t, int64_t,
                        int32_t*, int64_t, bool);

template <int R>
constexpr TileFn kTiles[kTileCols] = {Tile<R, 1>, Tile<R, 2>};

// The kernel for an R x C tile (1 <= R <= kTileRows, 1 <= C <= kTileCols).
TileFn TileFor(int rows, int cols) {
  static constexpr const TileFn* kByRows[kTileRows] = {kTiles<1>, kTiles<2>, kTiles<3>,
                                                       kTiles<4>, kTiles<5>, kTiles<6>};
  return kByRows[rows - 1][cols - 1];
}

// dst[r, 0:width16] = a[r, 0:width] widened to int16, zero from width up to width16 (the next
// multiple of 16), for `rows` rows of stride lda (int8) and width16 (int16).
__attribute__((target("avx2"))) void WidenRows(const int8_t* a, int64_t lda, int rows,
                                               int64_t width, int64_t width16, int16_t* dst) {
  for (int r = 0; r < rows; ++r) {
    const int8_t* src = a + r * lda;
    int16_t* out = dst + r * width16;
    int64_t t = 0;
    for (; t + 16 <= width; t += 16) {
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out + t),
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + t))));
    }
    for (; t < width; ++t) out[t] = src[t];
    for (; t < width16; ++t) out[t] = 0;
  }
}

// The same products on one core without AVX2, summed modulo 2^32 as int32 arithmetic does.
void ScalarGemm(int64_t rows, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                const Int8Dequant& dequant, float* out) {
  std::vector<int32_t> sums(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      uint32_t sum = 0;
      for (int64_t t = 0; t < k; ++t) {
        sum += static_cast<uint32_t>(int32_t{a[r * k + t]} * int32_t{b[j * k + t]});
      }
      sums[j] = static_cast<int32_t>(sum);
    }
    DequantizeInt8(dequant, sums.data(), n, r, 1, 0, n, out + r * n, n);
  }
}

}  // namespace

void ExactInt8Gemm(int64_t rows, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                   const Int8Dequant& dequant, float* out, int threads, bool avx2) {
  if (!avx2) return ScalarGemm(rows, n, k, a, b, dequant, out);
  // Balanced K blocks of a multiple of 16 values (3072 -> 2 x 1536, not 2048 + 1024).
  const int64_t k_blocks = (k + kBlockK - 1) / kBlockK;
  const int64_t block_k = ((k + k_blocks - 1) / k_blocks + 15) / 16 * 16;
  // Column blocks narrow enough that every thread gets one, and row chunks, each of about
  // equal size (128 rows: 66 + 62, not 96 + 32), of an even width and whole tiles of rows.
  const auto split = [](int64_t total, int64_t most, int64_t multiple) {
    const int64_t parts = (total + most - 1) / most;
    return ((total + parts - 1) / parts + multiple - 1) / multiple * multiple;
  };
  const int64_t block_cols = split(n, std::min(kBlockCols, (n + threads - 1) / threads), 2);
  const int64_t col_blocks = (n + block_cols - 1) / block_cols;
  const int64_t chunk_rows = split(rows, kChunkRows, kTileRows);
  const int64_t row_chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int64_t tasks = col_blocks * row_chunks;
#pragma omp parallel num_threads(threads) if (threads > 1 && tasks > 1)
  {
    // Per thread, kept from call to call: the widened activations of one tile and K block
    // (up to 24 KB), and a task's int32 sums (up to 96 KB), dequantized into `out` while
    // still in cache instead of going through an [rows, n] int32 buffer.
    thread_local std::vector<int16_t> a_scratch;
    thread_local std::vector<int32_t> c_scratch;
    if (a_scratch.size() < static_cast<size_t>(kTileRows * block_k)) {
      a_scratch.resize(static_cast<size_t>(kTileRows * block_k));
    }
    if (c_scratch.size() < static_cast<size_t>(kChunkRows * block_cols)) {
      c_scratch.resize(static_cast<size_t>(kChunkRows * block_cols));
    }
    int16_t* a16 = a_scratch.data();
    int32_t* c = c_scratch.data();
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t j0 = task / row_chunks * block_cols;
      const int64_t j1 = std::min(n, j0 + block_cols);
      const int64_t r0 = task % row_chunks * chunk_rows;
      const int64_t r1 = std::min(rows, r0 + chunk_rows);
      for (int64_t t0 = 0; t0 < k; t0 += block_k) {
        const int64_t width = std::min(block_k, k - t0);
        const int64_t width16 = (width + 15) / 16 * 16;
        for (int64_t r = r0; r < r1; r += kTileRows) {
          const int tile_rows = static_cast<int>(std::min<int64_t>(kTileRows, r1 - r));
          WidenRows(a + r * k + t0, k, tile_rows, width, width16, a16);
          for (int64_t j = j0; j < j1; j += kTileCols) {
            const int tile_cols = static_cast<int>(std::min<int64_t>(kTileCols, j1 - j));
            TileFor(tile_rows, tile_cols)(a16, width16, b + j * k + t0, k, width / 16,
                                          width % 16, c + (r - r0) * block_cols + (j - j0),
                                          block_cols, t0 > 0);
          }
        }
      }
      DequantizeInt8(dequant, c, block_cols, r0, r1 - r0, j0, j1 - j0, out + r0 * n + j0, n);
    }
  }
}

}  // namespace runtime
}  // namespace tenet
