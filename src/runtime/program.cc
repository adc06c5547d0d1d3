// Reading and writing kernel descriptors, with every field checked before a program runs.
#include "runtime/program.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <tvm/ffi/error.h>
#include <tvm/ffi/string.h>

#include "cost_model/json.h"

namespace tenet {
namespace runtime {

namespace ffi = tvm::ffi;
// Descriptors are read and written with the cost model's JSON (nlohmann-json, json.h).
using Json = detail::JsonValue;
using OrderedJson = detail::OrderedJson;

namespace {

const Json& Field(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " has no field '" << key << "'";
  }
  return *it;
}

// An integer of int64 (not a bool, not a float such as 2.0).
bool IsInt64(const Json& v) {
  return v.is_number_integer() &&
         (!v.is_number_unsigned() ||
          v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

// Field `key` of `obj` as T: std::string, int64_t, bool, or Json (an object or an array, as
// `want_array` says).
template <typename T>
T Get(const Json& obj, const char* key, const std::string& where, bool want_array = false) {
  const Json& v = Field(obj, key, where);
  bool ok;
  if constexpr (std::is_same_v<T, std::string>) {
    ok = v.is_string();
  } else if constexpr (std::is_same_v<T, int64_t>) {
    ok = IsInt64(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    ok = v.is_boolean();
  } else {
    ok = want_array ? v.is_array() : v.is_object();
  }
  if (!ok) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: field '" << key << "' of " << where
                              << " has the wrong type";
  }
  return v.get<T>();
}

const Json& AsObject(const Json& v, const std::string& where) {
  if (!v.is_object()) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " is not an object";
  }
  return v;
}

// Ranks beyond this are refused: no model here needs them, and a crafted descriptor must
// not make the runtime allocate per-dimension buffers of its choosing.
constexpr int64_t kMaxRank = 32;

void CheckRank(int64_t ndim, int64_t lo, const std::string& where, const char* field) {
  if (ndim < lo || ndim > kMaxRank) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " " << field << " is " << ndim
                              << "; expected an integer in [" << lo << ", " << kMaxRank << "]";
  }
}

TensorSpec ParseSpec(const Json& obj, const std::string& where, bool is_output) {
  TensorSpec spec;
  auto kind = obj.find("kind");
  if (kind != obj.end()) {
    if (!kind->is_string() || kind->get<std::string>() != "shape" || is_output) {
      TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where
                                << " has an unknown kind; only inputs may be of kind 'shape'";
    }
    spec.is_shape = true;
    return spec;
  }
  spec.dtype = ffi::StringToDLDataType(ffi::String(Get<std::string>(obj, "dtype", where)));
  spec.ndim = Get<int64_t>(obj, "ndim", where);
  CheckRank(spec.ndim, 0, where, "ndim");
  if (is_output) spec.source = Get<int64_t>(obj, "source", where);
  return spec;
}

// The rank of a value a step reads: an input's declared ndim or an earlier step's out_ndim.
int64_t RankOf(ValueRef ref, const Program& p) {
  return ref >= 0 ? p.inputs[ref].ndim : p.steps[-ref - 1].out_ndim;
}

// Checks the ranks a step relies on when it runs, so that no shape is read past its end:
// lhs and rhs are matrices or stacks of them, the output rank holds both, a quantized
// weight is a plain [N, K] (int4: [N, K/2]) input used transposed, a bias is a vector.
void CheckStepRanks(const Step& st, const Program& p, const std::string& where) {
  CheckRank(st.out_ndim, 2, where, "out_ndim");
  // Emulated formats hold their weight as codes [N, K/G, G]: logically a 2-D [N, K].
  const bool codes = st.kind == StepKind::kDequantFloat;
  const int64_t ra = RankOf(st.lhs, p), rb = RankOf(st.rhs, p);
  const int64_t rb_logical = codes && rb == 3 ? 2 : rb;
  if (ra < 2 || rb_logical < 2 || ra > st.out_ndim || rb_logical > st.out_ndim) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " has lhs rank " << ra
                              << " and rhs rank " << rb << " for out_ndim " << st.out_ndim
                              << "; both must be in [2, out_ndim]";
  }
  if (st.kind != StepKind::kFloat &&
      (rb != (codes ? 3 : 2) || st.rhs < 0 || !st.rhs_transposed)) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " of kind "
                              << StepKindName(st.kind)
                              << " needs a 2-D weight input (dequant_float: 3-D codes "
                                 "[N, K/G, G]) used transposed (rhs_transposed)";
  }
  if (st.has_bias && RankOf(st.bias, p) < 1) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " bias has rank 0";
  }
}

void CheckRef(ValueRef ref, const Program& p, size_t step_index, const std::string& where) {
  const bool ok = ref >= 0 ? ref < static_cast<int64_t>(p.inputs.size()) && !p.inputs[ref].is_shape
                           : -ref - 1 < static_cast<int64_t>(step_index);
  if (!ok) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " refers to value " << ref
                              << ", which is neither a tensor input nor an earlier step";
  }
}

// Reads an optional value reference (null when absent).
bool OptionalRef(const Json& obj, const char* key, const Program& p, size_t step,
                 const std::string& where, ValueRef* out) {
  if (Field(obj, key, where).is_null()) return false;
  *out = Get<int64_t>(obj, key, where);
  CheckRef(*out, p, step, where + " " + key);
  return true;
}

// The step's quantization recipe, read by the cost model's one recipe parser
// (charge.h ParseQuantRecipe: weight_batched optional) from the object's JSON text.
QuantRecipe ParseRecipe(const Json& obj, const std::string& where) {
  try {
    return ParseQuantRecipe(obj.dump(), where);
  } catch (const std::invalid_argument& e) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << e.what();
  }
  return QuantRecipe{};
}

OrderedJson RecipeJson(const QuantRecipe& r) {
  return OrderedJson::parse(SerializeQuantRecipe(r));
}

// Refuses a key that is not among the object's DescriptorFields, naming it: a misspelt or
// newer field must not be silently ignored.
void CheckKeys(const Json& obj, const char* object, const std::string& where) {
  const std::vector<DescriptorField>& fields = DescriptorFields(object);
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const DescriptorField& f : fields) known = known || it.key() == f.name;
    if (!known) {
      TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " has an unknown field '"
                                << it.key() << "'";
    }
  }
}

}  // namespace

const std::vector<DescriptorObject>& DescriptorObjects() {
  static const std::vector<DescriptorObject> objects = {
      {"descriptor",
       {{"version", true}, {"functions", true}, {"vector_functions", false},
        {"accelerator", true}}},
      {"function", {{"symbol", true}, {"inputs", true}, {"outputs", true}, {"steps", true}}},
      {"step",
       {{"pattern", true}, {"name", true}, {"lhs", true}, {"rhs", true}, {"kind", true},
        {"scheme", true}, {"bias", true}, {"scale_a", true}, {"scale_b", true},
        {"zero_point", true}, {"bits", true}, {"quant", true}, {"rhs_transposed", true},
        {"epilogue", true}, {"out_ndim", true}, {"a_on_chip", false}, {"c_on_chip", false}}},
      {"vector_function", {{"symbol", true}, {"steps", true}}},
      {"vector_step",
       {{"name", true}, {"scheme", true}, {"op", true}, {"rank", true}, {"operand", true},
        {"bits_in", true}, {"bits_out", true}}}};
  return objects;
}

const std::vector<DescriptorField>& DescriptorFields(const std::string& name) {
  for (const DescriptorObject& o : DescriptorObjects()) {
    if (name == o.name) return o.fields;
  }
  TVM_FFI_THROW(InternalError) << "no descriptor object '" << name << "'";
  TVM_FFI_UNREACHABLE();
}

StepKind ParseStepKind(const std::string& name) {
  if (name == "float") return StepKind::kFloat;
  if (name == "dequant_channel") return StepKind::kDequantChannel;
  if (name == "dequant_group") return StepKind::kDequantGroup;
  if (name == "int8") return StepKind::kInt8;
  if (name == "dequant_float") return StepKind::kDequantFloat;
  TVM_FFI_THROW(ValueError) << "tenet descriptor: unknown step kind '" << name
                            << "'; expected float, dequant_channel, dequant_group, int8 or "
                               "dequant_float";
  TVM_FFI_UNREACHABLE();
}

const char* StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kDequantChannel: return "dequant_channel";
    case StepKind::kDequantGroup: return "dequant_group";
    case StepKind::kInt8: return "int8";
    case StepKind::kDequantFloat: return "dequant_float";
    default: return "float";
  }
}

Descriptor ParseDescriptor(const std::string& text) {
  Json root;
  try {
    root = detail::ParseJson(text, "the descriptor");
  } catch (const std::invalid_argument& e) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: invalid JSON: " << e.what();
  }
  const Json& top = AsObject(root, "the descriptor");
  CheckKeys(top, "descriptor", "the descriptor");
  const int64_t version = Get<int64_t>(top, "version", "the descriptor");
  if (version != kDescriptorVersion) {
    TVM_FFI_THROW(ValueError) << "tenet descriptor: version " << version
                              << " is not supported by this runtime (it reads version "
                              << kDescriptorVersion << "); rebuild the model";
  }
  Descriptor descriptor;
  // The accelerator object is handed, as written, to the cost model's one parser.
  try {
    descriptor.accelerator =
        ParseAccelerator(Get<Json>(top, "accelerator", "the descriptor").dump());
  } catch (const std::exception& e) {  // invalid_argument, or overflow_error on a count
    TVM_FFI_THROW(ValueError) << "tenet descriptor: " << e.what();
  }
  // Optional: a module with nothing left on TVM's path (or a hand-written descriptor) has none.
  const Json no_vector_functions = Json::array();
  const Json& vector_functions = top.contains("vector_functions")
                                     ? Get<Json>(top, "vector_functions", "the descriptor", true)
                                     : no_vector_functions;
  for (const Json& f : vector_functions) {
    const Json& fobj = AsObject(f, "a vector function");
    VectorProgram vp;
    vp.symbol = Get<std::string>(fobj, "symbol", "a vector function");
    const std::string where = "vector function '" + vp.symbol + "'";
    CheckKeys(fobj, "vector_function", where);
    const Json steps = Get<Json>(fobj, "steps", where, true);
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::string swhere = where + " step " + std::to_string(i);
      const Json& sobj = AsObject(steps[i], swhere);
      CheckKeys(sobj, "vector_step", swhere);
      VectorStep st;
      st.name = Get<std::string>(sobj, "name", swhere);
      st.scheme = Get<std::string>(sobj, "scheme", swhere);
      try {
        st.op = ParseVectorOp(Get<std::string>(sobj, "op", swhere));
      } catch (const std::invalid_argument& e) {
        TVM_FFI_THROW(ValueError) << "tenet descriptor: " << swhere << ": " << e.what();
      }
      st.rank = Get<int64_t>(sobj, "rank", swhere);
      CheckRank(st.rank, 1, swhere, "rank");
      st.operand = Get<bool>(sobj, "operand", swhere);
      const int64_t bits_in = Get<int64_t>(sobj, "bits_in", swhere);
      const int64_t bits_out = Get<int64_t>(sobj, "bits_out", swhere);
      if (bits_in < 1 || bits_in > 64 || bits_out < 1 || bits_out > 64) {
        TVM_FFI_THROW(ValueError) << "tenet descriptor: " << swhere
                                  << " bits_in and bits_out must be integers in [1, 64]";
      }
      st.bits_in = static_cast<int>(bits_in);
      st.bits_out = static_cast<int>(bits_out);
      vp.steps.push_back(std::move(st));
    }
    descriptor.vector_programs.push_back(std::move(vp));
  }
  std::vector<Program>& programs = descriptor.programs;
  for (const Json& f : Get<Json>(top, "functions", "the descriptor", true)) {
    const Json& fobj = AsObject(f, "a function");
    Program p;
    p.symbol = (Get<std::string>(fobj, "symbol", "a function"));
    const std::string where = "function '" + p.symbol + "'";
    CheckKeys(fobj, "function", where);
    for (const Json& s : Get<Json>(fobj, "inputs", where, true)) {
      p.inputs.push_back(ParseSpec(AsObject(s, where + " input"), where + " input", false));
    }
    const Json steps = Get<Json>(fobj, "steps", where, true);
    for (size_t i = 0; i < steps.size(); ++i) {
      const std::string swhere = where + " step " + std::to_string(i);
      const Json& sobj = AsObject(steps[i], swhere);
      CheckKeys(sobj, "step", swhere);
      Step st;
      st.pattern = (Get<std::string>(sobj, "pattern", swhere));
      st.name = (Get<std::string>(sobj, "name", swhere));
      st.lhs = Get<int64_t>(sobj, "lhs", swhere);
      st.rhs = Get<int64_t>(sobj, "rhs", swhere);
      CheckRef(st.lhs, p, i, swhere + " lhs");
      CheckRef(st.rhs, p, i, swhere + " rhs");
      st.kind = ParseStepKind((Get<std::string>(sobj, "kind", swhere)));
      st.scheme = (Get<std::string>(sobj, "scheme", swhere));
      st.has_bias = OptionalRef(sobj, "bias", p, i, swhere, &st.bias);
      st.has_scale_a = OptionalRef(sobj, "scale_a", p, i, swhere, &st.scale_a);
      st.has_scale_b = OptionalRef(sobj, "scale_b", p, i, swhere, &st.scale_b);
      st.has_zero_point = OptionalRef(sobj, "zero_point", p, i, swhere, &st.zero_point);
      const bool needs_a = st.kind == StepKind::kInt8;
      const bool needs_b = st.kind != StepKind::kFloat;
      const bool needs_zp = st.kind == StepKind::kDequantGroup;
      st.recipe = ParseRecipe(AsObject(Field(sobj, "quant", swhere), swhere + " quant"),
                              swhere + " quant");
      if (st.has_scale_a != needs_a || st.has_scale_b != needs_b ||
          st.has_zero_point != needs_zp) {
        TVM_FFI_THROW(ValueError) << "tenet descriptor: " << swhere << " of kind "
                                  << StepKindName(st.kind) << " has the wrong scales";
      }
      const Json bits = Get<Json>(sobj, "bits", swhere, true);
      if (bits.size() != 3) {
        TVM_FFI_THROW(ValueError) << "tenet descriptor: " << swhere << " bits must be [a, b, c]";
      }
      int* widths[3] = {&st.bits_a, &st.bits_b, &st.bits_c};
      for (int j = 0; j < 3; ++j) {
        const int64_t b = IsInt64(bits[j]) ? bits[j].get<int64_t>() : 0;
        if (b < 1 || b > 64) {
          TVM_FFI_THROW(ValueError) << "tenet descriptor: " << swhere
                                    << " bits must be integers in [1, 64]";
        }
        *widths[j] = static_cast<int>(b);
      }
      st.rhs_transposed = Get<bool>(sobj, "rhs_transposed", swhere);
      try {
        st.epilogue = ParseEpilogue((Get<std::string>(sobj, "epilogue", swhere)));
      } catch (const std::invalid_argument& e) {
        TVM_FFI_THROW(ValueError) << "tenet descriptor: " << swhere << ": " << e.what();
      }
      st.out_ndim = Get<int64_t>(sobj, "out_ndim", swhere);
      st.a_on_chip = sobj.contains("a_on_chip") && Get<bool>(sobj, "a_on_chip", swhere);
      st.c_on_chip = sobj.contains("c_on_chip") && Get<bool>(sobj, "c_on_chip", swhere);
      CheckStepRanks(st, p, swhere);
      p.steps.push_back(std::move(st));
    }
    for (const Json& s : Get<Json>(fobj, "outputs", where, true)) {
      TensorSpec spec = ParseSpec(AsObject(s, where + " output"), where + " output", true);
      if (spec.source >= 0 || -spec.source - 1 >= static_cast<int64_t>(p.steps.size())) {
        TVM_FFI_THROW(ValueError) << "tenet descriptor: an output of " << where
                                  << " is not produced by one of its steps";
      }
      // Steps write float32 values of rank out_ndim straight into the output buffer.
      const Step& from = p.steps[-spec.source - 1];
      if (!(spec.dtype.code == kDLFloat && spec.dtype.bits == 32 && spec.dtype.lanes == 1) ||
          spec.ndim != from.out_ndim) {
        TVM_FFI_THROW(ValueError) << "tenet descriptor: an output of " << where << " is declared "
                                  << ffi::DLDataTypeToString(spec.dtype) << " of rank "
                                  << spec.ndim << " but its step writes float32 of rank "
                                  << from.out_ndim;
      }
      p.outputs.push_back(spec);
    }
    if (p.steps.empty() || p.outputs.empty()) {
      TVM_FFI_THROW(ValueError) << "tenet descriptor: " << where << " has no steps or outputs";
    }
    programs.push_back(std::move(p));
  }
  return descriptor;
}

std::string SerializeDescriptor(const Descriptor& descriptor) {
  auto spec_json = [](const TensorSpec& s, bool is_output) {
    if (s.is_shape) return OrderedJson{{"kind", "shape"}};
    OrderedJson o = {{"dtype", std::string(ffi::DLDataTypeToString(s.dtype))}, {"ndim", s.ndim}};
    if (is_output) o["source"] = s.source;
    return o;
  };
  OrderedJson functions = OrderedJson::array();
  for (const Program& p : descriptor.programs) {
    OrderedJson inputs = OrderedJson::array(), outputs = OrderedJson::array(),
                steps = OrderedJson::array();
    for (const auto& s : p.inputs) inputs.push_back(spec_json(s, false));
    for (const auto& s : p.outputs) outputs.push_back(spec_json(s, true));
    for (const Step& st : p.steps) {
      auto ref = [](bool has, ValueRef r) { return has ? OrderedJson(r) : OrderedJson(nullptr); };
      steps.push_back({{"pattern", st.pattern},
                       {"name", st.name},
                       {"lhs", st.lhs},
                       {"rhs", st.rhs},
                       {"kind", StepKindName(st.kind)},
                       {"scheme", st.scheme},
                       {"bias", ref(st.has_bias, st.bias)},
                       {"scale_a", ref(st.has_scale_a, st.scale_a)},
                       {"scale_b", ref(st.has_scale_b, st.scale_b)},
                       {"zero_point", ref(st.has_zero_point, st.zero_point)},
                       {"bits", {st.bits_a, st.bits_b, st.bits_c}},
                       {"quant", RecipeJson(st.recipe)},
                       {"rhs_transposed", st.rhs_transposed},
                       {"epilogue", EpilogueName(st.epilogue)},
                       {"out_ndim", st.out_ndim},
                       {"a_on_chip", st.a_on_chip},
                       {"c_on_chip", st.c_on_chip}});
    }
    functions.push_back(
        {{"symbol", p.symbol}, {"inputs", inputs}, {"outputs", outputs}, {"steps", steps}});
  }
  OrderedJson vector_functions = OrderedJson::array();
  for (const VectorProgram& vp : descriptor.vector_programs) {
    OrderedJson steps = OrderedJson::array();
    for (const VectorStep& st : vp.steps) {
      steps.push_back({{"name", st.name},
                       {"scheme", st.scheme},
                       {"op", VectorOpName(st.op)},
                       {"rank", st.rank},
                       {"operand", st.operand},
                       {"bits_in", st.bits_in},
                       {"bits_out", st.bits_out}});
    }
    vector_functions.push_back({{"symbol", vp.symbol}, {"steps", steps}});
  }
  // The accelerator as its own writer spells it (nlohmann reads back what it wrote).
  const OrderedJson top = {
      {"version", kDescriptorVersion},
      {"functions", functions},
      {"vector_functions", vector_functions},
      {"accelerator", OrderedJson::parse(SerializeAccelerator(descriptor.accelerator))}};
  try {
    return detail::Dump(top, "tenet descriptor");
  } catch (const std::invalid_argument& e) {
    TVM_FFI_THROW(ValueError) << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

}  // namespace runtime
}  // namespace tenet
