// The SFT batch source: dataset file -> chat template -> token ids + assistant-only labels -> samples of
// seq_len tokens -> micro-batches by global sample index (batch.hpp). Torch-free.
//
// Samples (N of them per epoch):
//   pack = false  one example per sample: truncated to seq_len (its end is cut), then padded with
//                 <|endoftext|> (label kIgnoreIndex). N = number of examples.
//   pack = true   the examples, each truncated to seq_len, are concatenated in file order into one
//                 token stream that is cut every seq_len tokens: every sample is full except the last,
//                 which is padded. An example may straddle two samples (its tail starts the next one,
//                 without its prompt). Each example starts with a role header (<|im_start|>system, or
//                 <|im_start|>user under qwen3 without a system message), which is never trained, so no
//                 position is trained to predict the next example; attention is not
//                 masked between examples inside a sample (plain packing, no position-id reset).
//                 N = ceil(total tokens / seq_len); shuffling permutes the packed samples.
// Sample order: EpochSampler (sampler.hpp) over N with (seed, epoch); the rows of a micro-batch are
// global_sample_index(step, micro, rank, row, ...).
//
// Every rank loads and tokenizes the whole file (deterministic, so all ranks agree on N and the order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lorabench/data/batch.hpp"
#include "lorabench/data/sft_dataset.hpp"
#include "lorabench/data/tokenizer.hpp"

namespace lorabench::data {

struct SftSpec {
  std::string path;                                  // the dataset file
  SftFormat format = SftFormat::kAuto;
  ChatOptions chat;                                  // data.chat_template (resolved) and data.enable_thinking
  std::string tokenizer_path;                        // a tokenizer.json (see resolve_tokenizer_path)
  bool pack = false;
  bool shuffle = true;
  BadRecordPolicy on_bad_record = BadRecordPolicy::kError;
  uint64_t seed = 0;                                 // run.seed
  BatchGeometry geo{1, 1, 1, 256};                   // REQUIRES seq_len >= 2
  // Evaluation split by position (data.eval_fraction): the last max(1, round(n x holdout_fraction)) of the
  // file's n valid records are held out. The training source (held_out_part = false) has the others.
  double holdout_fraction = 0;
  bool held_out_part = false;
};

// Throws IoError for a missing / bad tokenizer or dataset file (see sft_dataset.hpp for the policy).
std::unique_ptr<BatchSource> make_sft_source(const SftSpec& spec);
// The same with an already loaded tokenizer (spec.tokenizer_path is then ignored).
std::unique_ptr<BatchSource> make_sft_source(const SftSpec& spec, std::shared_ptr<const Tokenizer> tokenizer);

// The tokenizer file a run uses, first match wins (`name` is the bundled tokenizer's directory,
// tokenizer_name_of_family: qwen2.5 or qwen3):
//   1. `data_tokenizer` (data.tokenizer) when set;
//   2. <model_path>/tokenizer.json when `model_path` (model.path) is set;
//   3. $LORABENCH_DATA_DIR/<name>/tokenizer.json when that environment variable is set;
//   4. an installed binary's own copy, <prefix>/share/lorabench/<name>/tokenizer.json (cmake --install);
//   5. the build's default, <source dir>/third_party/<name>/tokenizer.json (scripts/install-deps.sh
//      fetches it there).
// Only chooses the path: Tokenizer::from_file reports a missing file (IoError naming the path and saying
// to run scripts/install-deps.sh).
std::string resolve_tokenizer_path(const std::string& data_tokenizer, const std::string& model_path,
                                   const std::string& name = "qwen2.5");
// The compile-time default of step 5.
std::string default_tokenizer_path(const std::string& name = "qwen2.5");
// The bundled tokenizer of a model family (ModelShape::family): "qwen2" -> "qwen2.5", "qwen3" -> "qwen3".
const char* tokenizer_name_of_family(const std::string& family);

}  // namespace lorabench::data
