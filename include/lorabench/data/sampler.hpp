// Epoch sampler: which sample of the dataset the global sample index g reads. Torch-free, MPI-free.
//
// With N samples per epoch, g belongs to epoch e = g / N at position p = g % N, and reads sample
// order_e[p], where order_e is the identity when shuffle is off and otherwise a permutation drawn from
// (seed, e) alone (Fisher-Yates on a SplitMix64 stream, unbiased bounded draws; no std:: distribution, so
// the order is the same with every compiler and standard library). It does not depend on the rank or the
// world size: global_sample_index() in batch.hpp assigns the indices to ranks, so shards are disjoint and
// the global batch of a step is the same examples whatever the world size.
#pragma once

#include <cstdint>
#include <vector>

namespace lorabench::data {

// Where a global sample index lies: what a checkpoint records as the data-loader position.
struct SampleCursor {
  int64_t epoch = 0;
  int64_t position = 0;  // in [0, epoch_size)
  bool operator==(const SampleCursor& o) const { return epoch == o.epoch && position == o.position; }
};

// REQUIRES: global_sample >= 0, epoch_size > 0.
SampleCursor sample_cursor(int64_t global_sample, int64_t epoch_size);
// The cursor of the first sample of optimizer step `step` (the position to resume from before that step).
SampleCursor step_cursor(int64_t step, int micro_batch, int grad_accum, int world_size, int64_t epoch_size);

class EpochSampler {
 public:
  // REQUIRES: epoch_size > 0.
  EpochSampler(int64_t epoch_size, bool shuffle, uint64_t seed);

  // The sample (in [0, epoch_size)) that global index g reads.
  int64_t sample(int64_t global_sample);
  // The sample order of one epoch.
  std::vector<int64_t> order(int64_t epoch) const;

  int64_t epoch_size() const { return n_; }
  bool shuffle() const { return shuffle_; }

 private:
  const std::vector<int64_t>& cached_order(int64_t epoch);

  int64_t n_;
  bool shuffle_;
  uint64_t seed_;
  // The two most recent epochs' orders (a step may straddle an epoch boundary).
  int64_t cached_epoch_[2] = {-1, -1};
  std::vector<int64_t> cached_[2];
  int next_slot_ = 0;
};

}  // namespace lorabench::data
