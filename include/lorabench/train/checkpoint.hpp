// Checkpoints of a training run: what they contain, when they are written, and how a run resumes from
// one (docs/checkpoints.md). The file format and the atomic commit live in io/checkpoint.hpp; this is
// the glue between it and the trainer: the fingerprint of the training, the named tensors of a
// strategy's FullState, the choice of the checkpoint to resume from.
//
// A checkpoint of step k (k optimizer steps completed) holds everything the next step depends on:
//   - the trainable tensors and AdamW's exp_avg / exp_avg_sq, by slot name with global shapes, and
//     AdamW's step count (it lags k when train.on_nonfinite = skip skipped updates);
//   - the LR schedule's spec (the LR is a pure function of the step);
//   - the data cursor: the next global sample index k x global batch, as (epoch, position);
//   - the RNG state: every random draw is counter-based (dropout masks from (seed, step, micro, sample),
//     init from (seed, tensor name), data order from (seed, epoch)), so the seed of each rank suffices;
//   - the tokens seen, and a fingerprint of the configuration and the base weights.
// Resuming at the same world size and strategy continues bit-identically; at another world size or with
// another strategy the full tensors are resharded by TrainingStrategy::load_state.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/config/run_config.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/io/checkpoint.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/model/layout.hpp"
#include "lorabench/strategy/strategy.hpp"

namespace lorabench::train {

// The configuration fields that define the training, in a fixed order, as text. A checkpoint is refused
// when any of them differs: model shape, base weights, dtype, LoRA shape, data (format, content digest,
// tokenizer digest, seq_len, pack, shuffle, on_bad_record), run.seed and the global batch size
// (micro_batch x grad_accum x world size; the world size alone may change).
using Fingerprint = std::vector<std::pair<std::string, std::string>>;
// Reads the dataset, the tokenizer and (for model.path) the snapshot's safetensors headers.
Fingerprint training_fingerprint(const RunConfig& c, int world_size);
// A 16-hex-digit hash of every field.
std::string fingerprint_digest(const Fingerprint& f);
// "field: checkpoint A, configuration B" for every field that differs or exists on one side only.
std::vector<std::string> fingerprint_differences(const Fingerprint& stored, const Fingerprint& current);

// The digest of the base weights:
//   random init          "random-init preset=<p> seed=<s>" (the weights are a function of both)
//   model.path snapshot  "safetensors-sampled-v1:<hex>": FNV-1a over config.json, and per *.safetensors
//                        weight file (model.safetensors, model-*.safetensors) its name, size, JSON header
//                        and 16 evenly spaced 4 KiB blocks of data
std::string base_weights_digest(const RunConfig& c);

// Combinations checkpointing does not support: ConfigError naming the key (run.repeat > 1 with
// checkpoints or resume; run.overwrite with resume = latest, which would delete what it resumes).
void validate_checkpoint_config(const RunConfig& c);

struct ResumePoint {
  std::string path;   // "" = start from step 0
  int64_t step = 0;   // steps the checkpoint completed
};

// Collective. The checkpoint checkpoint.resume asks for: none -> {}; latest -> the newest complete
// checkpoint in <run_dir>/checkpoints, skipping (with a warning naming it) incomplete, truncated or
// corrupt files; PATH -> that file. Rank 0 reads and verifies the candidate completely. ConfigError on
// every rank when nothing usable is found, when the fingerprint differs (every differing field listed),
// or when the checkpoint leaves no steps to run (run.steps, run.warmup_steps).
ResumePoint select_resume_checkpoint(const RunConfig& c, const std::string& run_dir, int world_size, MPI_Comm world);

// The named tensors of a FullState: trainable/<slot>, optimizer/exp_avg/<slot>, optimizer/exp_avg_sq/<slot>.
// whole = every tensor complete (gathered writes); otherwise rank `rank` of `world` gets an even share of
// each tensor's rows (parallel writes). The pieces point into `s`.
std::vector<io::TensorPiece> state_pieces(const model::ModelLayout& m, const strategy::FullState& s, bool whole,
                                          int rank, int world);
// The inverse: full tensors by name into one flat fp32 tensor per unit, read through `reader` straight
// into place (digests checked), or copied from c's in-memory data when reader is null. IoError naming the
// tensor when one is missing, has another shape, or the file has tensors the layout does not.
strategy::FullState state_from_checkpoint(const model::ModelLayout& m, const io::CheckpointContents& c,
                                          const io::CheckpointReader* reader = nullptr);

// Writes a run's checkpoints and resumes it. One per trial; every call is collective over `world`.
class Checkpointer {
 public:
  // run: rank 0's run file (checkpoint timings and resume information go to its summary), else nullptr.
  Checkpointer(const RunConfig& c, const model::ModelLayout& m, const data::BatchSource& source, MPI_Comm world,
               const std::string& run_dir, io::RunFileWriter* run);

  // Loads checkpoint `path` into `s` (nothing when path is empty) and returns the step to continue from.
  int64_t resume(strategy::TrainingStrategy& s, const std::string& path);
  // After step `steps_done - 1` completed (its update applied or skipped): counts this rank's tokens and
  // writes a checkpoint when steps_done is a multiple of checkpoint.every, and after the last step.
  void after_step(strategy::TrainingStrategy& s, int64_t steps_done, int64_t local_tokens);
  // Writes the checkpoint of `steps_done` now.
  io::CheckpointWriteResult save(strategy::TrainingStrategy& s, int64_t steps_done);
  // Fault injection (fault.signal_again): runs between a checkpoint's data write and its commit.
  std::function<void()> before_commit;
  // The step and path of the last checkpoint this Checkpointer wrote (-1 and "" before the first).
  int64_t last_saved_step() const { return last_step_; }
  const std::string& last_saved_path() const { return last_path_; }

 private:
  std::vector<io::AttrGroup> groups(int64_t steps_done, int64_t optimizer_step, int64_t tokens_seen) const;
  // Collective: fingerprint_ from training_fingerprint (rank 0 reads the files, every rank gets it).
  void compute_fingerprint();

  const RunConfig& c_;
  const model::ModelLayout& m_;
  const data::BatchSource& source_;
  MPI_Comm world_;
  std::string dir_;  // <run_dir>/checkpoints
  io::RunFileWriter* run_;
  int rank_ = 0, world_size_ = 1;
  Fingerprint fingerprint_;
  int64_t tokens_base_ = 0;   // global tokens up to the resume point
  int64_t tokens_local_ = 0;  // this rank's tokens since then
  int written_ = 0;
  int64_t last_step_ = -1;
  std::string last_path_;
  double write_s_total_ = 0;
};

}  // namespace lorabench::train
