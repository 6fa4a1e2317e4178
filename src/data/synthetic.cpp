#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/data/batch.hpp"

namespace lorabench::data {

namespace {

class SyntheticSource final : public BatchSource {
 public:
  explicit SyntheticSource(const SyntheticSpec& s) : s_(s) {
    LB_CHECK(s.vocab_size > 1 && s.geo.seq_len > 1, "synthetic data needs vocab > 1 and seq_len > 1");
  }

  Batch micro_batch(int64_t step, int micro, int rank) override {
    Batch b;
    b.batch = s_.geo.micro_batch;
    b.seq = s_.geo.seq_len;
    b.ids.resize(size_t(b.batch) * b.seq);
    for (int row = 0; row < b.batch; ++row) {
      int64_t g = global_sample_index(step, micro, rank, row, s_.geo.micro_batch, s_.geo.grad_accum, s_.geo.world_size);
      b.sample_index.push_back(g);
      uint64_t key = splitmix64(s_.seed ^ splitmix64(static_cast<uint64_t>(g) + 0x5851F42D4C957F2Dull));
      for (int t = 0; t < b.seq; ++t) {
        uint64_t r = splitmix64(key + static_cast<uint64_t>(t));
        b.ids[size_t(row) * b.seq + t] = static_cast<int64_t>(r % static_cast<uint64_t>(s_.vocab_size));
      }
    }
    b.labels = b.ids;
    b.real_tokens = int64_t(b.batch) * b.seq;
    b.loss_tokens = int64_t(b.batch) * (b.seq - 1);
    return b;
  }

  std::string describe() const override {
    return strformat("synthetic uniform tokens (vocab %d, seq %d, seed %llu)", s_.vocab_size, s_.geo.seq_len,
                     static_cast<unsigned long long>(s_.seed));
  }
  int64_t epoch_size() const override { return 0; }

 private:
  SyntheticSpec s_;
};

}  // namespace

std::unique_ptr<BatchSource> make_synthetic_source(const SyntheticSpec& spec) {
  return std::make_unique<SyntheticSource>(spec);
}

}  // namespace lorabench::data
