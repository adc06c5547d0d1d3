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

/*! \brief c[rows, n] (int32) = a[rows, k] (int8) @ b[n, k]^T (int8), exact. */
struct Int8GemmArgs {
  int64_t rows = 0, n = 0, k = 0;
  const int8_t* a = nullptr;
  const int8_t* b = nullptr;
  int32_t* c = nullptr;
};

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
 * \brief out[r, j] = epilogue((float(acc[r, j]) * sa[r or 0]) * sb[j or 0] + bias[j]).
 *
 * The multiplications happen in this order, as the Relax form the quantize pass writes
 * (astype, multiply by scale_a, multiply by scale_b) computes them.
 */
void Int8Epilogue(const int32_t* acc, int64_t rows, int64_t n, const float* sa, bool sa_per_row,
                  const float* sb, bool sb_per_col, const float* bias, Epilogue epilogue,
                  float* out);

/*!
 * \brief Runs GemmArgs with oneDNN's matmul primitive, keeping the primitives it has built,
 *  one per distinct shape and epilogue, so that a warm call only executes.
 *
 * Thread-safe: the primitive cache is guarded, and oneDNN primitives execute concurrently.
 */
class GemmEngine {
 public:
  GemmEngine();
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  void Run(const GemmArgs& args);
  void RunInt8(const Int8GemmArgs& args);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace runtime
}  // namespace tenet

#endif  // TENET_RUNTIME_GEMM_H_
