// The SFT batch source under real ranks: each rank draws its own micro-batches (world_size = the MPI
// world), the ranks' sample indices are disjoint and tile every step's global batch, and each row equals
// the row a one-rank source with the same global batch (grad_accum x world) reads for that index.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

#include "../unit/data_test_util.hpp"
#include "lorabench/data/sft_source.hpp"

using lorabench::data::Batch;
using lorabench::data::make_sft_source;
using lorabench::data::SftSpec;

namespace {

// FNV-1a over a row's ids and labels.
uint64_t row_hash(const Batch& b, int r) {
  uint64_t h = 1469598103934665603ull;
  for (int t = 0; t < b.seq; ++t) {
    size_t i = size_t(r) * size_t(b.seq) + size_t(t);
    for (int64_t v : {b.ids[i], b.labels[i]}) {
      h ^= static_cast<uint64_t>(v);
      h *= 1099511628211ull;
    }
  }
  return h;
}

TEST(DataShards, RanksReadDisjointShardsOfTheSameGlobalBatch) {
  LBTEST_QWEN_TOKENIZER(tok);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int micro_batch = 2, accum = 2, steps = 40;  // 40 x 2 x 2 x world samples: past one epoch
  SftSpec spec;
  spec.path = std::string(LORABENCH_SOURCE_DIR) + "/inputs/data/sft_toy.jsonl";
  spec.geo.seq_len = 80;
  spec.seed = 3;
  spec.geo.micro_batch = micro_batch;
  spec.geo.grad_accum = accum;
  spec.geo.world_size = world;
  auto src = make_sft_source(spec, tok);

  std::vector<int64_t> mine;  // (sample index, hash) pairs
  for (int64_t s = 0; s < steps; ++s) {
    for (int m = 0; m < accum; ++m) {
      Batch b = src->micro_batch(s, m, rank);
      for (int r = 0; r < b.batch; ++r) {
        mine.push_back(b.sample_index[size_t(r)]);
        mine.push_back(static_cast<int64_t>(row_hash(b, r)));
      }
    }
  }
  std::vector<int64_t> all(mine.size() * size_t(world));
  MPI_Allgather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, MPI_COMM_WORLD);

  std::map<int64_t, int64_t> by_index;
  for (size_t i = 0; i < all.size(); i += 2) {
    EXPECT_TRUE(by_index.emplace(all[i], all[i + 1]).second) << "sample " << all[i] << " drawn twice";
  }
  const int64_t total = int64_t(steps) * micro_batch * accum * world;
  ASSERT_EQ(int64_t(by_index.size()), total);
  EXPECT_EQ(by_index.begin()->first, 0);
  EXPECT_EQ(by_index.rbegin()->first, total - 1);

  // The one-rank reference with the same global batch.
  SftSpec one = spec;
  one.geo.world_size = 1;
  one.geo.grad_accum = accum * world;
  auto ref = make_sft_source(one, tok);
  for (int64_t s = 0; s < steps; ++s) {
    for (int m = 0; m < one.geo.grad_accum; ++m) {
      Batch b = ref->micro_batch(s, m, 0);
      for (int r = 0; r < b.batch; ++r) {
        EXPECT_EQ(by_index.at(b.sample_index[size_t(r)]), static_cast<int64_t>(row_hash(b, r)))
            << "sample " << b.sample_index[size_t(r)] << " differs from the one-rank run";
      }
    }
  }
}

}  // namespace
