// A checkpoint file (checkpoint.resume, `lorabench checkpoint info|verify|export-adapter`): probe it as
// resume does, then read_checkpoint with every tensor's data and digest, as `checkpoint verify` does.
// Input: HDF5 bytes or an edit script on corpus/checkpoint/step_00000002.h5 (h5_input.hpp).
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "h5_input.hpp"
#include "lorabench/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lbfuzz::h5_input("step_00000002.h5", LORABENCH_FUZZ_CHECKPOINT_BASE, data, size);
  if (path.empty()) return 0;
  lorabench::io::CheckpointProbe probe = lorabench::io::probe_checkpoint(path);  // never throws
  (void)probe;
  lbfuzz::expect_clean(path, [&] {
    const lorabench::io::CheckpointContents c = lorabench::io::read_checkpoint(path, /*with_data=*/true);
    for (const auto& g : c.groups)
      for (const auto& [k, v] : g.attrs) (void)lorabench::io::attr_text(v);
    for (const auto& t : c.tensors)
      if (static_cast<int64_t>(t.data.size()) != t.numel()) lbfuzz::finding("tensor " + t.path + ": data size != numel");
  });
  return 0;
}
