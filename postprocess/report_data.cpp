#include "report_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/io/h5.hpp"
#include "lorabench/io/schema.hpp"

namespace fs = std::filesystem;

namespace lorabench::report {

namespace {

// Fields a completed run must have: without them no table can be built, so their absence is an error
// rather than "n/a" (docs/report.md, "Inputs").
const std::vector<const char*> kRequiredTrainSummary = {"strategy", "world_size", "micro_batch", "grad_accum",
                                                        "global_batch_size", "dtype", "step_time_mean_s",
                                                        "tokens_per_s_mean"};
const std::vector<const char*> kRequiredStepColumns = {"trial", "step", "rank", "loss", "step_s"};
const std::vector<const char*> kRequiredCommColumns = {"op", "dtype", "bytes", "time_avg_s", "algbw_GBps",
                                                       "busbw_GBps"};

[[noreturn]] void missing(const std::string& path, const std::string& what) {
  throw IoError(path + ": " + what + " (required in a completed run; is the file from another lorabench version?)");
}

std::string attr_or(const TextMap& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

void read_counters(RunRecord& r, hid_t file) {
  const std::string name = schema::kCounters;
  if (!h5::exists(file, name)) return;
  r.counters.cols = h5::read_table(file, name);
  h5::Handle d(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  if (d.valid() && h5::has_attr(d, "events")) {
    for (const auto& e : split(h5::read_attr_string(d, "events"), ','))
      if (!e.empty()) r.counters.events.push_back(e);
  }
  if (r.counters.events.empty()) {  // no attribute: every column that is not a key column, by name
    for (const auto& [col, v] : r.counters.cols)
      if (col != "trial" && col != "step" && col != "rank" && col != "phase" && col != "intervals")
        r.counters.events.push_back(col);
  }
  for (const auto& e : r.counters.events)
    if (!r.counters.cols.count(e))
      throw IoError(r.path + ": /metrics/counters lists event \"" + e + "\" but has no such column");
  for (const char* c : {"step", "rank", "phase"})
    if (!r.counters.cols.count(c)) throw IoError(r.path + ": /metrics/counters has no column \"" + c + "\"");
  r.has_counters = true;
}

// The fields the analysis uses as counts and indices (ranks, steps, world size, ...) must be what the
// writer stores there: non-negative integers of int range. A crafted or corrupt file is refused here,
// naming the field, instead of overflowing an int conversion in the analysis.
void check_counts(const RunRecord& r) {
  auto ok = [](double v) { return !std::isfinite(v) || (v >= 0 && v < 2147483648.0 && v == std::floor(v)); };
  auto bad = [&](const std::string& where, double v) {
    throw IoError(r.path + ": " + where + " is " + strformat("%.17g", v) + ", not a count (corrupt file?)");
  };
  for (const char* k : {"world_size", "trials", "measured_steps", "micro_batch", "grad_accum", "global_batch_size",
                        "warmup_steps", "steps"}) {
    if (!ok(num(r.summary, k))) bad(std::string("/metrics/summary ") + k, num(r.summary, k));
    if (!ok(num(r.provenance, k))) bad(std::string("/provenance ") + k, num(r.provenance, k));
  }
  for (const char* k : {"run.warmup_steps", "run.steps", "run.repeat", "train.micro_batch", "train.grad_accum"})
    if (!ok(num(r.config, k))) bad(std::string("/config ") + k, num(r.config, k));
  for (const auto* table : {&r.steps, &r.eval, &r.counters.cols, &r.comm_results})
    for (const char* c : {"trial", "step", "rank", "phase", "intervals", "world_size", "op", "dtype"}) {
      auto it = table->find(c);
      if (it == table->end()) continue;
      for (double v : it->second)
        if (!std::isfinite(v) || !ok(v)) bad(std::string("column \"") + c + "\"", v);
    }
}

}  // namespace

bool RunRecord::completed() const { return status == schema::kStatusCompleted; }
bool RunRecord::is_train() const { return kind == schema::kKindTrain; }
bool RunRecord::is_comm() const { return kind == schema::kKindComm; }

double num(const TextMap& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end() || it->second.empty()) return NAN;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  return end == it->second.c_str() ? NAN : v;
}

std::string text(const TextMap& m, const std::string& key) { return attr_or(m, key.c_str()); }

RunRecord load_run(const std::string& path, const std::string& display) {
  io::RunFileReader reader(path);  // checks program and schema version; the messages name `path`
  RunRecord r;
  r.path = display;
  const hid_t f = reader.file();
  r.root = reader.root();
  for (const char* a : {schema::kAttrKind, schema::kAttrStatus})
    if (!r.root.count(a)) throw IoError(display + ": no root attribute \"" + a + "\"");
  r.kind = r.root[schema::kAttrKind];
  r.name = attr_or(r.root, schema::kAttrRunName);
  if (r.name.empty()) r.name = fs::path(display).parent_path().filename().string();
  r.status = r.root[schema::kAttrStatus];
  r.status_message = attr_or(r.root, schema::kAttrStatusMessage);
  r.verdict = attr_or(r.root, schema::kAttrVerdict);
  if (!r.is_train() && !r.is_comm())
    throw IoError(display + ": unknown run kind \"" + r.kind + "\" (this build reads \"train\" and \"comm\")");

  const bool done = r.completed();
  if (h5::exists(f, schema::kConfig)) {
    r.config = reader.config();
  } else if (done) {
    missing(display, "no /config group");
  }
  if (h5::exists(f, schema::kProvenance)) r.provenance = reader.provenance();
  if (h5::exists(f, schema::kSummary)) r.summary = reader.summary();
  r.validation = reader.validation();

  if (r.is_train()) {
    if (h5::exists(f, schema::kSteps)) {
      r.steps = reader.steps();
      r.eval = reader.eval();
    } else if (done) {
      missing(display, "no /metrics/steps table");
    }
    if (done) {
      for (const char* k : kRequiredTrainSummary)
        if (!r.summary.count(k)) missing(display, std::string("no /metrics/summary attribute \"") + k + "\"");
      for (const char* c : kRequiredStepColumns)
        if (!r.steps.count(c)) missing(display, std::string("no column \"") + c + "\" in /metrics/steps");
    }
    read_counters(r, f);
  } else {
    if (h5::exists(f, schema::kCommResults)) {
      r.comm_results = h5::read_table(f, schema::kCommResults);
      if (h5::exists(f, schema::kCommOpNames)) r.op_names = h5::read_strings(f, schema::kCommOpNames);
      if (h5::exists(f, schema::kCommDtypeNames)) r.dtype_names = h5::read_strings(f, schema::kCommDtypeNames);
      if (h5::exists(f, schema::kCommCheckDetails)) r.check_details = h5::read_strings(f, schema::kCommCheckDetails);
      h5::Handle g = h5::open_group(f, schema::kComm);
      r.comm_attrs = h5::read_attrs_as_text(g);
    } else if (done) {
      missing(display, "no /comm/results table");
    }
    if (done) {
      for (const char* c : kRequiredCommColumns)
        if (!r.comm_results.count(c)) missing(display, std::string("no column \"") + c + "\" in /comm/results");
      if (r.op_names.empty()) missing(display, "no /comm/op_names");
    }
  }
  check_counts(r);
  return r;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& args, std::vector<std::string>* notes) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    fs::path canon = fs::weakly_canonical(p, ec);
    std::string key = ec ? p.lexically_normal().string() : canon.string();
    if (seen.insert(key).second) out.push_back(p.lexically_normal().string());
  };
  for (const auto& a : args) {
    fs::path p(a);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> hits;
      fs::recursive_directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end;
      if (ec) throw IoError(a + ": cannot list the directory: " + ec.message());
      for (; it != end; it.increment(ec)) {
        if (ec) throw IoError(a + ": cannot list the directory: " + ec.message());
        if (it->is_directory() && it->path().filename() == "checkpoints") {
          it.disable_recursion_pending();
          continue;
        }
        if (!it->is_regular_file() || it->path().extension() != ".h5") continue;
        if (it->path().filename() == "run.h5") {
          hits.push_back(it->path());
          continue;
        }
        // Another *.h5: taken only when it is a run file of kind comm.
        try {
          io::RunFileReader r(it->path().string());
          if (r.kind() == schema::kKindComm) {
            hits.push_back(it->path());
          } else if (notes) {
            notes->push_back(it->path().lexically_normal().string() + ": skipped (kind \"" + r.kind() +
                             "\" in a file not named run.h5)");
          }
        } catch (const Error& e) {
          if (notes) notes->push_back(it->path().lexically_normal().string() + ": skipped (" + e.what() + ")");
        }
      }
      if (hits.empty()) throw IoError(a + ": no run files (*/run.h5 or comm *.h5) below this directory");
      std::sort(hits.begin(), hits.end());
      for (const auto& h : hits) add(h);
    } else if (fs::exists(p, ec)) {
      add(p);
    } else {
      throw IoError(a + ": no such file or directory");
    }
  }
  return out;
}

}  // namespace lorabench::report
