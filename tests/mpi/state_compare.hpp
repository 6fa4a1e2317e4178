// Comparisons of trainable-state snapshots (one tensor per unit, undefined where a unit has none),
// shared by the strategy-equivalence and checkpoint tests.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace lbtest {

// Relative difference of two parameter sets as vectors: ||a - b|| / ||b|| over every tensor. (Element-wise
// maxima are dominated by AdamW on near-zero gradients, where g / (sqrt(v) + eps) turns rounding-level
// differences of the gradient into visible differences of a single update.)
inline double norm_rel(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined()) continue;
    diff += (a[i] - b[i]).pow(2).sum().item<double>();
    ref += b[i].pow(2).sum().item<double>();
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

}  // namespace lbtest
