// The "tenet" runtime module: the Relax VM calls its functions to run offloaded GEMMs.
#include <tvm/ffi/cast.h>
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
// Quantization scales are charged as float16 side data.
constexpr int64_t kScaleBits = 16;

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

std::pair<Hardware, Dataflow> ParseCostConfig(const std::string& text) {
  try {
    return ParseConfig(text);
  } catch (const std::invalid_argument& e) {
    TVM_FFI_THROW(ValueError) << "tenet: invalid hardware/dataflow config: " << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

class TenetModuleObj : public ffi::ModuleObj {
 public:
  explicit TenetModuleObj(Descriptor descriptor)
      : descriptor_(std::move(descriptor)),
        costs_(ParseCostConfig(descriptor_.cost_config).first,
               ParseCostConfig(descriptor_.cost_config).second,
               descriptor_.macs_per_cycle_by_bits) {
    for (size_t i = 0; i < descriptor_.programs.size(); ++i) {
      by_symbol_.emplace(descriptor_.programs[i].symbol, i);
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
    if (name == "__tenet_ledger_json") {
      return ffi::Function::FromTyped([self, this]() { return ffi::String(LedgerJson()); });
    }
    if (name == "__tenet_ledger_reset") {
      return ffi::Function::FromTyped([self, this]() { ledger_.Reset(); });
    }
    if (name == "__tenet_set_tag") {
      return ffi::Function::FromTyped(
          [self, this](const ffi::String& tag) { ledger_.SetTag(std::string(tag)); });
    }
    if (name == "__tenet_set_charging") {
      return ffi::Function::FromTyped([self, this](bool on) { charging_.store(on); });
    }
    if (name == "__tenet_cost_config") {
      return ffi::Function::FromTyped(
          [self, this]() { return ffi::String(descriptor_.cost_config); });
    }
    return std::nullopt;
  }

  ffi::Bytes SaveToBytes() const final { return ffi::Bytes(SerializeDescriptor(descriptor_)); }

  ffi::String InspectSource(const ffi::String& format) const final {
    return ffi::String(std::string(SaveToBytes()));
  }

 private:
  void Run(uint32_t program_index, ffi::PackedArgs args) {
    const Program& p = descriptor_.programs[program_index];
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
      if (spec.is_shape) continue;
      std::ostringstream what;
      what << (is_out ? "output " : "input ") << (is_out ? i - n_in : i);
      (is_out ? outputs[i - n_in] : inputs[i]) = CheckTensor(p, args[i], spec, what.str());
    }
    // Values produced by steps: either written straight into an output buffer, or held in
    // scratch memory for the steps that read them.
    std::vector<View> produced(p.steps.size());
    std::vector<std::vector<float>> scratch(p.steps.size());
    std::vector<int> output_of_step(p.steps.size(), -1);
    for (size_t o = n_out; o-- > 0;) output_of_step[-p.outputs[o].source - 1] = o;
    auto value = [&](ValueRef ref) -> const View& {
      return ref >= 0 ? inputs[ref] : produced[-ref - 1];
    };
    const bool charging = charging_.load(std::memory_order_relaxed);
    std::vector<LedgerEntry> entries;
    if (charging) entries.reserve(p.steps.size());
    const uint64_t call_index = ledger_.NextCallIndex();
    for (size_t s = 0; s < p.steps.size(); ++s) {
      const Step& st = p.steps[s];
      const View& a = value(st.lhs);
      const View& b = value(st.rhs);
      ExpectDType(p, s, "lhs", a, st.kind == StepKind::kInt8 ? kInt8 : kFloat32);
      ExpectDType(p, s, "rhs", b,
                  st.kind == StepKind::kFloat           ? kFloat32
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
      const std::vector<int64_t> c_shape = OutputShape(p, s, a, b_logical);
      View c;
      c.shape = c_shape;
      c.dtype = kFloat32;
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
        scratch[s].resize(Numel(c_shape));
        c.data = scratch[s].data();
      }
      const float* bias = st.has_bias ? CheckBias(p, s, value(st.bias), c_shape.back()) : nullptr;
      const int64_t n = c_shape.back(), k = a.shape.back();
      int64_t scale_b_elems = 0;
      if (st.kind == StepKind::kInt8) {
        RunInt8Step(p, s, a, b, value(st.scale_a), value(st.scale_b), bias, c);
        scale_b_elems = Numel(value(st.scale_b).shape);
      } else {
        std::vector<float> dequantized;
        const void* weight = b.data;
        bool fused_done = false;
        if (st.kind != StepKind::kFloat) {
          const View& scale = value(st.scale_b);
          ExpectDType(p, s, "weight scale", scale, kFloat32);
          scale_b_elems = Numel(scale.shape);
          // A decode step's few rows read the weight once, in its stored width.
          const int64_t rows = Numel(c_shape) / std::max<int64_t>(n, 1);
          DequantRowsArgs fused;
          fused.rows = rows;
          fused.n = n;
          fused.k = k;
          fused.a = Floats(a);
          fused.bias = bias;
          fused.epilogue = st.epilogue;
          fused.c = static_cast<float*>(c.data);
          const bool few_rows = rows <= kMaxDequantRows && st.rhs_transposed &&
                                b.shape.size() == 2 && Numel(a.shape) == rows * k;
          if (st.kind == StepKind::kDequantChannel) {
            ExpectShape(p, s, "weight scale", scale, {n});
            if (few_rows) {
              fused.q8 = static_cast<const int8_t*>(b.data);
              fused.channel_scale = Floats(scale);
            }
          }
          if (!few_rows) dequantized.resize(Numel(b_logical));
          if (st.kind == StepKind::kDequantChannel && few_rows) {
            DequantGemmRows(fused);
            fused_done = true;
          } else if (st.kind == StepKind::kDequantChannel) {
            DequantizeChannel(static_cast<const int8_t*>(b.data), Floats(scale), n, k,
                              dequantized.data());
          } else {
            const int64_t groups = scale.shape.size() == 3 ? scale.shape[1] : 0;
            if (groups < 1 || k % groups != 0 || (k / groups) % 2 != 0) {
              TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s
                                        << " group scale has shape " << ShapeStr(scale.shape)
                                        << "; expected [N, K/G, 1] with an even G dividing K="
                                        << k;
            }
            ExpectShape(p, s, "group scale", scale, {n, groups, 1});
            const View& zp = value(st.zero_point);
            ExpectDType(p, s, "zero point", zp, kFloat32);
            const bool zp_per_group = !zp.shape.empty();
            if (zp_per_group) ExpectShape(p, s, "zero point", zp, {n, groups, 1});
            if (few_rows) {
              fused.q4 = static_cast<const uint8_t*>(b.data);
              fused.group_scale = Floats(scale);
              fused.zero_point = Floats(zp);
              fused.zp_per_group = zp_per_group;
              fused.group_size = k / groups;
              DequantGemmRows(fused);
              fused_done = true;
            } else {
              DequantizePackedInt4(static_cast<const uint8_t*>(b.data), Floats(zp),
                                   zp_per_group, Floats(scale), n, groups, k / groups,
                                   dequantized.data());
            }
          }
          weight = dequantized.data();
        }
        if (!fused_done) {
          GemmArgs g;
          g.a_shape = a.shape;
          g.b_shape = b_logical;
          g.c_shape = c_shape;
          g.b_transposed = st.rhs_transposed;
          g.epilogue = st.epilogue;
          g.a = Floats(a);
          g.b = static_cast<const float*>(weight);
          g.c = static_cast<float*>(c.data);
          g.bias = bias;
          gemm_.Run(g);
        }
      }
      produced[s] = c;
      if (charging) {
        LedgerEntry e;
        e.call_index = call_index;
        e.program = program_index;
        e.step = static_cast<uint32_t>(s);
        e.tag = ledger_.CurrentTag();
        e.shape = ShapeKey(st, c_shape, k, scale_b_elems);
        if (e.shape.batch > 0 && e.shape.m > 0 && e.shape.n > 0 && e.shape.k > 0) {
          try {
            e.cost = costs_.Get(e.shape);
          } catch (const std::exception& err) {
            TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": step " << s << " ("
                                      << st.name << "): the cost model refused the call: "
                                      << err.what();
          }
        }
        entries.push_back(std::move(e));
      }
    }
    // A value returned more than once was written into its first output; copy the rest.
    for (size_t o = 0; o < n_out; ++o) {
      const int64_t step = -p.outputs[o].source - 1;
      if (output_of_step[step] == static_cast<int>(o)) continue;
      if (outputs[o].shape != produced[step].shape) {
        TVM_FFI_THROW(ValueError) << "tenet: " << p.symbol << ": output " << o << " has shape "
                                  << ShapeStr(outputs[o].shape) << " but step " << step
                                  << " produces " << ShapeStr(produced[step].shape);
      }
      std::copy_n(Floats(produced[step]), Numel(produced[step].shape),
                  static_cast<float*>(outputs[o].data));
    }
    if (charging) ledger_.Append(&entries);
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
    std::vector<int32_t> acc(rows * n);
    Int8GemmArgs g;
    g.rows = rows;
    g.n = n;
    g.k = k;
    g.a = static_cast<const int8_t*>(a.data);
    g.b = static_cast<const int8_t*>(b.data);
    g.c = acc.data();
    gemm_.RunInt8(g);
    Int8Epilogue(acc.data(), rows, n, Floats(sa), sa_per_row, Floats(sb), sb_per_col, bias,
                 st.epilogue, static_cast<float*>(c.data));
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

  // Charged sizes: the element widths of the step's scheme, its scales as side data read
  // once (float16, as MLC-LLM, GPTQ and AWQ store them), and the non-MAC work the scheme
  // adds: one multiply per weight to dequantize it, or for int8 GEMMs the on-chip
  // max-abs reduction and quantization of the activation (2 ops per element) and the
  // dequantization of the output (1 op per element).
  GemmWorkload ShapeKey(const Step& st, const std::vector<int64_t>& c_shape, int64_t k,
                   int64_t scale_b_elems) const {
    GemmWorkload key;
    key.batch = 1;
    for (size_t i = 0; i + 2 < c_shape.size(); ++i) key.batch *= c_shape[i];
    key.m = c_shape[c_shape.size() - 2];
    key.n = c_shape.back();
    key.k = k;
    key.bits_a = st.bits_a;
    key.bits_b = st.bits_b;
    key.bits_c = st.bits_c;
    key.extra_read_bits = scale_b_elems * kScaleBits;
    if (st.kind == StepKind::kDequantChannel || st.kind == StepKind::kDequantGroup) {
      key.extra_ops = key.n * key.k;
    } else if (st.kind == StepKind::kInt8) {
      key.extra_ops = key.batch * key.m * (2 * key.k + key.n);
    }
    return key;
  }

  std::string LedgerJson() const;

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
  CostCache costs_;
  Ledger ledger_;
  std::atomic<bool> charging_{true};
};

void WriteMetrics(std::ostream& os, const Metrics& m) {
  os << "{\"macs\":" << m.macs << ",\"cycles\":" << m.cycles
     << ",\"compute_cycles\":" << m.compute_cycles << ",\"stall_cycles\":" << m.stall_cycles
     << ",\"time_steps\":" << m.time_steps << ",\"active_pes\":" << m.active_pes
     << ",\"num_pes\":" << m.num_pes << ",\"avg_active_pes\":" << m.avg_active_pes
     << ",\"ingress_delay\":" << m.ingress_delay << ",\"egress_delay\":" << m.egress_delay
     << ",\"compute_delay\":" << m.compute_delay
     << ",\"compute_delay_exact\":" << m.compute_delay_exact << ",\"delay\":" << m.delay
     << ",\"folds\":" << m.folds << ",\"offchip_read_bits\":" << m.offchip_read_bits
     << ",\"offchip_write_bits\":" << m.offchip_write_bits
     << ",\"pe_utilization\":" << m.pe_utilization
     << ",\"bandwidth_bits_per_cycle\":" << m.bandwidth_bits_per_cycle
     << ",\"latency_us\":" << m.latency_us << ",\"tensors\":{";
  bool first = true;
  for (const auto& kv : m.tensors) {
    const TensorMetrics& t = kv.second;
    os << (first ? "" : ",") << '"' << kv.first << "\":{\"is_write\":"
       << (t.is_write ? "true" : "false") << ",\"bits\":" << t.bits << ",\"total\":" << t.total
       << ",\"unique\":" << t.unique << ",\"reuse_factor\":" << t.reuse_factor
       << ",\"spatial_reuse\":" << t.spatial_reuse << ",\"temporal_reuse\":" << t.temporal_reuse
       << ",\"offchip_elements\":" << t.offchip_elements << ",\"offchip_bits\":" << t.offchip_bits
       << '}';
    first = false;
  }
  os << "}}";
}

// Entries refer to a table of distinct costs (a model calls few shapes many times), and to
// the functions and steps by index, so a long ledger stays small.
std::string TenetModuleObj::LedgerJson() const {
  std::vector<LedgerEntry> entries = ledger_.Snapshot();
  std::ostringstream os;
  os.precision(17);
  os << "{\"hardware\":" << JsonString(costs_.hardware().name)
     << ",\"dataflow\":" << JsonString(costs_.dataflow().name)
     << ",\"clock_ghz\":" << costs_.hardware().clock_ghz << ",\"tags\":[";
  std::vector<std::string> tags = ledger_.Tags();
  for (size_t i = 0; i < tags.size(); ++i) os << (i ? "," : "") << JsonString(tags[i]);
  os << "],\"functions\":[";
  for (size_t i = 0; i < descriptor_.programs.size(); ++i) {
    const Program& p = descriptor_.programs[i];
    os << (i ? "," : "") << "{\"symbol\":" << JsonString(p.symbol) << ",\"steps\":[";
    for (size_t s = 0; s < p.steps.size(); ++s) {
      os << (s ? "," : "") << "{\"pattern\":" << JsonString(p.steps[s].pattern)
         << ",\"name\":" << JsonString(p.steps[s].name)
         << ",\"scheme\":" << JsonString(p.steps[s].scheme) << '}';
    }
    os << "]}";
  }
  os << "],\"costs\":[";
  std::unordered_map<const Metrics*, size_t> cost_ids;
  for (const LedgerEntry& e : entries) {
    if (!e.cost || cost_ids.count(e.cost.get())) continue;
    os << (cost_ids.empty() ? "" : ",");
    WriteMetrics(os, *e.cost);
    cost_ids.emplace(e.cost.get(), cost_ids.size());
  }
  os << "],\"entries\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    const LedgerEntry& e = entries[i];
    os << (i ? "," : "") << '[' << e.call_index << ',' << e.program << ',' << e.step << ','
       << e.tag << ',' << e.shape.batch << ',' << e.shape.m << ',' << e.shape.n << ','
       << e.shape.k << ',' << e.shape.bits_a << ',' << e.shape.bits_b << ',' << e.shape.bits_c
       << ',' << (e.cost ? static_cast<int64_t>(cost_ids.at(e.cost.get())) : -1) << ','
       << e.shape.extra_read_bits << ',' << e.shape.extra_ops << ']';
  }
  os << "]}";
  return os.str();
}

ffi::Module CreateTenetModule(const std::string& descriptor) {
  return ffi::Module(ffi::make_object<TenetModuleObj>(ParseDescriptor(descriptor)));
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
