// The safetensors reader refuses every kind of damaged file with a message naming file and tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "lorabench/core/error.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/model/dense.hpp"

using namespace lorabench;
namespace fs = std::filesystem;

namespace {

std::string tmpdir() {
  fs::path p = fs::temp_directory_path() / ("lorabench_st_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p.string();
}

// A file with an explicit header and `data_bytes` bytes of data.
std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes) {
  std::string path = tmpdir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  std::string data(data_bytes, '\1');
  out << data;
  return path;
}

std::string open_error(const std::string& path) {
  try {
    io::SafeTensorsFile f(path);
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an IoError for " << path;
  return "";
}

// The process's resident file-backed memory (RssFile of /proc/self/status), in KiB.
long rss_file_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  ADD_FAILURE() << "no RssFile in /proc/self/status";
  return -1;
}

}  // namespace

TEST(SafeTensors, ReleaseDropsTheCopiedBytesFromTheResidentSet) {
  // A model load copies each tensor out of the mapping and releases it, so the file's pages do not stay
  // in the resident set beside the model (they did: 0.5B bf16 peaked at the model + the whole file).
  const int64_t n = 8 << 20;  // 32 MiB of F32
  std::vector<float> a(n);
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<float>(i % 1000);
  std::string path = tmpdir() + "/big.safetensors";
  io::write_safetensors(path, {{"w", "F32", {n}, a.data()}}, {});
  io::SafeTensorsFile f(path);
  const auto& w = f.require("w", {n});
  const long before = rss_file_kib();
  EXPECT_EQ(0, std::memcmp(f.data(w), a.data(), n * 4));  // touches every page
  const long touched = rss_file_kib();
  f.release(w);
  const long released = rss_file_kib();
  EXPECT_GT(touched - before, 30 << 10) << "reading 32 MiB should map them in";
  EXPECT_GT(touched - released, 30 << 10) << "release() should drop them again";
  // Still readable: the bytes fault back in from the page cache.
  EXPECT_EQ(0, std::memcmp(f.data(w), a.data(), n * 4));
}

TEST(SafeTensors, RoundTrip) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> b = {7, 8};
  std::string path = tmpdir() + "/ok.safetensors";
  io::write_safetensors(path, {{"x", "F32", {2, 3}, a.data()}, {"a.y", "I64", {2}, b.data()}}, {{"format", "pt"}});
  io::SafeTensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const auto& x = f.require("x", {2, 3});
  EXPECT_EQ(0, std::memcmp(f.data(x), a.data(), 24));
  EXPECT_EQ(f.find("a.y")->begin % 8, 0u);
}

TEST(SafeTensors, TruncatedFile) {
  std::string path = write_raw("trunc.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  std::string e = open_error(path);
  EXPECT_NE(e.find("trunc.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor w"), std::string::npos) << e;
  EXPECT_NE(e.find("outside the data section"), std::string::npos) << e;
  std::ofstream(tmpdir() + "/tiny.safetensors") << "abc";
  EXPECT_NE(open_error(tmpdir() + "/tiny.safetensors").find("truncated"), std::string::npos);
}

TEST(SafeTensors, LyingHeaderLength) {
  std::string path = tmpdir() + "/lying.safetensors";
  std::ofstream out(path, std::ios::binary);
  uint64_t n = 1 << 30;
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << "{}";
  out.close();
  std::string e = open_error(path);
  EXPECT_NE(e.find("header length"), std::string::npos) << e;
  path = write_raw("badjson.safetensors", R"({"w":{"dtype":"F32",)", 0);
  EXPECT_NE(open_error(path).find("not valid JSON"), std::string::npos);
}

TEST(SafeTensors, OverlappingRanges) {
  std::string path = write_raw("overlap.safetensors",
                               R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                               16);
  std::string e = open_error(path);
  EXPECT_NE(e.find("overlap"), std::string::npos) << e;
  EXPECT_NE(e.find("a"), std::string::npos) << e;
}

TEST(SafeTensors, WrongDtypeAndSizeMismatch) {
  std::string e = open_error(write_raw("dt.safetensors", R"({"w":{"dtype":"F24","shape":[2],"data_offsets":[0,6]}})", 6));
  EXPECT_NE(e.find("tensor w: unknown dtype \"F24\""), std::string::npos) << e;
  e = open_error(write_raw("sz.safetensors", R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(e.find("needs 6 bytes"), std::string::npos) << e;
}

TEST(SafeTensors, MissingTensorAndWrongShapeInASnapshot) {
  // A copy of the tiny fixture without one tensor, then with one tensor of the wrong shape.
  std::string src = std::string(LORABENCH_FIXTURES) + "/qwen2-tiny";
  io::SafeTensorsFile orig(src + "/model.safetensors");
  for (int variant = 0; variant < 2; ++variant) {
    std::string dir = tmpdir() + "/snap" + std::to_string(variant);
    fs::create_directories(dir);
    fs::copy_file(src + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
    std::vector<io::TensorToWrite> ts;
    std::vector<int64_t> bad_shape = {64, 63};
    for (const auto& t : orig.tensors()) {
      if (t.name == "model.layers.1.mlp.up_proj.weight") {
        if (variant == 0) continue;
        ts.push_back({t.name, t.dtype, bad_shape, orig.data(t)});
        continue;
      }
      ts.push_back({t.name, t.dtype, t.shape, orig.data(t)});
    }
    io::write_safetensors(dir + "/model.safetensors", ts, {});
    model::ModelShape shape = model::load_hf_config(dir + "/config.json");
    model::LoraSpec off;
    off.enabled = false;
    model::DenseModel m(model::build_layout(shape, off), at::kFloat);
    try {
      m.load_snapshot(model::Snapshot(dir));
      ADD_FAILURE() << "variant " << variant << " loaded";
    } catch (const IoError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << msg;
      EXPECT_NE(msg.find(variant == 0 ? "missing tensor" : "has shape [64, 63], expected [176, 64]"),
                std::string::npos)
          << msg;
    }
  }
}
