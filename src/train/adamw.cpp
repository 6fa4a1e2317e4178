#include "lorabench/train/adamw.hpp"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>

namespace lorabench::train {

void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, int64_t step, double lr,
                  const AdamWConfig& c, const Ranges& decay_ranges) {
  at::RecordFunction scope(at::RecordScope::USER_SCOPE);
  if (scope.isActive()) scope.before("lb::optimizer");
  if (c.weight_decay != 0) {
    for (const auto& [b, n] : decay_ranges) p.narrow(0, b, n).mul_(1.0 - lr * c.weight_decay);
  }
  m.mul_(c.beta1).add_(g, 1.0 - c.beta1);
  v.mul_(c.beta2).addcmul_(g, g, 1.0 - c.beta2);
  const double bc1 = 1.0 - std::pow(c.beta1, double(step));
  const double bc2 = 1.0 - std::pow(c.beta2, double(step));
  const double step_size = lr / bc1;
  at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(c.eps);
  p.addcdiv_(m, denom, -step_size);
}

Ranges intersect(const Ranges& ranges, int64_t lo, int64_t n) {
  Ranges out;
  for (const auto& [b, len] : ranges) {
    int64_t s = std::max(b, lo), e = std::min(b + len, lo + n);
    if (e > s) out.emplace_back(s - lo, e - s);
  }
  return out;
}

}  // namespace lorabench::train
