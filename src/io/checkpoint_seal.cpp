// The seal of a checkpoint file: its size and a 64-bit hash of every byte after the first 512, written as
// text into those 512 bytes (HDF5's user block, which libhdf5 skips), after the file is complete and closed.
// Readers check it with plain reads before libhdf5 sees the file: libhdf5 trusts its own metadata, and a
// damaged byte there can crash or hang it (issue 49, item 3; docs/checkpoints.md, "Integrity").
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/io/checkpoint.hpp"

namespace lorabench::io {

namespace {

constexpr const char* kSealMagic = "lorabench checkpoint seal 1\n";
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

// Closes the descriptor on every path.
struct Fd {
  int fd;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

bool read_exact(int fd, char* dst, size_t n, off_t at) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, dst + done, n - done, at + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

// Every 8-byte word w at word index i (little-endian, the tail zero-padded) adds
// splitmix64(splitmix64(i) ^ w); the total is mixed with the byte count. Any change of one word changes
// one term by a bijective mix, so a single damaged byte always changes the hash.
std::string hash_after_seal(int fd, int64_t size, const std::string& path) {
  std::vector<char> buf(size_t(4) << 20);
  uint64_t sum = 0, word_index = 0;
  off_t at = static_cast<off_t>(kCheckpointSealBytes);
  while (at < size) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(int64_t(buf.size()), size - at));
    if (!read_exact(fd, buf.data(), n, at)) throw IoError(path + ": cannot read at byte " + std::to_string(at) + ": " + std::strerror(errno));
    size_t k = 0;
    for (; k + 8 <= n; k += 8, ++word_index) {
      uint64_t w;
      std::memcpy(&w, buf.data() + k, 8);
      sum += splitmix64(splitmix64(word_index) ^ w);
    }
    if (k < n) {  // only the file's last chunk can end inside a word (the chunks are multiples of 8)
      uint64_t w = 0;
      std::memcpy(&w, buf.data() + k, n - k);
      sum += splitmix64(splitmix64(word_index++) ^ w);
    }
    at += static_cast<off_t>(n);
  }
  return strformat("%016llx", static_cast<unsigned long long>(splitmix64(sum ^ splitmix64(~uint64_t(size)))));
}

// The seal's 512 bytes: the magic line, "size N", "hash H", then zeros.
std::string seal_text(long long size, const std::string& hash) {
  std::string head = std::string(kSealMagic) + "size " + std::to_string(size) + "\nhash " + hash + "\n";
  head.resize(kCheckpointSealBytes, '\0');
  return head;
}

int64_t file_size(int fd) {
  struct stat st{};
  return ::fstat(fd, &st) == 0 ? int64_t(st.st_size) : -1;
}

}  // namespace

void seal_checkpoint_file(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDWR));
  if (f.fd < 0) throw IoError(path + ": cannot open to seal: " + std::strerror(errno));
  const int64_t size = file_size(f.fd);
  if (size < int64_t(kCheckpointSealBytes)) throw IoError(path + ": too short to seal (" + std::to_string(size) + " bytes)");
  const std::string head = seal_text(size, hash_after_seal(f.fd, size, path));
  size_t done = 0;
  while (done < head.size()) {
    const ssize_t put = ::pwrite(f.fd, head.data() + done, head.size() - done, static_cast<off_t>(done));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw IoError(path + ": cannot write the seal: " + std::strerror(errno));
    done += static_cast<size_t>(put);
  }
}

CheckpointSeal check_checkpoint_seal(const std::string& path, bool with_hash) {
  CheckpointSeal s;
  Fd f(::open(path.c_str(), O_RDONLY));
  if (f.fd < 0) {
    s.problem = std::string("cannot open: ") + std::strerror(errno);
    return s;
  }
  const int64_t size = file_size(f.fd);
  char head[kCheckpointSealBytes];
  if (size < int64_t(sizeof kHdf5Signature) || !read_exact(f.fd, head, std::min<size_t>(sizeof head, size_t(size)), 0)) {
    s.problem = "damaged: " + std::to_string(size) + " bytes, too short for a checkpoint";
    return s;
  }
  if (std::memcmp(head, kHdf5Signature, sizeof kHdf5Signature) == 0) {
    s.state = CheckpointSeal::kUnsealed;  // written before seals existed: HDF5 signature at byte 0
    return s;
  }
  const size_t magic = std::strlen(kSealMagic);
  if (size < int64_t(kCheckpointSealBytes)) {
    s.problem = "damaged: " + std::to_string(size) + " bytes, too short for a checkpoint";
    return s;
  }
  if (std::memcmp(head, kSealMagic, magic) != 0) {
    s.problem = "damaged: no checkpoint seal and no HDF5 signature at the start of the file";
    return s;
  }
  const std::string text(head + magic, ::strnlen(head + magic, sizeof head - magic));
  long long stored_size = -1;
  char hash[17] = {0};
  // Every one of the 512 bytes is checked: what the seal says, and the zeros after it.
  if (std::sscanf(text.c_str(), "size %lld\nhash %16[0-9a-f]\n", &stored_size, hash) != 2 || std::strlen(hash) != 16 ||
      seal_text(stored_size, hash) != std::string(head, sizeof head)) {
    s.problem = "damaged: the seal at the start of the file (its first 512 bytes) is not as written";
    return s;
  }
  s.stored_hash = hash;
  if (stored_size != size) {
    s.problem = strformat("damaged: %lld bytes, the seal says %lld (%s)", static_cast<long long>(size), stored_size,
                          size < stored_size ? "truncated" : "bytes appended");
    return s;
  }
  s.state = CheckpointSeal::kSealed;
  if (!with_hash) return s;
  try {
    const std::string actual = hash_after_seal(f.fd, size, path);
    if (actual != s.stored_hash) {
      s.state = CheckpointSeal::kDamaged;
      s.problem = "damaged: the file's hash " + actual + " differs from its seal's " + s.stored_hash +
                  " (bytes changed after it was written)";
      return s;
    }
  } catch (const IoError& e) {
    s.state = CheckpointSeal::kDamaged;
    s.problem = std::string("unreadable: ") + e.what();
    return s;
  }
  return s;
}

}  // namespace lorabench::io
