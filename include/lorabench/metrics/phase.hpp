// The phases of a training step that timers, hardware counters and traces are attributed to.
// Torch-free. The per-phase definitions (where each phase begins and ends in the trainer) are in
// docs/metrics.md.
#pragma once

#include <array>

namespace lorabench::metrics {

enum class Phase : int {
  kData = 0,   // fetching and collating the batch
  kForward,    // model forward + loss
  kBackward,   // autograd backward (including communication overlapped with it)
  kComm,       // gradient / parameter communication that is not hidden inside backward
  kOptimizer,  // clipping + optimizer step + zero_grad
};

inline constexpr int kPhaseCount = 5;

inline constexpr std::array<Phase, kPhaseCount> kAllPhases = {Phase::kData, Phase::kForward, Phase::kBackward,
                                                              Phase::kComm, Phase::kOptimizer};

// "data", "forward", "backward", "comm", "optimizer": the names used in the run file and in traces.
inline constexpr const char* phase_name(Phase p) {
  constexpr const char* kNames[kPhaseCount] = {"data", "forward", "backward", "comm", "optimizer"};
  return kNames[static_cast<int>(p)];
}

inline constexpr int phase_index(Phase p) { return static_cast<int>(p); }

}  // namespace lorabench::metrics
