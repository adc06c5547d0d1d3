// Kernel descriptors: what the Python codegen tells the runtime about each offloaded function.
#ifndef TENET_RUNTIME_PROGRAM_H_
#define TENET_RUNTIME_PROGRAM_H_

#include <tvm/ffi/dtype.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/accelerator.h"
#include "cost_model/charge.h"
#include "cost_model/cost_model.h"
#include "cost_model/vector.h"
#include "runtime/gemm.h"

namespace tenet {
namespace runtime {

/*! \brief The descriptor format this runtime reads; bumped on any incompatible change. */
constexpr int64_t kDescriptorVersion = 6;

/*! \brief A tensor a program reads or writes: >= 0 is a function input, < 0 is -(step + 1). */
using ValueRef = int64_t;

/*! \brief The static facts about one input or output of an offloaded function. */
struct TensorSpec {
  bool is_shape = false;  // a shape argument (symbolic dims), accepted and not read
  DLDataType dtype{};
  int64_t ndim = 0;
  ValueRef source = 0;  // outputs only: the step that produces it
};

/*! \brief How a step's operands are stored and turned into the GEMM's values. */
enum class StepKind {
  kFloat,           // float32 x float32
  kDequantChannel,  // float32 x dequantize(int8 [N, K], scale [N]): weight-only per channel
  kDequantGroup,    // float32 x ((packed int4 [N, K/2] - zp) * scale [N, K/G, 1]): per group
  kInt8,            // int8 x int8 -> int32, then * scale_a * scale_b in float32
  kDequantFloat,    // float32 x reshape(codes [N, K/G, G] * scale [N, K/G, 1], [N, K]):
                    // formats without an integer kernel (fp8, fp4, MX, asymmetric, fp16),
                    // their codes held exactly in float32 (exact emulation)
};

/*! \brief A key of a GEMM step object in the descriptor: its name and whether it must be
 *  present (a required operand key may still hold null: "no such operand"). */
struct DescriptorField {
  const char* name;
  bool required;
};

/*! \brief The keys of one kind of object in the descriptor, in the order SerializeDescriptor
 *  writes them. */
struct DescriptorObject {
  const char* name;  // "descriptor" (the top level), "function", "step", "vector_function",
                     // "vector_step"
  std::vector<DescriptorField> fields;
};

/*!
 * \brief Every object of the descriptor and its keys: the one definition the runtime reads
 *  (ParseDescriptor refuses any other key, naming it) and the codegen writes (exported as
 *  tenet_byoc.runtime.descriptor_fields).
 */
const std::vector<DescriptorObject>& DescriptorObjects();

/*! \brief The keys of the object called `name` in DescriptorObjects(). */
const std::vector<DescriptorField>& DescriptorFields(const std::string& name);

StepKind ParseStepKind(const std::string& name);
const char* StepKindName(StepKind kind);

/*! \brief One GEMM of a program (one composite function of the partitioned module). */
struct Step {
  std::string pattern;  // the Composite attr, e.g. "tenet.matmul_transposed_bias"
  std::string name;     // a readable name for reports (the binding's name in the module)
  std::string scheme;   // the quantization scheme, "none" for float
  StepKind kind = StepKind::kFloat;
  ValueRef lhs = 0, rhs = 0, bias = 0, scale_a = 0, scale_b = 0, zero_point = 0;
  bool has_bias = false, has_scale_a = false, has_scale_b = false, has_zero_point = false;
  int bits_a = 32, bits_b = 32, bits_c = 32;  // element widths charged to the cost model
  QuantRecipe recipe;  // how the quantize pass stored and computes the call (its charge)
  bool rhs_transposed = false;
  Epilogue epilogue = Epilogue::kNone;
  int64_t out_ndim = 0;
  // The operands the call plan's rule keeps on chip (GemmWorkload::a_on_chip, c_on_chip):
  // A made in the step (not an input of the caller), C used in it (not its result).
  bool a_on_chip = false, c_on_chip = false;
};

/*! \brief An offloaded function: its signature and the GEMMs it runs in order. */
struct Program {
  std::string symbol;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<Step> steps;
};

/*! \brief One non-GEMM operator a Relax function runs on TVM's path and the vector unit is
 *  charged for (tenet_byoc.vector_plan): its kind, widths, and how many numbers of the charge
 *  call's shape it reads (its output's `rank` dims, then the second operand's elements when
 *  `operand`). */
struct VectorStep {
  std::string name;    // the Relax binding's name (or the layer's), for reports
  std::string scheme;  // "none", or the module's scheme for an activation quantize
  VectorOp op = VectorOp::kAdd;
  int64_t rank = 1;
  bool operand = false;
  int bits_in = 32, bits_out = 32;
};

/*! \brief The charge call a partitioned Relax function makes once per call (symbol
 *  "tenet_vector.<function>"): one shape argument holding every step's numbers in order. */
struct VectorProgram {
  std::string symbol;
  std::vector<VectorStep> steps;
};

/*! \brief Everything a tenet runtime module is made of, and what it serializes. */
struct Descriptor {
  std::vector<Program> programs;
  std::vector<VectorProgram> vector_programs;
  Accelerator accelerator;  // what the calls are charged to; the cost model's JSON form
};

/*!
 * \brief Parses the descriptor JSON written by tenet_byoc.codegen.
 * \throws tvm::ffi::Error (ValueError) naming the field that is missing or malformed.
 */
Descriptor ParseDescriptor(const std::string& json);

/*! \brief Writes a descriptor back to JSON (the inverse of ParseDescriptor). */
std::string SerializeDescriptor(const Descriptor& descriptor);

}  // namespace runtime
}  // namespace tenet

#endif  // TENET_RUNTIME_PROGRAM_H_
