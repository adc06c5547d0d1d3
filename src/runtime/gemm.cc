// oneDNN matmul primitives for GemmArgs, built once per shape and kept in a bounded cache.
#include "runtime/gemm.h"

#include <dnnl.hpp>

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace tenet {
namespace runtime {

Epilogue ParseEpilogue(const std::string& name) {
  if (name == "none" || name.empty()) return Epilogue::kNone;
  if (name == "relu") return Epilogue::kRelu;
  if (name == "gelu") return Epilogue::kGelu;
  if (name == "gelu_tanh") return Epilogue::kGeluTanh;
  throw std::invalid_argument("unknown epilogue '" + name +
                              "'; expected none, relu, gelu or gelu_tanh");
}

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kRelu: return "relu";
    case Epilogue::kGelu: return "gelu";
    case Epilogue::kGeluTanh: return "gelu_tanh";
    default: return "none";
  }
}

namespace {

using dnnl::memory;

// Primitives are small, but a decode loop over many context lengths would grow the cache
// without bound; past this many shapes it is cleared and refilled.
constexpr size_t kMaxCachedPrimitives = 1024;

// At this many rows or fewer a GEMM is a few matrix-vector products bound by reading the
// weight; oneDNN's BLAS-style sgemm streams it faster than the matmul primitive's brgemm
// (measured 62 vs 103 us for 1x768x2304), so such calls take that path.
constexpr int64_t kMaxGemvRows = 4;

// Elementwise loops (dequantization, int8 epilogue) below this size run on one thread: a
// parallel region's fork and join cost more than the work.
constexpr int64_t kMinParallelElements = 1 << 15;

// A few-row GEMM whose weight has at least this many elements is split over the threads.
constexpr int64_t kMinParallelGemvWeights = 1 << 18;

// Below this many multiply-adds a GEMM runs on the calling thread alone: waking an OpenMP
// team (passive wait policy, see _loader.py) costs tens of microseconds, about what a core
// does in 2^22 float32 multiply-adds, so a smaller GEMM only loses by splitting.
constexpr int64_t kMinParallelMacs = 1 << 22;

// Sets the calling thread's OpenMP team size for the regions it opens, oneDNN's included,
// and restores it: oneDNN sizes a primitive's work split by omp_get_max_threads() when the
// primitive is made, and its BLAS-style calls when they run.
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads) : saved_(omp_get_max_threads()) {
    if (threads != saved_) omp_set_num_threads(threads);
  }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

int64_t Product(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= v[i];
  return p;
}

memory::dims RowMajorStrides(const memory::dims& dims) {
  memory::dims strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

// Left-pads a stored shape's batch dims with 1 so it has `rank` dims.
memory::dims PadTo(const std::vector<int64_t>& shape, size_t rank) {
  memory::dims out(rank - shape.size(), 1);
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// c[rows, n] = epilogue(a[rows, k] @ b + bias) with dnnl_sgemm, for rows <= kMaxGemvRows.
void RunSmallRows(const GemmArgs& g, int64_t rows, int64_t n, int64_t k) {
  float beta = 0.f;
  if (g.bias) {
    for (int64_t r = 0; r < rows; ++r) std::copy(g.bias, g.bias + n, g.c + r * n);
    beta = 1.f;
  }
  // Split the columns over the threads, each streaming its slice of the weight, when the
  // weight is large enough for that to pay (oneDNN runs each call on one thread inside a
  // parallel region).
  const int parts = n * k >= kMinParallelGemvWeights ? TeamThreads() : 1;
  const int64_t chunk = (n + parts - 1) / parts;
  // With one part, keep sgemm from opening a team of its own for a small product.
  ScopedThreads single(parts == 1 ? 1 : omp_get_max_threads());
  int failed = 0;
#pragma omp parallel for schedule(static) num_threads(parts) reduction(| : failed) if (parts > 1)
  for (int part = 0; part < parts; ++part) {
    const int64_t n0 = part * chunk;
    const int64_t width = std::min(chunk, n - n0);
    if (width <= 0) continue;
    const float* b = g.b + (g.b_transposed ? n0 * k : n0);
    failed |= dnnl_sgemm('N', g.b_transposed ? 'T' : 'N', rows, width, k, 1.f, g.a, k, b,
                         g.b_transposed ? k : n, beta, g.c + n0, n) != dnnl_success;
  }
  if (failed) throw std::runtime_error("dnnl_sgemm failed");
  if (g.epilogue != Epilogue::kNone) {
    for (int64_t i = 0; i < rows * n; ++i) g.c[i] = ApplyEpilogue(g.epilogue, g.c[i]);
  }
}

}  // namespace

float ApplyEpilogue(Epilogue e, float x) {
  switch (e) {
    case Epilogue::kRelu: return x > 0.f ? x : 0.f;
    case Epilogue::kGelu: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
    case Epilogue::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.f + std::tanh(inner));
    }
    default: return x;
  }
}

namespace {

// Keeps the worker threads of the calling thread's OpenMP team off the CPU the caller runs
// on, re-binding them (to the caller's CPU set less that CPU) whenever the caller has moved.
//
// Why: on a virtual machine, a worker that slept while the process idled is woken onto the
// caller's vCPU when its own has halted, and stays queued behind the caller for the rest of
// a burst of calls (measured on a 2-vCPU Xeon VM: a 128x768x768 GEMM 2.0 ms against 1.0 ms,
// half the two-thread speed, after 20 ms of idle). A worker barred from the caller's CPU is
// woken on another. The caller itself is never bound, so the Python threads it starts keep
// the process's CPU set. Off with TENET_BIND_THREADS=0; nothing is done where the caller's
// set has no CPU besides the one it runs on.
class WorkerPlacement {
 public:
  void Before(int threads) {
    if (!enabled_) return;
    const int cpu = sched_getcpu();
    if (cpu < 0 || (cpu == cpu_ && static_cast<int>(tids_.size()) >= threads - 1)) return;
    if (static_cast<int>(tids_.size()) < threads - 1) Record(threads);
    cpu_set_t others;
    if (sched_getaffinity(0, sizeof others, &others) != 0) return;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) == 0) return;
    for (const pid_t tid : tids_) sched_setaffinity(tid, sizeof others, &others);
    cpu_ = cpu;
  }

 private:
  // The thread ids of the team's workers: a region of `threads` opens the same pool
  // threads the GEMM's regions then use.
  void Record(int threads) {
    std::vector<pid_t> tids(threads, 0);
#pragma omp parallel num_threads(threads)
    tids[omp_get_thread_num()] = static_cast<pid_t>(syscall(SYS_gettid));
    tids_.assign(tids.begin() + 1, tids.end());
    cpu_ = -1;
  }

  bool enabled_ = [] {
    const char* env = std::getenv("TENET_BIND_THREADS");
    return env == nullptr || std::string(env) != "0";
  }();
  std::vector<pid_t> tids_;
  int cpu_ = -1;
};

}  // namespace

int TeamThreads() {
  const int threads = omp_get_max_threads();
  if (threads > 1) {
    thread_local WorkerPlacement placement;  // libgomp keeps one pool of workers per caller
    placement.Before(threads);
  }
  return threads;
}

int GemmThreads(int64_t macs) { return macs < kMinParallelMacs ? 1 : TeamThreads(); }

std::string EffectiveIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2_vnni_2: return "avx2_vnni_2";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_fp16: return "avx512_core_fp16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    default: return "default";
  }
}

const char* Int8PathName(Int8Path path) {
  return path == Int8Path::kNative ? "native" : "widened";
}

void DequantizeChannel(const int8_t* q, const float* scale, int64_t n, int64_t k, float* w) {
#pragma omp parallel for schedule(static) if (n * k >= kMinParallelElements)
  for (int64_t r = 0; r < n; ++r) {
    const float s = scale[r];
    for (int64_t j = 0; j < k; ++j) w[r * k + j] = static_cast<float>(q[r * k + j]) * s;
  }
}

void DequantizePackedInt4(const uint8_t* packed, const float* zp, bool zp_per_group,
                          const float* scale, int64_t n, int64_t groups, int64_t group_size,
                          float* w) {
  const int64_t k = groups * group_size;
#pragma omp parallel for schedule(static) if (n * k >= kMinParallelElements)
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = packed + r * (k / 2);
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scale[r * groups + g];
      const float z = zp[zp_per_group ? r * groups + g : 0];
      float* dst = w + r * k + g * group_size;
      const uint8_t* src = row + g * group_size / 2;
      for (int64_t j = 0; j < group_size / 2; ++j) {
        dst[2 * j] = (static_cast<float>(src[j] & 15) - z) * s;
        dst[2 * j + 1] = (static_cast<float>(src[j] >> 4) - z) * s;
      }
    }
  }
}

void DequantizeInt8(const Int8Dequant& d, const int32_t* acc, int64_t lda, int64_t r0,
                    int64_t rows, int64_t j0, int64_t cols, float* out, int64_t ldo) {
  // One pass per operation, each a plain loop the compiler vectorizes: a call to
  // ApplyEpilogue per element (through the PLT) cost a sixth of a 128 x 768 x 768 GEMM.
  for (int64_t r = 0; r < rows; ++r) {
    const float a = d.sa[d.sa_per_row ? r0 + r : 0];
    const int32_t* in = acc + r * lda;
    float* o = out + r * ldo;
    if (d.sb_per_col) {
      const float* sb = d.sb + j0;
      for (int64_t j = 0; j < cols; ++j) o[j] = (static_cast<float>(in[j]) * a) * sb[j];
    } else {
      const float b = d.sb[0];
      for (int64_t j = 0; j < cols; ++j) o[j] = (static_cast<float>(in[j]) * a) * b;
    }
    if (d.bias) {
      const float* bias = d.bias + j0;
      for (int64_t j = 0; j < cols; ++j) o[j] += bias[j];
    }
    if (d.epilogue != Epilogue::kNone) {
      for (int64_t j = 0; j < cols; ++j) o[j] = ApplyEpilogue(d.epilogue, o[j]);
    }
  }
}

namespace {

// A cached primitive and the scratchpad it asks for. Primitives are made in oneDNN's user
// scratchpad mode: in the library mode a primitive may not run on a thread other than the
// one that made it (the library keeps its scratchpad per creating thread, so two threads
// running one primitive wrote over each other's partial sums: wrong outputs and crashes in
// brgemm), while in the user mode each call passes scratch memory of its own.
struct CachedMatmul {
  dnnl::matmul prim;
  memory::desc scratchpad;
  explicit operator bool() const { return static_cast<bool>(prim); }
};

// The calling thread's scratchpad, grown to the largest a primitive it ran has asked for:
// a thread runs one primitive at a time, and its OpenMP team works inside that call.
void* ThreadScratchpad(size_t bytes) {
  struct Buffer {
    std::unique_ptr<void, void (*)(void*)> data{nullptr, std::free};
    size_t bytes = 0;
  };
  thread_local Buffer buffer;
  if (bytes > buffer.bytes) {
    // 4 KiB aligned, as oneDNN aligns the scratchpads it allocates itself.
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    buffer.data.reset(std::aligned_alloc(4096, rounded));
    if (!buffer.data) throw std::bad_alloc();
    buffer.bytes = rounded;
  }
  return buffer.data.get();
}

// Runs a cached primitive on the calling thread with its own scratchpad.
void Execute(const CachedMatmul& m, const dnnl::engine& engine,
             std::unordered_map<int, memory> args) {
  const size_t bytes = m.scratchpad.get_size();
  if (bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(m.scratchpad, engine, ThreadScratchpad(bytes)));
  }
  dnnl::stream stream(engine);
  m.prim.execute(stream, args);
  stream.wait();
}

}  // namespace

struct GemmEngine::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::unordered_map<std::string, CachedMatmul> cache;

  CachedMatmul Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    return it == cache.end() ? CachedMatmul() : it->second;
  }

  CachedMatmul Get(const std::string& key, const memory::desc& a, const memory::desc& b,
                   const memory::desc* bias, const memory::desc& c, Epilogue epilogue) {
    if (CachedMatmul found = Find(key)) return found;
    dnnl::post_ops ops;
    switch (epilogue) {
      case Epilogue::kRelu: ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f); break;
      case Epilogue::kGelu: ops.append_eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f); break;
      case Epilogue::kGeluTanh:
        ops.append_eltwise(dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
        break;
      default: break;
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto pd = bias ? dnnl::matmul::primitive_desc(engine, a, b, *bias, c, attr)
                   : dnnl::matmul::primitive_desc(engine, a, b, c, attr);
    return Insert(key, pd);
  }

  CachedMatmul Insert(const std::string& key, const dnnl::matmul::primitive_desc& pd) {
    CachedMatmul made{dnnl::matmul(pd), pd.scratchpad_desc()};
    std::lock_guard<std::mutex> lock(mutex);
    if (cache.size() >= kMaxCachedPrimitives) cache.clear();
    cache.emplace(key, made);
    return made;
  }

  // c[rows, n] = a[rows, k] @ b[n, k]^T in one oneDNN s8s8s32 call: the BLAS-style kernel
  // for a few rows (it streams the weight faster: 24 us for 1x768x2304 against 48 us for
  // numpy's float32 on an AVX-512 VNNI EPYC), the matmul primitive otherwise. Exact only
  // where the ISA has VNNI; Int8Path says when to call it.
  void NativeInt8(int64_t rows, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                  int32_t* c) {
    const int threads = GemmThreads(rows * n * k);
    ScopedThreads scoped(threads);
    if (rows <= kMaxGemvRows) {
      const int32_t no_offset = 0;
      const dnnl_status_t status = dnnl_gemm_s8s8s32('N', 'T', 'F', rows, n, k, 1.f, a, k, 0,
                                                     b, k, 0, 0.f, c, n, &no_offset);
      if (status != dnnl_success) {
        throw std::runtime_error("dnnl_gemm_s8s8s32 failed with status " +
                                 std::to_string(status));
      }
      return;
    }
    const memory::desc a_md({rows, k}, memory::data_type::s8, {k, 1});
    const memory::desc b_md({k, n}, memory::data_type::s8, {1, k});  // stored [n, k]
    const memory::desc c_md({rows, n}, memory::data_type::s32, {n, 1});
    const std::string key = "s8|" + std::to_string(rows) + "|" + std::to_string(n) + "|" +
                            std::to_string(k) + "|t" + std::to_string(threads);
    CachedMatmul prim = Find(key);
    if (!prim) {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      prim = Insert(key, dnnl::matmul::primitive_desc(engine, a_md, b_md, c_md, attr));
    }
    memory a_mem(a_md, engine, const_cast<int8_t*>(a));
    memory b_mem(b_md, engine, const_cast<int8_t*>(b));
    memory c_mem(c_md, engine, c);
    Execute(prim, engine, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  }

  // Whether the native kernels give numpy's exact sums on operands that saturate vpmaddubsw
  // (every element +-127 or -128), for the few-row and the many-row kernel.
  bool NativeInt8IsExact() {
    for (const int64_t rows : {int64_t{1}, int64_t{16}}) {
      const int64_t n = 16, k = 256;
      std::vector<int8_t> a(rows * k), b(n * k);
      for (int64_t i = 0; i < rows * k; ++i) a[i] = (i * 7 % 3 == 0) ? -128 : 127;
      for (int64_t i = 0; i < n * k; ++i) b[i] = (i * 5 % 3 == 1) ? -128 : 127;
      std::vector<int32_t> c(rows * n);
      NativeInt8(rows, n, k, a.data(), b.data(), c.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          int64_t want = 0;
          for (int64_t t = 0; t < k; ++t) want += int64_t{a[r * k + t]} * b[j * k + t];
          if (c[r * n + j] != want) return false;
        }
      }
    }
    return true;
  }
};

namespace {

// Whether the ISA oneDNN runs includes `isa` (the values are bit sets, each including the
// ones below it).
bool IsaIncludes(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(isa);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & want) == want;
}

bool IsaHasVnni(dnnl::cpu_isa isa) {
  // The ISA values are bit sets, each including the ones below it; VNNI is the bit that
  // avx2_vnni adds to avx2, or that avx512_core_vnni adds to avx512_core.
  const auto bits = static_cast<unsigned>(isa);
  const auto bit = [](dnnl::cpu_isa with, dnnl::cpu_isa without) {
    return static_cast<unsigned>(with) & ~static_cast<unsigned>(without);
  };
  return (bits & bit(dnnl::cpu_isa::avx2_vnni, dnnl::cpu_isa::avx2)) != 0 ||
         (bits & bit(dnnl::cpu_isa::avx512_core_vnni, dnnl::cpu_isa::avx512_core)) != 0;
}

}  // namespace

Int8Path ChosenInt8Path() {
  static const Int8Path path = [] {
    if (!IsaHasVnni(dnnl::get_effective_cpu_isa())) return Int8Path::kWidened;
    GemmEngine::Impl probe;
    return probe.NativeInt8IsExact() ? Int8Path::kNative : Int8Path::kWidened;
  }();
  return path;
}

GemmEngine::GemmEngine() : impl_(std::make_unique<Impl>()) {}
GemmEngine::~GemmEngine() = default;

void GemmEngine::RunInt8(const Int8GemmArgs& g) {
  if (g.rows == 0 || g.n == 0) return;
  if (g.k != 0 && ChosenInt8Path() == Int8Path::kWidened) {
    // A few rows are bound by reading the weight: split it over the threads once it is
    // large, as the float32 few-row path does, even below kMinParallelMacs.
    const int threads = g.n * g.k >= kMinParallelGemvWeights
                            ? TeamThreads()
                            : GemmThreads(g.rows * g.n * g.k);
    // The AVX2 kernel where oneDNN may use AVX2 too: ONEDNN_MAX_CPU_ISA=SSE41 then holds
    // both to what an older CPU runs, and tests reach the scalar loop on any machine.
    static const bool avx2 = __builtin_cpu_supports("avx2") && IsaIncludes(dnnl::cpu_isa::avx2);
    ExactInt8Gemm(g.rows, g.n, g.k, g.a, g.b, g.dequant, g.out, threads, avx2);
    return;
  }
  std::vector<int32_t> acc(g.rows * g.n);  // zero: the sums of an empty reduction
  if (g.k != 0) impl_->NativeInt8(g.rows, g.n, g.k, g.a, g.b, acc.data());
#pragma omp parallel for schedule(static) if (g.rows * g.n >= kMinParallelElements)
  for (int64_t r = 0; r < g.rows; ++r) {
    DequantizeInt8(g.dequant, acc.data() + r * g.n, g.n, r, 1, 0, g.n, g.out + r * g.n, g.n);
  }
}

void GemmEngine::Run(const GemmArgs& g) {
  const size_t rank = g.c_shape.size();
  const int64_t n = g.c_shape[rank - 1];
  const int64_t k = g.a_shape.back();
  const int64_t c_elems = Product(g.c_shape, 0, rank);
  if (c_elems == 0) return;
  if (k == 0) {
    // An empty reduction: oneDNN refuses zero-sized dims, and the answer is the epilogue
    // of the bias (or of zero).
    for (int64_t i = 0; i < c_elems; ++i) {
      g.c[i] = ApplyEpilogue(g.epilogue, g.bias ? g.bias[i % n] : 0.f);
    }
    return;
  }

  memory::dims a_dims = PadTo(g.a_shape, rank);
  memory::dims b_stored = PadTo(g.b_shape, rank);
  memory::dims c_dims(g.c_shape.begin(), g.c_shape.end());
  memory::dims b_dims = b_stored;
  memory::dims b_strides = RowMajorStrides(b_stored);
  if (g.b_transposed) {
    std::swap(b_dims[rank - 1], b_dims[rank - 2]);
    std::swap(b_strides[rank - 1], b_strides[rank - 2]);
  }

  // The linear-layer case (a shared 2-D weight) is one large GEMM: fold a's batch into M
  // when a is not broadcast, which lets oneDNN pick its plain GEMM kernels.
  const bool b_unbatched = Product(b_dims, 0, rank - 2) == 1;
  const bool a_full = Product(a_dims, 0, rank - 2) == Product(c_dims, 0, rank - 2);
  if (rank > 2 && b_unbatched && a_full) {
    const int64_t rows = Product(c_dims, 0, rank - 1);
    a_dims = {rows, k};
    c_dims = {rows, n};
    b_dims = {b_dims[rank - 2], b_dims[rank - 1]};
    b_strides = {b_strides[rank - 2], b_strides[rank - 1]};
  }

  if (c_dims.size() == 2 && c_dims[0] <= kMaxGemvRows) {
    RunSmallRows(g, c_dims[0], n, k);
    return;
  }
  const int threads = GemmThreads(c_elems * k);
  ScopedThreads scoped(threads);

  const memory::desc a_md(a_dims, memory::data_type::f32, RowMajorStrides(a_dims));
  const memory::desc b_md(b_dims, memory::data_type::f32, b_strides);
  const memory::desc c_md(c_dims, memory::data_type::f32, RowMajorStrides(c_dims));
  memory::dims bias_dims(c_dims.size(), 1);
  bias_dims.back() = n;
  const memory::desc bias_md(bias_dims, memory::data_type::f32, RowMajorStrides(bias_dims));

  std::ostringstream key;
  for (auto d : a_dims) key << d << ',';
  key << '|';
  for (size_t i = 0; i < b_dims.size(); ++i) key << b_dims[i] << ':' << b_strides[i] << ',';
  key << '|';
  for (auto d : c_dims) key << d << ',';
  key << '|' << (g.bias != nullptr) << '|' << static_cast<int>(g.epilogue) << "|t" << threads;

  const CachedMatmul prim =
      impl_->Get(key.str(), a_md, b_md, g.bias ? &bias_md : nullptr, c_md, g.epilogue);
  auto& eng = impl_->engine;
  memory a_mem(a_md, eng, const_cast<float*>(g.a));
  memory b_mem(b_md, eng, const_cast<float*>(g.b));
  memory c_mem(c_md, eng, g.c);
  std::unordered_map<int, memory> exec_args = {
      {DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
  if (g.bias) exec_args.emplace(DNNL_ARG_BIAS, memory(bias_md, eng, const_cast<float*>(g.bias)));
  Execute(prim, eng, std::move(exec_args));
}

}  // namespace runtime
}  // namespace tenet
