// The charging rule of one call (see charge.h).
#include "cost_model/charge.h"

#include <functional>
#include <stdexcept>

namespace tenet {

GemmCall DescribeGemmCall(int64_t batch, int64_t m, int64_t n, int64_t k, int bits_a,
                          int bits_b, int bits_c, Dequantization place,
                          int64_t scale_elements, const std::string& scheme) {
  if (scale_elements < 0)
    throw std::invalid_argument("GemmCall scale_elements must be >= 0, got " +
                                std::to_string(scale_elements));
  GemmCall call{{batch, m, n, k, bits_a, bits_b, bits_c}, scheme};
  GemmWorkload& w = call.workload;
  Validate(w);  // before the products below, which it bounds
  w.extra_read_bits = scale_elements * kScaleBits;
  switch (place) {
    case Dequantization::kNone: break;
    case Dequantization::kWeight: w.extra_ops = n * k; break;
    case Dequantization::kActivationAndOutput: w.extra_ops = batch * m * (2 * k + n); break;
  }
  return call;
}

Charge ChargeGemm(const GemmCall& call, const Accelerator& accelerator, AnalysisMethod method) {
  Charge charge;
  charge.call = call;
  const GemmWorkload& w = call.workload;
  const Hardware& hw = accelerator.hardware;
  const MemoryHierarchy& mem = accelerator.memory;
  // First, so an unsupported width is refused before any counting.
  const MacSpec& mac = accelerator.precision.Lookup(w.bits_a, w.bits_b);
  charge.array = AnalyzeGemm(w, hw, accelerator.dataflow, method);
  // One cached array model per call: a mapping search trying many tilings of this call
  // reuses every tile shape's exact cost.
  const ArrayModel array = CachedArrayModel(ExactArrayModel(w, hw, accelerator.dataflow, mem));
  charge.memory = AnalyzeMemory(w, array, mem, ChooseMapping(w, accelerator));
  charge.energy = CallEnergy(w, charge.memory, mem, mac);
  return charge;
}

TileMapping ChooseMapping(const GemmWorkload& w, const Accelerator& accelerator) {
  const MappingPolicy& choice = accelerator.mapping;
  if (choice.kind == "given") return choice.tiles;
  if (choice.kind != "default")
    throw std::invalid_argument("Accelerator.mapping.kind '" + choice.kind + "' is not known");
  // A relation dataflow has no rows x cols: its PEs count as one row (the default mapping
  // only uses the edges to size tiles in whole array widths).
  const Dataflow& df = accelerator.dataflow;
  const int64_t rows = df.rows > 0 ? df.rows : 1;
  const int64_t cols = df.cols > 0 ? df.cols : accelerator.hardware.NumPEs();
  return DefaultTileMapping(w, accelerator.memory, rows, cols);
}

bool operator==(const GemmCall& a, const GemmCall& b) {
  const GemmWorkload &x = a.workload, &y = b.workload;
  return x.batch == y.batch && x.m == y.m && x.n == y.n && x.k == y.k &&
         x.bits_a == y.bits_a && x.bits_b == y.bits_b && x.bits_c == y.bits_c &&
         x.extra_read_bits == y.extra_read_bits && x.extra_ops == y.extra_ops &&
         a.scheme == b.scheme;
}

size_t GemmCallHash::operator()(const GemmCall& call) const {
  const GemmWorkload& g = call.workload;
  size_t h = std::hash<std::string>()(call.scheme);
  for (int64_t v : {g.batch, g.m, g.n, g.k, int64_t(g.bits_a), int64_t(g.bits_b),
                    int64_t(g.bits_c), g.extra_read_bits, g.extra_ops})
    h = (h ^ std::hash<int64_t>()(v)) * 1099511628211ull;
  return h;
}

}  // namespace tenet
