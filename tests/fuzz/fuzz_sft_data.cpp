// An SFT dataset file (data.path, data.eval_path): JSONL or a JSON array, alpaca or chat records. The
// first input byte picks format (auto/alpaca/chat), bad-record policy and packing; the rest is the file.
// make_sft_source loads, renders the chat template, tokenizes (the tiny Qwen2.5 tokenizer) and cuts
// samples, as a run does; then two micro-batches are drawn and checked for their shape.
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "lorabench/data/sft_source.hpp"
#include "tiny_tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  using namespace lorabench::data;
  const uint8_t mode = data[0];
  const std::string path = lbfuzz::write_input("train.jsonl", data + 1, size - 1);
  SftSpec spec;
  spec.path = path;
  spec.format = mode % 3 == 0 ? SftFormat::kAuto : mode % 3 == 1 ? SftFormat::kAlpaca : SftFormat::kChat;
  spec.on_bad_record = (mode & 4) ? BadRecordPolicy::kSkip : BadRecordPolicy::kError;
  spec.pack = (mode & 8) != 0;
  spec.shuffle = (mode & 16) != 0;
  spec.geo.seq_len = (mode & 32) ? 2 : 24;
  spec.geo.micro_batch = 2;
  spec.holdout_fraction = (mode & 64) ? 0.3 : 0;
  spec.held_out_part = (mode & 128) != 0;
  lbfuzz::expect_clean(path, [&] {
    auto source = make_sft_source(spec, lbfuzz::tiny_tokenizer());
    (void)source->describe();
    if (source->epoch_size() <= 0) lbfuzz::finding("an SFT source with no samples was accepted");
    for (int64_t step : {0, 1}) {
      const Batch b = source->micro_batch(step, 0, 0);
      const size_t cells = static_cast<size_t>(b.batch) * static_cast<size_t>(b.seq);
      if (b.batch != spec.geo.micro_batch || b.seq != spec.geo.seq_len || b.ids.size() != cells || b.labels.size() != cells)
        lbfuzz::finding("micro-batch of the wrong shape");
      for (int64_t id : b.ids)
        if (id < 0 || id >= lbfuzz::tiny_tokenizer()->vocab_size()) lbfuzz::finding("token id outside the vocabulary");
    }
  });
  return 0;
}
