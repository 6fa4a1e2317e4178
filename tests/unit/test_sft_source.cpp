#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data_test_util.hpp"
#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/chat_template.hpp"
#include "lorabench/data/sft_source.hpp"

using lbtest::TempFile;
using lorabench::IoError;
using lorabench::RunConfig;
using lorabench::data::Batch;
using lorabench::data::BatchSource;
using lorabench::data::encode_chat;
using lorabench::data::kIgnoreIndex;
using lorabench::data::make_sft_source;
using lorabench::data::SftSpec;
using lorabench::data::TokenId;

namespace {

constexpr int64_t kPad = 151643;  // <|endoftext|>

const std::string kToy = std::string(LORABENCH_SOURCE_DIR) + "/inputs/data/sft_toy.jsonl";

const char* kThree =
    R"({"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"})"
    "\n"
    R"({"instruction": "Translate into English.", "input": "你好，世界！", "output": "Hello, world!"})"
    "\n"
    R"({"instruction": "Write a Python function that returns the square of x.", "output": "def square(x):\n    return x * x"})"
    "\n";

SftSpec spec_for(const std::string& path, int seq_len, int micro_batch = 1, int grad_accum = 1, int world = 1) {
  SftSpec s;
  s.path = path;
  s.shuffle = false;
  s.geo = lorabench::data::BatchGeometry{micro_batch, grad_accum, world, seq_len};
  return s;
}

// Recounts what batch.hpp promises for real_tokens and loss_tokens.
void expect_counts_consistent(const Batch& b) {
  int64_t real = 0, loss = 0;
  for (int r = 0; r < b.batch; ++r) {
    for (int t = 0; t < b.seq; ++t) {
      size_t i = size_t(r) * size_t(b.seq) + size_t(t);
      if (b.ids[i] != kPad) ++real;  // no pad token inside the toy data
      if (t >= 1 && b.labels[i] != kIgnoreIndex) ++loss;
      if (b.labels[i] != kIgnoreIndex) {
        EXPECT_EQ(b.labels[i], b.ids[i]);
      }
    }
  }
  EXPECT_EQ(b.real_tokens, real);
  EXPECT_EQ(b.loss_tokens, loss);
}

// Row r of a batch as (ids, labels).
std::pair<std::vector<int64_t>, std::vector<int64_t>> row(const Batch& b, int r) {
  auto first = size_t(r) * size_t(b.seq);
  return {std::vector<int64_t>(b.ids.begin() + long(first), b.ids.begin() + long(first + size_t(b.seq))),
          std::vector<int64_t>(b.labels.begin() + long(first), b.labels.begin() + long(first + size_t(b.seq)))};
}

}  // namespace

TEST(SftSource, PaddedRowsCarryLossOnlyOnAssistantTokens) {
  LBTEST_QWEN_TOKENIZER(tok);
  TempFile f("three.jsonl", kThree);
  auto src = make_sft_source(spec_for(f.path(), 64, 3), tok);
  EXPECT_EQ(src->epoch_size(), 3);
  EXPECT_EQ(src->skipped_records(), 0);
  Batch b = src->micro_batch(0, 0, 0);
  ASSERT_EQ(b.batch, 3);
  ASSERT_EQ(b.seq, 64);
  ASSERT_EQ(b.ids.size(), 3u * 64u);
  EXPECT_EQ(b.sample_index, (std::vector<int64_t>{0, 1, 2}));
  auto records = lorabench::data::load_sft_records(f.path(), lorabench::data::SftFormat::kAuto,
                                                   lorabench::data::BadRecordPolicy::kError);
  int64_t real = 0;
  for (int r = 0; r < 3; ++r) {
    auto ex = encode_chat(*tok, records.records[size_t(r)].messages);
    ASSERT_LE(ex.ids.size(), 64u);
    auto [ids, labels] = row(b, r);
    for (size_t t = 0; t < 64; ++t) {
      if (t < ex.ids.size()) {
        EXPECT_EQ(ids[t], ex.ids[t]);
        EXPECT_EQ(labels[t], ex.trained[t] ? int64_t(ex.ids[t]) : kIgnoreIndex);
      } else {
        EXPECT_EQ(ids[t], kPad);
        EXPECT_EQ(labels[t], kIgnoreIndex);
      }
    }
    real += int64_t(ex.ids.size());
    // The trained part decodes to the answer and its <|im_end|>.
    std::vector<TokenId> trained;
    for (size_t t = 0; t < ex.ids.size(); ++t)
      if (ex.trained[t]) trained.push_back(ex.ids[t]);
    EXPECT_EQ(tok->decode(trained), records.records[size_t(r)].messages.back().content + "<|im_end|>");
  }
  EXPECT_EQ(b.real_tokens, real);
  expect_counts_consistent(b);
  EXPECT_NE(src->describe().find("3 examples"), std::string::npos) << src->describe();
}

TEST(SftSource, TruncatesToSeqLen) {
  LBTEST_QWEN_TOKENIZER(tok);
  TempFile f("three.jsonl", kThree);
  auto src = make_sft_source(spec_for(f.path(), 30, 3), tok);
  Batch b = src->micro_batch(0, 0, 0);
  auto records = lorabench::data::load_sft_records(f.path(), lorabench::data::SftFormat::kAuto,
                                                   lorabench::data::BadRecordPolicy::kError);
  for (int r = 0; r < 3; ++r) {
    auto ex = encode_chat(*tok, records.records[size_t(r)].messages);
    ASSERT_GT(ex.ids.size(), 30u);  // the default system block alone is 21 tokens
    auto ids = row(b, r).first;
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), ex.ids.begin()));
  }
  EXPECT_EQ(b.real_tokens, 3 * 30);
  expect_counts_consistent(b);
  EXPECT_NE(src->describe().find("3 truncated"), std::string::npos) << src->describe();
}

TEST(SftSource, PackingConcatenatesExamplesIntoFullRows) {
  LBTEST_QWEN_TOKENIZER(tok);
  TempFile f("three.jsonl", kThree);
  auto records = lorabench::data::load_sft_records(f.path(), lorabench::data::SftFormat::kAuto,
                                                   lorabench::data::BadRecordPolicy::kError);
  // The examples, each truncated to seq_len, back to back: what the packed rows must hold in order.
  auto stream = [&](int seq, std::vector<int64_t>* ids, std::vector<int64_t>* labels) {
    for (const auto& r : records.records) {
      auto ex = encode_chat(*tok, r.messages);
      for (size_t t = 0; t < std::min<size_t>(ex.ids.size(), size_t(seq)); ++t) {
        ids->push_back(ex.ids[t]);
        labels->push_back(ex.trained[t] ? ex.ids[t] : kIgnoreIndex);
      }
    }
  };
  for (int seq : {32, 48, 200}) {  // 32: every example truncated; 200: none, everything in one row
    SCOPED_TRACE("seq_len " + std::to_string(seq));
    std::vector<int64_t> want_ids, want_labels;
    stream(seq, &want_ids, &want_labels);
    SftSpec spec = spec_for(f.path(), seq, 1);
    spec.pack = true;
    auto src = make_sft_source(spec, tok);
    const int64_t samples = src->epoch_size();
    EXPECT_EQ(samples, (int64_t(want_ids.size()) + seq - 1) / seq);
    std::vector<int64_t> got_ids, got_labels;
    for (int64_t step = 0; step < samples; ++step) {
      Batch b = src->micro_batch(step, 0, 0);
      expect_counts_consistent(b);
      auto [ids, labels] = row(b, 0);
      if (step + 1 < samples) {
        EXPECT_EQ(b.real_tokens, b.seq) << "packed rows are full except the last";
      }
      got_ids.insert(got_ids.end(), ids.begin(), ids.begin() + long(b.real_tokens));
      got_labels.insert(got_labels.end(), labels.begin(), labels.begin() + long(b.real_tokens));
      for (int64_t t = b.real_tokens; t < b.seq; ++t) {
        EXPECT_EQ(ids[size_t(t)], kPad);
        EXPECT_EQ(labels[size_t(t)], kIgnoreIndex);
      }
    }
    EXPECT_EQ(got_ids, want_ids);
    EXPECT_EQ(got_labels, want_labels);
    // No position is trained to predict the next example's first token (<|im_start|>, never trained).
    for (size_t i = 0; i < want_ids.size(); ++i)
      if (want_ids[i] == 151644) {
        EXPECT_EQ(want_labels[i], kIgnoreIndex);
      }
  }
}

TEST(SftSource, SameGlobalBatchAtWorldSizes124AndDisjointShards) {
  LBTEST_QWEN_TOKENIZER(tok);
  struct Layout {
    int world, accum;
  };
  // step -> sample index -> row content
  std::vector<std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>>> reference;
  std::vector<int64_t> reference_tokens;
  for (Layout l : {Layout{1, 4}, Layout{2, 2}, Layout{4, 1}}) {
    SftSpec spec = spec_for(kToy, 96, 2, l.accum, l.world);
    spec.shuffle = true;
    spec.seed = 5;
    auto src = make_sft_source(spec, tok);
    ASSERT_GE(src->epoch_size(), 200);
    std::vector<std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>>> steps;
    std::vector<int64_t> tokens;
    for (int64_t step = 0; step < 60; ++step) {  // 60 x 8 = 480 samples: more than two epochs
      std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> rows;
      std::vector<std::set<int64_t>> per_rank(size_t(l.world));
      int64_t real = 0;
      for (int rank = 0; rank < l.world; ++rank) {
        for (int m = 0; m < l.accum; ++m) {
          Batch b = src->micro_batch(step, m, rank);
          expect_counts_consistent(b);
          real += b.real_tokens;
          for (int r = 0; r < b.batch; ++r) {
            EXPECT_TRUE(per_rank[size_t(rank)].insert(b.sample_index[size_t(r)]).second);
            rows[b.sample_index[size_t(r)]] = row(b, r);
          }
        }
      }
      for (int a = 0; a < l.world; ++a)
        for (int c = a + 1; c < l.world; ++c)
          for (int64_t g : per_rank[size_t(a)]) EXPECT_EQ(per_rank[size_t(c)].count(g), 0u) << "ranks share a sample";
      EXPECT_EQ(rows.size(), 8u);  // G = micro_batch 2 x accum x world = 8
      EXPECT_EQ(rows.begin()->first, step * 8);
      steps.push_back(std::move(rows));
      tokens.push_back(real);
    }
    if (reference.empty()) {
      reference = steps;
      reference_tokens = tokens;
    } else {
      EXPECT_TRUE(steps == reference) << "world " << l.world << " x accum " << l.accum << " sees other examples";
      EXPECT_EQ(tokens, reference_tokens);
    }
  }
}

TEST(SftSource, DeterministicPerSeedAndReshuffledPerEpoch) {
  LBTEST_QWEN_TOKENIZER(tok);
  SftSpec spec = spec_for(kToy, 64, 4);
  spec.shuffle = true;
  spec.seed = 11;
  auto a = make_sft_source(spec, tok);
  auto b = make_sft_source(spec, tok);
  spec.seed = 12;
  auto c = make_sft_source(spec, tok);
  const int64_t n = a->epoch_size();
  bool differs = false;
  for (int64_t step = 0; step < 5; ++step) {
    Batch x = a->micro_batch(step, 0, 0), y = b->micro_batch(step, 0, 0), z = c->micro_batch(step, 0, 0);
    EXPECT_EQ(x.ids, y.ids);
    EXPECT_EQ(x.labels, y.labels);
    differs = differs || x.ids != z.ids;
  }
  EXPECT_TRUE(differs) << "another seed should give another order";
  // Each epoch reads every example once; epoch 1's order differs from epoch 0's.
  SftSpec one = spec_for(kToy, 64, 1);
  one.shuffle = true;
  one.seed = 11;
  auto s = make_sft_source(one, tok);
  std::multiset<std::vector<int64_t>> e0, e1;
  std::vector<std::vector<int64_t>> o0, o1;
  for (int64_t g = 0; g < 2 * n; ++g) {
    auto ids = s->micro_batch(g, 0, 0).ids;
    (g < n ? e0 : e1).insert(ids);
    (g < n ? o0 : o1).push_back(ids);
  }
  EXPECT_EQ(e0, e1);
  EXPECT_NE(o0, o1);
  // Without shuffle, file order.
  auto plain = make_sft_source(spec_for(kToy, 64, 1), tok);
  auto first = plain->micro_batch(0, 0, 0);
  auto again = plain->micro_batch(n, 0, 0);
  EXPECT_EQ(first.ids, again.ids);
}

TEST(SftSource, SkipModeIsCountedAndReported) {
  LBTEST_QWEN_TOKENIZER(tok);
  TempFile f("skip.jsonl", std::string(kThree) + "{oops\n{\"instruction\": \"Q\"}\n");
  SftSpec spec = spec_for(f.path(), 64, 1);
  EXPECT_THROW(make_sft_source(spec, tok), IoError);
  spec.on_bad_record = lorabench::data::BadRecordPolicy::kSkip;
  auto src = make_sft_source(spec, tok);
  EXPECT_EQ(src->skipped_records(), 2);
  EXPECT_EQ(src->epoch_size(), 3);
  EXPECT_NE(src->describe().find("2 bad records skipped"), std::string::npos) << src->describe();
  EXPECT_NE(src->describe().find(f.path() + ":4"), std::string::npos) << src->describe();
}

TEST(SftSource, RejectsOutOfRangeMicroBatchCoordinates) {
  LBTEST_QWEN_TOKENIZER(tok);
  TempFile f("three.jsonl", kThree);
  auto src = make_sft_source(spec_for(f.path(), 64, 1, 2, 2), tok);
  EXPECT_NO_THROW(src->micro_batch(0, 1, 1));
  EXPECT_THROW(src->micro_batch(0, 2, 0), lorabench::Error);
  EXPECT_THROW(src->micro_batch(0, 0, 2), lorabench::Error);
}

TEST(SftSource, TokenizerPathResolution) {
  using lorabench::data::resolve_tokenizer_path;
  const char* old = std::getenv("LORABENCH_DATA_DIR");
  std::string saved = old ? old : "";
  unsetenv("LORABENCH_DATA_DIR");
  EXPECT_EQ(resolve_tokenizer_path("", ""), lorabench::data::default_tokenizer_path());
  EXPECT_EQ(std::string(lorabench::data::default_tokenizer_path()),
            std::string(LORABENCH_SOURCE_DIR) + "/third_party/qwen2.5/tokenizer.json");
  setenv("LORABENCH_DATA_DIR", "/data/shared/", 1);
  EXPECT_EQ(resolve_tokenizer_path("", ""), "/data/shared/qwen2.5/tokenizer.json");
  EXPECT_EQ(resolve_tokenizer_path("", "/models/Qwen2.5-0.5B-Instruct/"), "/models/Qwen2.5-0.5B-Instruct/tokenizer.json");
  EXPECT_EQ(resolve_tokenizer_path("my/tokenizer.json", "/models/Qwen2.5-0.5B-Instruct/"), "my/tokenizer.json");
  if (old) setenv("LORABENCH_DATA_DIR", saved.c_str(), 1);
  else unsetenv("LORABENCH_DATA_DIR");

  SftSpec spec = spec_for(kToy, 64);
  spec.tokenizer_path = "/nonexistent/qwen2.5/tokenizer.json";
  try {
    make_sft_source(spec);
    ADD_FAILURE() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/qwen2.5/tokenizer.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scripts/install-deps.sh"), std::string::npos) << e.what();
  }
}

