// The "tenet" runtime module: the Relax VM calls its functions to run offloaded GEMMs.
#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "cost_model/json.h"
#include "runtime/gemm.h"
#include "runtime/ledger.h"
#include "runtime/program.h"

namespace tenet {
namespace runtime {

namespace ffi = tvm::ffi;

namespace {

/*! \brief A compact row-major buffer seen by one GEMM step. */
struct View {
  void* data = nullptr;
  DLDataType dtype{};
  std::vector<int64_t> shape;
};

constexpr DLDataType kFloat32{kDLFloat, 32, 1};
constexpr DLDataType kInt8{kDLInt, 8, 1};
constexpr DLDataType kUInt8{kDLUInt, 8, 1};

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const float* Floats(const View& v) { return static_cast<const float*>(v.data); }

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
  explicit TenetModuleObj(Descriptor descriptor)
      : descriptor_(std::move(descriptor)),
        costs_(descriptor_.accelerator),
        vector_costs_(descriptor_.accelerator) {
    for (size_t i = 0; i < descriptor_.programs.size(); ++i) {
      by_symbol_.emplace(descriptor_.programs[i].symbol, i);
    }
    for (size_t i = 0; i < descriptor_.vector_programs.size(); ++i) {
      by_vector_symbol_.emplace(descriptor_.vector_programs[i].symbol, i);
    }
  }

  const char* kind() const final { return "tenet"; }

  int GetPropertyMask() const final {
    return ffi::Module::kBinarySerializable | ffi::Module::kRunnable;
  }

  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    // The closures keep the module alive for as long as their holder keeps them.
    ffi::ObjectPtr<ffi::Object> self = ffi::GetObjectPtr<ffi::Object>(this);
    auto it = by_symbol_.find(std::string(name));
    if (it != by_symbol_.end()) {
      const uint32_t index = static_cast<uint32_t>(it->second);
      return ffi::Function::FromPacked([self, this, index](ffi::PackedArgs args, ffi::Any*) {
        Run(index, args);
      });
    }
    auto vit = by_vector_symbol_.find(std::string(name));
    if (vit != by_vector_symbol_.end()) {
      const uint32_t index = static_cast<uint32_t>(vit->second);
      return ffi::Function::FromPacked([self, this, index](ffi::PackedArgs args, ffi::Any*) {
        RunVector(index, args);
      });
    }
    if (name == "__tenet_ledger_json") {
      return ffi::Function::FromTyped(
          [self, this]() { return ffi::String(LedgerJson(ledger_, descriptor_)); });
    }
    // vm.profile: the entries the calling thread charges between begin and end, in the
    // ledger JSON format (other threads' calls of this module are not among them).
    if (name == "__tenet_capture_begin") {
      return ffi::Function::FromTyped([self, this]() { ThreadCaptures()[this].clear(); });
    }
    if (name == "__tenet_capture_end") {
      return ffi::Function::FromTyped([self, this]() {
        auto& captures = ThreadCaptures();
        auto it = captures.find(this);
        std::vector<LedgerEntry> entries;
        if (it != captures.end()) {
          entries = std::move(it->second);
          captures.erase(it);
        }
        return ffi::String(LedgerJson(ledger_, descriptor_, entries));
      });
    }
    if (name == "__tenet_ledger_reset") {
      return ffi::Function::FromTyped([self, this]() { ledger_.Reset(); });
    }
    // Distinct calls the accelerator's mapping search has searched (mapping "auto"; else 0):
    // what shows that a model's repeated calls are cache lookups.
    if (name == "__tenet_mapping_searches") {
      return ffi::Function::FromTyped([self, this]() { return costs_.searches(); });
    }
    if (name == "__tenet_set_tag") {
      return ffi::Function::FromTyped(
          [self, this](const ffi::String& tag) { ledger_.SetTag(std::string(tag)); });
    }
    // The tag in force, so a caller that tags its own calls (a model runner) can restore it.
    if (name == "__tenet_tag") {
      return ffi::Function::FromTyped([self, this]() {
        const uint32_t current = ledger_.CurrentTag();  // read first: tags only grow
        return ffi::String(ledger_.Tags()[current]);
      });
    }
    if (name == "__tenet_set_charging") {
      return ffi::Function::FromTyped([self, this](bool on) { charging_.store(on); });
    }
    return std::nullopt;
  }

  ffi::Bytes SaveToBytes() const final { return ffi::Bytes(SerializeDescriptor(descriptor_)); }

  ffi::String InspectSource(const ffi::String& format) const final {
    return ffi::String(std::string(SaveToBytes()));
  }

 private:
  /*! \brief One call's values: its arguments, and what its steps produce. */
  struct Frame {
    std::vector<View> inputs, outputs;
    std::vector<View> produced;                // per step
    std::vector<std::vector<float>> scratch;   // per step not written into an output
    std::vector<int> output_of_step;           // the output a step writes into, or -1
    const View& Value(ValueRef ref) const { return ref >= 0 ? inputs[ref] : produced[-ref - 1]; }
  };

  /*! \brief What a step's call was, for the ledger. */
  struct StepShape {
    std::vector<int64_t> c_shape;
    int64_t k = 0;
  };

  void Run(uint32_t program_index, ffi::PackedArgs args) {
    const Program& p = descriptor_.programs[program_index];
    Frame frame = Bind(p, args);
    Plan(p, &frame);
    const bool charging = charging_.load(std::memory_order_relaxed);
    std::vector<LedgerEntry> entries;
    if (charging) entries.reserve(p.steps.size());
    const uint64_t call_index = ledger_.NextCallIndex();
    for (size_t s = 0; s < p.steps.size(); ++s) {
      const StepShape shape = RunStep(p, s, &frame);
      if (charging) {
        entries.push_back(ChargeStep(p, program_index, s, call_index, shape));
        if (entries.back().charge) ChargeEpilogues(p, program_index, s, call_index, shape, &entries);
      }
    }
    CopyRepeatedOutputs(p, frame);
    if (charging) Record(&entries);
  }

  // The fused epilogue of a GEMM step (bias add, activation) on the vector unit, each its
  // own entry after the GEMM's, sharing its call index.
  void ChargeEpilogues(const Program& p, uint32_t program_index, size_t s, uint64_t call_index,
                       const StepShape& shape, std::vector<LedgerEntry>* entries) {
    const Step& st = p.steps[s];
    for (int j = 0; j < EpilogueCount(st); ++j) {
      LedgerEntry e = VectorEntry(call_index, program_index, s,
                                  ChargeVector(EpilogueCall(st, j, shape.c_shape), p.symbol,
                                               st.name));
      e.epilogue = j;
      entries->push_back(std::move(e));
    }
  }

  // A vector-unit entry of call `call_index`, step `step` of program `program`, with the
  // tag now open; the caller marks whether it is a GEMM's epilogue or a vector step.
  LedgerEntry VectorEntry(uint64_t call_index, uint32_t program, size_t step,
                          std::shared_ptr<const VectorCharge> charge) {
    LedgerEntry e;
    e.call_index = call_index;
    e.program = program;
    e.step = static_cast<uint32_t>(step);
    e.tag = ledger_.CurrentTag();
    e.vector = std::move(charge);
    return e;
  }

  std::shared_ptr<const VectorCharge> ChargeVector(const VectorCall& call,
                                                   const std::string& symbol,
                                                   const std::string& name) {
    try {
      return vector_costs_.Get(call);
    } catch (const std::exception& err) {
      TVM_FFI_THROW(ValueError) << "tenet: " << symbol << ": " << name
                                << ": the cost model refused the vector call "
                                << SerializeVectorCall(call) << ": " << err.what();
    }
    TVM_FFI_UNREACHABLE();
  }

  // The charge call a partitioned function makes (tenet_byoc.vector_plan): one shape argument
  // with each vector step's output dims (and its second operand's elements), the VM having
  // evaluated the symbolic ones. The operators themselves ran on TVM's path.
  void RunVector(uint32_t index, ffi::PackedArgs args) {
    const VectorProgram& vp = descriptor_.vector_programs[index];
    if (args.size() != 1) {
      TVM_FFI_THROW(ValueError) << "tenet: " << vp.symbol << ": expected one shape argument, got "
                                << args.size();
    }
    auto shape = args[0].try_cast<ffi::Shape>();
    if (!shape.has_value()) {
      TVM_FFI_THROW(TypeError) << "tenet: " << vp.symbol << ": the argument is not a shape (got "
                               << args[0].GetTypeKey() << ")";
    }
    const ffi::Shape& dims = *shape;
    size_t want = 0;
    for (const VectorStep& st : vp.steps) want += st.rank + (st.operand ? 1 : 0);
    if (dims.size() != want) {
      TVM_FFI_THROW(ValueError) << "tenet: " << vp.symbol << ": the shape argument has "
                                << dims.size() << " numbers; its " << vp.steps.size()
                                << " vector steps read " << want;
    }
    if (!charging_.load(std::memory_order_relaxed)) return;
    const uint64_t call_index = ledger_.NextCallIndex();
    std::vector<LedgerEntry> entries;
    entries.reserve(vp.steps.size());
    size_t at = 0;
    for (size_t s = 0; s < vp.steps.size(); ++s) {
      const VectorStep& st = vp.steps[s];
      VectorCall call;
      call.op = st.op;
      call.bits_in = st.bits_in;
      call.bits_out = st.bits_out;
      call.shape.assign(dims.begin() + at, dims.begin() + at + st.rank);
      at += st.rank;
      if (st.operand) call.operand_elements = dims[at++];
      if (Numel(call.shape) == 0) continue;  // an empty operator: nothing to charge
      LedgerEntry e = VectorEntry(call_index, index, s, ChargeVector(call, vp.symbol, st.name));
      e.vector_step = true;
      entries.push_back(std::move(e));
    }
    Record(&entries);
  }

  // Appends a call's entries to the ledger and to the calling thread's open capture.
  void Record(std::vector<LedgerEntry>* entries) {
    {
      auto& captures = ThreadCaptures();
      if (!captures.empty()) {
        auto it = captures.find(this);
        if (it != captures.end()) {
          it->second.insert(it->second.end(), entries->begin(), entries->end());
        }
      }
      ledger_.Append(entries);
    }
  }

  // Open captures of the current thread, by module. Thread-local, so a profiled call sees
  // only its own thread's entries, and collecting them costs nothing per ledger entry.
  static std::unordered_map<const TenetModuleObj*, std::vector<LedgerEntry>>& ThreadCaptures() {
    thread_local std::unordered_map<const TenetModuleObj*, std::vector<LedgerEntry>> captures;
    return captures;
  }

  // Checks the arguments against the program's signature and views them.
  Frame Bind(const Program& p, ffi::PackedArgs args) {
    const size_t n_in = p.inputs.size(), n_out = p.outputs.size();
    if (static_cast<size_t>(args.size()) != n_in + n_out) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": expected " << n_in + n_out
                                << " arguments (" << n_in << " inputs, " << n_out
                                << " outputs), got " << args.size();
    }
    Frame frame;
    frame.inputs.resize(n_in);
    frame.outputs.resize(n_out);
    for (size_t i = 0; i < n_in + n_out; ++i) {
      const bool is_out = i >= n_in;
      const TensorSpec& spec = is_out ? p.outputs[i - n_in] : p.inputs[i];
      if (spec.is_shape) continue;
      std::ostringstream what;
      what << (is_out ? "output " : "input ") << (is_out ? i - n_in : i);
      (is_out ? frame.outputs[i - n_in] : frame.inputs[i]) =
          CheckTensor(p, args[i], spec, what.str());
    }
    return frame;
  }

  // A step's value goes straight into the first output that returns it; the others are
  // held in scratch memory for the steps that read them.
  void Plan(const Program& p, Frame* frame) const {
    frame->produced.resize(p.steps.size());
    frame->scratch.resize(p.steps.size());
    frame->output_of_step.assign(p.steps.size(), -1);
    for (size_t o = p.outputs.size(); o-- > 0;) {
      frame->output_of_step[-p.outputs[o].source - 1] = static_cast<int>(o);
    }
  }

  // Checks step s's operands, computes it into its destination, and says what it ran.
  StepShape RunStep(const Program& p, size_t s, Frame* frame) {
    const Step& st = p.steps[s];
    const View& a = frame->Value(st.lhs);
    const View& b = frame->Value(st.rhs);
    ExpectDType(p, s, "lhs", a, st.kind == StepKind::kInt8 ? kInt8 : kFloat32);
    const bool float_rhs = st.kind == StepKind::kFloat || st.kind == StepKind::kDequantFloat;
    ExpectDType(p, s, "rhs", b,
                float_rhs                            ? kFloat32
                : st.kind == StepKind::kDequantGroup ? kUInt8
                                                     : kInt8);
    // The weight of a quantized step is [N, K] (packed int4: [N, K/2]), used transposed.
    std::vector<int64_t> b_logical = b.shape;
    if (st.kind == StepKind::kDequantGroup) {
      if (b.shape.size() != 2) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s
                                  << " packed int4 weight has shape " << ShapeStr(b.shape)
                                  << "; expected [N, K/2]";
      }
      b_logical = {b.shape[0], 2 * b.shape[1]};
    }
    if (st.kind == StepKind::kDequantFloat) {
      if (b.shape.size() != 3) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s
                                  << " weight codes have shape " << ShapeStr(b.shape)
                                  << "; expected [N, K/G, G]";
      }
      b_logical = {b.shape[0], b.shape[1] * b.shape[2]};
    }
    StepShape shape;
    shape.c_shape = OutputShape(p, s, a, b_logical);
    shape.k = a.shape.back();
    View c;
    c.shape = shape.c_shape;
    c.dtype = kFloat32;
    const int out = frame->output_of_step[s];
    if (out >= 0) {
      const View& dest = frame->outputs[out];
      if (dest.shape != c.shape) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": output " << out
                                  << " has shape " << ShapeStr(dest.shape) << " but step " << s
                                  << " (" << st.name << ") produces " << ShapeStr(c.shape);
      }
      c.data = dest.data;
    } else {
      frame->scratch[s].resize(Numel(c.shape));
      c.data = frame->scratch[s].data();
    }
    const float* bias =
        st.has_bias ? CheckBias(p, s, frame->Value(st.bias), c.shape.back()) : nullptr;
    if (st.kind == StepKind::kInt8) {
      RunInt8Step(p, s, a, b, frame->Value(st.scale_a), frame->Value(st.scale_b), bias, c);
    } else if (st.kind == StepKind::kFloat) {
      RunFloatGemm(st, a, Floats(b), b_logical, bias, c);
    } else if (st.kind == StepKind::kDequantFloat) {
      RunEmulatedStep(p, s, *frame, a, b, b_logical, bias, c);
    } else {
      RunWeightOnlyStep(p, s, *frame, a, b, b_logical, bias, c);
    }
    frame->produced[s] = c;
    return shape;
  }

  void RunFloatGemm(const Step& st, const View& a, const float* b,
                    const std::vector<int64_t>& b_shape, const float* bias, const View& c) {
    GemmArgs g;
    g.a_shape = a.shape;
    g.b_shape = b_shape;
    g.c_shape = c.shape;
    g.b_transposed = st.rhs_transposed;
    g.epilogue = st.epilogue;
    g.a = Floats(a);
    g.b = b;
    g.c = static_cast<float*>(c.data);
    g.bias = bias;
    gemm_.Run(g);
  }

  // A weight-only quantized step: a decode step's few rows read the weight once, in its
  // stored width; more rows dequantize it to float32 for the float GEMM.
  void RunWeightOnlyStep(const Program& p, size_t s, const Frame& frame, const View& a,
                         const View& b, const std::vector<int64_t>& b_logical,
                         const float* bias, const View& c) {
    const Step& st = p.steps[s];
    const int64_t n = c.shape.back(), k = a.shape.back();
    DequantRowsArgs w = WeightOperands(p, s, frame, b, n, k);
    if (b.shape.size() == 2 && RunFewRows(w, st, a, bias, c)) return;
    std::vector<float> weight(Numel(b_logical));
    if (w.q8 != nullptr) {
      DequantizeChannel(w.q8, w.channel_scale, n, k, weight.data());
    } else {
      DequantizePackedInt4(w.q4, w.zero_point, w.zp_per_group, w.group_scale, n,
                           k / w.group_size, w.group_size, weight.data());
    }
    RunFloatGemm(st, a, weight.data(), b_logical, bias, c);
  }

  // A format without an integer kernel: its codes (exact in float32) times their scales,
  // w[r, g*G + j] = codes[r, g, j] * scale[r, g], as the Relax form computes it. A decode
  // step's few rows form each weight in a register (read once, as float32 is); more rows
  // dequantize the weight to float32 for the float GEMM.
  void RunEmulatedStep(const Program& p, size_t s, const Frame& frame, const View& a,
                       const View& b, const std::vector<int64_t>& b_logical, const float* bias,
                       const View& c) {
    const Step& st = p.steps[s];
    const View& scale = frame.Value(st.scale_b);
    ExpectDType(p, s, "weight scale", scale, kFloat32);
    const int64_t n = b.shape[0], groups = b.shape[1], g = b.shape[2];
    ExpectShape(p, s, "weight scale", scale, {n, groups, 1});
    const float* codes = Floats(b);
    const float* sc = Floats(scale);
    DequantRowsArgs w;
    w.n = n;
    w.k = groups * g;
    w.codes = codes;
    w.group_scale = sc;
    w.group_size = g;
    if (g > 0 && RunFewRows(w, st, a, bias, c)) return;
    std::vector<float> weight(Numel(b_logical));
    for (int64_t i = 0; i < n * groups; ++i) {
      for (int64_t j = 0; j < g; ++j) weight[i * g + j] = codes[i * g + j] * sc[i];
    }
    RunFloatGemm(st, a, weight.data(), b_logical, bias, c);
  }

  // A decode step's few rows through the dequantizing row kernels (each weight read once,
  // in its stored width); false, with nothing done, for a call they do not take.
  bool RunFewRows(DequantRowsArgs w, const Step& st, const View& a, const float* bias,
                  const View& c) const {
    w.rows = Numel(c.shape) / std::max<int64_t>(w.n, 1);
    if (w.rows > kMaxDequantRows || !st.rhs_transposed || Numel(a.shape) != w.rows * w.k)
      return false;
    w.a = Floats(a);
    w.bias = bias;
    w.epilogue = st.epilogue;
    w.c = static_cast<float*>(c.data);
    DequantGemmRows(w);
    return true;
  }

  // The checked storage, scales and zero point of a weight-only quantized step's weight
  // [N, K] (int8, or packed int4 [N, K/2]), as the dequantizing kernels take them.
  DequantRowsArgs WeightOperands(const Program& p, size_t s, const Frame& frame, const View& b,
                                 int64_t n, int64_t k) const {
    const Step& st = p.steps[s];
    const View& scale = frame.Value(st.scale_b);
    ExpectDType(p, s, "weight scale", scale, kFloat32);
    DequantRowsArgs w;
    w.n = n;
    w.k = k;
    if (st.kind == StepKind::kDequantChannel) {
      ExpectShape(p, s, "weight scale", scale, {n});
      w.q8 = static_cast<const int8_t*>(b.data);
      w.channel_scale = Floats(scale);
      return w;
    }
    const int64_t groups = scale.shape.size() == 3 ? scale.shape[1] : 0;
    if (groups < 1 || k % groups != 0 || (k / groups) % 2 != 0) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s
                                << " group scale has shape " << ShapeStr(scale.shape)
                                << "; expected [N, K/G, 1] with an even G dividing K=" << k;
    }
    ExpectShape(p, s, "group scale", scale, {n, groups, 1});
    const View& zp = frame.Value(st.zero_point);
    ExpectDType(p, s, "zero point", zp, kFloat32);
    w.zp_per_group = !zp.shape.empty();
    if (w.zp_per_group) ExpectShape(p, s, "zero point", zp, {n, groups, 1});
    w.q4 = static_cast<const uint8_t*>(b.data);
    w.group_scale = Floats(scale);
    w.zero_point = Floats(zp);
    w.group_size = k / groups;
    return w;
  }

  // The ledger entry of step s: the cost model's charge of the call it made.
  LedgerEntry ChargeStep(const Program& p, uint32_t program_index, size_t s,
                         uint64_t call_index, const StepShape& shape) {
    LedgerEntry e;
    e.call_index = call_index;
    e.program = program_index;
    e.step = static_cast<uint32_t>(s);
    e.tag = ledger_.CurrentTag();
    for (int64_t d : shape.c_shape) {
      if (d == 0) return e;  // an empty GEMM: nothing to charge
    }
    if (shape.k == 0) return e;
    try {
      e.charge = costs_.Get(StepCall(p.steps[s], shape.c_shape, shape.k));
    } catch (const std::exception& err) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " ("
                                << p.steps[s].name << "): the cost model refused the call: "
                                << err.what();
    }
    return e;
  }

  // A value returned more than once was written into its first output; copy the rest.
  void CopyRepeatedOutputs(const Program& p, const Frame& frame) const {
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      const int64_t step = -p.outputs[o].source - 1;
      if (frame.output_of_step[step] == static_cast<int>(o)) continue;
      const View& value = frame.produced[step];
      if (frame.outputs[o].shape != value.shape) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": output " << o << " has shape "
                                  << ShapeStr(frame.outputs[o].shape) << " but step " << step
                                  << " produces " << ShapeStr(value.shape);
      }
      std::copy_n(Floats(value), Numel(value.shape), static_cast<float*>(frame.outputs[o].data));
    }
  }

  void RunInt8Step(const Program& p, size_t s, const View& a, const View& b, const View& sa,
                   const View& sb, const float* bias, const View& c) {
    const Step& st = p.steps[s];
    const int64_t n = c.shape.back(), k = a.shape.back();
    const int64_t rows = Numel(c.shape) / std::max<int64_t>(n, 1);
    if (b.shape.size() != 2 || !st.rhs_transposed || c.shape.size() != a.shape.size()) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s
                                << " int8 GEMM needs a [N, K] weight used transposed";
    }
    ExpectDType(p, s, "activation scale", sa, kFloat32);
    ExpectDType(p, s, "weight scale", sb, kFloat32);
    std::vector<int64_t> per_token(a.shape.begin(), a.shape.end() - 1);
    per_token.push_back(1);
    const bool sa_per_row = !sa.shape.empty();
    const bool sb_per_col = !sb.shape.empty();
    if (sa_per_row) ExpectShape(p, s, "activation scale", sa, per_token);
    if (sb_per_col) ExpectShape(p, s, "weight scale", sb, {n});
    Int8GemmArgs g;
    g.rows = rows;
    g.n = n;
    g.k = k;
    g.a = static_cast<const int8_t*>(a.data);
    g.b = static_cast<const int8_t*>(b.data);
    g.dequant.sa = Floats(sa);
    g.dequant.sa_per_row = sa_per_row;
    g.dequant.sb = Floats(sb);
    g.dequant.sb_per_col = sb_per_col;
    g.dequant.bias = bias;
    g.dequant.epilogue = st.epilogue;
    g.out = static_cast<float*>(c.data);
    gemm_.RunInt8(g);
  }

  void ExpectDType(const Program& p, size_t s, const char* role, const View& v,
                   DLDataType want) const {
    if (!SameDType(v.dtype, want)) {
      TVM_FFI_THROW(TypeError) << "tenet: " << p.symbol << ": step " << s << " ("
                               << p.steps[s].name << "): " << role << " has dtype "
                               << ffi::DLDataTypeToString(v.dtype) << "; expected "
                               << ffi::DLDataTypeToString(want);
    }
  }

  void ExpectShape(const Program& p, size_t s, const char* role, const View& v,
                   const std::vector<int64_t>& want) const {
    if (v.shape != want) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " ("
                                << p.steps[s].name << "): " << role << " has shape "
                                << ShapeStr(v.shape) << "; expected " << ShapeStr(want);
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
    v.data = static_cast<char*>(t->data) + t->byte_offset;
    v.dtype = t->dtype;
    return v;
  }

  // The output shape of step s from its lhs and (logical, stored-orientation) rhs shapes.
  std::vector<int64_t> OutputShape(const Program& p, size_t s, const View& lhs,
                                   const std::vector<int64_t>& rhs_shape) {
    const Step& st = p.steps[s];
    const std::vector<int64_t>& a = lhs.shape;
    const std::vector<int64_t>& b = rhs_shape;
    const size_t ra = a.size(), rb = b.size();
    const int64_t k_a = a[ra - 1];
    const int64_t k_b = st.rhs_transposed ? b[rb - 1] : b[rb - 2];
    const int64_t n = st.rhs_transposed ? b[rb - 2] : b[rb - 1];
    if (k_a != k_b) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " (" << st.name
                                << "): lhs " << ShapeStr(a) << " and rhs "
                                << ShapeStr(b) << (st.rhs_transposed ? " (transposed)" : "")
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
      const int64_t da = from_end <= ra ? a[ra - from_end] : 1;
      const int64_t db = from_end <= rb ? b[rb - from_end] : 1;
      if (da != db && da != 1 && db != 1) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " ("
                                  << st.name << "): batch dims of lhs " << ShapeStr(a)
                                  << " and rhs " << ShapeStr(b) << " do not broadcast";
      }
      c[i] = da == 1 ? db : da;
    }
    c[rank - 2] = a[ra - 2];
    c[rank - 1] = n;
    return c;
  }

  const float* CheckBias(const Program& p, size_t s, const View& bias, int64_t n) {
    ExpectDType(p, s, "bias", bias, kFloat32);
    if (bias.shape.empty() || bias.shape.back() != n || Numel(bias.shape) != n) {
      TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " ("
                                << p.steps[s].name << "): bias shape " << ShapeStr(bias.shape)
                                << " is not a vector of the " << n << " output columns";
    }
    return Floats(bias);
  }

  Descriptor descriptor_;
  std::unordered_map<std::string, size_t> by_symbol_;
  GemmEngine gemm_;
  ChargeCache costs_;
  VectorChargeCache vector_costs_;
  std::unordered_map<std::string, size_t> by_vector_symbol_;
  Ledger ledger_;
  std::atomic<bool> charging_{true};
};

ffi::Module CreateTenetModule(const std::string& descriptor) {
  return ffi::Module(ffi::make_object<TenetModuleObj>(ParseDescriptor(descriptor)));
}

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::GlobalDef()
      .def("tenet_byoc.runtime.create_module",
           [](const ffi::String& descriptor) { return CreateTenetModule(descriptor); })
      .def("ffi.Module.load_from_bytes.tenet",
           [](const ffi::Bytes& bytes) { return CreateTenetModule(std::string(bytes)); })
      // The descriptor version this runtime reads (program.h): the codegen writes it from
      // here, so the number is written once.
      .def("tenet_byoc.runtime.descriptor_version", []() { return kDescriptorVersion; })
      // Every descriptor object's keys (program.h DescriptorObjects) as JSON
      // {object: [[name, required], ...]}: the codegen writes its objects' keys from here,
      // so each list is written once.
      .def("tenet_byoc.runtime.descriptor_fields", []() {
        detail::OrderedJson objects = detail::OrderedJson::object();
        for (const DescriptorObject& o : DescriptorObjects()) {
          detail::OrderedJson fields = detail::OrderedJson::array();
          for (const DescriptorField& f : o.fields) fields.push_back({f.name, f.required});
          objects[o.name] = fields;
        }
        return ffi::String(objects.dump());
      });
}

}  // namespace runtime
}  // namespace tenet
