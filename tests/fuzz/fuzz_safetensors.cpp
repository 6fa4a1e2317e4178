// A safetensors file (model weights, adapter weights, `forward` inputs): SafeTensorsFile validates it on
// open; then every tensor is looked up by name and shape and its bytes are read, as the weight loader
// does. The data section is memory-mapped, where AddressSanitizer sees no bounds: the target checks
// itself that every accepted tensor lies inside the file and that its shape matches its byte range.
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "lorabench/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lbfuzz::write_input("model.safetensors", data, size);
  lbfuzz::expect_clean(path, [&] {
    lorabench::io::SafeTensorsFile f(path);
    // Opened: the file has an 8-byte header length and that many header bytes.
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    const uint64_t data_size = size - 8 - header_len;
    const auto* section = static_cast<const unsigned char*>(f.data(lorabench::io::SafeTensorInfo{}));
    unsigned sum = 0;
    for (const auto& t : f.tensors()) {
      const auto& found = f.require(t.name, t.shape);
      if (t.begin > t.end || t.end > data_size)
        lbfuzz::finding("tensor " + t.name + " accepted outside the data section");
      uint64_t numel = 1;
      bool zero = false;
      for (int64_t d : t.shape) {
        if (d < 0) lbfuzz::finding("tensor " + t.name + " accepted with a negative dimension");
        zero = zero || d == 0;
      }
      for (int64_t d : t.shape) {
        if (zero) break;
        if (numel > UINT64_MAX / static_cast<uint64_t>(d))
          lbfuzz::finding("tensor " + t.name + " accepted with an element count beyond 2^64");
        numel *= static_cast<uint64_t>(d);
      }
      if (zero) numel = 0;
      if (t.numel() != static_cast<int64_t>(numel)) lbfuzz::finding("tensor " + t.name + ": numel() is wrong");
      const uint64_t esize = lorabench::io::safetensors_dtype_size(t.dtype);
      if (numel > UINT64_MAX / esize || numel * esize != t.end - t.begin)
        lbfuzz::finding("tensor " + t.name + " accepted with shape x dtype size != its byte range");
      const auto* p = static_cast<const unsigned char*>(f.data(found));
      for (uint64_t i = 0; i < t.end - t.begin; ++i) sum += p[i];
    }
    (void)section;
    for (const auto& [k, v] : f.metadata()) sum += static_cast<unsigned>(k.size() + v.size());
    volatile unsigned sink = sum;
    (void)sink;
  });
  return 0;
}
