// Checkpoint files outputs/<run>/checkpoints/step_XXXXXXXX.h5: the HDF5 format and the atomic commit
// protocol. Torch-free: tensors arrive as raw fp32 buffers with their global shapes; what goes into the
// attribute groups is decided by the caller (train/checkpoint.hpp). Layout in docs/checkpoints.md.
//
//   /                       format, format_version, step, complete (written last: the file is usable)
//   /<group>                attributes given by the caller (state, schedule, optimizer, data, rng,
//                           fingerprint, writer)
//   /<tensor path>          float32 datasets with their global shapes, each with a `digest` attribute
//                           (trainable/<name>, optimizer/exp_avg/<name>, optimizer/exp_avg_sq/<name>)
//   /rng/rank_seeds         int64, one per rank of the writing job
//
// Atomicity: the file is written as step_XXXXXXXX.h5.tmp, flushed, closed and fsync'd; after every rank
// has finished (a collective status check) rank 0 renames it, fsyncs the directory, and only then
// replaces the `latest` pointer (tmp + rename + directory fsync) and prunes older checkpoints.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lorabench::io {

constexpr const char* kCheckpointFormat = "lorabench-checkpoint";
constexpr int kCheckpointFormatVersion = 1;
constexpr const char* kCheckpointLatest = "latest";  // pointer file: the name of the newest checkpoint

// Root attribute names.
constexpr const char* kCkptAttrFormat = "format";
constexpr const char* kCkptAttrFormatVersion = "format_version";
constexpr const char* kCkptAttrStep = "step";
constexpr const char* kCkptAttrComplete = "complete";
constexpr const char* kCkptAttrDigest = "digest";  // on every tensor dataset

using AttrValue = std::variant<int64_t, double, std::string>;
using AttrList = std::vector<std::pair<std::string, AttrValue>>;
struct AttrGroup {
  std::string name;  // a top-level group ("state", "fingerprint", ...)
  AttrList attrs;
};
std::string attr_text(const AttrValue& v);  // integers as is, doubles with %.17g
const AttrValue* find_attr(const AttrList& attrs, const std::string& name);

// What one rank writes of one tensor: rows [row_begin, row_end) of dimension 0 (all of a 0-d/1-d
// tensor's elements count as rows), row-major fp32. Every rank lists the same tensors in the same order.
struct TensorPiece {
  std::string path;             // "trainable/<name>", "optimizer/exp_avg/<name>", ...
  std::vector<int64_t> shape;   // the global shape
  int64_t row_begin = 0, row_end = 0;
  const float* data = nullptr;  // (row_end - row_begin) x (elements per row) values
};

// Rows [begin, end) of `rows` that rank `rank` of `world` writes in parallel mode: an even split.
std::pair<int64_t, int64_t> even_rows(int64_t rows, int rank, int world);

// How a checkpoint is written (docs/checkpoints.md has the measurements behind the default):
//   kGathered  rank 0 writes every tensor with HDF5's default (POSIX) driver; the others wait
//   kParallel  every rank opens the file through MPI-IO (H5Pset_fapl_mpio) and writes its rows of every
//              tensor with collective transfers
enum class CheckpointWriteMode { kGathered, kParallel };
const char* write_mode_name(CheckpointWriteMode m);

// The digest of a tensor: a 64-bit sum over elements of mix(index, bits), mixed with the element count,
// as 16 hex digits. Equal tensors have equal digests; the sum does not depend on how the elements are
// split between writers, so ranks that each hold a part can add their partial sums.
uint64_t digest_partial(const float* data, int64_t n, int64_t first_index);
std::string digest_finish(uint64_t partial_sum, int64_t numel);
std::string tensor_digest(const float* data, int64_t n);

struct CheckpointWriteResult {
  std::string path;        // the final file name
  double write_s = 0;      // create + write + close + fsync of the temporary file (max over ranks)
  double commit_s = 0;     // rename + directory fsync + latest pointer + prune
  int64_t bytes = 0;       // tensor payload
  std::vector<std::string> pruned;  // checkpoints removed by keep_last
};

// Collective over `comm`. Writes `dir`/step_XXXXXXXX.h5 (step = `step`) atomically (see the file
// comment), with `groups` as attribute groups and `tensors` as datasets; `rank_seeds` becomes
// /rng/rank_seeds. In kGathered mode only rank 0's pieces are used and they must be whole tensors.
// keep_last > 0 then removes older complete checkpoints beyond the newest keep_last, and stale *.tmp
// files. A failure on any rank is an IoError on every rank; the previous checkpoints and `latest` stay.
// `before_commit` (fault injection) runs on every rank between the data write and the rename.
CheckpointWriteResult save_checkpoint(const std::string& dir, int64_t step, MPI_Comm comm, CheckpointWriteMode mode,
                                      const std::vector<AttrGroup>& groups, const std::vector<TensorPiece>& tensors,
                                      const std::vector<int64_t>& rank_seeds, int keep_last,
                                      const std::function<void()>& before_commit = {});

// Only the file part of save_checkpoint (no rename, pointer or pruning): collective, writes `path`
// and returns the write time (max over ranks). For measurements and tests.
double write_checkpoint_file(const std::string& path, MPI_Comm comm, CheckpointWriteMode mode, int64_t step,
                             const std::vector<AttrGroup>& groups, const std::vector<TensorPiece>& tensors,
                             const std::vector<int64_t>& rank_seeds);

// The seal (docs/checkpoints.md, "Integrity"): the first kCheckpointSealBytes bytes of a checkpoint are
// HDF5's user block, which libhdf5 skips; after the file is complete and closed, rank 0 writes there, as
// text, the file's size and a 64-bit hash of every byte after them. Readers check it with plain reads before
// libhdf5 opens the file, so that damaged metadata is reported as damage instead of reaching libhdf5's
// parser, which trusts it (a flipped byte there can crash or hang it).
inline constexpr size_t kCheckpointSealBytes = 512;
void seal_checkpoint_file(const std::string& path);  // throws IoError
struct CheckpointSeal {
  // kSealed: size and seal agree (and the hash, when checked); kUnsealed: an HDF5 file with no seal (written
  // before seals existed: nothing to check before libhdf5 reads it); kDamaged: problem says why.
  enum State { kDamaged, kSealed, kUnsealed } state = kDamaged;
  std::string stored_hash;
  std::string problem;
};
// with_hash = false checks the seal and the size only (no read of the whole file). Never throws.
CheckpointSeal check_checkpoint_seal(const std::string& path, bool with_hash);

// "step_00000042.h5"; the step of such a name or -1.
std::string checkpoint_file_name(int64_t step);
int64_t checkpoint_step_of(const std::string& file_name);

// A look at a file: its seal, with the hash (one read of the file), then its root attributes: whether it is
// a complete checkpoint. Never throws.
struct CheckpointProbe {
  std::string path;
  int64_t step = -1;
  bool complete = false;
  bool sealed = false;  // false: a file written before seals (its metadata unchecked before libhdf5 read it)
  std::string seal_hash;
  std::string problem;  // why not (damaged, unreadable, not a checkpoint, no complete marker, ...), "" when complete
};
CheckpointProbe probe_checkpoint(const std::string& path);

// The final-named checkpoint files of a directory (step_XXXXXXXX.h5), newest first. {} when none.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The file the `latest` pointer of `dir` names, or "" when there is none.
std::string read_latest_pointer(const std::string& dir);

struct StoredTensor {
  std::string path;
  std::vector<int64_t> shape;
  std::string digest;       // as stored
  std::vector<float> data;  // empty unless read with data
  int64_t numel() const;
};

struct CheckpointContents {
  std::string path;
  int64_t step = 0;
  std::vector<AttrGroup> groups;       // every attribute group, in name order
  std::vector<StoredTensor> tensors;   // every float dataset, in path order
  std::vector<int64_t> rank_seeds;
  bool sealed = false;    // the seal was there and the file's hash agreed with it (CheckpointProbe)
  std::string seal_hash;
  const AttrGroup* group(const std::string& name) const;
  const StoredTensor* tensor(const std::string& path) const;
};

// An open, complete checkpoint. The constructor checks the seal (a damaged file never reaches libhdf5),
// then reads the attributes and the tensor list (no tensor data); read() reads one tensor and checks its
// digest. IoError naming the file and what is wrong: damaged (the seal), unreadable or truncated, not a checkpoint, another format version, no complete marker, a tensor that
// cannot be read or whose digest differs from the stored one (a corrupt file).
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  const CheckpointContents& contents() const { return contents_; }
  // REQUIRES: t is one of contents().tensors; dst holds t.numel() floats.
  void read(const StoredTensor& t, float* dst) const;
  // Reads every tensor through one scratch buffer: the digest check of the whole file.
  void verify_all() const;

 private:
  CheckpointContents contents_;
  hid_t file_ = H5I_INVALID_HID;
};

// The whole file: attributes, tensor list and (with_data) every tensor's values, digests checked.
CheckpointContents read_checkpoint(const std::string& path, bool with_data = true);

// Durability helpers: fsync a file's data / a directory's entries (IoError on failure).
void fsync_file(const std::string& path);
void fsync_dir(const std::string& dir);
// Writes `text` to dir/name via a temporary file, fsync and rename, then fsyncs the directory.
void write_file_atomic(const std::string& dir, const std::string& name, const std::string& text);

}  // namespace lorabench::io
