// lorabench-report, part 1: finding run files and reading them into plain records. Torch-free (links
// lorabench_io, lorabench_metrics, lorabench_core only). What is read, and which fields are required, is
// in docs/report.md ("Inputs").
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "lorabench/io/run_file.hpp"

namespace lorabench::report {

using TextMap = std::map<std::string, std::string>;
using Columns = std::map<std::string, std::vector<double>>;

// The hardware counters of a training run, /metrics/counters (layout in docs/hdf5-schema.md, section
// "counters"): one row per (trial, step, rank, phase), one column per counted event.
struct CounterTable {
  std::vector<std::string> events;  // counted events, in column order
  Columns cols;                     // trial, step, rank, phase, intervals, <event>...
};

// One run file, as read. Optional fields that are absent stay empty (printed "n/a").
struct RunRecord {
  std::string path;  // as shown in the report
  std::string kind;  // schema::kKindTrain or schema::kKindComm
  std::string name;  // root run_name
  std::string status;
  std::string status_message;
  std::string verdict;
  TextMap root, config, provenance, summary;
  std::vector<io::ValidationCheck> validation;

  // kind = train
  Columns steps;  // /metrics/steps (may be empty when the run failed before its first flush)
  Columns eval;   // /metrics/eval: held-out evaluations (train.eval_every); empty when none
  bool has_counters = false;
  CounterTable counters;

  // kind = comm
  Columns comm_results;
  std::vector<std::string> op_names, dtype_names, check_details;
  TextMap comm_attrs;  // attributes of /comm

  bool completed() const;
  bool is_train() const;
  bool is_comm() const;
};

// Reads `path` (shown as `display`). Throws IoError naming the file when it is not a lorabench run file,
// has another schema version, has an unknown kind, or is a completed run that lacks a required field.
RunRecord load_run(const std::string& path, const std::string& display);

// The inputs: a file is taken as given; a directory contributes every run.h5 below it, and every other
// *.h5 below it that is a run file of kind comm (files under a "checkpoints" folder are never looked at;
// other *.h5 files that are not run files are skipped with a line in `notes`). Paths are
// lexically normalized, directory hits sorted, duplicates (same canonical file) dropped. Throws IoError
// for a path that does not exist and for a directory without run files.
std::vector<std::string> expand_inputs(const std::vector<std::string>& args, std::vector<std::string>* notes);

// Field access with "absent" as NaN / "".
double num(const TextMap& m, const std::string& key);
std::string text(const TextMap& m, const std::string& key);
inline bool known(double v) { return std::isfinite(v); }

}  // namespace lorabench::report
