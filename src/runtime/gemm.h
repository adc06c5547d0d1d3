// GEMM kernels of the tenet runtime: batched, broadcasting matmul with a fused epilogue on oneDNN.
#ifndef TENET_RUNTIME_GEMM_H_
#define TENET_RUNTIME_GEMM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tenet {
namespace runtime {

/*! \brief The elementwise tail fused after matmul (+ bias). */
enum class Epilogue { kNone, kRelu, kGelu, kGeluTanh };

Epilogue ParseEpilogue(const std::string& name);
float ApplyEpilogue(Epilogue e, float x);
const char* EpilogueName(Epilogue e);

/*!
 * \brief One float32 GEMM over row-major, compact buffers:
 *  c[batch..., M, N] = epilogue(a[batch_a..., M, K] @ b[batch_b..., K, N] + bias[N]).
 *
 * The batch dims of a and b are right-aligned to those of c and may be 1 (broadcast).
 * When `b_transposed`, b is stored as [batch_b..., N, K].
 */
struct GemmArgs {
  std::vector<int64_t> a_shape, b_shape, c_shape;  // as stored
  bool b_transposed = false;
  Epilogue epilogue = Epilogue::kNone;
  const float* a = nullptr;
  const float* b = nullptr;
  const float* bias = nullptr;  // length N, or null
  float* c = nullptr;
};

/*!
 * \brief The float32 tail of an int8 GEMM: out[r, j] = epilogue((float(acc[r, j]) *
 *  sa[r or 0]) * sb[j or 0] + bias[j]).
 *
 * The multiplications happen in this order, as the Relax form the quantize pass writes
 * (astype, multiply by scale_a, multiply by scale_b) computes them.
 */
struct Int8Dequant {
  const float* sa = nullptr;  // [rows] when sa_per_row, else one value
  bool sa_per_row = false;
  const float* sb = nullptr;  // [n] when sb_per_col, else one value
  bool sb_per_col = false;
  const float* bias = nullptr;  // [n], or null
  Epilogue epilogue = Epilogue::kNone;
};

/*! \brief out[rows, n] = dequant(a[rows, k] (int8) @ b[n, k]^T (int8)), the int32 sums exact. */
struct Int8GemmArgs {
  int64_t rows = 0, n = 0, k = 0;
  const int8_t* a = nullptr;
  const int8_t* b = nullptr;
  Int8Dequant dequant;
  float* out = nullptr;
};

/*!
 * \brief out[rows, n] = dequant(a[rows, k] @ b[n, k]^T), int8 operands with exact int32 sums
 *  on any x86-64 CPU (wrapping modulo 2^32 as int32 arithmetic does; none can for k < 2^17):
 *  with `avx2`, operands widened to int16 and multiplied with vpmaddwd in 6 x 2 register
 *  tiles on `threads` OpenMP threads, each block's sums dequantized while in cache; else a
 *  scalar loop on one thread.
 */
void ExactInt8Gemm(int64_t rows, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                   const Int8Dequant& dequant, float* out, int threads, bool avx2);

/*! \brief The most rows DequantGemmRows takes: a decode step's few tokens. */
constexpr int64_t kMaxDequantRows = 4;

/*!
 * \brief c[rows, n] = epilogue(a[rows, k] @ dequantize(weight)^T + bias) for rows <=
 *  kMaxDequantRows, the weight stored [N, K] as int8 with per-output-channel scales (q8,
 *  channel_scale), as packed int4 [N, K/2] with group scales [N, K/G] and zero points
 *  (q4, group_scale, zero_point: [N, K/G] or one value; group_size G even, dividing K), or
 *  as float32 codes [N, K] with group scales [N, K/G] (codes, group_scale, group_size: any
 *  G dividing K), the emulated formats, each weight being codes * scale as in the Relax form.
 *
 * Each weight is read once in its stored width and never written out as float32 (a decode
 * step is bound by reading the weights). Products are those of the Relax form up to where
 * the scale is applied: a scale multiplies the sum of a channel or group, not each weight.
 */
struct DequantRowsArgs {
  int64_t rows = 0, n = 0, k = 0;
  const float* a = nullptr;
  const int8_t* q8 = nullptr;
  const float* channel_scale = nullptr;
  const float* codes = nullptr;
  const uint8_t* q4 = nullptr;
  const float* group_scale = nullptr;
  const float* zero_point = nullptr;
  bool zp_per_group = false;
  int64_t group_size = 0;
  const float* bias = nullptr;
  Epilogue epilogue = Epilogue::kNone;
  float* c = nullptr;
};
void DequantGemmRows(const DequantRowsArgs& args);

/*! \brief w[n, k] = q[n, k] * scale[n]: per-output-channel dequantization of a weight. */
void DequantizeChannel(const int8_t* q, const float* scale, int64_t n, int64_t k, float* w);

/*!
 * \brief w[r, g*G + j] = (float(u) - zp[r, g or 0]) * scale[r, g], u the nibble of element
 *  g*G + j of row r in packed[r, K/2] (element 2i: low nibble of byte i, 2i + 1: high).
 *
 * The operations and their order are those of the Relax form (astype, subtract, multiply).
 */
void DequantizePackedInt4(const uint8_t* packed, const float* zp, bool zp_per_group,
                          const float* scale, int64_t n, int64_t groups, int64_t group_size,
                          float* w);

/*!
 * \brief out[r, j] = dequant(acc[r, j]) for r0 <= r < r0 + rows and j0 <= j < j0 + cols,
 *  on the calling thread; acc and out point at element (r0, j0), their rows lda and ldo apart.
 */
void DequantizeInt8(const Int8Dequant& dequant, const int32_t* acc, int64_t lda, int64_t r0,
                    int64_t rows, int64_t j0, int64_t cols, float* out, int64_t ldo);

/*!
 * \brief How int8 GEMMs are computed on this CPU.
 *
 * oneDNN's s8 x s8 kernels on CPUs without VNNI (plain AVX2, AVX-512 without VNNI) multiply
 * through vpmaddubsw, whose 16-bit pair sums saturate once |a| x |b| gets large (oneDNN's
 * "Nuances of int8 computations"): the int32 result is then wrong. With VNNI (AVX-VNNI,
 * AVX-512 VNNI, AMX) the products accumulate straight into int32 and are exact.
 */
enum class Int8Path {
  kNative,   // one oneDNN s8s8s32 GEMM: exact where the ISA has VNNI
  kWidened,  // operands widened to int16 and multiplied with vpmaddwd (ExactInt8Gemm)
};

/*! \brief The oneDNN ISA this process runs (e.g. "avx2", "avx512_core_vnni"). */
std::string EffectiveIsaName();

/*!
 * \brief The int8 path for this process, chosen once from the effective ISA and confirmed
 *  by a worst-case probe GEMM on each kernel (a native path that gives a wrong sum is never
 *  used). Thread-safe.
 */
Int8Path ChosenInt8Path();
const char* Int8PathName(Int8Path path);

/*!
 * \brief The OpenMP threads a GEMM of `macs` multiply-adds runs on: one below a size where
 *  waking a team costs more than it saves, else omp_get_max_threads() (OMP_NUM_THREADS).
 */
int GemmThreads(int64_t macs);

/*!
 * \brief omp_get_max_threads(), having first kept the calling thread's OpenMP workers off
 *  the CPU it runs on (see WorkerPlacement in gemm.cc; TENET_BIND_THREADS=0 turns it off):
 *  what every parallel region of the GEMM kernels is sized by.
 */
int TeamThreads();

/*!
 * \brief Runs GemmArgs with oneDNN's matmul primitive, keeping the primitives it has built,
 *  one per distinct shape and epilogue, so that a warm call only executes.
 *
 * Thread-safe: the primitive cache is guarded, and each call gives its primitive the calling
 * thread's own scratchpad (oneDNN's user scratchpad mode), so threads may run one primitive
 * at once.
 */
class GemmEngine {
 public:
  GemmEngine();
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  void Run(const GemmArgs& args);
  void RunInt8(const Int8GemmArgs& args);

  struct Impl;  // oneDNN state, defined in gemm.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace runtime
}  // namespace tenet

#endif  // TENET_RUNTIME_GEMM_H_
