// The run file outputs/<run>/run.h5: written by rank 0 only, created exclusively (never overwrites),
// flushed at log intervals so a killed job leaves a readable file. Layout in docs/hdf5-schema.md.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lorabench/io/h5.hpp"
#include "lorabench/io/schema.hpp"

namespace lorabench::io {

struct RankRow {
  int rank = 0;
  std::string host;
  int local_rank = 0;
  int node = 0;
  int pid = 0;
  int threads = 1;
  int cuda_device = -1;  // -1 = CPU
};

struct ValidationCheck {
  std::string name;
  bool passed = false;
  std::string detail;
};

using KeyValues = std::vector<std::pair<std::string, std::string>>;

class RunFileWriter {
 public:
  // Creates `path` (IoError when it exists) with the root attributes and status "running".
  RunFileWriter(const std::string& path, const std::string& kind, const std::string& run_name);

  void write_config(const KeyValues& resolved, const std::string& ini_text, const std::string& input_path,
                    const std::vector<std::string>& overrides);
  void write_provenance(const KeyValues& attrs);
  void write_ranks(const std::vector<RankRow>& ranks);
  // Rows of /metrics/steps, schema::kNumStepColumns values each, row-major.
  void append_steps(const std::vector<double>& rows);
  // /metrics/counters: columns trial, step, rank, phase, intervals, then one per event (names as given);
  // attributes events, via, phases (comma-separated). Call once before append_counters.
  void create_counters(const std::vector<std::string>& events, const std::vector<std::string>& via,
                       const std::vector<std::string>& phases);
  void append_counters(const std::vector<double>& rows);  // 5 + events values per row, row-major
  // One row of /metrics/eval (created by the first call): trial, step (optimizer steps done), loss (mean
  // over the held-out set's counted tokens), perplexity = exp(loss), tokens (counted), samples, seconds.
  void append_eval(int trial, int64_t step, double loss, int64_t tokens, int64_t samples, double seconds);
  void write_summary(const std::string& name, double value);
  void write_summary(const std::string& name, const std::string& value);
  // Writes /validation and the root verdict: VALID when every check passed.
  void write_validation(const std::vector<ValidationCheck>& checks);
  // "completed" or "failed" also stamp finished_utc.
  void set_status(const std::string& status, const std::string& message = "");
  void flush();

  hid_t file() const { return file_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  h5::Handle file_;
  h5::Handle summary_;
  h5::Table steps_;
  h5::Table counters_;
  h5::Table eval_;
};

// Opens a run file for reading and checks that it is one: IoError "<path>: not a lorabench run file"
// or "...: schema version N (this build reads 1)".
class RunFileReader {
 public:
  explicit RunFileReader(const std::string& path);
  const std::string& path() const { return path_; }
  hid_t file() const { return file_; }

  std::string kind() const;
  std::map<std::string, std::string> root() const;        // root attributes as text
  std::map<std::string, std::string> config() const;      // key -> resolved value
  std::string ini_text() const;
  std::map<std::string, std::string> provenance() const;
  std::map<std::string, std::string> summary() const;     // /metrics/summary attributes as text
  std::map<std::string, std::vector<double>> steps() const;  // column -> values
  std::map<std::string, std::vector<double>> ranks() const;
  std::map<std::string, std::vector<double>> eval() const;  // /metrics/eval; empty without evaluations
  std::vector<std::string> rank_hosts() const;
  std::vector<ValidationCheck> validation() const;

 private:
  std::string path_;
  h5::Handle file_;
};

}  // namespace lorabench::io
