// The "tenet" runtime module: the Relax VM calls its functions to run offloaded GEMMs.
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/gemm.h"
#include "runtime/program.h"

namespace tenet {
namespace runtime {

namespace ffi = tvm::ffi;

namespace {

/*! \brief A compact row-major float buffer seen by one GEMM step. */
struct View {
  float* data = nullptr;
  std::vector<int64_t> shape;
};

std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

bool SameDType(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

}  // namespace

class TenetModuleObj : public ffi::ModuleObj {
 public:
  explicit TenetModuleObj(std::vector<Program> programs) {
    for (auto& p : programs) {
      std::string symbol = p.symbol;
      programs_.emplace(std::move(symbol), std::move(p));
    }
  }

  const char* kind() const final { return "tenet"; }

  int GetPropertyMask() const final {
    return ffi::Module::kBinarySerializable | ffi::Module::kRunnable;
  }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    auto it = programs_.find(std::string(name));
    if (it == programs_.end()) return std::nullopt;
    const Program* program = &it->second;
    // The closure keeps the module alive for as long as the VM holds the function.
    ffi::ObjectPtr<ffi::Object> self = ffi::GetObjectPtr<ffi::Object>(this);
    return ffi::Function::FromPacked([self, this, program](ffi::PackedArgs args, ffi::Any* rv) {
      Run(*program, args);
    });
  }

  ffi::Bytes SaveToBytes() const final {
    std::vector<Program> programs;
    for (const auto& kv : programs_) programs.push_back(kv.second);
    return ffi::Bytes(SerializePrograms(programs));
  }

  ffi::String InspectSource(const ffi::String& format) const final {
    return ffi::String(std::string(SaveToBytes()));
  }

 private:
  void Run(const Program& p, ffi::PackedArgs args) {
    const size_t n_in = p.inputs.size(), n_out = p.outputs.size();
    if (static_cast<size_t>(args.size()) != n_in + n_out) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": expected " << n_in + n_out
                                << " arguments (" << n_in << " inputs, " << n_out
                                << " outputs), got " << args.size();
    }
    std::vector<View> inputs(n_in), outputs(n_out);
    for (size_t i = 0; i < n_in + n_out; ++i) {
      const bool is_out = i >= n_in;
      const TensorSpec& spec = is_out ? p.outputs[i - n_in] : p.inputs[i];
      std::ostringstream what;
      what << (is_out ? "output " : "input ") << (is_out ? i - n_in : i);
      (is_out ? outputs[i - n_in] : inputs[i]) = CheckTensor(p, args[i], spec, what.str());
    }
    // Values produced by steps: either written straight into an output buffer, or held in
    // scratch memory for the steps that read them.
    std::vector<View> produced(p.steps.size());
    std::vector<std::vector<float>> scratch(p.steps.size());
    std::vector<int> output_of_step(p.steps.size(), -1);
    for (size_t o = 0; o < n_out; ++o) output_of_step[-p.outputs[o].source - 1] = o;
    auto value = [&](ValueRef ref) -> const View& {
      return ref >= 0 ? inputs[ref] : produced[-ref - 1];
    };
    for (size_t s = 0; s < p.steps.size(); ++s) {
      const Step& st = p.steps[s];
      const View& a = value(st.lhs);
      const View& b = value(st.rhs);
      std::vector<int64_t> c_shape = OutputShape(p, s, a, b);
      View c;
      c.shape = c_shape;
      if (output_of_step[s] >= 0) {
        const View& out = outputs[output_of_step[s]];
        if (out.shape != c_shape) {
          TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": output "
                                    << output_of_step[s] << " has shape "
                                    << ShapeStr(out.shape) << " but step " << s << " ("
                                    << st.name << ") produces " << ShapeStr(c_shape);
        }
        c.data = out.data;
      } else {
        int64_t elems = 1;
        for (int64_t d : c_shape) elems *= d;
        scratch[s].resize(elems);
        c.data = scratch[s].data();
      }
      GemmArgs g;
      g.a_shape = a.shape;
      g.b_shape = b.shape;
      g.c_shape = c_shape;
      g.b_transposed = st.rhs_transposed;
      g.epilogue = st.epilogue;
      g.a = a.data;
      g.b = b.data;
      g.c = c.data;
      if (st.has_bias) g.bias = CheckBias(p, s, value(st.bias), c_shape.back());
      gemm_.Run(g);
      produced[s] = c;
    }
  }

  View CheckTensor(const Program& p, ffi::AnyView arg, const TensorSpec& spec,
                   const std::string& what) {
    auto maybe = arg.try_cast<DLTensor*>();
    if (!maybe.has_value() || *maybe == nullptr) {
      TVM_FFI_THROW(TypeError) << "tenet: " << p.symbol << ": " << what
                               << " is not a tensor (got " << arg.GetTypeKey() << ")";
    }
    const DLTensor* t = *maybe;
    if (t->device.device_type != kDLCPU) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": " << what
                                << " is on device type " << t->device.device_type
                                << "; the tenet runtime computes on the CPU (kDLCPU)";
    }
    if (!SameDType(t->dtype, spec.dtype)) {
      TVM_FFI_THROW(TypeError) << "tenet: " << p.symbol << ": " << what << " has dtype "
                               << ffi::DLDataTypeToString(t->dtype) << "; expected "
                               << ffi::DLDataTypeToString(spec.dtype);
    }
    if (t->ndim != spec.ndim) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": " << what << " has rank "
                                << t->ndim << "; expected " << spec.ndim;
    }
    View v;
    v.shape.assign(t->shape, t->shape + t->ndim);
    int64_t expected = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] < 0) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": " << what
                                  << " has a negative dim in shape " << ShapeStr(v.shape);
      }
      if (t->strides != nullptr && t->shape[i] != 1 && t->strides[i] != expected) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": " << what << " with shape "
                                  << ShapeStr(v.shape)
                                  << " is not compact row-major (stride " << t->strides[i]
                                  << " on axis " << i << ", expected " << expected << ")";
      }
      expected *= t->shape[i];
    }
    if (expected > 0 && t->data == nullptr) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": " << what << " has no data";
    }
    v.data = reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset);
    return v;
  }

  std::vector<int64_t> OutputShape(const Program& p, size_t s, const View& a, const View& b) {
    const Step& st = p.steps[s];
    const size_t ra = a.shape.size(), rb = b.shape.size();
    const int64_t k_a = a.shape[ra - 1];
    const int64_t k_b = st.rhs_transposed ? b.shape[rb - 1] : b.shape[rb - 2];
    const int64_t n = st.rhs_transposed ? b.shape[rb - 2] : b.shape[rb - 1];
    if (k_a != k_b) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " (" << st.name
                                << "): lhs " << ShapeStr(a.shape) << " and rhs "
                                << ShapeStr(b.shape) << (st.rhs_transposed ? " (transposed)" : "")
                                << " disagree on the reduction length (" << k_a << " vs " << k_b
                                << ")";
    }
    const size_t rank = static_cast<size_t>(st.out_ndim);
    if (rank < 2 || ra > rank || rb > rank) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s
                                << " has operand ranks " << ra << ", " << rb
                                << " that do not fit its output rank " << rank;
    }
    std::vector<int64_t> c(rank, 1);
    for (size_t i = 0; i + 2 < rank; ++i) {
      const size_t from_end = rank - i;  // position counted from the right
      const int64_t da = from_end <= ra ? a.shape[ra - from_end] : 1;
      const int64_t db = from_end <= rb ? b.shape[rb - from_end] : 1;
      if (da != db && da != 1 && db != 1) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " ("
                                  << st.name << "): batch dims of lhs " << ShapeStr(a.shape)
                                  << " and rhs " << ShapeStr(b.shape) << " do not broadcast";
      }
      c[i] = da == 1 ? db : da;
    }
    c[rank - 2] = a.shape[ra - 2];
    c[rank - 1] = n;
    return c;
  }

  const float* CheckBias(const Program& p, size_t s, const View& bias, int64_t n) {
    int64_t elems = 1;
    for (int64_t d : bias.shape) elems *= d;
    if (bias.shape.empty() || bias.shape.back() != n || elems != n) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " ("
                                << p.steps[s].name << "): bias shape " << ShapeStr(bias.shape)
                                << " is not a vector of the " << n << " output columns";
    }
    return bias.data;
  }

  std::unordered_map<std::string, Program> programs_;
  GemmEngine gemm_;
};

ffi::Module CreateTenetModule(const std::string& descriptor) {
  return ffi::Module(ffi::make_object<TenetModuleObj>(ParsePrograms(descriptor)));
}

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("tenet_byoc.runtime.create_module",
           [](const ffi::String& descriptor) { return CreateTenetModule(descriptor); })
      .def("ffi.Module.load_from_bytes.tenet",
           [](const ffi::Bytes& bytes) { return CreateTenetModule(std::string(bytes)); });
}

}  // namespace runtime
}  // namespace tenet
