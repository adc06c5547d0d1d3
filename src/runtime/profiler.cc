// The call timer behind tenet_byoc.VirtualMachine(profile=True): a Relax VM instrument that
// times every callee in C++, so no Python runs between a call's two timestamps.
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost_model/json.h"

namespace tenet {
namespace runtime {

namespace ffi = tvm::ffi;

namespace {

using Clock = std::chrono::steady_clock;

/*! \brief One timed call of a VM callee. */
struct CallRecord {
  uint32_t name;   // index into CallTimer::names_
  uint32_t depth;  // 0 for calls made by the profiled function itself, 1 for their callees...
  int64_t nanos;
  std::string arg_shapes;  // "float32[1, 784], float32[128, 784]" as TVM's old profiler wrote
  std::string device;      // "cpu0"; empty when no argument is a tensor
};

const char* DeviceName(int device_type) {
  switch (device_type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return "cuda";
    case kDLOpenCL:
      return "opencl";
    case kDLVulkan:
      return "vulkan";
    case kDLMetal:
      return "metal";
    case kDLROCM:
      return "rocm";
    default:
      return "dev";
  }
}

/*!
 * \brief Times the calls of one VM between Start() and Stop().
 *
 * The VM calls the instrument before a callee runs (before_run = true) and after it returns.
 * The argument shapes are read before the start timestamp is taken and the stop timestamp is
 * the first thing taken after, so only the callee itself falls inside the timed region.
 * A VM runs one function at a time on one thread; the lock only guards against a reader
 * (Records) racing a run.
 */
class CallTimer {
 public:
  void Start() {
    std::lock_guard<std::mutex> lock(mutex_);
    records_.clear();
    open_.clear();
    running_ = true;
    began_ = Clock::now();
  }

  void Stop() {
    const Clock::time_point now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_) wall_nanos_ = Nanos(began_, now);
    running_ = false;
  }

  /*! \brief The instrument's body: (func, func_symbol, before_run, ret_value, *args). */
  void Instrument(ffi::PackedArgs args) {
    if (!running_) return;
    if (args.size() < 3) {
      TVM_FFI_THROW(ValueError) << "tenet profiler: the VM instrument expects (func, symbol, "
                                   "before_run, ret_value, *args), got "
                                << args.size() << " arguments";
    }
    const bool before = args[2].cast<bool>();
    if (!before) {
      const Clock::time_point now = Clock::now();
      std::lock_guard<std::mutex> lock(mutex_);
      if (open_.empty()) return;  // started between a callee's before and after
      Open& o = open_.back();
      records_[o.record].nanos = Nanos(o.start, now);
      open_.pop_back();
      return;
    }
    CallRecord r;
    r.name = NameIndex(args[1].cast<ffi::String>());
    std::ostringstream shapes;
    bool first = true;
    for (int i = 4; i < args.size(); ++i) {
      auto maybe = args[i].try_cast<DLTensor*>();
      if (!maybe.has_value() || *maybe == nullptr) continue;
      const DLTensor* t = *maybe;
      if (r.device.empty()) {
        r.device = std::string(DeviceName(t->device.device_type)) +
                   std::to_string(t->device.device_id);
      }
      shapes << (first ? "" : ", ") << ffi::DLDataTypeToString(t->dtype) << '[';
      for (int d = 0; d < t->ndim; ++d) shapes << (d ? ", " : "") << t->shape[d];
      shapes << ']';
      first = false;
    }
    r.arg_shapes = shapes.str();
    std::lock_guard<std::mutex> lock(mutex_);
    r.depth = static_cast<uint32_t>(open_.size());
    r.nanos = -1;  // a callee that throws never gets its "after" call
    records_.push_back(std::move(r));
    open_.push_back(Open{records_.size() - 1, Clock::now()});
  }

  /*! \brief {"wall_ns": ..., "names": [...], "calls": [[name, depth, ns, shapes, device]...]}. */
  std::string RecordsJson() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::ostringstream os;
    os << "{\"wall_ns\":" << wall_nanos_ << ",\"names\":[";
    for (size_t i = 0; i < names_.size(); ++i) os << (i ? "," : "") << detail::JsonQuote(names_[i]);
    os << "],\"calls\":[";
    for (size_t i = 0; i < records_.size(); ++i) {
      const CallRecord& r = records_[i];
      os << (i ? "," : "") << '[' << r.name << ',' << r.depth << ',' << r.nanos << ','
         << detail::JsonQuote(r.arg_shapes) << ',' << detail::JsonQuote(r.device) << ']';
    }
    os << "]}";
    return os.str();
  }

 private:
  struct Open {
    size_t record;
    Clock::time_point start;
  };

  static int64_t Nanos(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
  }

  uint32_t NameIndex(const ffi::String& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = name_index_.find(std::string(name));
    if (it != name_index_.end()) return it->second;
    names_.emplace_back(name);
    return name_index_[names_.back()] = static_cast<uint32_t>(names_.size() - 1);
  }

  mutable std::mutex mutex_;
  std::atomic<bool> running_{false};
  Clock::time_point began_;
  int64_t wall_nanos_ = 0;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> name_index_;
  std::vector<CallRecord> records_;
  std::vector<Open> open_;
};

/*!
 * \brief A new timer as its four entry points: "instrument" (for vm.set_instrument), "start",
 * "stop" and "records" (JSON, see CallTimer::RecordsJson).
 */
ffi::Map<ffi::String, ffi::Function> CreateCallTimer() {
  auto timer = std::make_shared<CallTimer>();
  ffi::Map<ffi::String, ffi::Function> api;
  api.Set("instrument", ffi::Function::FromPacked([timer](ffi::PackedArgs args, ffi::Any* rv) {
            timer->Instrument(args);
            *rv = static_cast<int64_t>(0);  // VMInstrumentReturnKind::kNoOp
          }));
  api.Set("start", ffi::Function::FromTyped([timer]() { timer->Start(); }));
  api.Set("stop", ffi::Function::FromTyped([timer]() { timer->Stop(); }));
  api.Set("records",
          ffi::Function::FromTyped([timer]() { return ffi::String(timer->RecordsJson()); }));
  return api;
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef().def("tenet_byoc.profiler.create_call_timer", CreateCallTimer);
}

}  // namespace runtime
}  // namespace tenet
