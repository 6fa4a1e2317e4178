// lorabench checkpoint: look into checkpoint files (docs/checkpoints.md).
//
//   lorabench checkpoint info FILE                  step, every attribute group (fingerprint fields, data
//                                                   cursor, ...), every tensor with its shape and digest
//   lorabench checkpoint verify A B [--rtol R]      compare group by group and tensor by tensor (digests,
//                                                   max abs / max rel difference); exit 0 when identical
//                                                   (or every tensor within R), 1 otherwise
//   lorabench checkpoint export-adapter FILE DIR    the LoRA adapter of a checkpoint in PEFT's format
//
// Rank 0 does the work (run it on one rank); an unreadable or corrupt file exits 2 with the reason.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/io/checkpoint.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/lora/adapter.hpp"

namespace lorabench::app {

namespace {

void print_checkpoint_help() {
  std::printf(
      "usage: lorabench checkpoint info FILE\n"
      "       lorabench checkpoint verify A B [--rtol R]\n"
      "       lorabench checkpoint export-adapter FILE DIR\n\n"
      "info    prints a checkpoint's step, attribute groups (state, schedule, optimizer, data cursor, rng,\n"
      "        fingerprint, writer) and every tensor with its shape and digest (digests are recomputed and\n"
      "        checked against the stored ones).\n"
      "verify  compares two checkpoints: attributes group by group (the writer group and the writing job's\n"
      "        geometry are shown, not compared) and every tensor: digests, max |a-b| and max |a-b| / max |b|.\n"
      "        Exit 0 when everything is identical (bitwise), or with --rtol R when every tensor's max rel\n"
      "        difference is <= R and the attributes agree; exit 1 otherwise; 2 when a file is unusable.\n"
      "export-adapter  writes the checkpoint's LoRA adapter to DIR in PEFT's format (adapter_model.safetensors,\n"
      "        adapter_config.json), as a run writes outputs/<run>/adapter/ at its end: the adapter of a run that\n"
      "        was killed or stopped. DIR must not exist or be empty.\n"
      "docs/checkpoints.md describes the file layout.\n");
}

// Attributes that describe the writing job, not the training state: shown by verify, never compared.
bool informational(const std::string& group, const std::string& name) {
  if (group == "writer") return true;
  return group == "data" && (name == "world_size" || name == "micro_batch" || name == "grad_accum");
}

int info(const std::string& path) {
  io::CheckpointContents c = io::read_checkpoint(path, true);
  int64_t params = 0;
  for (const auto& t : c.tensors) params += t.numel();
  std::printf("checkpoint  %s\nformat      %s version %d, complete\nseal        %s\nstep        %lld\ntensors     "
              "%zu (%lld values, %s), digests verified\n",
              path.c_str(), io::kCheckpointFormat, io::kCheckpointFormatVersion,
              c.sealed ? ("hash " + c.seal_hash + " verified").c_str()
                       : "none (written before seals: its HDF5 metadata was not checked before reading)",
              (long long)c.step, c.tensors.size(), (long long)params, format_bytes(double(params) * 4).c_str());
  for (const auto& g : c.groups) {
    if (g.attrs.empty()) continue;
    std::printf("\n[%s]\n", g.name.c_str());
    for (const auto& [k, v] : g.attrs) std::printf("  %-24s %s\n", k.c_str(), io::attr_text(v).c_str());
  }
  std::vector<std::string> seeds;
  for (int64_t s : c.rank_seeds) seeds.push_back(std::to_string(s));
  std::printf("\n[rng/rank_seeds]\n  %s\n", join(seeds, ",").c_str());
  std::printf("\n[tensors]\n");
  size_t w = 0;
  for (const auto& t : c.tensors) w = std::max(w, t.path.size());
  for (const auto& t : c.tensors)
    std::printf("  %-*s  %-14s %s\n", int(w), t.path.c_str(), io::shape_string(t.shape).c_str(), t.digest.c_str());
  return 0;
}

// Attributes, group by group (printed); returns the differences that count.
int compare_attributes(const io::CheckpointContents& a, const io::CheckpointContents& b) {
  int differences = 0;
  std::set<std::string> names;
  for (const auto& g : a.groups) names.insert(g.name);
  for (const auto& g : b.groups) names.insert(g.name);
  std::printf("\n%-13s %-28s %-28s %-28s %s\n", "group", "attribute", "A", "B", "");
  for (const auto& gname : names) {
    const io::AttrGroup *ga = a.group(gname), *gb = b.group(gname);
    std::map<std::string, std::pair<std::string, std::string>> attrs;
    if (ga)
      for (const auto& [k, v] : ga->attrs) attrs[k].first = io::attr_text(v);
    if (gb)
      for (const auto& [k, v] : gb->attrs) attrs[k].second = io::attr_text(v);
    int same = 0;
    for (const auto& [k, v] : attrs) {
      const bool info_only = informational(gname, k);
      if (v.first == v.second) {
        ++same;
        continue;
      }
      if (!info_only) ++differences;
      std::printf("%-13s %-28s %-28s %-28s %s\n", gname.c_str(), k.c_str(), v.first.c_str(), v.second.c_str(),
                  info_only ? "(not compared)" : "DIFFERS");
    }
    if (!attrs.empty()) std::printf("%-13s %d of %zu attributes equal\n", gname.c_str(), same, attrs.size());
  }
  return differences;
}

// Tensors (printed, and summarised per parent path); returns the differences beyond rtol (< 0: any).
int compare_tensors(const io::CheckpointContents& a, const io::CheckpointContents& b, double rtol) {
  int differences = 0;
  std::map<std::string, const io::StoredTensor*> ta, tb;
  for (const auto& t : a.tensors) ta[t.path] = &t;
  for (const auto& t : b.tensors) tb[t.path] = &t;
  std::set<std::string> paths;
  for (const auto& [p, t] : ta) paths.insert(p);
  for (const auto& [p, t] : tb) paths.insert(p);
  size_t w = 6;
  for (const auto& p : paths) w = std::max(w, p.size());
  std::printf("\n%-*s  %-14s %-16s %-16s %-11s %-11s %s\n", int(w), "tensor", "shape", "digest A", "digest B",
              "max_abs", "max_rel", "");
  struct GroupStats {
    int tensors = 0, identical = 0;
    double max_abs = 0, max_rel = 0;
  };
  std::map<std::string, GroupStats> per_group;
  for (const auto& p : paths) {
    const std::string group = p.substr(0, p.rfind('/'));
    GroupStats& gs = per_group[group];
    ++gs.tensors;
    auto ia = ta.find(p), ib = tb.find(p);
    if (ia == ta.end() || ib == tb.end()) {
      ++differences;
      std::printf("%-*s  only in %s\n", int(w), p.c_str(), ia == ta.end() ? "B" : "A");
      continue;
    }
    const io::StoredTensor &x = *ia->second, &y = *ib->second;
    if (x.shape != y.shape) {
      ++differences;
      std::printf("%-*s  shape %s vs %s\n", int(w), p.c_str(), io::shape_string(x.shape).c_str(),
                  io::shape_string(y.shape).c_str());
      continue;
    }
    double max_abs = 0, scale = 0;
    for (size_t i = 0; i < x.data.size(); ++i) {
      max_abs = std::max(max_abs, std::abs(double(x.data[i]) - double(y.data[i])));
      scale = std::max(scale, std::abs(double(y.data[i])));
    }
    const double max_rel = max_abs == 0 ? 0.0 : scale > 0 ? max_abs / scale : INFINITY;
    const bool identical = x.digest == y.digest;
    const char* verdict = identical ? "identical" : (rtol >= 0 && max_rel <= rtol) ? "within rtol" : "DIFFERS";
    if (!identical && !(rtol >= 0 && max_rel <= rtol)) ++differences;
    gs.identical += identical ? 1 : 0;
    gs.max_abs = std::max(gs.max_abs, max_abs);
    gs.max_rel = std::max(gs.max_rel, max_rel);
    std::printf("%-*s  %-14s %-16s %-16s %-11.3e %-11.3e %s\n", int(w), p.c_str(), io::shape_string(x.shape).c_str(),
                x.digest.c_str(), y.digest.c_str(), max_abs, max_rel, verdict);
  }
  std::printf("\n");
  for (const auto& [g, s] : per_group)
    std::printf("%-24s %4d tensors, %4d identical, max_abs %.3e, max_rel %.3e\n", g.c_str(), s.tensors, s.identical,
                s.max_abs, s.max_rel);
  return differences;
}

int verify(const std::string& pa, const std::string& pb, double rtol) {
  const io::CheckpointContents a = io::read_checkpoint(pa, true), b = io::read_checkpoint(pb, true);
  std::printf("A  %s (step %lld)\nB  %s (step %lld)\n", pa.c_str(), (long long)a.step, pb.c_str(), (long long)b.step);
  const int differences = compare_attributes(a, b) + compare_tensors(a, b, rtol);
  std::printf("%s\n", differences == 0 ? (rtol >= 0 ? "verdict: equal (within rtol)" : "verdict: identical")
                                       : strformat("verdict: %d difference(s)", differences).c_str());
  return differences == 0 ? 0 : 1;
}

}  // namespace

// The attribute KEY of group GROUP as text; IoError naming the file when it is missing.
std::string attr_of(const io::CheckpointContents& c, const char* group, const std::string& key) {
  const io::AttrGroup* g = c.group(group);
  const io::AttrValue* v = g ? io::find_attr(g->attrs, key) : nullptr;
  if (v == nullptr) throw IoError(c.path + ": no attribute /" + group + "/" + key);
  return io::attr_text(*v);
}

int export_adapter(const std::string& path, const std::string& dir) {
  const io::CheckpointContents c = io::read_checkpoint(path, true);  // digests checked
  if (attr_of(c, "fingerprint", "lora.enabled") != "true")
    throw IoError(path + ": written by a full fine-tuning run (lora.enabled = false): it holds no adapter");
  lora::AdapterConfig a;
  try {
    a.r = std::stoi(attr_of(c, "fingerprint", "lora.r"));
    a.alpha = std::stod(attr_of(c, "fingerprint", "lora.alpha"));
    a.dropout = std::stod(attr_of(c, "lora", "dropout"));
  } catch (const std::logic_error&) {
    throw IoError(path + ": /fingerprint lora.r, lora.alpha or /lora dropout is not a number");
  }
  a.rslora = attr_of(c, "fingerprint", "lora.rslora") == "true";
  a.targets = split(attr_of(c, "fingerprint", "lora.targets"), ',');
  // Older checkpoints have no /writer/base_model: the preset of a random init, else the snapshot is unknown.
  const io::AttrGroup* w = c.group("writer");
  if (const io::AttrValue* b = w ? io::find_attr(w->attrs, "base_model") : nullptr) {
    a.base_model = io::attr_text(*b);
  } else {
    const std::string src = attr_of(c, "fingerprint", "model.source");
    a.base_model = starts_with(src, "preset ") ? src.substr(7) : "";
  }
  std::vector<io::TensorToWrite> tensors;
  for (const auto& t : c.tensors)
    if (starts_with(t.path, "trainable/")) tensors.push_back({t.path.substr(10), "F32", t.shape, t.data.data()});
  if (tensors.empty()) throw IoError(path + ": no trainable tensors");
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec))
    throw IoError(dir + " exists and is not empty (an adapter is never overwritten: choose another directory)");
  std::filesystem::create_directories(dir);
  io::write_safetensors((std::filesystem::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  lora::write_adapter_config(dir, a);
  std::printf("adapter %s: step %lld of %s, %zu tensors, r %d, alpha %g, targets %s, base %s\n", dir.c_str(),
              (long long)c.step, path.c_str(), tensors.size(), a.r, a.alpha, join(a.targets, ",").c_str(),
              a.base_model.empty() ? "(unknown)" : a.base_model.c_str());
  return 0;
}

int checkpoint_main(MpiSession& mpi, int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    if (mpi.rank() == 0) print_checkpoint_help();
    return args.empty() ? 2 : 0;
  }
  double rtol = -1;
  std::vector<std::string> pos;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--rtol" && i + 1 < args.size()) {
      char* end = nullptr;
      rtol = std::strtod(args[i + 1].c_str(), &end);
      if (*end != '\0' || !(rtol >= 0)) throw ConfigError("checkpoint verify: --rtol expects a number >= 0");
      ++i;
    } else if (starts_with(args[i], "-")) {
      throw ConfigError("checkpoint: unknown option " + args[i] + " (lorabench checkpoint --help)");
    } else {
      pos.push_back(args[i]);
    }
  }
  const std::string& cmd = args[0];
  const bool usage_ok = (cmd == "info" && pos.size() == 1 && rtol < 0) || (cmd == "verify" && pos.size() == 2) ||
                        (cmd == "export-adapter" && pos.size() == 2 && rtol < 0);
  if (!usage_ok)
    throw ConfigError("checkpoint: usage: lorabench checkpoint info FILE | verify A B [--rtol R] | "
                      "export-adapter FILE DIR");
  int rc = 0;
  if (mpi.rank() == 0) {
    try {
      rc = cmd == "info" ? info(pos[0]) : cmd == "verify" ? verify(pos[0], pos[1], rtol) : export_adapter(pos[0], pos[1]);
    } catch (const IoError& e) {
      std::fprintf(stderr, "lorabench checkpoint: %s\n", e.what());
      rc = 2;
    }
    std::fflush(stdout);
  }
  MPI_Bcast(&rc, 1, MPI_INT, 0, mpi.world());
  return rc;
}

}  // namespace lorabench::app
