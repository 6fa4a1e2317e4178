#include "lorabench/optim/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "lorabench/core/error.hpp"

namespace lorabench::optim {

double lr_at(const ScheduleSpec& s, int64_t step) {
  if (s.warmup_steps > 0 && step < s.warmup_steps) return s.lr * double(step + 1) / double(s.warmup_steps);
  if (s.kind == "constant") return s.lr;
  const double span = double(std::max<int64_t>(1, s.total_steps - 1 - s.warmup_steps));
  const double p = std::clamp(double(step - s.warmup_steps) / span, 0.0, 1.0);
  if (s.kind == "linear") return s.min_lr + (s.lr - s.min_lr) * (1.0 - p);
  if (s.kind == "cosine") return s.min_lr + (s.lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
  throw ConfigError("train.schedule: unknown schedule \"" + s.kind + "\"");
}

}  // namespace lorabench::optim
