// Run files with known numbers for lorabench-report's tests, written with io::RunFileWriter (the same
// writer lorabench uses) and the trainer's summary rules, with every time-, host- and build-dependent
// root attribute overwritten so the report made from them is byte-for-byte reproducible.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace lorabench::report_test {

struct TrainFixture {
  std::string name;
  std::string strategy = "single";
  std::string dtype = "fp32";
  int world = 1;
  int trials = 1;
  int steps = 4;
  int warmup = 1;
  std::string status = "completed";  // completed | failed | running
  std::string message;
  std::string git_commit = "0123456789abcdef0123456789abcdef01234567";
  // Phase seconds (data, forward, backward, comm_exposed, optimizer) of (trial, step, rank); step_s is
  // their sum plus 1 ms of unattributed time.
  std::function<std::array<double, 5>(int, int, int)> phases;
  // Seconds of comm_exposed that (trial, step, rank) waited for peers (the rest is transfer); none = 0.
  std::function<double(int, int, int)> wait;
  // Payload bytes per rank per step: all_reduce, reduce_scatter, all_gather, broadcast, all_to_all.
  std::array<double, 5> bytes{};
  double mem_peak = 8 << 20, mem_state = 2 << 20, rss = 300 << 20, predicted_state = 2 << 20;
  std::string formula = "2Ψt + 2Ψt + 8Ψt";
  // Hardware counters per phase: events and a value function (event index, phase, step, rank).
  std::vector<std::string> counter_events;
  std::map<std::string, std::string> config;      // overrides of the default config
  std::map<std::string, std::string> provenance;  // overrides of the default provenance
  std::map<std::string, double> summary;          // further /metrics/summary numbers (e.g. the planner's)
  // The roofline (metrics/roofline.hpp): per rank and step FLOPs and bytes of forward, backward, optimizer
  // against this bandwidth (bytes/s; 0 = none, as in files written before it) and the fixture's 50 GFLOP/s.
  double mem_bandwidth = 0;
  std::array<double, 3> roofline_flops{}, roofline_bytes{};
  std::vector<std::pair<std::string, std::string>> failed_checks;  // (name, detail): the verdict is then INVALID
};

// Writes `dir`/<name>/run.h5.
void write_train_fixture(const std::string& dir, const TrainFixture& f);

// A `lorabench comm` run file at `path`: all_reduce and reduce_scatter, fp32, at `world` ranks, sizes
// 64 KiB, 1 MiB, 16 MiB with known bandwidths.
void write_comm_fixture(const std::string& path, const std::string& name, int world, bool one_failed_check = false);

// The fixture set behind tests/fixtures/report/golden.md: runs single, ddp, fsdp (2 trials), single-bf16,
// failed, running, and the comm run, below `dir`.
void write_golden_set(const std::string& dir);

}  // namespace lorabench::report_test
