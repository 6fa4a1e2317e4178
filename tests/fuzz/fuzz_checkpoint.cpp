// A checkpoint file (checkpoint.resume, `lorabench checkpoint info|verify|export-adapter`): probe it as
// resume does, then read_checkpoint with every tensor's data and digest, as `checkpoint verify` does.
// Input (h5_input.hpp), on the sealed base file corpus/checkpoint/step_00000002.h5:
//   - an edit script, after which the file is sealed again (the reader's logic behind the seal);
//   - "BYTES\n" edits of its bytes, not sealed again: any changed byte must be reported as damage by the
//     probe and by the reader, before libhdf5 reads the file (issue 49, item 3);
//   - raw bytes starting with the seal's text (the fuzzer's own mutations of a sealed file).
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "h5_input.hpp"
#include "lorabench/io/checkpoint.hpp"

namespace {
void reseal(const std::string& path) { lorabench::io::seal_checkpoint_file(path); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lbfuzz::H5InputOptions opt;
  opt.after_edit = reseal;
  opt.raw_prefix = "lorabench checkpoint seal";
  opt.byte_edits = true;
  bool changed = false;
  const std::string path =
      lbfuzz::h5_input("step_00000002.h5", LORABENCH_FUZZ_CHECKPOINT_BASE, data, size, opt, &changed);
  if (path.empty()) return 0;
  lorabench::io::CheckpointProbe probe = lorabench::io::probe_checkpoint(path);  // never throws
  if (changed && (probe.complete || probe.problem.rfind("damaged", 0) != 0))
    lbfuzz::finding("a byte of the sealed checkpoint changed, and the probe said: " +
                    (probe.complete ? std::string("complete") : probe.problem));
  lbfuzz::expect_clean(path, [&] {
    const lorabench::io::CheckpointContents c = lorabench::io::read_checkpoint(path, /*with_data=*/true);
    if (changed) lbfuzz::finding("a byte of the sealed checkpoint changed, and read_checkpoint read it");
    for (const auto& g : c.groups)
      for (const auto& [k, v] : g.attrs) (void)lorabench::io::attr_text(v);
    for (const auto& t : c.tensors)
      if (static_cast<int64_t>(t.data.size()) != t.numel()) lbfuzz::finding("tensor " + t.path + ": data size != numel");
  });
  return 0;
}
