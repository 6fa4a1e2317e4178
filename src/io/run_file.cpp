#include "lorabench/io/run_file.hpp"

#include <cmath>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/core/version.hpp"

namespace lorabench::io {

RunFileWriter::RunFileWriter(const std::string& path, const std::string& kind, const std::string& run_name)
    : path_(path), file_(h5::create_exclusive(path)) {
  h5::write_attr(file_, schema::kAttrSchemaVersion, schema::kVersion);
  h5::write_attr(file_, schema::kAttrProgram, schema::kProgram);
  h5::write_attr(file_, schema::kAttrProgramVersion, program_version());
  h5::write_attr(file_, schema::kAttrGitCommit, git_commit());
  h5::write_attr(file_, schema::kAttrKind, kind);
  h5::write_attr(file_, schema::kAttrRunName, run_name);
  h5::write_attr(file_, schema::kAttrCreated, sys::utc_now_iso8601());
  h5::write_attr(file_, schema::kAttrStatus, schema::kStatusRunning);
  h5::write_attr(file_, schema::kAttrStatusMessage, "");
  h5::write_attr(file_, schema::kAttrVerdict, "PENDING");
  h5::Handle metrics = h5::create_group(file_, schema::kMetrics);
  summary_ = h5::create_group(file_, schema::kSummary);
  if (kind == schema::kKindTrain) {
    steps_ = h5::Table::create(file_, schema::kSteps, schema::step_table_columns());
  }
  flush();
}

void RunFileWriter::write_config(const KeyValues& resolved, const std::string& ini_text, const std::string& input_path,
                                 const std::vector<std::string>& overrides) {
  h5::Handle g = h5::require_group(file_, schema::kConfig);
  for (const auto& [k, v] : resolved) h5::write_attr(g, k, v);
  h5::write_attr(g, "input_file", input_path);
  h5::write_string_dataset(file_, schema::kConfigIni, ini_text);
  h5::write_strings(file_, schema::kConfigOverrides, overrides);
}

void RunFileWriter::write_provenance(const KeyValues& attrs) {
  h5::Handle g = h5::require_group(file_, schema::kProvenance);
  for (const auto& [k, v] : attrs) h5::write_attr(g, k, v);
}

void RunFileWriter::write_ranks(const std::vector<RankRow>& ranks) {
  h5::Table t = h5::Table::create(file_, schema::kRanks, schema::rank_columns(), 64);
  std::vector<double> rows;
  std::vector<std::string> hosts;
  for (const auto& r : ranks) {
    rows.insert(rows.end(), {double(r.rank), double(r.local_rank), double(r.node), double(r.pid), double(r.threads),
                             double(r.cuda_device)});
    hosts.push_back(r.host);
  }
  t.append(rows, ranks.size());
  h5::write_strings(file_, schema::kRankHosts, hosts);
}

void RunFileWriter::append_steps(const std::vector<double>& rows) {
  LB_CHECK(steps_.columns() == schema::kNumStepColumns, "this run file has no step table");
  steps_.append(rows, rows.size() / schema::kNumStepColumns);
}

void RunFileWriter::create_counters(const std::vector<std::string>& events, const std::vector<std::string>& via,
                                    const std::vector<std::string>& phases) {
  std::vector<h5::Column> cols = {{"trial", true}, {"step", true}, {"rank", true}, {"phase", true}, {"intervals", true}};
  for (const auto& e : events) cols.push_back({e, true});
  counters_ = h5::Table::create(file_, schema::kCounters, cols);
  h5::Handle d(H5Dopen2(file_, schema::kCounters, H5P_DEFAULT));
  h5::write_attr(d, "events", join(events, ","));
  h5::write_attr(d, "via", join(via, ","));
  h5::write_attr(d, "phases", join(phases, ","));
}

void RunFileWriter::append_counters(const std::vector<double>& rows) {
  LB_CHECK(counters_.columns() > 0, "create_counters() first");
  counters_.append(rows, rows.size() / counters_.columns());
}

void RunFileWriter::append_eval(int trial, int64_t step, double loss, int64_t tokens, int64_t samples, double seconds) {
  if (eval_.columns() == 0)
    eval_ = h5::Table::create(file_, schema::kEval,
                              {{"trial", true}, {"step", true}, {"loss", false}, {"perplexity", false},
                               {"tokens", true}, {"samples", true}, {"seconds", false}});
  eval_.append({double(trial), double(step), loss, std::exp(loss), double(tokens), double(samples), seconds}, 1);
}

void RunFileWriter::write_summary(const std::string& name, double value) { h5::write_attr(summary_, name, value); }
void RunFileWriter::write_summary(const std::string& name, const std::string& value) {
  h5::write_attr(summary_, name, value);
}

void RunFileWriter::write_validation(const std::vector<ValidationCheck>& checks) {
  h5::Handle g = h5::require_group(file_, schema::kValidation);
  std::vector<std::string> names, details;
  std::vector<int64_t> passed;
  bool all = true;
  for (const auto& c : checks) {
    names.push_back(c.name);
    details.push_back(c.detail);
    passed.push_back(c.passed ? 1 : 0);
    all = all && c.passed;
  }
  h5::write_strings(g, "check_names", names);
  h5::write_strings(g, "check_details", details);
  hsize_t n = passed.size();
  h5::write_array(g, "check_passed", H5T_NATIVE_INT64, passed.data(), {n});
  const char* verdict = all ? "VALID" : "INVALID";
  h5::write_attr(g, schema::kAttrVerdict, verdict);
  h5::write_attr(file_, schema::kAttrVerdict, verdict);
}

void RunFileWriter::set_status(const std::string& status, const std::string& message) {
  h5::write_attr(file_, schema::kAttrStatus, status);
  h5::write_attr(file_, schema::kAttrStatusMessage, message);
  if (status != schema::kStatusRunning) h5::write_attr(file_, schema::kAttrFinished, sys::utc_now_iso8601());
  flush();
}

void RunFileWriter::flush() { h5::flush(file_); }

RunFileReader::RunFileReader(const std::string& path) : path_(path), file_(h5::open_read(path)) {
  if (!h5::has_attr(file_, schema::kAttrProgram) || h5::read_attr_string(file_, schema::kAttrProgram) != schema::kProgram)
    throw IoError(path + ": not a lorabench run file (no root attribute program = lorabench)");
  if (!h5::has_attr(file_, schema::kAttrSchemaVersion))
    throw IoError(path + ": not a lorabench run file (no schema_version)");
  int64_t v = h5::read_attr_int(file_, schema::kAttrSchemaVersion);
  if (v < schema::kOldestReadableVersion || v > schema::kVersion)
    throw IoError(path + ": schema version " + std::to_string(v) + " (this build reads versions " +
                  std::to_string(schema::kOldestReadableVersion) + " to " + std::to_string(schema::kVersion) + ")");
}

std::string RunFileReader::kind() const { return h5::read_attr_string(file_, schema::kAttrKind); }
std::map<std::string, std::string> RunFileReader::root() const { return h5::read_attrs_as_text(file_); }
std::map<std::string, std::string> RunFileReader::config() const {
  h5::Handle g = h5::open_group(file_, schema::kConfig);
  return h5::read_attrs_as_text(g);
}
std::string RunFileReader::ini_text() const { return h5::read_string_dataset(file_, schema::kConfigIni); }
std::map<std::string, std::string> RunFileReader::provenance() const {
  h5::Handle g = h5::open_group(file_, schema::kProvenance);
  return h5::read_attrs_as_text(g);
}
std::map<std::string, std::string> RunFileReader::summary() const {
  h5::Handle g = h5::open_group(file_, schema::kSummary);
  return h5::read_attrs_as_text(g);
}
std::map<std::string, std::vector<double>> RunFileReader::steps() const { return h5::read_table(file_, schema::kSteps); }
std::map<std::string, std::vector<double>> RunFileReader::ranks() const { return h5::read_table(file_, schema::kRanks); }
std::map<std::string, std::vector<double>> RunFileReader::eval() const {
  if (!h5::exists(file_, schema::kEval)) return {};
  return h5::read_table(file_, schema::kEval);
}
std::vector<std::string> RunFileReader::rank_hosts() const { return h5::read_strings(file_, schema::kRankHosts); }

std::vector<ValidationCheck> RunFileReader::validation() const {
  std::vector<ValidationCheck> out;
  if (!h5::exists(file_, schema::kValidation)) return out;
  h5::Handle g = h5::open_group(file_, schema::kValidation);
  auto names = h5::read_strings(g, "check_names");
  auto details = h5::read_strings(g, "check_details");
  const std::vector<hsize_t> dims = h5::dataset_dims(g, "check_passed");
  if (details.size() != names.size() || dims.size() != 1 || dims[0] != names.size())
    throw IoError(path_ + ": /validation: check_names, check_details and check_passed differ in length");
  std::vector<int64_t> passed(names.size());
  if (!names.empty()) h5::read_array(g, "check_passed", H5T_NATIVE_INT64, passed.data());
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], passed[i] != 0, details.at(i)});
  return out;
}

}  // namespace lorabench::io
