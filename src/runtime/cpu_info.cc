// What the GEMM kernels of this process run on: the ISA oneDNN uses, the int8 path, threads.
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <omp.h>

#include <cstdlib>
#include <sstream>

#include "runtime/gemm.h"

namespace tenet {
namespace runtime {

namespace {

// A JSON object; every value is a plain identifier or number, so no escaping is needed
// beyond the wait policy, which comes from the environment and is quoted through `Quoted`.
std::string Quoted(const char* text) {
  std::string out = "\"";
  for (const char* p = text; *p; ++p) {
    const unsigned char ch = static_cast<unsigned char>(*p);
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch >= 0x20 && ch < 0x7f) out += static_cast<char>(ch);
  }
  return out + "\"";
}

std::string CpuInfoJson() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  std::ostringstream os;
  os << "{\"isa\": " << Quoted(EffectiveIsaName().c_str())
     << ", \"int8_path\": " << Quoted(Int8PathName(ChosenInt8Path()))
     << ", \"threads\": " << omp_get_max_threads()
     << ", \"omp_wait_policy\": " << Quoted(policy ? policy : "") << "}";
  return os.str();
}

}  // namespace

TVM_FFI_STATIC_INIT_BLOCK() {
  tvm::ffi::reflection::GlobalDef().def("tenet_byoc.runtime.cpu_info",
                                        []() { return tvm::ffi::String(CpuInfoJson()); });
}

}  // namespace runtime
}  // namespace tenet
