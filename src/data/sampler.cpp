#include "lorabench/data/sampler.hpp"

#include <numeric>

#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/data/batch.hpp"

namespace lorabench::data {

namespace {

// Uniform in [0, bound) without modulo bias (Lemire's multiply-and-reject).
uint64_t bounded(uint64_t& state, uint64_t bound) {
  unsigned __int128 m = static_cast<unsigned __int128>(splitmix64_next(state)) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(splitmix64_next(state)) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

SampleCursor sample_cursor(int64_t global_sample, int64_t epoch_size) {
  LB_CHECK(global_sample >= 0 && epoch_size > 0, "sample_cursor needs g >= 0 and a non-empty epoch");
  return SampleCursor{global_sample / epoch_size, global_sample % epoch_size};
}

SampleCursor step_cursor(int64_t step, int micro_batch, int grad_accum, int world_size, int64_t epoch_size) {
  return sample_cursor(global_sample_index(step, 0, 0, 0, micro_batch, grad_accum, world_size), epoch_size);
}

EpochSampler::EpochSampler(int64_t epoch_size, bool shuffle, uint64_t seed)
    : n_(epoch_size), shuffle_(shuffle), seed_(seed) {
  LB_CHECK(epoch_size > 0, "an epoch needs at least one sample");
}

std::vector<int64_t> EpochSampler::order(int64_t epoch) const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  std::iota(v.begin(), v.end(), int64_t(0));
  if (!shuffle_) return v;
  // The stream of epoch e: seeded from (seed, e) only, with a tag so it differs from other seed uses.
  uint64_t state = seed_ ^ 0x6C6F726162656E63ull;  // "lorabenc"
  uint64_t key = splitmix64_next(state);
  state = key ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull);
  splitmix64_next(state);
  for (int64_t i = n_ - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(bounded(state, static_cast<uint64_t>(i) + 1));
    std::swap(v[size_t(i)], v[size_t(j)]);
  }
  return v;
}

const std::vector<int64_t>& EpochSampler::cached_order(int64_t epoch) {
  for (int s = 0; s < 2; ++s) {
    if (cached_epoch_[s] == epoch) return cached_[s];
  }
  int s = next_slot_;
  next_slot_ ^= 1;
  cached_[s] = order(epoch);
  cached_epoch_[s] = epoch;
  return cached_[s];
}

int64_t EpochSampler::sample(int64_t global_sample) {
  SampleCursor c = sample_cursor(global_sample, n_);
  if (!shuffle_) return c.position;
  return cached_order(c.epoch)[size_t(c.position)];
}

}  // namespace lorabench::data
