// A Hugging Face config.json (model.path/config.json, `forward --model`): load_hf_config. What it
// accepts goes on to size every tensor of the model, so an accepted shape must be positive and
// consistent (a zero or negative size would fail later with no file named, or not at all).
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "lorabench/model/shape.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lbfuzz::write_input("config.json", data, size);
  lbfuzz::expect_clean(path, [&] {
    const lorabench::model::ModelShape s = lorabench::model::load_hf_config(path);
    for (int64_t v : {s.vocab_size, s.hidden, s.intermediate, s.layers, s.heads, s.kv_heads, s.head_dim, s.max_positions})
      if (v <= 0) lbfuzz::finding("load_hf_config accepted a non-positive size");
    if (!(s.rope_theta > 0) || !(s.rms_eps > 0)) lbfuzz::finding("load_hf_config accepted rope_theta/rms_norm_eps <= 0");
    (void)s.total_params();
  });
  return 0;
}
