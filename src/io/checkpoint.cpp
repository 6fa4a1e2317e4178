#include "lorabench/io/checkpoint.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/io/h5.hpp"

namespace fs = std::filesystem;

namespace lorabench::io {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw IoError(path + ": " + what); }

void check(herr_t st, const std::string& path, const std::string& what) {
  if (st < 0) {
    std::string detail = h5::last_error();
    fail(path, what + (detail.empty() ? "" : " (" + detail + ")"));
  }
}
hid_t check_id(hid_t id, const std::string& path, const std::string& what) {
  check(id < 0 ? -1 : 0, path, what);
  return id;
}

// Every rank learns whether all ranks succeeded; the first failing rank's message is reported.
void agree(MPI_Comm comm, bool ok, const std::string& message) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int bad = ok ? 0 : 1, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
  if (!any) return;
  int mine = ok ? 1 << 30 : rank, first = 0;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  int len = rank == first ? static_cast<int>(message.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT, first, comm);
  std::string text = rank == first ? message : std::string(static_cast<size_t>(len), '\0');
  if (len) MPI_Bcast(text.data(), len, MPI_CHAR, first, comm);
  throw AgreedIoError(rank == first ? text : text + " (reported by rank " + std::to_string(first) + ")");
}

int64_t row_elems(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void write_value(hid_t obj, const std::string& name, const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) {
    h5::write_attr(obj, name, *i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    h5::write_attr(obj, name, *d);
  } else {
    h5::write_attr(obj, name, std::get<std::string>(v));
  }
}

AttrList read_attrs(hid_t obj) {
  AttrList out;
  for (const auto& name : h5::attr_names(obj)) {
    h5::Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
    h5::Handle t(H5Aget_type(a));
    switch (H5Tget_class(t)) {
      case H5T_STRING: out.emplace_back(name, h5::read_attr_string(obj, name)); break;
      case H5T_INTEGER: out.emplace_back(name, h5::read_attr_int(obj, name)); break;
      case H5T_FLOAT: out.emplace_back(name, h5::read_attr_double(obj, name)); break;
      default: break;
    }
  }
  return out;
}

// The body shared by both write modes: `parallel` = every rank of `comm` calls this with the file opened
// through MPI-IO; otherwise rank 0 alone, with whole tensors.
void write_body(hid_t file, const std::string& path, bool parallel, MPI_Comm comm, int64_t step,
                const std::vector<AttrGroup>& groups, const std::vector<TensorPiece>& tensors,
                const std::vector<int64_t>& rank_seeds) {
  int rank = 0;
  if (parallel) MPI_Comm_rank(comm, &rank);
  h5::write_attr(file, kCkptAttrFormat, kCheckpointFormat);
  h5::write_attr(file, kCkptAttrFormatVersion, kCheckpointFormatVersion);
  h5::write_attr(file, kCkptAttrStep, step);
  for (const auto& g : groups) {
    h5::Handle gh = h5::require_group(file, g.name);
    for (const auto& [name, value] : g.attrs) write_value(gh, name, value);
  }
  h5::Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl, 1);
  h5::Handle dxpl(H5Pcreate(H5P_DATASET_XFER));
  if (parallel) H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);

  // Digests first: each rank's partial sums over its rows, added over ranks in one reduction.
  std::vector<uint64_t> partial(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorPiece& t = tensors[i];
    const int64_t re = row_elems(t.shape);
    partial[i] = digest_partial(t.data, (t.row_end - t.row_begin) * re, t.row_begin * re);
  }
  if (parallel && !partial.empty())
    MPI_Allreduce(MPI_IN_PLACE, partial.data(), static_cast<int>(partial.size()), MPI_UINT64_T, MPI_SUM, comm);

  {  // /rng/rank_seeds: rank 0 writes every element
    hsize_t n = rank_seeds.size();
    h5::Handle space(H5Screate_simple(1, &n, nullptr));
    h5::Handle d(check_id(H5Dcreate2(file, "rng/rank_seeds", H5T_STD_I64LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
                          path, "cannot create rng/rank_seeds"));
    h5::Handle fspace(H5Dget_space(d));
    h5::Handle mspace(H5Screate_simple(1, &n, nullptr));
    if (rank != 0) {
      H5Sselect_none(fspace);
      H5Sselect_none(mspace);
    }
    check(H5Dwrite(d, H5T_NATIVE_INT64, mspace, fspace, dxpl, rank_seeds.data()), path, "cannot write rng/rank_seeds");
  }

  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorPiece& t = tensors[i];
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    h5::Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                                  : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    h5::Handle d(check_id(H5Dcreate2(file, t.path.c_str(), H5T_IEEE_F32LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
                          path, "cannot create dataset " + t.path));
    h5::write_attr(d, kCkptAttrDigest, digest_finish(partial[i], numel_of(t.shape)));
    h5::Handle fspace(H5Dget_space(d));
    const hsize_t count = static_cast<hsize_t>((t.row_end - t.row_begin) * row_elems(t.shape));
    const hsize_t mcount = count ? count : 1;
    h5::Handle mspace(H5Screate_simple(1, &mcount, nullptr));
    if (count == 0) {
      H5Sselect_none(fspace);
      H5Sselect_none(mspace);
    } else if (!dims.empty()) {
      std::vector<hsize_t> start(dims.size(), 0), cnt = dims;
      start[0] = static_cast<hsize_t>(t.row_begin);
      cnt[0] = static_cast<hsize_t>(t.row_end - t.row_begin);
      H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr);
    }
    check(H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, t.data), path, "cannot write " + t.path);
  }
  // The marker comes last: a file without it was not finished.
  h5::write_attr(file, kCkptAttrComplete, int64_t(1));
  if (const std::string why = h5::reserve_for_flush(file); !why.empty())
    throw IoError(path + ": flush failed (" + why + ")");
  check(H5Fflush(file, H5F_SCOPE_GLOBAL), path, "flush failed");
}

}  // namespace

std::string attr_text(const AttrValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v)) {
    // The shortest text that reads back as the same double.
    for (int digits = 6; digits < 17; ++digits) {
      std::string s = strformat("%.*g", digits, *d);
      if (std::strtod(s.c_str(), nullptr) == *d) return s;
    }
    return strformat("%.17g", *d);
  }
  return std::get<std::string>(v);
}

const AttrValue* find_attr(const AttrList& attrs, const std::string& name) {
  for (const auto& [n, v] : attrs)
    if (n == name) return &v;
  return nullptr;
}

std::pair<int64_t, int64_t> even_rows(int64_t rows, int rank, int world) {
  return {rows * rank / world, rows * (rank + 1) / world};
}

const char* write_mode_name(CheckpointWriteMode m) {
  return m == CheckpointWriteMode::kParallel ? "parallel" : "gathered";
}

uint64_t digest_partial(const float* data, int64_t n, int64_t first_index) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, 4);
    sum += splitmix64(splitmix64(uint64_t(first_index + i)) ^ bits);
  }
  return sum;
}

std::string digest_finish(uint64_t partial_sum, int64_t numel) {
  return strformat("%016llx", static_cast<unsigned long long>(splitmix64(partial_sum ^ splitmix64(~uint64_t(numel)))));
}

std::string tensor_digest(const float* data, int64_t n) { return digest_finish(digest_partial(data, n, 0), n); }

int64_t StoredTensor::numel() const { return numel_of(shape); }

std::string checkpoint_file_name(int64_t step) { return strformat("step_%08lld.h5", static_cast<long long>(step)); }

int64_t checkpoint_step_of(const std::string& name) {
  if (name.size() != 16 || !starts_with(name, "step_") || !ends_with(name, ".h5")) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < 13; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

void fsync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw IoError(path + ": cannot open to fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError(path + ": fsync failed: " + std::strerror(err));
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw IoError(dir + ": cannot open directory to fsync: " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some file systems do not support fsync on directories (EINVAL); the rename is still atomic there.
  if (rc != 0 && err != EINVAL) throw IoError(dir + ": directory fsync failed: " + std::strerror(err));
}

void write_file_atomic(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = (fs::path(dir) / name).string(), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw IoError(tmp + ": cannot write");
  }
  fsync_file(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw IoError(path + ": rename failed: " + std::strerror(errno));
  fsync_dir(dir);
}

double write_checkpoint_file(const std::string& path, MPI_Comm comm, CheckpointWriteMode mode, int64_t step,
                             const std::vector<AttrGroup>& groups, const std::vector<TensorPiece>& tensors,
                             const std::vector<int64_t>& rank_seeds) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  h5::silence_errors();
  const double t0 = sys::now_s();
  bool ok = true;
  std::string err;
  // Room for the seal (kCheckpointSealBytes, written by rank 0 once the file is closed).
  h5::Handle fcpl(H5Pcreate(H5P_FILE_CREATE));
  check(H5Pset_userblock(fcpl, kCheckpointSealBytes), path, "H5Pset_userblock failed");
  if (mode == CheckpointWriteMode::kGathered) {
    if (rank == 0) {
      try {
        h5::Handle f(check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, H5P_DEFAULT), path, "cannot create"));
        write_body(f, path, false, comm, step, groups, tensors, rank_seeds);
        f.reset();
        seal_checkpoint_file(path);
        fsync_file(path);
      } catch (const std::exception& e) {
        ok = false;
        err = e.what();
      }
    }
  } else {
    try {
      h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
      check(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), path, "H5Pset_fapl_mpio failed");
      H5Pset_all_coll_metadata_ops(fapl, 1);
      H5Pset_coll_metadata_write(fapl, 1);
      h5::Handle f(check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl), path,
                            "cannot create (MPI-IO driver)"));
      write_body(f, path, true, comm, step, groups, tensors, rank_seeds);
      f.reset();  // collective close
    } catch (const std::exception& e) {
      ok = false;
      err = e.what();
    }
    MPI_Barrier(comm);
    if (ok && rank == 0) {
      try {
        seal_checkpoint_file(path);
        fsync_file(path);
      } catch (const std::exception& e) {
        ok = false;
        err = e.what();
      }
    }
  }
  agree(comm, ok, err);
  double dt = sys::now_s() - t0;
  MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm);
  return dt;
}

CheckpointWriteResult save_checkpoint(const std::string& dir, int64_t step, MPI_Comm comm, CheckpointWriteMode mode,
                                      const std::vector<AttrGroup>& groups, const std::vector<TensorPiece>& tensors,
                                      const std::vector<int64_t>& rank_seeds, int keep_last,
                                      const std::function<void()>& before_commit) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  CheckpointWriteResult res;
  const std::string name = checkpoint_file_name(step);
  res.path = (fs::path(dir) / name).string();
  const std::string tmp = res.path + ".tmp";
  for (const auto& t : tensors) res.bytes += numel_of(t.shape) * 4;

  bool ok = true;
  std::string err;
  if (rank == 0) {
    try {
      fs::create_directories(dir);
      fs::remove(tmp);
    } catch (const std::exception& e) {
      ok = false;
      err = dir + ": " + e.what();
    }
  }
  agree(comm, ok, err);
  try {
    res.write_s = write_checkpoint_file(tmp, comm, mode, step, groups, tensors, rank_seeds);
  } catch (const IoError&) {
    // Every rank has closed its part (the write ends with a collective status check). The unfinished file
    // is worth nothing and holds space the next run needs (a full disk is the usual reason to be here).
    if (rank == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
  if (before_commit) before_commit();

  // Every rank has closed its part (write_checkpoint_file ends with a collective status check).
  const double c0 = sys::now_s();
  if (rank == 0) {
    try {
      if (std::rename(tmp.c_str(), res.path.c_str()) != 0)
        throw IoError(res.path + ": rename from .tmp failed: " + std::strerror(errno));
      fsync_dir(dir);
      write_file_atomic(dir, kCheckpointLatest, name + "\n");
      // Older complete checkpoints beyond keep_last, then leftovers of interrupted writes.
      if (keep_last > 0) {
        int kept = 1;  // the new one
        for (const auto& p : list_checkpoints(dir)) {
          const int64_t s = checkpoint_step_of(fs::path(p).filename().string());
          if (s >= step) continue;
          // A sealed file is complete (the seal is written after the complete marker and the close); its
          // size agreeing with the seal is enough here, without reading it all or opening it with libhdf5.
          const CheckpointSeal seal = check_checkpoint_seal(p, /*with_hash=*/false);
          if (seal.state == CheckpointSeal::kDamaged) continue;
          if (seal.state == CheckpointSeal::kUnsealed && !probe_checkpoint(p).complete) continue;
          if (kept < keep_last) {
            ++kept;
            continue;
          }
          fs::remove(p);
          res.pruned.push_back(p);
        }
      }
      for (const auto& e : fs::directory_iterator(dir)) {
        const std::string f = e.path().filename().string();
        if (ends_with(f, ".h5.tmp") && checkpoint_step_of(f.substr(0, f.size() - 4)) >= 0) fs::remove(e.path());
      }
      fsync_dir(dir);
    } catch (const std::exception& e) {
      ok = false;
      err = e.what();
    }
  }
  agree(comm, ok, err);
  res.commit_s = sys::now_s() - c0;
  return res;
}

CheckpointProbe probe_checkpoint(const std::string& path) {
  CheckpointProbe p;
  p.path = path;
  h5::silence_errors();
  if (!fs::is_regular_file(path)) {
    p.problem = "missing";
    return p;
  }
  const CheckpointSeal seal = check_checkpoint_seal(path, /*with_hash=*/true);
  if (seal.state == CheckpointSeal::kDamaged) {
    p.problem = seal.problem;
    return p;
  }
  p.sealed = seal.state == CheckpointSeal::kSealed;
  p.seal_hash = seal.stored_hash;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    p.problem = "not an HDF5 file";
    return p;
  }
  h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.valid()) {
    std::string detail = h5::last_error();
    p.problem = "unreadable" + (detail.empty() ? std::string() : " (" + detail + ")");
    return p;
  }
  try {
    if (!h5::has_attr(f, kCkptAttrFormat) || h5::read_attr_string(f, kCkptAttrFormat) != kCheckpointFormat) {
      p.problem = "not a lorabench checkpoint";
      return p;
    }
    if (h5::has_attr(f, kCkptAttrStep)) p.step = h5::read_attr_int(f, kCkptAttrStep);
    if (!h5::has_attr(f, kCkptAttrComplete) || h5::read_attr_int(f, kCkptAttrComplete) != 1) {
      p.problem = "no complete marker (the write did not finish)";
      return p;
    }
  } catch (const std::exception& e) {
    p.problem = e.what();
    return p;
  }
  p.complete = true;
  return p;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = checkpoint_step_of(e.path().filename().string());
    if (s >= 0) found.emplace_back(s, e.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [s, p] : found) out.push_back(p);
  return out;
}

std::string read_latest_pointer(const std::string& dir) {
  std::ifstream in((fs::path(dir) / kCheckpointLatest).string());
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return trim(line);
}

const AttrGroup* CheckpointContents::group(const std::string& name) const {
  for (const auto& g : groups)
    if (g.name == name) return &g;
  return nullptr;
}

const StoredTensor* CheckpointContents::tensor(const std::string& p) const {
  for (const auto& t : tensors)
    if (t.path == p) return &t;
  return nullptr;
}

namespace {
struct VisitState {
  std::vector<std::string> names;
};
herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<VisitState*>(out)->names.emplace_back(name);
  return 0;
}
}  // namespace

CheckpointReader::CheckpointReader(const std::string& path) {
  CheckpointProbe p = probe_checkpoint(path);
  if (!p.complete) fail(path, p.problem);
  CheckpointContents& c = contents_;
  c.path = path;
  c.step = p.step;
  c.sealed = p.sealed;
  c.seal_hash = p.seal_hash;
  file_ = check_id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path, "cannot open");
  try {
    const int64_t version = h5::read_attr_int(file_, kCkptAttrFormatVersion);
    if (version != kCheckpointFormatVersion)
      fail(path, "checkpoint format version " + std::to_string(version) + " (this build reads version " +
                     std::to_string(kCheckpointFormatVersion) + ")");
    VisitState vs;
    check(H5Lvisit(file_, H5_INDEX_NAME, H5_ITER_INC, collect_link, &vs), path, "cannot list the objects");
    std::sort(vs.names.begin(), vs.names.end());
    for (const auto& name : vs.names) {
      h5::Handle obj(check_id(H5Oopen(file_, name.c_str(), H5P_DEFAULT), path, "cannot open " + name));
      const H5I_type_t type = H5Iget_type(obj);
      if (type == H5I_GROUP) {
        if (name.find('/') == std::string::npos) c.groups.push_back({name, read_attrs(obj)});
        continue;
      }
      if (type != H5I_DATASET) continue;
      h5::Handle dtype(H5Dget_type(obj));
      h5::Handle space(H5Dget_space(obj));
      const int nd = H5Sget_simple_extent_ndims(space);
      std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 0)));
      if (nd > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
      if (name == "rng/rank_seeds") {
        if (dims.size() != 1) fail(path, "rng/rank_seeds is not a 1-d dataset");
        c.rank_seeds.resize(h5::stored_points(obj, name));
        if (!c.rank_seeds.empty())
          check(H5Dread(obj, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, c.rank_seeds.data()), path,
                "cannot read " + name);
        continue;
      }
      if (H5Tget_class(dtype) != H5T_FLOAT) continue;
      StoredTensor t;
      t.path = name;
      t.shape.assign(dims.begin(), dims.end());
      (void)h5::stored_points(obj, name);  // a shape larger than the data stored is a corrupt file
      if (!h5::has_attr(obj, kCkptAttrDigest)) fail(path, "tensor " + name + " has no digest attribute");
      t.digest = h5::read_attr_string(obj, kCkptAttrDigest);
      c.tensors.push_back(std::move(t));
    }
    if (c.group("state") == nullptr) fail(path, "no /state group");
  } catch (...) {
    H5Fclose(file_);
    throw;
  }
}

CheckpointReader::~CheckpointReader() {
  if (file_ >= 0) H5Fclose(file_);
}

void CheckpointReader::read(const StoredTensor& t, float* dst) const {
  const std::string& path = contents_.path;
  h5::Handle d(check_id(H5Dopen2(file_, t.path.c_str(), H5P_DEFAULT), path, "cannot open tensor " + t.path));
  check(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst), path, "cannot read tensor " + t.path);
  const std::string digest = tensor_digest(dst, t.numel());
  if (digest != t.digest)
    fail(path, "tensor " + t.path + ": digest " + digest + " differs from the stored " + t.digest + " (corrupt file)");
}

void CheckpointReader::verify_all() const {
  std::vector<float> scratch;
  for (const auto& t : contents_.tensors) {
    if (scratch.size() < size_t(t.numel())) scratch.resize(size_t(t.numel()));
    read(t, scratch.data());
  }
}

CheckpointContents read_checkpoint(const std::string& path, bool with_data) {
  CheckpointReader r(path);
  CheckpointContents c = r.contents();
  if (with_data)
    for (auto& t : c.tensors) {
      t.data.resize(size_t(t.numel()));
      r.read(t, t.data.data());
    }
  return c;
}

}  // namespace lorabench::io
