// What the trainer consumes: micro-batches of token ids and labels, torch-free.
//
// Every sample is a function of (seed, global sample index): the global batch of optimizer step s is
// samples [s*G, (s+1)*G) with G = micro_batch x grad_accum x world_size, and rank r's micro-step m takes
// samples s*G + (m*world_size + r)*micro_batch + [0, micro_batch). So the ranks' shards are disjoint,
// the global batch is the same examples whatever the world size, and resuming needs only the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lorabench::data {

// The shape of the training's batches: the one holder of micro-batch, accumulation, world size and
// sequence length (the trainer, the data sources, checkpoints, the run file and the planner read them here).
struct BatchGeometry {
  int micro_batch = 1;   // sequences per rank and micro-step
  int grad_accum = 1;    // micro-steps per optimizer step
  int world_size = 1;    // data-parallel ranks
  int seq_len = 0;       // tokens per sequence
  int64_t global_batch() const { return int64_t(micro_batch) * grad_accum * world_size; }  // sequences per step
  int64_t tokens_per_step() const { return global_batch() * seq_len; }  // upper bound (with padding)
  int64_t micro_batch_tokens() const { return int64_t(micro_batch) * seq_len; }  // one rank's micro-step
};

constexpr int64_t kIgnoreIndex = -100;  // label of a token that carries no loss (Hugging Face's value)

struct Batch {
  int batch = 0;                 // rows
  int seq = 0;                   // tokens per row
  std::vector<int64_t> ids;      // (batch, seq), row-major; padding uses pad_id
  std::vector<int64_t> labels;   // (batch, seq), unshifted like Hugging Face: the loss of position t
                                 // predicts labels[t+1]; kIgnoreIndex = no loss (prompt, padding)
  int64_t real_tokens = 0;       // non-padding tokens (what tokens/s counts)
  int64_t loss_tokens = 0;       // positions t < seq-1 with labels[t+1] != kIgnoreIndex
  std::vector<int64_t> sample_index;  // global sample index of each row
};

// Where the global sample index g of step s, micro-step m, rank r, row b lives (see the file comment).
inline int64_t global_sample_index(int64_t step, int micro, int rank, int row, int micro_batch, int grad_accum,
                                   int world_size) {
  const int64_t per_step = int64_t(micro_batch) * grad_accum * world_size;
  return step * per_step + (int64_t(micro) * world_size + rank) * micro_batch + row;
}

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The micro-batch of `rank` at optimizer step `step`, micro-step `micro`. Deterministic.
  virtual Batch micro_batch(int64_t step, int micro, int rank) = 0;
  // One line for logs and the run file ("synthetic tokens, vocab 151936, seq 256").
  virtual std::string describe() const = 0;
  // Samples per epoch (0 = unbounded, e.g. synthetic).
  virtual int64_t epoch_size() const = 0;
  // Records skipped while loading (data.on_bad_record = skip); 0 when none or not applicable.
  virtual int64_t skipped_records() const { return 0; }
};

struct SyntheticSpec {
  uint64_t seed = 0;
  int vocab_size = 0;
  BatchGeometry geo;
};

// Uniform random tokens, every position trained (labels = ids). Sample g is generated from a counter-based
// stream keyed by (seed, g), so it does not depend on which rank draws it.
std::unique_ptr<BatchSource> make_synthetic_source(const SyntheticSpec& spec);

}  // namespace lorabench::data
