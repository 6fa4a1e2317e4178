// Thin RAII over the HDF5 C API: every hid_t has an owner, every call is checked (IoError naming the
// file and the object), and the few shapes lorabench writes (string/number attributes, string datasets,
// numeric arrays, extendible compound tables) have one helper each. Torch-free.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lorabench::h5 {

// Owns one hid_t of any kind (file, group, dataset, dataspace, datatype, property list, attribute).
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: handles pass straight into the C API
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// libhdf5's lifetime in a program that runs MPI. open_library(), called before MPI_Init, starts libhdf5
// with no shutdown of its own (parallel libhdf5 started after MPI_Init would shut down inside
// MPI_Finalize, and at exit); close_library(), called before MPI_Finalize, shuts it down, closing what is
// still open. A file whose close failed (a flush that failed on a full disk or a failing device:
// libhdf5 1.10 then keeps the file's ID over freed state, and closing it again crashes) is left to the
// end of the process instead: close_library() then does nothing, and says why on stderr.
void open_library();
void close_library();

// Turns off HDF5's automatic error stack printing (our exceptions carry the context). Idempotent.
void silence_errors();
// The innermost message of this thread's HDF5 error stack, "" when it is empty. A failed system call
// becomes its reason: "write failed: No space left on device (errno 28)" instead of HDF5's text with
// timestamps, descriptors and buffer addresses.
std::string last_error();

// Files, opened by one process with the default driver. create_exclusive fails (IoError) when the
// file exists.
Handle create_exclusive(const std::string& path);
Handle create_truncate(const std::string& path);
Handle open_read(const std::string& path);
Handle open_rw(const std::string& path);
void flush(hid_t file);  // reserve_for_flush, then H5Fflush; IoError naming the file and the reason
// Before a flush of a file written through libhdf5's POSIX driver: allocates its space, so that the flush
// cannot fail for want of it (a failed flush leaves libhdf5 1.10 unable to close the file). "" when done
// or not needed (read-only, other drivers), else the reason with its errno.
std::string reserve_for_flush(hid_t file);

// Groups: open_group throws IoError "<file>: no group <path>" when missing.
Handle create_group(hid_t loc, const std::string& name);
Handle open_group(hid_t loc, const std::string& name);
Handle require_group(hid_t loc, const std::string& name);  // open or create
bool exists(hid_t loc, const std::string& path);  // every component of a/b/c

// Attributes (scalar). write_* replace an existing attribute of the same name.
void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, const char* value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, int value);
void write_attr(hid_t obj, const std::string& name, double value);
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values);
void write_attr(hid_t obj, const std::string& name, const std::vector<double>& values);
bool has_attr(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name);
int64_t read_attr_int(hid_t obj, const std::string& name);
double read_attr_double(hid_t obj, const std::string& name);
std::vector<double> read_attr_doubles(hid_t obj, const std::string& name);
std::vector<std::string> attr_names(hid_t obj);
// Every scalar attribute as text (numbers printed with %.17g).
std::map<std::string, std::string> read_attrs_as_text(hid_t obj);

// Datasets.
void write_string_dataset(hid_t loc, const std::string& name, const std::string& value);
std::string read_string_dataset(hid_t loc, const std::string& name);
void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values);
std::vector<std::string> read_strings(hid_t loc, const std::string& name);

// A numeric N-d array (row-major) with `type` one of the H5T_NATIVE_* types.
void write_array(hid_t loc, const std::string& name, hid_t mem_type, const void* data, const std::vector<hsize_t>& dims,
                 hid_t file_type = -1);
std::vector<hsize_t> dataset_dims(hid_t loc, const std::string& name);
// The element count of an open dataset, after checking that the file stores that many (IoError naming the
// file and `name` when a truncated or crafted file claims more than it holds): what a reader may allocate.
hsize_t stored_points(hid_t dset, const std::string& name);
void read_array(hid_t loc, const std::string& name, hid_t mem_type, void* data);

// An extendible table of records (a 1-d compound dataset, chunked, unlimited rows). Every column is
// float64 in memory; columns marked integer are stored as int64 in the file.
struct Column {
  std::string name;
  bool integer = false;
};

class Table {
 public:
  // Creates `name` under `loc` with these columns.
  static Table create(hid_t loc, const std::string& name, const std::vector<Column>& columns, hsize_t chunk_rows = 256);
  void append(const std::vector<double>& row_major, size_t rows);
  size_t columns() const { return columns_.size(); }

 private:
  Handle dset_;
  Handle mem_type_;
  std::vector<Column> columns_;
  hsize_t rows_ = 0;
};

// Reads a compound table written by Table: every column as doubles, keyed by name.
std::map<std::string, std::vector<double>> read_table(hid_t loc, const std::string& name);

// The file name of an object, for messages.
std::string file_name(hid_t obj);

}  // namespace lorabench::h5
