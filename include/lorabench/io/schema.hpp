// Names shared by the run-file writer (lorabench) and its readers (lorabench-report, tests, h5dump
// users). docs/hdf5-schema.md documents every name here; a unit test checks the two agree.
#pragma once

#include <string>
#include <vector>

#include "lorabench/io/h5.hpp"

namespace lorabench::schema {

// Bumped whenever a name below changes meaning or disappears. Readers refuse other versions.
// 2: straggler metrics from compute time, wait/transfer split. 3: straggler_ratio's denominator is the
// median of the other ranks (the slowest left out), the layout unchanged; readers take 2 and 3 (the report
// recomputes the ratios from compute_s either way).
constexpr int kVersion = 3;
constexpr int kOldestReadableVersion = 2;
constexpr const char* kProgram = "lorabench";

// Root attributes.
constexpr const char* kAttrSchemaVersion = "schema_version";
constexpr const char* kAttrProgram = "program";
constexpr const char* kAttrProgramVersion = "program_version";
constexpr const char* kAttrGitCommit = "git_commit";
constexpr const char* kAttrKind = "kind";              // "train" or "comm"
constexpr const char* kAttrRunName = "run_name";
constexpr const char* kAttrStatus = "status";          // "running", "completed", "failed", "preempted"
constexpr const char* kAttrStatusMessage = "status_message";
constexpr const char* kAttrVerdict = "verdict";        // "VALID", "INVALID" (or "PENDING" while running)
constexpr const char* kAttrCreated = "created_utc";
constexpr const char* kAttrFinished = "finished_utc";

constexpr const char* kKindTrain = "train";
constexpr const char* kKindComm = "comm";
constexpr const char* kStatusRunning = "running";
constexpr const char* kStatusCompleted = "completed";
constexpr const char* kStatusFailed = "failed";
// Stopped by SIGTERM/SIGUSR1 after a checkpoint (core/stop_request.hpp); the summary and verdict cover the
// steps that ran.
constexpr const char* kStatusPreempted = "preempted";

// Groups and datasets.
constexpr const char* kConfig = "config";                 // attrs: every key's resolved value
constexpr const char* kConfigIni = "config/ini_text";     // the input file as given
constexpr const char* kConfigOverrides = "config/overrides";  // the --set arguments
constexpr const char* kProvenance = "provenance";         // attrs: argv, versions, hardware, Slurm, env
constexpr const char* kRanks = "ranks";                   // table: one row per rank
constexpr const char* kRankHosts = "ranks_hosts";         // hosts of the ranks, in rank order
constexpr const char* kMetrics = "metrics";
constexpr const char* kSteps = "metrics/steps";           // table: one row per (trial, step, rank)
constexpr const char* kSummary = "metrics/summary";       // attrs: the run's summary numbers
constexpr const char* kCounters = "metrics/counters";     // table: counters per (trial, step, rank, phase)
constexpr const char* kEval = "metrics/eval";             // table: one row per evaluation (train.eval_every)
constexpr const char* kValidation = "validation";         // attrs: verdict; dataset checks
constexpr const char* kValidationChecks = "validation/checks";
constexpr const char* kComm = "comm";                     // the collective benchmark (kind = comm)
// /comm of a `lorabench comm` run file (docs/hdf5-schema-comm.md). Attributes of /comm: backend,
// world_size, hosts, dtype, warmup, iters, check, timing.
constexpr const char* kCommResults = "comm/results";          // table: one row per (op, size)
constexpr const char* kCommOpNames = "comm/op_names";         // strings: name of op code i
constexpr const char* kCommDtypeNames = "comm/dtype_names";   // strings: name of dtype code i
constexpr const char* kCommCheckDetails = "comm/check_details";  // strings: per row, first mismatch or ""

// Columns of /ranks.
const std::vector<h5::Column>& rank_columns();

// Columns of /comm/results, in order (name, integer, unit, meaning).
struct CommColumnInfo {
  const char* name;
  bool integer;
  const char* unit;
  const char* meaning;
};
const std::vector<CommColumnInfo>& comm_result_columns();
std::vector<h5::Column> comm_result_table_columns();

// Columns of /metrics/steps, in order. Integer columns are stored as int64.
enum StepColumn : int {
  kTrial, kStep, kRank, kLoss, kLr, kGradNorm, kClipped, kTokens, kLossTokens,
  kStepS, kDataS, kForwardS, kBackwardS, kCommExposedS, kOptimizerS,
  kComputeS, kWaitPeersS, kTransferS, kCollectives, kStepStragglerRatio, kStepSlowestRank,
  kTokensPerS, kFlops, kMfu,
  kMemCurrent, kMemPeak, kRssPeak,
  kBytesAllReduce, kBytesReduceScatter, kBytesAllGather, kBytesBroadcast, kBytesAllToAll,
  kMemReservedPeak,
  kNumStepColumns
};
struct StepColumnInfo {
  const char* name;
  bool integer;
  const char* unit;
  const char* meaning;
};
const std::vector<StepColumnInfo>& step_columns();
std::vector<h5::Column> step_table_columns();

// Attributes of /metrics/summary that every completed training run has.
const std::vector<std::pair<const char*, const char*>>& summary_attributes();  // name, meaning

}  // namespace lorabench::schema
