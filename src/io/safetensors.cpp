#include "lorabench/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::io {

int64_t SafeTensorInfo::numel() const {
  // The reader has checked that the element count fits (it is at most the file size); a zero dimension
  // makes it 0 whatever the others are, without multiplying them (which could overflow).
  for (auto d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

size_t safetensors_dtype_size(const std::string& t) {
  if (t == "F64" || t == "I64" || t == "U64") return 8;
  if (t == "F32" || t == "I32" || t == "U32") return 4;
  if (t == "F16" || t == "BF16" || t == "I16" || t == "U16") return 2;
  if (t == "I8" || t == "U8" || t == "BOOL" || t == "F8_E4M3" || t == "F8_E5M2") return 1;
  return 0;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafeTensorsFile::SafeTensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    throw IoError(path + ": cannot stat");
  }
  map_size_ = static_cast<size_t>(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    throw IoError(path + ": truncated: " + std::to_string(map_size_) + " bytes, no header length");
  }
  map_ = mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw IoError(path + ": mmap failed: " + std::strerror(errno));
  }
  auto fail = [&](const std::string& msg) {
    munmap(map_, map_size_);
    map_ = nullptr;
    throw IoError(path + ": " + msg);
  };
  const auto* bytes = static_cast<const unsigned char*>(map_);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > map_size_ - 8)
    fail("header length " + std::to_string(header_len) + " exceeds the file size " + std::to_string(map_size_));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const std::exception& e) {
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail("header is not a JSON object");
  data_ = bytes + 8 + header_len;
  const uint64_t data_size = map_size_ - 8 - header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail("tensor " + name + ": entry needs dtype, shape and data_offsets");
    SafeTensorInfo t;
    t.name = name;
    if (!v["dtype"].is_string()) fail("tensor " + name + ": dtype is not a string");
    t.dtype = v["dtype"].get<std::string>();
    size_t esize = safetensors_dtype_size(t.dtype);
    if (esize == 0) fail("tensor " + name + ": unknown dtype \"" + t.dtype + "\"");
    if (!v["shape"].is_array()) fail("tensor " + name + ": shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) fail("tensor " + name + ": bad shape " + v["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("tensor " + name + ": data_offsets must be two non-negative integers");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.end < t.begin) fail("tensor " + name + ": data_offsets end before they begin");
    if (t.end > data_size)
      fail("tensor " + name + ": bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
           ") lie outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    // Bytes the shape needs, checked for overflow: a lying shape must not wrap around to the byte range.
    uint64_t expect = esize;
    bool zero = false, overflow = false;
    for (int64_t d : t.shape) {
      if (d == 0) zero = true;
      else if (expect > UINT64_MAX / static_cast<uint64_t>(d)) overflow = true;
      else expect *= static_cast<uint64_t>(d);
    }
    if (zero) expect = 0;
    else if (overflow)
      fail("tensor " + name + ": shape " + shape_string(t.shape) + " x " + t.dtype + " needs more than 2^64 bytes");
    if (t.end - t.begin != expect)
      fail("tensor " + name + ": shape " + shape_string(t.shape) + " x " + t.dtype + " needs " +
           std::to_string(expect) + " bytes but data_offsets span " + std::to_string(t.end - t.begin));
    tensors_.push_back(std::move(t));
  }
  std::vector<const SafeTensorInfo*> sorted;
  for (const auto& t : tensors_) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  const SafeTensorInfo* reach = nullptr;  // the tensor that extends furthest so far
  for (const SafeTensorInfo* t : sorted) {
    if (t->end == t->begin) continue;  // empty tensors occupy no bytes
    if (reach != nullptr && t->begin < reach->end)
      fail("tensors " + reach->name + " and " + t->name + " overlap in the data section");
    if (reach == nullptr || t->end > reach->end) reach = t;
  }
}

SafeTensorsFile::~SafeTensorsFile() {
  if (map_) munmap(map_, map_size_);
}

void SafeTensorsFile::release(const SafeTensorInfo& t) const {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(data_ + t.begin) + page - 1) / page * page;
  const uintptr_t last = reinterpret_cast<uintptr_t>(data_ + t.end) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

const SafeTensorInfo* SafeTensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const SafeTensorInfo& SafeTensorsFile::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const SafeTensorInfo* t = find(name);
  if (!t) throw IoError(path_ + ": missing tensor " + name);
  if (t->shape != shape)
    throw IoError(path_ + ": tensor " + name + " has shape " + shape_string(t->shape) + ", expected " +
                  shape_string(shape));
  return *t;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });
  nlohmann::ordered_json header;
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto* t : order) {
    size_t esize = safetensors_dtype_size(t->dtype);
    LB_CHECK(esize > 0, "unknown safetensors dtype " + t->dtype);
    uint64_t n = 1;
    for (auto d : t->shape) n *= static_cast<uint64_t>(d);
    header[t->name] = {{"dtype", t->dtype}, {"shape", t->shape}, {"data_offsets", {offset, offset + n * esize}}};
    offset += n * esize;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');  // the reference pads the header to 8 bytes
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(tmp + ": cannot create");
    uint64_t len = h.size();
    unsigned char lb[8];
    for (int i = 0; i < 8; ++i) lb[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(lb), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto* t : order) {
      uint64_t n = 1;
      for (auto d : t->shape) n *= static_cast<uint64_t>(d);
      out.write(static_cast<const char*>(t->data), static_cast<std::streamsize>(n * safetensors_dtype_size(t->dtype)));
    }
    out.flush();
    if (!out) throw IoError(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw IoError(path + ": rename failed: " + std::strerror(errno));
}

}  // namespace lorabench::io
