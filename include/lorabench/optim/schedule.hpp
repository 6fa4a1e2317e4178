// Learning-rate schedules: linear warm-up from lr/warmup to lr over train.warmup_steps, then constant,
// cosine or linear decay to train.min_lr at the last step. A pure function of the step, so the schedule's
// state in a checkpoint is the step itself.
#pragma once

#include <cstdint>
#include <string>

namespace lorabench::optim {

struct ScheduleSpec {
  std::string kind = "constant";  // constant | cosine | linear
  double lr = 0;
  double min_lr = 0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
};

// The learning rate of optimizer step `step` (0-based):
//   step < W:   lr * (step + 1) / W
//   otherwise:  p = (step - W) / max(1, S - 1 - W)  (0 at the first step after warm-up, 1 at the last)
//               constant: lr;  linear: min_lr + (lr - min_lr)(1 - p);
//               cosine: min_lr + (lr - min_lr)(1 + cos(pi p)) / 2
double lr_at(const ScheduleSpec& s, int64_t step);

}  // namespace lorabench::optim
