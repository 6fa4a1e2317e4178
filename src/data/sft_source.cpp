#include "lorabench/data/sft_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "lorabench/core/error.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/data/chat_template.hpp"
#include "lorabench/data/sampler.hpp"

#ifndef LORABENCH_TOKENIZER_ROOT
#error "LORABENCH_TOKENIZER_ROOT must be defined by the build (src/data/CMakeLists.txt)"
#endif

namespace lorabench::data {

namespace {

// Samples as one flat token array: sample i is [begin[i], begin[i+1]) of ids / trained (at most seq_len).
struct SampleStore {
  std::vector<TokenId> ids;
  std::vector<uint8_t> trained;
  std::vector<int64_t> begin{0};

  int64_t size() const { return int64_t(begin.size()) - 1; }
  void close_sample() { begin.push_back(int64_t(ids.size())); }
};

class SftSource final : public BatchSource {
 public:
  SftSource(const SftSpec& spec, std::shared_ptr<const Tokenizer> tok)
      : spec_(spec), tok_(std::move(tok)) {
    LB_CHECK(spec.geo.seq_len >= 2, "seq_len must be >= 2");
    LB_CHECK(spec.geo.micro_batch >= 1 && spec.geo.grad_accum >= 1 && spec.geo.world_size >= 1,
             "micro_batch, grad_accum and world_size must be >= 1");
    pad_id_ = tok_->token_id("<|endoftext|>");
    if (pad_id_ < 0) throw IoError(tok_->origin() + ": no <|endoftext|> token to pad with");

    SftRecords recs = load_sft_records(spec.path, spec.format, spec.on_bad_record, spec.chat.tmpl);
    format_ = recs.format;
    skipped_ = recs.skipped;
    problems_ = recs.problems;
    for (const auto& p : problems_) log::info("data: skipped bad record " + p);
    if (spec.holdout_fraction > 0) {
      const int64_t n = int64_t(recs.records.size());
      const int64_t k = std::max<int64_t>(1, std::llround(double(n) * spec.holdout_fraction));
      if (k >= n)
        throw IoError(strformat("%s: data.eval_fraction = %g holds out %lld of its %lld records and leaves none to train on",
                                spec.path.c_str(), spec.holdout_fraction, (long long)k, (long long)n));
      if (spec.held_out_part) {
        recs.records.erase(recs.records.begin(), recs.records.end() - k);
      } else {
        recs.records.resize(size_t(n - k));
      }
    }
    examples_ = int64_t(recs.records.size());

    const size_t seq = size_t(spec.geo.seq_len);
    for (const auto& r : recs.records) {
      EncodedExample ex = encode_chat(*tok_, r.messages, spec.chat, r.tools);
      total_tokens_ += int64_t(ex.ids.size());
      if (ex.ids.size() > seq) {
        ++truncated_;
        ex.ids.resize(seq);
        ex.trained.resize(seq);
      }
      // Position 0 is never a target (the loss at t predicts t+1), so look from 1.
      if (ex.trained.size() < 2 || std::find(ex.trained.begin() + 1, ex.trained.end(), uint8_t(1)) == ex.trained.end())
        ++no_loss_;
      store_.ids.insert(store_.ids.end(), ex.ids.begin(), ex.ids.end());
      store_.trained.insert(store_.trained.end(), ex.trained.begin(), ex.trained.end());
      if (!spec.pack) store_.close_sample();
    }
    kept_tokens_ = int64_t(store_.ids.size());
    if (spec.pack) {
      for (int64_t b = int64_t(seq); b < kept_tokens_; b += int64_t(seq)) store_.begin.push_back(b);
      store_.close_sample();
    }
    if (truncated_ > 0) {
      log::info(strformat("data: %lld of %lld examples are longer than seq_len %d and were truncated",
                          static_cast<long long>(truncated_), static_cast<long long>(examples_), spec.geo.seq_len));
    }
    if (no_loss_ > 0) {
      log::warn(strformat("data: %lld of %lld examples have no trained token within seq_len %d (prompt too long): "
                          "they add no loss, and a step made of such examples only stops the run "
                          "(train.on_empty_step)",
                          static_cast<long long>(no_loss_), static_cast<long long>(examples_), spec.geo.seq_len));
    }
    sampler_ = std::make_unique<EpochSampler>(store_.size(), spec.shuffle, spec.seed);
  }

  Batch micro_batch(int64_t step, int micro, int rank) override {
    LB_CHECK(step >= 0 && micro >= 0 && micro < spec_.geo.grad_accum && rank >= 0 && rank < spec_.geo.world_size,
             strformat("micro_batch(step %lld, micro %d, rank %d) outside grad_accum %d x world %d",
                       static_cast<long long>(step), micro, rank, spec_.geo.grad_accum, spec_.geo.world_size));
    Batch b;
    b.batch = spec_.geo.micro_batch;
    b.seq = spec_.geo.seq_len;
    const size_t seq = size_t(b.seq);
    b.ids.assign(size_t(b.batch) * seq, pad_id_);
    b.labels.assign(size_t(b.batch) * seq, kIgnoreIndex);
    for (int row = 0; row < b.batch; ++row) {
      int64_t g = global_sample_index(step, micro, rank, row, spec_.geo.micro_batch, spec_.geo.grad_accum, spec_.geo.world_size);
      b.sample_index.push_back(g);
      int64_t s = sampler_->sample(g);
      size_t begin = size_t(store_.begin[size_t(s)]);
      size_t len = size_t(store_.begin[size_t(s) + 1]) - begin;
      int64_t* ids = b.ids.data() + size_t(row) * seq;
      int64_t* labels = b.labels.data() + size_t(row) * seq;
      for (size_t t = 0; t < len; ++t) {
        ids[t] = store_.ids[begin + t];
        if (store_.trained[begin + t]) labels[t] = ids[t];
      }
      b.real_tokens += int64_t(len);
      for (size_t t = 1; t < seq; ++t) b.loss_tokens += labels[t] != kIgnoreIndex;
    }
    return b;
  }

  std::string describe() const override {
    std::string s = strformat("sft %s %s: %lld examples -> %lld %s samples of seq %d, %lld tokens", sft_format_name(format_),
                              spec_.path.c_str(), static_cast<long long>(examples_),
                              static_cast<long long>(store_.size()), spec_.pack ? "packed" : "padded", spec_.geo.seq_len,
                              static_cast<long long>(kept_tokens_));
    if (truncated_ > 0) {
      s += strformat(" (%lld truncated examples, %lld tokens before truncation)", static_cast<long long>(truncated_),
                     static_cast<long long>(total_tokens_));
    }
    s += strformat(", %s, seed %llu, tokenizer %s, chat template %s%s", spec_.shuffle ? "shuffled per epoch" : "in file order",
                   static_cast<unsigned long long>(spec_.seed), tok_->origin().c_str(), chat_template_name(spec_.chat.tmpl),
                   spec_.chat.tmpl == ChatTemplate::kQwen3 && !spec_.chat.enable_thinking ? " (thinking off)" : "");
    if (skipped_ > 0) {
      s += strformat("; %lld bad records skipped (first: %s)", static_cast<long long>(skipped_),
                     problems_.front().c_str());
    }
    return s;
  }

  int64_t epoch_size() const override { return store_.size(); }
  int64_t skipped_records() const override { return skipped_; }

 private:
  SftSpec spec_;
  std::shared_ptr<const Tokenizer> tok_;
  TokenId pad_id_ = -1;
  SftFormat format_ = SftFormat::kAuto;
  int64_t skipped_ = 0;
  std::vector<std::string> problems_;
  int64_t examples_ = 0, truncated_ = 0, no_loss_ = 0, total_tokens_ = 0, kept_tokens_ = 0;
  SampleStore store_;
  std::unique_ptr<EpochSampler> sampler_;
};

}  // namespace

std::unique_ptr<BatchSource> make_sft_source(const SftSpec& spec, std::shared_ptr<const Tokenizer> tokenizer) {
  LB_CHECK(tokenizer != nullptr, "make_sft_source needs a tokenizer");
  return std::make_unique<SftSource>(spec, std::move(tokenizer));
}

std::unique_ptr<BatchSource> make_sft_source(const SftSpec& spec) {
  auto tok = std::make_shared<const Tokenizer>(Tokenizer::from_file(spec.tokenizer_path));
  return make_sft_source(spec, std::move(tok));
}

std::string default_tokenizer_path(const std::string& name) {
  return std::string(LORABENCH_TOKENIZER_ROOT) + "/" + name + "/tokenizer.json";
}

std::string resolve_tokenizer_path(const std::string& data_tokenizer, const std::string& model_path,
                                   const std::string& name) {
  if (!data_tokenizer.empty()) return data_tokenizer;
  if (!model_path.empty()) {
    std::string dir = model_path;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir + "/tokenizer.json";
  }
  const char* env = std::getenv("LORABENCH_DATA_DIR");
  if (env && *env) {
    std::string dir = env;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir + "/" + name + "/tokenizer.json";
  }
  // An installed lorabench (cmake --install) finds the tokenizer beside itself: PREFIX/bin/lorabench ->
  // PREFIX/share/lorabench/<name>/tokenizer.json. A build tree uses the checkout's copy.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path installed =
        exe.parent_path().parent_path() / "share" / "lorabench" / name / "tokenizer.json";
    if (std::filesystem::exists(installed, ec)) return installed.string();
  }
  return default_tokenizer_path(name);
}

const char* tokenizer_name_of_family(const std::string& family) { return family == "qwen3" ? "qwen3" : "qwen2.5"; }

}  // namespace lorabench::data
