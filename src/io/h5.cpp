#include "lorabench/io/h5.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::h5 {

namespace {

std::string object_name(hid_t obj) {
  ssize_t n = H5Iget_name(obj, nullptr, 0);
  if (n <= 0) return "?";
  std::string s(static_cast<size_t>(n), '\0');
  H5Iget_name(obj, s.data(), static_cast<size_t>(n) + 1);
  return s;
}

[[noreturn]] void fail(hid_t obj, const std::string& what) {
  // A failed system call (a full disk, an I/O error) is named; HDF5's own texts stay out of the message.
  // Read before the names: every HDF5 call clears the error stack.
  const std::string why = last_error();
  std::string where = obj >= 0 ? file_name(obj) + ":" + object_name(obj) : std::string("hdf5");
  const bool os = why.find("(errno ") != std::string::npos;
  throw IoError(where + ": " + what + (os ? " (" + why + ")" : ""));
}

herr_t innermost(unsigned, const H5E_error2_t* e, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (e->desc && *e->desc) *s = e->desc;  // the last one walked (H5E_WALK_DOWNWARD) is the innermost
  return 0;
}

hid_t check(hid_t id, hid_t obj, const std::string& what) {
  if (id < 0) fail(obj, what);
  return id;
}

void check_status(herr_t st, hid_t obj, const std::string& what) {
  if (st < 0) fail(obj, what);
}

Handle string_type() {
  Handle t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

void remove_attr_if_present(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
}

void write_scalar_attr(hid_t obj, const std::string& name, hid_t type, const void* value) {
  remove_attr_if_present(obj, name);
  Handle space(H5Screate(H5S_SCALAR));
  Handle a(check(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), obj,
                 "cannot create attribute " + name));
  check_status(H5Awrite(a, type, value), obj, "cannot write attribute " + name);
}

template <class T>
void write_vector_attr(hid_t obj, const std::string& name, hid_t type, const std::vector<T>& v) {
  remove_attr_if_present(obj, name);
  hsize_t n = v.size();
  Handle space(n == 0 ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr));
  Handle a(check(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), obj,
                 "cannot create attribute " + name));
  if (n) check_status(H5Awrite(a, type, v.data()), obj, "cannot write attribute " + name);
}

Handle open_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) fail(obj, "missing attribute \"" + name + "\"");
  return Handle(check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), obj, "cannot open attribute " + name));
}

}  // namespace

namespace {

// The POSIX descriptor of a file that libhdf5 holds open for writing with its POSIX (sec2) driver; -1
// for files opened read-only and for other drivers (MPI-IO, whose close is collective).
int writable_posix_fd(hid_t file) {
  unsigned intent = 0;
  if (H5Fget_intent(file, &intent) < 0 || !(intent & H5F_ACC_RDWR)) return -1;
  Handle fapl(H5Fget_access_plist(file));
  if (!fapl.valid() || H5Pget_driver(fapl) != H5FD_SEC2) return -1;
  int* fd = nullptr;
  if (H5Fget_vfd_handle(file, fapl, reinterpret_cast<void**>(&fd)) < 0 || fd == nullptr) return -1;
  return *fd;
}

// Allocates the disk blocks of the file's whole address space (libhdf5 places every object before it
// writes it, so its flush writes inside that space): after this a flush cannot fail for want of space.
// 0, or the errno of the refusal; file systems without fallocate (EOPNOTSUPP) are not checked.
int reserve_file_space(hid_t file, int fd) {
  hsize_t size = 0;
  if (H5Fget_filesize(file, &size) < 0 || size == 0) return 0;
  if (fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0) return 0;
  return errno == EOPNOTSUPP || errno == ENOSYS ? 0 : errno;
}

// The file whose close failed (close_library then leaves libhdf5 alone), "" while there is none.
std::string g_unclosable;  // NOLINT: one per process, like libhdf5's own state

}  // namespace

std::string reserve_for_flush(hid_t file) {
  const int fd = writable_posix_fd(file);
  if (fd < 0) return "";
  const int err = reserve_file_space(file, fd);
  if (err == 0) return "";
  return strformat("cannot reserve the file's space: %s (errno %d)", std::strerror(err), err);
}

// A flush that fails leaves libhdf5 1.10's metadata cache unable to flush again: H5Fclose then fails,
// frees the file's state and yet keeps its ID, and closing that ID again (libhdf5's own shutdown does)
// crashes on the freed state. So a writable POSIX file is closed once its space is reserved; where that is
// refused (a full disk, a quota), its descriptor is first pointed at an empty in-memory file, the close
// writes there and libhdf5 releases everything, and the file on disk is abandoned unfinished (the caller
// has reported the failure; a checkpoint's .tmp is deleted). A close that fails all the same (a device
// that fails writes) is remembered, and close_library() then leaves libhdf5 to the end of the process.
void Handle::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {
    case H5I_FILE: {
      const std::string name = file_name(id_);
      if (const int fd = writable_posix_fd(id_); fd >= 0 && reserve_file_space(id_, fd) != 0) {
        const int scratch = memfd_create("lorabench-abandoned-hdf5", MFD_CLOEXEC);
        if (scratch >= 0) {
          dup2(scratch, fd);
          close(scratch);
        }
      }
      if (H5Fclose(id_) < 0) g_unclosable = name;
      break;
    }
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    case H5I_GENPROP_LST: H5Pclose(id_); break;
    default: break;
  }
  id_ = H5I_INVALID_HID;
}

void open_library() {
  H5dont_atexit();
  H5open();
}

void close_library() {
  if (!g_unclosable.empty()) {
    std::fprintf(stderr, "lorabench: %s could not be closed (its last flush failed); libhdf5 is left to the end of "
                 "the process\n", g_unclosable.c_str());
    return;
  }
  H5close();
}

void silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string last_error() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, innermost, &s);
  // The sec2 driver's "file write failed: time = ..., errno = 28, error message = 'No space left on
  // device', buf = ..." (and "file read failed: ..."): keep the operation and the system's reason.
  const auto e = s.find("errno = ");
  const auto m = s.find("error message = '");
  if (e != std::string::npos && m != std::string::npos) {
    const auto start = m + 17;
    const auto end = s.find('\'', start);
    const std::string op = s.substr(0, s.find(':'));  // "file write failed"
    const int err = std::atoi(s.c_str() + e + 8);
    return op + ": " + s.substr(start, end == std::string::npos ? std::string::npos : end - start) +
           strformat(" (errno %d)", err);
  }
  return s;
}

std::string file_name(hid_t obj) {
  ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n <= 0) return "?";
  std::string s(static_cast<size_t>(n), '\0');
  H5Fget_name(obj, s.data(), static_cast<size_t>(n) + 1);
  return s;
}

Handle create_exclusive(const std::string& path) {
  silence_errors();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw IoError(path + ": cannot create (it exists, or the directory is not writable)");
  return Handle(f);
}

Handle create_truncate(const std::string& path) {
  silence_errors();
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw IoError(path + ": cannot create");
  return Handle(f);
}

Handle open_read(const std::string& path) {
  silence_errors();
  htri_t is = H5Fis_hdf5(path.c_str());
  if (is <= 0) throw IoError(path + ": missing, unreadable or not an HDF5 file");
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw IoError(path + ": cannot open as HDF5");
  return Handle(f);
}

Handle open_rw(const std::string& path) {
  silence_errors();
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) throw IoError(path + ": cannot open for writing");
  return Handle(f);
}

void flush(hid_t file) {
  if (const std::string why = reserve_for_flush(file); !why.empty())
    throw IoError(file_name(file) + ": flush failed (" + why + ")");
  check_status(H5Fflush(file, H5F_SCOPE_GLOBAL), file, "flush failed");
}

Handle create_group(hid_t loc, const std::string& name) {
  return Handle(check(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), loc,
                      "cannot create group " + name));
}

bool exists(hid_t loc, const std::string& path) {
  std::string prefix;
  for (const auto& part : split(path, '/')) {
    if (part.empty()) continue;
    prefix += (prefix.empty() ? "" : "/") + part;
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

Handle open_group(hid_t loc, const std::string& name) {
  if (!exists(loc, name)) fail(loc, "no group \"" + name + "\"");
  return Handle(check(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), loc, "cannot open group " + name));
}

Handle require_group(hid_t loc, const std::string& name) {
  return exists(loc, name) ? open_group(loc, name) : create_group(loc, name);
}

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle t = string_type();
  const char* p = value.c_str();
  write_scalar_attr(obj, name, t, &p);
}
void write_attr(hid_t obj, const std::string& name, const char* value) { write_attr(obj, name, std::string(value)); }
void write_attr(hid_t obj, const std::string& name, int64_t value) {
  write_scalar_attr(obj, name, H5T_NATIVE_INT64, &value);
}
void write_attr(hid_t obj, const std::string& name, int value) { write_attr(obj, name, static_cast<int64_t>(value)); }
void write_attr(hid_t obj, const std::string& name, double value) {
  write_scalar_attr(obj, name, H5T_NATIVE_DOUBLE, &value);
}
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values) {
  write_vector_attr(obj, name, H5T_NATIVE_INT64, values);
}
void write_attr(hid_t obj, const std::string& name, const std::vector<double>& values) {
  write_vector_attr(obj, name, H5T_NATIVE_DOUBLE, values);
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::string read_attr_string(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  Handle ftype(H5Aget_type(a));
  if (H5Tget_class(ftype) != H5T_STRING) fail(obj, "attribute \"" + name + "\" is not a string");
  if (H5Tis_variable_str(ftype) > 0) {
    Handle t = string_type();
    char* p = nullptr;
    check_status(H5Aread(a, t, &p), obj, "cannot read attribute " + name);
    std::string s = p ? p : "";
    if (p) H5free_memory(p);
    return s;
  }
  size_t n = H5Tget_size(ftype);
  std::string s(n, '\0');
  check_status(H5Aread(a, ftype, s.data()), obj, "cannot read attribute " + name);
  s.resize(strnlen(s.c_str(), n));
  return s;
}

int64_t read_attr_int(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  int64_t v = 0;
  check_status(H5Aread(a, H5T_NATIVE_INT64, &v), obj, "attribute \"" + name + "\" is not an integer");
  return v;
}

double read_attr_double(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  double v = 0;
  check_status(H5Aread(a, H5T_NATIVE_DOUBLE, &v), obj, "attribute \"" + name + "\" is not a number");
  return v;
}

std::vector<double> read_attr_doubles(hid_t obj, const std::string& name) {
  Handle a = open_attr(obj, name);
  Handle space(H5Aget_space(a));
  hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<double> v(static_cast<size_t>(n > 0 ? n : 0));
  if (n > 0) check_status(H5Aread(a, H5T_NATIVE_DOUBLE, v.data()), obj, "cannot read attribute " + name);
  return v;
}

std::vector<std::string> attr_names(hid_t obj) {
  std::vector<std::string> names;
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  H5Oget_info3(obj, &info, H5O_INFO_NUM_ATTRS);
#else
  H5Oget_info2(obj, &info, H5O_INFO_NUM_ATTRS);
#endif
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    ssize_t n = H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n <= 0) continue;
    std::string s(static_cast<size_t>(n), '\0');
    H5Aget_name_by_idx(obj, ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), static_cast<size_t>(n) + 1, H5P_DEFAULT);
    names.push_back(s);
  }
  return names;
}

std::map<std::string, std::string> read_attrs_as_text(hid_t obj) {
  std::map<std::string, std::string> out;
  for (const auto& name : attr_names(obj)) {
    Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
    Handle t(H5Aget_type(a));
    Handle space(H5Aget_space(a));
    H5T_class_t cls = H5Tget_class(t);
    hssize_t npts = H5Sget_simple_extent_npoints(space);
    if (cls == H5T_STRING) {
      out[name] = read_attr_string(obj, name);
    } else if (cls == H5T_INTEGER && npts == 1) {
      out[name] = std::to_string(read_attr_int(obj, name));
    } else if (cls == H5T_FLOAT && npts == 1) {
      out[name] = strformat("%.17g", read_attr_double(obj, name));
    } else if ((cls == H5T_FLOAT || cls == H5T_INTEGER) && npts > 1) {
      std::vector<std::string> parts;
      for (double d : read_attr_doubles(obj, name)) parts.push_back(strformat("%.17g", d));
      out[name] = join(parts, ",");
    }
  }
  return out;
}

void write_string_dataset(hid_t loc, const std::string& name, const std::string& value) {
  Handle t = string_type();
  Handle space(H5Screate(H5S_SCALAR));
  Handle d(check(H5Dcreate2(loc, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), loc,
                 "cannot create dataset " + name));
  const char* p = value.c_str();
  check_status(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), loc, "cannot write dataset " + name);
}

std::string read_string_dataset(hid_t loc, const std::string& name) {
  if (!exists(loc, name)) fail(loc, "no dataset \"" + name + "\"");
  Handle d(check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), loc, "cannot open dataset " + name));
  Handle t = string_type();
  char* p = nullptr;
  check_status(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), loc, "cannot read dataset " + name);
  std::string s = p ? p : "";
  if (p) H5free_memory(p);
  return s;
}

void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values) {
  Handle t = string_type();
  hsize_t n = values.size();
  Handle space(H5Screate_simple(1, &n, nullptr));
  Handle d(check(H5Dcreate2(loc, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), loc,
                 "cannot create dataset " + name));
  std::vector<const char*> ptrs;
  for (const auto& v : values) ptrs.push_back(v.c_str());
  if (n) check_status(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), loc, "cannot write " + name);
}

hsize_t stored_points(hid_t dset, const std::string& name) {
  Handle space(H5Dget_space(dset));
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n < 0) fail(dset, "cannot read the shape of " + name);
  Handle type(H5Dget_type(dset));
  Handle dcpl(H5Dget_create_plist(dset));
  const long double need = static_cast<long double>(n) * static_cast<long double>(H5Tget_size(type));
  // Uncompressed data occupies its full size; with a filter (compression) only a generous bound holds.
  const bool filtered = dcpl.valid() && H5Pget_nfilters(dcpl) > 0;
  const long double have = filtered ? 1024.0L * static_cast<long double>(H5Dget_storage_size(dset)) + 65536.0L
                                    : static_cast<long double>(H5Dget_storage_size(dset));
  if (n > 0 && need > have)
    fail(dset, name + " claims " + std::to_string(n) + " elements but stores " +
                   std::to_string(H5Dget_storage_size(dset)) + " bytes (truncated or corrupt file)");
  return static_cast<hsize_t>(n);
}

std::vector<std::string> read_strings(hid_t loc, const std::string& name) {
  if (!exists(loc, name)) fail(loc, "no dataset \"" + name + "\"");
  Handle d(check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), loc, "cannot open dataset " + name));
  const hsize_t n = stored_points(d, name);
  std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
  Handle t = string_type();
  if (n > 0) check_status(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), loc, "cannot read " + name);
  std::vector<std::string> out;
  for (char* p : ptrs) {
    out.emplace_back(p ? p : "");
    if (p) H5free_memory(p);
  }
  return out;
}

void write_array(hid_t loc, const std::string& name, hid_t mem_type, const void* data, const std::vector<hsize_t>& dims,
                 hid_t file_type) {
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle d(check(H5Dcreate2(loc, name.c_str(), file_type >= 0 ? file_type : mem_type, space, H5P_DEFAULT,
                            H5P_DEFAULT, H5P_DEFAULT),
                 loc, "cannot create dataset " + name));
  check_status(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), loc, "cannot write dataset " + name);
}

std::vector<hsize_t> dataset_dims(hid_t loc, const std::string& name) {
  if (!exists(loc, name)) fail(loc, "no dataset \"" + name + "\"");
  Handle d(check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), loc, "cannot open dataset " + name));
  Handle space(H5Dget_space(d));
  int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<size_t>(nd > 0 ? nd : 0));
  if (nd > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

void read_array(hid_t loc, const std::string& name, hid_t mem_type, void* data) {
  if (!exists(loc, name)) fail(loc, "no dataset \"" + name + "\"");
  Handle d(check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), loc, "cannot open dataset " + name));
  check_status(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), loc, "cannot read dataset " + name);
}

Table Table::create(hid_t loc, const std::string& name, const std::vector<Column>& columns, hsize_t chunk_rows) {
  Table t;
  t.columns_ = columns;
  const size_t n = columns.size();
  t.mem_type_ = Handle(H5Tcreate(H5T_COMPOUND, n * sizeof(double)));
  Handle file_type(H5Tcreate(H5T_COMPOUND, n * 8));
  for (size_t i = 0; i < n; ++i) {
    H5Tinsert(t.mem_type_, columns[i].name.c_str(), i * sizeof(double), H5T_NATIVE_DOUBLE);
    H5Tinsert(file_type, columns[i].name.c_str(), i * 8, columns[i].integer ? H5T_STD_I64LE : H5T_IEEE_F64LE);
  }
  hsize_t zero = 0, unlimited = H5S_UNLIMITED;
  Handle space(H5Screate_simple(1, &zero, &unlimited));
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_chunk(dcpl, 1, &chunk_rows);
  t.dset_ = Handle(check(H5Dcreate2(loc, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), loc,
                         "cannot create table " + name));
  return t;
}

void Table::append(const std::vector<double>& row_major, size_t rows) {
  if (rows == 0) return;
  LB_CHECK(row_major.size() == rows * columns_.size(), "table row width mismatch");
  hsize_t new_size = rows_ + rows;
  check_status(H5Dset_extent(dset_, &new_size), dset_, "cannot extend table");
  Handle fspace(H5Dget_space(dset_));
  hsize_t start = rows_, count = rows;
  H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
  Handle mspace(H5Screate_simple(1, &count, nullptr));
  check_status(H5Dwrite(dset_, mem_type_, mspace, fspace, H5P_DEFAULT, row_major.data()), dset_,
               "cannot append rows");
  rows_ = new_size;
}

std::map<std::string, std::vector<double>> read_table(hid_t loc, const std::string& name) {
  if (!exists(loc, name)) fail(loc, "no table \"" + name + "\"");
  Handle d(check(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), loc, "cannot open table " + name));
  Handle ftype(H5Dget_type(d));
  if (H5Tget_class(ftype) != H5T_COMPOUND) fail(loc, "\"" + name + "\" is not a table");
  int n = H5Tget_nmembers(ftype);
  const hsize_t rows = stored_points(d, name);
  std::map<std::string, std::vector<double>> out;
  for (int i = 0; i < n; ++i) {
    char* cname = H5Tget_member_name(ftype, static_cast<unsigned>(i));
    std::string col = cname;
    H5free_memory(cname);
    Handle mt(H5Tcreate(H5T_COMPOUND, sizeof(double)));
    H5Tinsert(mt, col.c_str(), 0, H5T_NATIVE_DOUBLE);
    std::vector<double> v(static_cast<size_t>(rows));
    if (rows > 0) check_status(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), loc, "cannot read " + col);
    out[col] = std::move(v);
  }
  return out;
}

}  // namespace lorabench::h5
