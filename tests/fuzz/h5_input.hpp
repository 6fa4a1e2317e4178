// The input of the HDF5 targets (checkpoint, run file). Crafted or corrupt HDF5 files reach a reader in
// two ways, and the fuzz input is either:
//   - an HDF5 file's raw bytes (it starts with the HDF5 signature), only when LORABENCH_FUZZ_H5_RAW is
//     set: written to a temporary file as is. Off by default because mutated HDF5 metadata makes the
//     system's libhdf5 (1.10.8) itself hang or crash within seconds (docs/testing.md, "What the
//     campaigns found"): that is HDF5's parser, not lorabench's code, and it would stop every run there;
//   - an edit script (it starts with "EDIT\n"): a copy of the target's base file (a valid file written
//     by lorabench) is changed through the HDF5 API, one edit per line, so that the file stays valid
//     HDF5 and the reader's own logic is what gets exercised: missing, mistyped and extra attributes,
//     datasets of another type or a lying shape, links in odd places. Lines that do not parse, and edits
//     HDF5 refuses, are skipped.
//       rm PATH                       delete a link
//       rmattr OBJ NAME               delete an attribute
//       attr OBJ NAME TYPE VALUE      (re)write an attribute; TYPE s | i | d | iv | dv | u8 (iv/dv: 1,2,3)
//       dset PATH TYPE DIMS VALUE     (re)create a dataset; TYPE f32 | f64 | i64 | i32 | u8 | s | cmpd;
//                                     DIMS "-" (scalar) or 2x3; VALUE the fill number, the string, or for
//                                     cmpd the columns "a:i,b:d"; above 65536 elements nothing is written
//                                     (a file that lies about its size costs nothing to make)
//       group PATH                    create a group
//       hlink SRC DST / slink TARGET DST   a hard / soft link
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_common.hpp"

namespace lbfuzz {

namespace h5edit {

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

inline hid_t open_obj(hid_t file, const std::string& path) {
  if (path == "/" || path.empty()) return H5Oopen(file, "/", H5P_DEFAULT);
  return H5Oopen(file, path.c_str(), H5P_DEFAULT);
}

inline void write_attr(hid_t file, const std::string& obj, const std::string& name, const std::string& type,
                       const std::string& value) {
  hid_t o = open_obj(file, obj);
  if (o < 0) return;
  if (H5Aexists(o, name.c_str()) > 0) H5Adelete(o, name.c_str());
  hid_t space = -1, ftype = -1, a = -1;
  if (type == "s") {
    ftype = H5Tcopy(H5T_C_S1);
    H5Tset_size(ftype, value.empty() ? 1 : value.size());
    space = H5Screate(H5S_SCALAR);
    a = H5Acreate2(o, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT);
    std::string v = value.empty() ? std::string(1, '\0') : value;
    if (a >= 0) H5Awrite(a, ftype, v.data());
  } else if (type == "i" || type == "d" || type == "u8") {
    space = H5Screate(H5S_SCALAR);
    hid_t t = type == "i" ? H5T_NATIVE_INT64 : type == "d" ? H5T_NATIVE_DOUBLE : H5T_NATIVE_UINT8;
    a = H5Acreate2(o, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT);
    int64_t i = std::strtoll(value.c_str(), nullptr, 10);
    double d = std::strtod(value.c_str(), nullptr);
    uint8_t u = static_cast<uint8_t>(i);
    if (a >= 0) H5Awrite(a, t, type == "i" ? static_cast<const void*>(&i) : type == "d" ? static_cast<const void*>(&d) : &u);
  } else if (type == "iv" || type == "dv") {
    std::vector<int64_t> iv;
    std::vector<double> dv;
    for (const auto& x : split(value, ',')) {
      iv.push_back(std::strtoll(x.c_str(), nullptr, 10));
      dv.push_back(std::strtod(x.c_str(), nullptr));
    }
    hsize_t n = iv.size();
    space = H5Screate_simple(1, &n, nullptr);
    hid_t t = type == "iv" ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
    a = H5Acreate2(o, name.c_str(), t, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) H5Awrite(a, t, type == "iv" ? static_cast<const void*>(iv.data()) : dv.data());
  }
  if (a >= 0) H5Aclose(a);
  if (ftype >= 0) H5Tclose(ftype);
  if (space >= 0) H5Sclose(space);
  H5Oclose(o);
}

inline void make_dataset(hid_t file, const std::string& path, const std::string& type, const std::string& dims_text,
                         const std::string& value) {
  if (H5Lexists(file, path.c_str(), H5P_DEFAULT) > 0) H5Ldelete(file, path.c_str(), H5P_DEFAULT);
  std::vector<hsize_t> dims;
  if (dims_text != "-") {
    for (const auto& x : split(dims_text, 'x')) dims.push_back(std::strtoull(x.c_str(), nullptr, 10));
    if (dims.size() > 8) return;
  }
  long double n = 1;
  for (hsize_t d : dims) n *= static_cast<long double>(d);
  if (n > 4.0e18L) return;
  const bool write = n <= 65536;
  hid_t t = -1;
  bool own_type = false;
  if (type == "f32") t = H5T_NATIVE_FLOAT;
  else if (type == "f64") t = H5T_NATIVE_DOUBLE;
  else if (type == "i64") t = H5T_NATIVE_INT64;
  else if (type == "i32") t = H5T_NATIVE_INT32;
  else if (type == "u8") t = H5T_NATIVE_UINT8;
  if (type == "s") {
    t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    own_type = true;
  } else if (type == "cmpd") {
    const auto cols = split(value, ',');
    t = H5Tcreate(H5T_COMPOUND, 8 * cols.size());
    own_type = true;
    for (size_t i = 0; i < cols.size(); ++i) {
      const auto nt = split(cols[i], ':');
      H5Tinsert(t, nt[0].c_str(), 8 * i, nt.size() > 1 && nt[1] == "i" ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE);
    }
  }
  if (t < 0) return;
  hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (!write && !dims.empty()) {
    std::vector<hsize_t> chunk(dims.size(), 1);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  }
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t d = H5Dcreate2(file, path.c_str(), t, space, lcpl, dcpl, H5P_DEFAULT);
  if (d >= 0 && write && n > 0) {
    const size_t count = static_cast<size_t>(n);
    const size_t esize = H5Tget_size(t);
    std::vector<unsigned char> buf(count * esize, 0);
    if (type == "s") {
      std::vector<const char*> ptrs(count, value.c_str());
      H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data());
    } else {
      const double x = std::strtod(value.c_str(), nullptr);
      for (size_t i = 0; i < count; ++i) {
        unsigned char* p = buf.data() + i * esize;
        if (type == "f32") { float f = static_cast<float>(x); std::memcpy(p, &f, 4); }
        else if (type == "f64") std::memcpy(p, &x, 8);
        else if (type == "i64") { int64_t v = static_cast<int64_t>(std::strtoll(value.c_str(), nullptr, 10)); std::memcpy(p, &v, 8); }
        else if (type == "i32") { int32_t v = static_cast<int32_t>(std::strtol(value.c_str(), nullptr, 10)); std::memcpy(p, &v, 4); }
        else if (type == "u8") p[0] = static_cast<unsigned char>(i);
        else if (type == "cmpd") for (size_t k = 0; k + 8 <= esize; k += 8) std::memcpy(p + k, &x, 8);
      }
      H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    }
  }
  if (d >= 0) H5Dclose(d);
  H5Pclose(lcpl);
  H5Pclose(dcpl);
  H5Sclose(space);
  if (own_type) H5Tclose(t);
}

inline void apply(const std::string& path, const std::string& script) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) finding("cannot open the base file " + path);
  std::istringstream in(script);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string op, a, b, c;
    ls >> op >> a;
    if (a.empty()) continue;
    if (op == "rm") {
      H5Ldelete(f, a.c_str(), H5P_DEFAULT);
    } else if (op == "rmattr") {
      ls >> b;
      hid_t o = open_obj(f, a);
      if (o >= 0) {
        H5Adelete(o, b.c_str());
        H5Oclose(o);
      }
    } else if (op == "attr") {
      ls >> b >> c;
      std::string value;
      std::getline(ls >> std::ws, value);
      write_attr(f, a, b, c, value);
    } else if (op == "dset") {
      ls >> b >> c;
      std::string value;
      std::getline(ls >> std::ws, value);
      make_dataset(f, a, b, c, value);
    } else if (op == "group") {
      hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
      H5Pset_create_intermediate_group(lcpl, 1);
      hid_t g = H5Gcreate2(f, a.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT);
      if (g >= 0) H5Gclose(g);
      H5Pclose(lcpl);
    } else if (op == "hlink") {
      ls >> b;
      H5Lcreate_hard(f, a.c_str(), f, b.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    } else if (op == "slink") {
      ls >> b;
      H5Lcreate_soft(a.c_str(), f, b.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    }
  }
  H5Fclose(f);
}

}  // namespace h5edit

// What a target adds to the two forms above (the checkpoint target: its files carry a seal, docs/checkpoints.md
// "Integrity"):
//   after_edit  called on the file after an edit script (the checkpoint's: seal it again, so that the edits
//               reach the reader's logic behind the seal instead of stopping at it)
//   raw_prefix  raw bytes that start with it are written as they are, whatever LORABENCH_FUZZ_H5_RAW says
//               (a sealed checkpoint: the fuzzer's byte mutations of it must be reported as damage before
//               libhdf5 reads anything)
//   byte_edits  the form "BYTES\n" + lines "OFFSET VALUE" (decimals): the base file with those bytes set
//               (OFFSET modulo the file size), not sealed again; *changed says whether any byte differs
struct H5InputOptions {
  void (*after_edit)(const std::string& path) = nullptr;
  std::string raw_prefix;
  bool byte_edits = false;
};

// Turns the fuzz input into an HDF5 file named `name` in temp_dir() (see the file comment) and returns
// its path; "" when the input is neither form.
inline std::string h5_input(const std::string& name, const std::string& base_file, const uint8_t* data, size_t size,
                            const H5InputOptions& opt = {}, bool* changed = nullptr) {
  static const char kSignature[] = "\x89HDF\r\n\x1a\n";
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  static const bool raw = std::getenv("LORABENCH_FUZZ_H5_RAW") != nullptr;
  if (changed) *changed = false;
  if (raw && size >= 8 && std::memcmp(data, kSignature, 8) == 0) return write_input(name, data, size);
  if (!opt.raw_prefix.empty() && size >= opt.raw_prefix.size() &&
      std::memcmp(data, opt.raw_prefix.data(), opt.raw_prefix.size()) == 0)
    return write_input(name, data, size);
  const std::filesystem::path p = temp_dir() / name;
  if (size >= 5 && std::memcmp(data, "EDIT\n", 5) == 0) {
    std::filesystem::copy_file(base_file, p, std::filesystem::copy_options::overwrite_existing);
    h5edit::apply(p.string(), std::string(reinterpret_cast<const char*>(data) + 5, size - 5));
    if (opt.after_edit) opt.after_edit(p.string());
    return p.string();
  }
  if (opt.byte_edits && size >= 6 && std::memcmp(data, "BYTES\n", 6) == 0) {
    std::ifstream base(base_file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(base)), std::istreambuf_iterator<char>());
    if (bytes.empty()) finding("cannot read the base file " + base_file);
    const std::string original = bytes;
    std::istringstream in(std::string(reinterpret_cast<const char*>(data) + 6, size - 6));
    unsigned long long offset = 0, value = 0;
    while (in >> offset >> value) bytes[offset % bytes.size()] = static_cast<char>(value & 0xff);
    if (changed) *changed = bytes != original;
    return write_input(name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  return "";
}

}  // namespace lbfuzz
