// The safetensors format (Hugging Face): 8-byte little-endian header length, a JSON header mapping
// tensor names to {dtype, shape, data_offsets}, then the raw bytes. Torch-free.
//
// SafeTensorsFile memory-maps the file and validates it completely on open: the header length against
// the file size, the JSON, the dtype names, that shape x dtype size equals the byte range, that ranges
// lie inside the data section and do not overlap. A bad file is an IoError naming the file and the
// tensor, never a crash and never a silent zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lorabench::io {

struct SafeTensorInfo {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
  int64_t numel() const;
};

size_t safetensors_dtype_size(const std::string& dtype);  // 0 for an unknown name

class SafeTensorsFile {
 public:
  explicit SafeTensorsFile(const std::string& path);
  ~SafeTensorsFile();
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
  const SafeTensorInfo* find(const std::string& name) const;
  // Throws IoError "<file>: missing tensor <name>" / "...: tensor <name> has shape [..], expected [..]".
  const SafeTensorInfo& require(const std::string& name, const std::vector<int64_t>& shape) const;
  const void* data(const SafeTensorInfo& t) const { return data_ + t.begin; }
  // Drops the whole pages of t's bytes from the process's resident set once they have been copied out
  // (madvise MADV_DONTNEED on the read-only mapping: the page cache keeps them, a later read faults them
  // back in). Loading a model then holds one tensor of the file at a time on top of the model, not the
  // whole file; best effort (a refused madvise changes nothing but the resident set).
  void release(const SafeTensorInfo& t) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const unsigned char* data_ = nullptr;
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  std::string dtype;            // safetensors dtype name
  std::vector<int64_t> shape;
  const void* data = nullptr;   // numel x dtype size bytes
};

// Writes a safetensors file (tensors sorted by name, like the reference implementation), atomically:
// to "<path>.tmp" and renamed.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

std::string shape_string(const std::vector<int64_t>& shape);  // "[2, 3]"

}  // namespace lorabench::io
