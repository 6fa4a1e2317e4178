// AdamW with torch.optim.AdamW's arithmetic (decoupled weight decay, bias correction), on flat fp32
// ranges, so a strategy can update whatever part of the parameters it owns.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace lorabench::optim {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

// [begin, begin + length) element ranges of a flat buffer.
using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// One update at step `step` (1-based) with learning rate `lr`:
//   p *= 1 - lr * wd            (only inside decay_ranges)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// p, g, m, v: fp32 tensors of the same size (contiguous).
void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, int64_t step, double lr,
                  const AdamWConfig& c, const Ranges& decay_ranges);

// The part of `ranges` that falls inside [lo, lo + n), shifted to start at 0.
Ranges intersect(const Ranges& ranges, int64_t lo, int64_t n);

}  // namespace lorabench::optim
