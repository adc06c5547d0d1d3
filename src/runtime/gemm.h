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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace runtime
}  // namespace tenet

#endif  // TENET_RUNTIME_GEMM_H_
