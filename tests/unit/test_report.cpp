// lorabench-report: the golden report from fixture run files with known numbers, clear failures on
// damaged, foreign and other-version files, the bottleneck rules and the SVG writer.
//
// The golden file is tests/fixtures/report/golden.md. After an intended change of the report, rerun with
// LORABENCH_UPDATE_GOLDEN=1 to rewrite it, and review the diff.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lorabench/core/strings.hpp"
#include "lorabench/io/h5.hpp"
#include "lorabench/io/schema.hpp"
#include "report_analysis.hpp"
#include "report_data.hpp"
#include "report_fixtures.hpp"
#include "report_render.hpp"
#include "svg.hpp"

namespace fs = std::filesystem;
namespace rep = lorabench::report;
namespace rt = lorabench::report_test;
namespace h5 = lorabench::h5;

namespace {

// A fresh directory under the build tree for one test.
fs::path work_dir(const std::string& name) {
  fs::path d = fs::path(LORABENCH_TEST_BINARY_DIR) / "report_tests" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Result {
  int rc = -1;
  std::string out, err;
};

// Runs lorabench-report in `cwd` with `args` (already shell-quoted where needed).
Result run_report(const fs::path& cwd, const std::string& args) {
  const fs::path out = cwd / "stdout.txt", err = cwd / "stderr.txt";
  const std::string cmd = "cd '" + cwd.string() + "' && '" + LORABENCH_REPORT_BIN + "' " + args + " >'" + out.string() +
                          "' 2>'" + err.string() + "'";
  const int st = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

rt::TrainFixture simple(const std::string& name, const std::string& strategy = "single", int world = 1) {
  rt::TrainFixture f;
  f.name = name;
  f.strategy = strategy;
  f.world = world;
  f.phases = [](int, int, int) -> std::array<double, 5> { return {0.004, 0.015, 0.025, 0.0, 0.005}; };
  return f;
}

}  // namespace

TEST(Report, GoldenMarkdownFromFixtureRuns) {
  const fs::path dir = work_dir("golden");
  rt::write_golden_set((dir / "in").string());
  const Result r = run_report(dir, "in -o report.md");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string actual = slurp(dir / "report.md");
  const fs::path golden = fs::path(LORABENCH_SOURCE_DIR) / "tests/fixtures/report/golden.md";
  if (std::getenv("LORABENCH_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << actual;
    GTEST_SKIP() << "rewrote " << golden << " (LORABENCH_UPDATE_GOLDEN is set): review the diff";
  }
  const std::string expected = slurp(golden);
  ASSERT_FALSE(expected.empty()) << golden << " is missing";
  EXPECT_EQ(actual, expected) << "the report differs from " << golden << "; compare with: diff " << golden << " "
                              << (dir / "report.md");
  // Every chart the report links exists and is a complete SVG document.
  for (const char* c : {"loss.svg", "tokens_per_s.svg", "memory.svg", "phases.svg"}) {
    const std::string svg = slurp(dir / "charts" / c);
    EXPECT_NE(actual.find(std::string("](charts/") + c + ")"), std::string::npos) << c;
    EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << c;
    EXPECT_NE(svg.find("</svg>\n"), std::string::npos) << c;
  }
  // Deterministic: a second run gives the same bytes.
  const Result again = run_report(dir, "in -o report2.md --charts charts2");
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(slurp(dir / "report2.md").find("](charts2/loss.svg)") != std::string::npos, true);
  EXPECT_EQ(slurp(dir / "charts" / "phases.svg"), slurp(dir / "charts2" / "phases.svg"));
}

TEST(Report, GoldenContentIsWhatTheFixturesSay) {
  // Independent of the golden file: the numbers the fixtures were built to produce.
  const fs::path dir = work_dir("content");
  rt::write_golden_set((dir / "in").string());
  const Result r = run_report(dir, "in");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string& md = r.out;
  // ddp: step 4+15+25.x+20+5+1 ms; 18 ms of the exposed 20 ms are transfer (~26%) -> communication-bound;
  // 1 MiB all_reduce per step.
  EXPECT_NE(md.find("**ddp** (ddp, 2 ranks): **communication-bound**"), std::string::npos) << md;
  EXPECT_NE(md.find("the collective benchmark (comm) reached 1.6 GB/s busbw for all_reduce fp32 at 1.00 MiB"),
            std::string::npos);
  EXPECT_NE(md.find("**single** (single, 1 rank): **compute-bound**"), std::string::npos);
  EXPECT_NE(md.find("**single-bf16** (single, 1 rank): **data-bound**"), std::string::npos);
  // fsdp: rank 1 computes 20 ms longer in backward in every step -> a persistent straggler
  EXPECT_NE(md.find("**fsdp** (fsdp, 2 ranks): **straggler-bound**: rank 1 computes 1.39x as long as the other "
                    "ranks"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("in 6 of 6 measured steps (a persistent straggler); its largest excess is in backward (+20 ms "
                    "per step)"),
            std::string::npos);
  // The per-rank table and the verdict from one rule (issue 49, item 9): rank 1's compute over the other
  // rank's, 71 / 51 ms, is the table's "compute / others'" and the sentence's straggler ratio.
  EXPECT_NE(md.find("| fsdp | 1 | 71.00 | 1.392 | 0.000 | 8.000 | 4.000 | 6 of 6 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fsdp | 0 | 51.00 | 0.718 |"), std::string::npos) << md;
  EXPECT_NE(md.find("straggler ratio 1.392 (slowest / the other ranks' median mean compute"), std::string::npos);
  EXPECT_NE(md.find("**FAILED**: non-finite loss at step 1"), std::string::npos);
  EXPECT_NE(md.find("**RUNNING / NOT FINISHED**"), std::string::npos);
  EXPECT_NE(md.find("- **git commit**:"), std::string::npos);
  EXPECT_NE(md.find("- **config run.seed (C1)**: `1` (ddp, single); `7` (fsdp)"), std::string::npos);
  EXPECT_EQ(md.find("parallel.reshard_after_forward (C1)"), std::string::npos) << "a role key is not a warning";
  EXPECT_NE(md.find("| PAPI_TOT_INS | PAPI_TOT_CYC | perf::TASK-CLOCK | IPC |"), std::string::npos);
  EXPECT_NE(md.find("**fsdp**, **single**, **single-bf16**: no counters in the run file (`/metrics/counters` absent); "
                    "papi_status: `counting nothing"), std::string::npos);
  EXPECT_NE(md.find("| 3 steps |"), std::string::npos);
  EXPECT_NE(md.find("| 2 trials |"), std::string::npos);
  EXPECT_EQ(md.find("## Charts"), std::string::npos) << "no -o and no --charts: no charts";
}

TEST(Report, MeshRunsAreNamedByTheirShape) {
  // An hsdp or tensor-parallel run's summary names its mesh; the report's strategy column shows the shape, so runs
  // of different meshes are told apart (and grouped by it).
  const fs::path dir = work_dir("mesh");
  rt::write_golden_set((dir / "in").string());
  std::vector<rep::RunRecord> runs;
  for (const auto& p : rep::expand_inputs({(dir / "in").string()}, nullptr)) runs.push_back(rep::load_run(p, p));
  for (auto& r : runs) {
    if (r.name == "fsdp") r.summary["mesh"] = "dp_replicate 2 x dp_shard 1 (shard groups within a node)";
    if (r.name == "ddp") r.summary["mesh"] = "dp_replicate 2 x dp_shard 1 x tp 2 (tensor-parallel groups within a node)";
  }
  const rep::Analysis a = rep::analyze(runs);
  int named = 0;
  for (const auto& t : a.train)
    if (t.run->name == "fsdp") {
      EXPECT_EQ(t.strategy, "fsdp (2 x 1)");
      ++named;
    } else if (t.run->name == "ddp") {
      EXPECT_EQ(t.strategy, "ddp (dp 2 x tp 2)");
      ++named;
    } else {
      EXPECT_EQ(t.strategy.find('('), std::string::npos) << t.run->name << ": " << t.strategy;
    }
  EXPECT_EQ(named, 2);
}

TEST(Report, ScalingAndMemoryNumbers) {
  const fs::path dir = work_dir("numbers");
  rt::write_golden_set((dir / "in").string());
  std::vector<rep::RunRecord> runs;
  for (const auto& p : rep::expand_inputs({(dir / "in").string()}, nullptr)) runs.push_back(rep::load_run(p, p));
  const rep::Analysis a = rep::analyze(runs);
  const rep::TrainRow* single = nullptr;
  const rep::TrainRow* ddp = nullptr;
  const rep::TrainRow* fsdp = nullptr;
  for (const auto& t : a.train) {
    if (t.run->name == "single") single = &t;
    if (t.run->name == "ddp") ddp = &t;
    if (t.run->name == "fsdp") fsdp = &t;
  }
  ASSERT_TRUE(single && ddp && fsdp);
  ASSERT_EQ(a.configs.size(), 2u);  // fp32 and bf16
  EXPECT_EQ(ddp->baseline, single);
  EXPECT_DOUBLE_EQ(ddp->speedup, ddp->tps_mean / single->tps_mean);
  EXPECT_DOUBLE_EQ(ddp->efficiency, ddp->speedup / 2);
  EXPECT_EQ(fsdp->ddp, ddp);
  EXPECT_NEAR(fsdp->saving_vs_ddp, 1.0 - (6.0 * (1 << 20)) / (9.0 * (1 << 20)), 1e-12);
  // 1 MiB all_reduce per rank per step at 2 ranks (bus factor 1), 20 ms exposed, of which rank 0 waited
  // 2 ms for rank 1: the bandwidth is over the transfer time, 19 ms per rank per step on average.
  EXPECT_EQ(ddp->dominant_op, 0);
  EXPECT_NEAR(ddp->transfer_mean_s, 0.019, 1e-12);
  EXPECT_NEAR(ddp->achieved_busbw_GBps, 1048576.0 / 0.019 / 1e9, 1e-9);
  // The wait/transfer split and the per-rank stragglers: ddp is balanced, fsdp's rank 1 persistent.
  EXPECT_NEAR(ddp->wait_share, 0.001 / ddp->step_rank_median, 1e-12);
  EXPECT_EQ(ddp->stragglers.kind, "balanced");
  ASSERT_TRUE(fsdp->has_stragglers);
  EXPECT_EQ(fsdp->stragglers.kind, "persistent");
  EXPECT_EQ(fsdp->stragglers.named_rank, 1u);
  EXPECT_EQ(fsdp->straggler_steps_measured, 6);  // 3 measured steps x 2 trials
  ASSERT_EQ(fsdp->ranks.size(), 2u);
  EXPECT_NEAR(fsdp->ranks[0].wait_s, 0.020, 1e-12);
  EXPECT_NEAR(fsdp->ranks[1].compute_s - fsdp->ranks[0].compute_s, 0.020, 1e-12);
  ASSERT_NE(ddp->reference.run, nullptr);
  EXPECT_DOUBLE_EQ(ddp->reference.bytes, 1048576.0);
  // One trial: std over the 3 measured steps of max-over-ranks step time (steps 1..3: jitter 0/1/0 ms).
  EXPECT_TRUE(single->std_over_steps);
  EXPECT_EQ(single->std_samples, 3);
  EXPECT_NEAR(single->step_std, std::sqrt(((1.0 / 3) * (1.0 / 3) * 2 + (2.0 / 3) * (2.0 / 3)) / 2) * 1e-3, 1e-12);
  EXPECT_FALSE(fsdp->std_over_steps);
  EXPECT_EQ(fsdp->std_samples, 2);
}

// The planner's prediction beside the measurement: a CPU run compares the RSS; once a GPU run is among
// the runs, its predicted reserved bytes are compared with the caching allocator's reserved peak.
TEST(Report, PredictionTableComparesGpuReservedBytes) {
  const fs::path dir = work_dir("prediction");
  const double MiB = 1 << 20;
  rt::TrainFixture cpu = simple("cpu");
  cpu.summary = {{"predicted_tensor_peak_bytes", 8 * MiB}, {"predicted_rss_bytes", 330 * MiB},
                 {"predicted_step_time_s", 0.050}};
  rt::write_train_fixture((dir / "in").string(), cpu);
  Result r = run_report(dir, "in -o cpu.md");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string md = slurp(dir / "cpu.md");
  EXPECT_NE(md.find("| run | strategy | world | tensor peak / rank: predicted | measured | ratio | RSS / rank: predicted "
                    "| measured | ratio | step time (ms): predicted |"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("GPU reserved"), std::string::npos) << "no GPU run, no GPU columns";
  EXPECT_NE(md.find("| cpu | single | 1 | 8.00 MiB | 8.00 MiB | 1.00 | 330.00 MiB | 300.00 MiB | 1.10 |"), std::string::npos)
      << md;

  rt::TrainFixture gpu = simple("gpu");
  gpu.summary = {{"predicted_tensor_peak_bytes", 9 * MiB}, {"predicted_reserved_bytes", 12 * MiB},
                 {"mem_reserved_peak_bytes_max", 10 * MiB}, {"predicted_step_time_s", 0.050}};
  rt::write_train_fixture((dir / "in").string(), gpu);
  r = run_report(dir, "in -o both.md");
  ASSERT_EQ(r.rc, 0) << r.err;
  md = slurp(dir / "both.md");
  EXPECT_NE(md.find("| RSS / rank: predicted | measured | ratio | GPU reserved / rank: predicted | measured | ratio | "
                    "step time (ms): predicted |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| gpu | single | 1 | 9.00 MiB | 8.00 MiB | 1.12 | n/a | 300.00 MiB | n/a | 12.00 MiB | 10.00 MiB | "
                    "1.20 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| cpu | single | 1 | 8.00 MiB | 8.00 MiB | 1.00 | 330.00 MiB | 300.00 MiB | 1.10 | n/a | n/a | n/a |"),
            std::string::npos)
      << md;
}

// Every INVALID verdict in the Runs table comes with its reasons: the run file's failed checks.
TEST(Report, InvalidRunsSayWhy) {
  const fs::path dir = work_dir("invalid");
  rt::TrainFixture bad = simple("bad");
  bad.failed_checks = {{"tokens_trained", "2 step(s) had no token to train on and made no update"}};
  rt::write_train_fixture((dir / "in").string(), bad);
  rt::write_train_fixture((dir / "in").string(), simple("good"));
  const Result r = run_report(dir, "in");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| **INVALID** |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("- **bad** is INVALID: `tokens_trained`: 2 step(s) had no token to train on and made no update\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("**good** is INVALID"), std::string::npos) << r.out;
}

// What a cell alone would get wrong: an MFU above 100% (the peak is too low, and the report says so), a
// resumed run's first loss (taken at the resume step), and a prediction asked for and not recorded.
TEST(Report, CellsThatNeedAWord) {
  const fs::path dir = work_dir("cells");
  rt::TrainFixture fast = simple("fast");
  fast.summary = {{"mfu_mean", 1.052}, {"peak_flops_per_rank", 2e9}, {"resumed_at_step", 4}};
  fast.config = {{"run.predict", "true"}};
  rt::write_train_fixture((dir / "in").string(), fast);
  rt::TrainFixture plain = simple("plain");
  plain.config = {{"run.predict", "false"}};
  rt::write_train_fixture((dir / "in").string(), plain);
  const Result r = run_report(dir, "in");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("(resumed: first = step 4)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| **105.2%** (peak too low) |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("- **fast**: MFU 105.2% is above 100%: its peak of 2.0 GFLOP/s per rank (configured) is "
                       "below what the run achieved"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| fast | single | 1 | **missing** (run.predict = true, none recorded) |"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("| plain | single | 1 | **missing**"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("**plain**: MFU"), std::string::npos) << r.out;
}

TEST(Report, TruncatedFileFailsNamingIt) {
  const fs::path dir = work_dir("truncated");
  rt::write_train_fixture((dir / "in").string(), simple("a"));
  const fs::path good = dir / "in" / "a" / "run.h5";
  const fs::path bad = dir / "broken.h5";
  const std::string bytes = slurp(good);
  std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const Result r = run_report(dir, "broken.h5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("lorabench-report: error: broken.h5"), std::string::npos) << r.err;
  // The same file found in a directory (named run.h5) fails too.
  fs::create_directories(dir / "dir" / "x");
  fs::copy_file(bad, dir / "dir" / "x" / "run.h5");
  const Result d = run_report(dir, "dir");
  EXPECT_EQ(d.rc, 1);
  EXPECT_NE(d.err.find("dir/x/run.h5"), std::string::npos) << d.err;
}

TEST(Report, ForeignHdf5FileFailsNamingIt) {
  const fs::path dir = work_dir("foreign");
  {
    h5::Handle f = h5::create_truncate((dir / "other.h5").string());
    h5::write_attr(f, "creator", "somebody else");
    h5::Handle g = h5::create_group(f, "data");
  }
  const Result r = run_report(dir, "other.h5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("other.h5: not a lorabench run file"), std::string::npos) << r.err;
  std::ofstream(dir / "text.h5") << "not hdf5 at all\n";
  const Result t = run_report(dir, "text.h5");
  EXPECT_EQ(t.rc, 1);
  EXPECT_NE(t.err.find("text.h5"), std::string::npos) << t.err;
}

TEST(Report, OtherSchemaVersionFails) {
  const fs::path dir = work_dir("version");
  rt::write_train_fixture((dir / "in").string(), simple("a"));
  {
    h5::Handle f = h5::open_rw((dir / "in" / "a" / "run.h5").string());
    h5::write_attr(f, lorabench::schema::kAttrSchemaVersion, 99);
  }
  const Result r = run_report(dir, "in/a/run.h5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("in/a/run.h5: schema version 99"), std::string::npos) << r.err;
}

TEST(Report, MissingRequiredFieldFailsButOptionalOnesAreNa) {
  const fs::path dir = work_dir("fields");
  rt::write_train_fixture((dir / "in").string(), simple("a"));
  rt::write_train_fixture((dir / "in").string(), simple("b"));
  {
    h5::Handle f = h5::open_rw((dir / "in" / "b" / "run.h5").string());
    h5::Handle g = h5::open_group(f, lorabench::schema::kSummary);
    ASSERT_GE(H5Adelete(g, "mfu_mean"), 0);  // optional: printed n/a
  }
  Result ok = run_report(dir, "in/b/run.h5");
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_NE(ok.out.find("| n/a |"), std::string::npos);
  {
    h5::Handle f = h5::open_rw((dir / "in" / "a" / "run.h5").string());
    h5::Handle g = h5::open_group(f, lorabench::schema::kSummary);
    ASSERT_GE(H5Adelete(g, "tokens_per_s_mean"), 0);  // required
  }
  const Result r = run_report(dir, "in");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("in/a/run.h5: no /metrics/summary attribute \"tokens_per_s_mean\""), std::string::npos) << r.err;
}

TEST(Report, CommandLineErrors) {
  const fs::path dir = work_dir("cli");
  Result r = run_report(dir, "does-not-exist.h5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("does-not-exist.h5: no such file or directory"), std::string::npos) << r.err;
  fs::create_directories(dir / "empty");
  r = run_report(dir, "empty");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("empty: no run files"), std::string::npos) << r.err;
  r = run_report(dir, "");
  EXPECT_EQ(r.rc, 2);
  r = run_report(dir, "--bogus x");
  EXPECT_EQ(r.rc, 2);
  r = run_report(dir, "--help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("Usage: lorabench-report"), std::string::npos);
}

TEST(Report, DirectoryScanTakesRunFilesAndCommFilesOnly) {
  const fs::path dir = work_dir("scan");
  rt::write_train_fixture((dir / "out").string(), simple("a"));
  rt::write_comm_fixture((dir / "out" / "bench-2.h5").string(), "bench", 2);
  // A checkpoint folder and a stray foreign file: not reports' business.
  fs::create_directories(dir / "out" / "a" / "checkpoints");
  std::ofstream(dir / "out" / "a" / "checkpoints" / "step_00000001.h5") << "x";
  { h5::Handle f = h5::create_truncate((dir / "out" / "stray.h5").string()); }
  std::vector<std::string> notes;
  const auto found = rep::expand_inputs({(dir / "out").string(), (dir / "out" / "a" / "run.h5").string()}, &notes);
  ASSERT_EQ(found.size(), 2u);
  EXPECT_TRUE(lorabench::ends_with(found[0], "out/a/run.h5"));
  EXPECT_TRUE(lorabench::ends_with(found[1], "out/bench-2.h5"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("stray.h5: skipped"), std::string::npos);
}

TEST(Report, FailedCommCheckIsShown) {
  const fs::path dir = work_dir("commfail");
  rt::write_comm_fixture((dir / "c.h5").string(), "c", 4, true);
  const Result r = run_report(dir, "c.h5");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("**FAIL**: 3 wrong element(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Verdict: **INVALID**"), std::string::npos);
  EXPECT_NE(r.out.find("No training runs among the inputs."), std::string::npos);
}

namespace {

// An attribution input with the given shares (data, forward, backward, comm, optimizer), wait and transfer
// shares, and the straggler summary of `compute` (per step, per rank) with phase means that put all of
// a rank's extra compute into backward.
rep::AttributionInput attribution_input(std::array<double, 5> share, double wait, double transfer,
                                        const std::vector<std::vector<double>>& compute, double threshold = 1.10) {
  rep::AttributionInput in;
  in.share = share;
  in.wait_share = wait;
  in.transfer_share = transfer;
  const size_t world = compute[0].size();
  in.rank_compute_s.assign(world, 0.0);
  for (const auto& st : compute)
    for (size_t r = 0; r < world; ++r) in.rank_compute_s[r] += st[r] / double(compute.size());
  std::vector<std::vector<double>> phases(4, std::vector<double>(world, 0.01));  // data, fwd, bwd, opt
  phases[2] = in.rank_compute_s;
  in.stragglers = lorabench::metrics::summarize_stragglers(compute, threshold, phases);
  in.has_stragglers = true;
  in.measured_steps = int(compute.size());
  return in;
}

std::vector<std::vector<double>> steps_of(size_t n, std::vector<double> per_rank) {
  return std::vector<std::vector<double>>(n, per_rank);
}

}  // namespace

// The roofline names the limit of a step that no other cause holds: memory-bound when the compute phases'
// bounds add up on memory, compute-bound when more tokens per step put them on compute; with another
// verdict the roofline follows as "also".
TEST(Report, AttributionRooflineNamesTheLimit) {
  const rep::AttributionRules rules;
  const auto balanced = steps_of(6, {0.100, 0.102});
  auto cell = [](double flops, double bytes, double measured) {
    const double frame = 50e9, bw = 10e9;
    rep::RooflineCell c;
    c.flops = flops;
    c.bytes = bytes;
    c.bound_s = std::max(flops / frame, bytes / bw);
    c.measured_s = measured;
    c.fraction = c.bound_s / measured;
    c.limit = bytes / bw > flops / frame ? "memory" : "compute";
    return c;
  };
  auto with_roofline = [&](rep::AttributionInput in, double tokens) {
    in.has_roofline = true;
    in.ridge = 5.0;
    // forward and backward: 0.1 GB and 0.2 GB of weights and tensors whatever the tokens, 1 MFLOP a token.
    in.roofline[0] = cell(1e6 * tokens, 0.1e9 + 1e3 * tokens, 0.02);
    in.roofline[1] = cell(2e6 * tokens, 0.2e9 + 2e3 * tokens, 0.04);
    in.roofline[2] = cell(0, 0.01e9, 0.002);
    rep::RooflineCell step;
    step.bound_s = in.roofline[0].bound_s + in.roofline[1].bound_s + in.roofline[2].bound_s;
    step.measured_s = 0.062;
    step.fraction = step.bound_s / step.measured_s;
    double memory = 0, compute = 0;
    for (int i = 0; i < 3; ++i) (in.roofline[size_t(i)].limit == "memory" ? memory : compute) += in.roofline[size_t(i)].bound_s;
    step.limit = memory > compute ? "memory" : "compute";
    in.roofline[3] = step;
    return in;
  };
  const auto base = attribution_input({0.05, 0.3, 0.5, 0.05, 0.1}, 0.02, 0.03, balanced);
  // 256 tokens: forward 0.26 GFLOP (5 ms) against 0.1 GB (10 ms): memory bound.
  const auto few = rep::attribute(with_roofline(base, 256), rules);
  EXPECT_EQ(few.verdict, "memory-bound");
  ASSERT_GE(few.evidence.size(), 2u);
  EXPECT_NE(few.evidence[1].find("on the roofline (docs/metrics.md) forward + backward + optimizer are memory bound"),
            std::string::npos) << few.evidence[1];
  EXPECT_NE(few.evidence[1].find("memory bound: forward at 2.6 FLOP/byte, backward at 2.6 FLOP/byte, optimizer (the "
                                 "ridge is at 5.0 FLOP/byte)"),
            std::string::npos) << few.evidence[1];
  // 4096 tokens: 4.1 GFLOP (82 ms) against 0.104 GB (10 ms): compute bound, the optimizer still memory bound.
  const auto many = rep::attribute(with_roofline(base, 4096), rules);
  EXPECT_EQ(many.verdict, "compute-bound");
  EXPECT_NE(many.evidence[1].find("are compute bound"), std::string::npos) << many.evidence[1];
  EXPECT_NE(many.evidence[1].find("memory bound: optimizer (the ridge"), std::string::npos) << many.evidence[1];
  // Another cause wins; the roofline follows it.
  const auto cm = rep::attribute(with_roofline(attribution_input({0.05, 0.3, 0.3, 0.30, 0.05}, 0.02, 0.28, balanced), 256),
                                 rules);
  EXPECT_EQ(cm.verdict, "communication-bound");
  bool also = false;
  for (const auto& e : cm.evidence) also = also || e.rfind("also on the roofline", 0) == 0;
  EXPECT_TRUE(also);
  // A file without the roofline keeps the old verdict.
  EXPECT_EQ(rep::attribute(base, rules).verdict, "compute-bound");
}

TEST(Report, AttributionRules) {
  const rep::AttributionRules rules;
  const auto balanced = steps_of(6, {0.100, 0.102});
  // data, forward, backward, comm, optimizer shares
  const auto c = rep::attribute(attribution_input({0.05, 0.3, 0.5, 0.05, 0.1}, 0.02, 0.03, balanced), rules);
  EXPECT_EQ(c.verdict, "compute-bound");
  EXPECT_NE(c.evidence[0].find("forward + backward + optimizer are 90% of the step"), std::string::npos)
      << c.evidence[0];
  EXPECT_NE(c.evidence[0].find("the median step's straggler ratio is 1.020 (< 1.10)"), std::string::npos)
      << c.evidence[0];
  EXPECT_EQ(rep::attribute(attribution_input({0.25, 0.3, 0.3, 0.05, 0.1}, 0.02, 0.03, balanced), rules).verdict,
            "data-bound");
  // communication: the ranks arrive together and still wait
  const auto cm = rep::attribute(attribution_input({0.05, 0.3, 0.3, 0.30, 0.05}, 0.02, 0.28, balanced), rules);
  EXPECT_EQ(cm.verdict, "communication-bound");
  EXPECT_NE(cm.evidence[0].find("arrive together (waiting for peers is 2% of the step) yet stay blocked 28%"),
            std::string::npos)
      << cm.evidence[0];
  // a large exposed share that is waiting for peers, not transfer, is not communication-bound
  EXPECT_EQ(rep::attribute(attribution_input({0.05, 0.3, 0.3, 0.30, 0.05}, 0.28, 0.02, balanced), rules).verdict,
            "compute-bound");
  // exactly at a threshold counts
  EXPECT_EQ(rep::attribute(attribution_input({0.05, 0.3, 0.3, 0.20, 0.1}, 0.0, 0.20, balanced), rules).verdict,
            "communication-bound");
  EXPECT_EQ(rep::attribute(attribution_input({0.20, 0.3, 0.3, 0.0, 0.1}, 0.0, 0.0, balanced), rules).verdict,
            "data-bound");

  // a persistent straggler: rank 1 computes 3x as long in every step
  const auto slow = rep::attribute(attribution_input({0.01, 0.3, 0.3, 0.38, 0.01}, 0.37, 0.01,
                                                     steps_of(5, {0.100, 0.300})),
                                   rules);
  EXPECT_EQ(slow.verdict, "straggler-bound");
  EXPECT_NE(slow.evidence[0].find("rank 1 computes 3.00x as long as the other ranks (300 ms vs 100 ms per step"),
            std::string::npos)
      << slow.evidence[0];
  EXPECT_NE(slow.evidence[0].find("in 5 of 5 measured steps (a persistent straggler)"), std::string::npos);
  EXPECT_NE(slow.evidence[0].find("its largest excess is in backward (+200 ms per step)"), std::string::npos);
  EXPECT_NE(slow.evidence[0].find("straggler ratio 3.000"), std::string::npos);
  // One of two ranks 19% slower in every step (issue 49, item 9): a persistent straggler, the sentence's
  // ratio what its factor is; against both ranks' median it read 1.087 and "no single slow rank".
  const auto slow19 = rep::attribute(attribution_input({0.01, 0.3, 0.3, 0.38, 0.01}, 0.37, 0.01,
                                                       steps_of(6, {0.100, 0.119})),
                                     rules);
  EXPECT_EQ(slow19.verdict, "straggler-bound");
  EXPECT_NE(slow19.evidence[0].find("rank 1 computes 1.19x as long as the other ranks"), std::string::npos)
      << slow19.evidence[0];
  EXPECT_NE(slow19.evidence[0].find("straggler ratio 1.190"), std::string::npos) << slow19.evidence[0];
  // ranks taking turns: still waiting for each other, but no single rank is named as persistent
  const auto turns = rep::attribute(
      attribution_input({0.01, 0.3, 0.3, 0.30, 0.01}, 0.25, 0.01,
                        {{0.1, 0.2}, {0.2, 0.1}, {0.1, 0.2}, {0.2, 0.1}, {0.1, 0.2}, {0.2, 0.1}}),
      rules);
  EXPECT_EQ(turns.verdict, "straggler-bound");
  EXPECT_NE(turns.evidence[0].find("no single slow rank"), std::string::npos) << turns.evidence[0];
  // a one-step hiccup is not a straggler, and is reported as such
  auto hiccup_steps = steps_of(9, {0.100, 0.101});
  hiccup_steps[4] = {0.100, 0.400};
  const auto hiccup =
      rep::attribute(attribution_input({0.05, 0.3, 0.5, 0.05, 0.1}, 0.03, 0.02, hiccup_steps), rules);
  EXPECT_EQ(hiccup.verdict, "compute-bound");
  ASSERT_EQ(hiccup.evidence.size(), 2u);
  EXPECT_NE(hiccup.evidence[1].find("hiccups, not a straggler: 1 of 9 measured steps"), std::string::npos)
      << hiccup.evidence[1];

  // several hold: the largest cost wins, the others are named, the bandwidth evidence follows
  rep::AttributionInput both = attribution_input({0.30, 0.2, 0.2, 0.22, 0.08}, 0.0, 0.22, balanced);
  both.comm_evidence = {"bw"};
  const auto b = rep::attribute(both, rules);
  EXPECT_EQ(b.verdict, "data-bound");
  ASSERT_EQ(b.evidence.size(), 3u);
  EXPECT_EQ(b.evidence[1].rfind("also communication", 0), 0u) << b.evidence[1];
  EXPECT_EQ(b.evidence[2], "bw");
  const auto sc = rep::attribute(attribution_input({0.01, 0.2, 0.2, 0.58, 0.01}, 0.35, 0.23,
                                                   steps_of(5, {0.100, 0.300})),
                                 rules);
  EXPECT_EQ(sc.verdict, "straggler-bound");
  EXPECT_EQ(sc.evidence[1].rfind("also communication", 0), 0u) << sc.evidence[1];

  // missing inputs
  EXPECT_EQ(rep::attribute(attribution_input({NAN, 0.3, 0.5, 0.05, 0.1}, 0.0, 0.05, balanced), rules).verdict, "n/a");
  EXPECT_EQ(rep::attribute(attribution_input({0.05, 0.3, 0.5, 0.05, 0.1}, NAN, NAN, balanced), rules).verdict, "n/a");
  // custom thresholds
  rep::AttributionRules strict;
  strict.transfer_share = 0.04;
  EXPECT_EQ(rep::attribute(attribution_input({0.01, 0.3, 0.5, 0.05, 0.1}, 0.0, 0.05, balanced), strict).verdict,
            "communication-bound");
}

TEST(Report, KeyClassesAndBusFactors) {
  EXPECT_TRUE(rep::is_workload_key("model.dtype"));
  EXPECT_TRUE(rep::is_workload_key("train.micro_batch"));
  EXPECT_TRUE(rep::is_workload_key("parallel.threads_per_rank"));
  EXPECT_FALSE(rep::is_workload_key("parallel.strategy"));
  EXPECT_FALSE(rep::is_workload_key("run.steps"));
  EXPECT_TRUE(rep::is_role_key("parallel.strategy"));
  EXPECT_TRUE(rep::is_identity_key("run.output_dir"));
  EXPECT_FALSE(rep::is_identity_key("run.seed"));
  EXPECT_DOUBLE_EQ(rep::bus_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(rep::bus_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(rep::bus_factor("broadcast", 4), 1.0);
}

// Achieved bus bandwidth against the benchmark: far below, at the link's rate, and above it, where the transfer
// time undercounts and the link is not the limit; the ratio never in scientific notation.
TEST(Report, BandwidthAgainstTheBenchmarkReadsOneWayPerRange) {
  rep::RunRecord bench;
  bench.name = "comm";
  rep::TrainRow t;
  t.world = 2;
  t.dominant_op = 0;
  t.bytes_per_rank_step[0] = 1 << 20;
  t.transfer_mean_s = 0.002;
  t.reference.run = &bench;
  t.reference.busbw_GBps = 1.0;
  t.reference.op = "all_reduce";
  t.reference.dtype = "fp32";
  t.reference.bytes = 1 << 20;
  auto sentence = [&](double achieved) {
    t.achieved_busbw_GBps = achieved;
    const auto e = rep::comm_evidence(t, {&bench}, rep::AttributionRules{});
    return e.empty() ? std::string() : e[0];
  };
  std::string s = sentence(0.034);
  EXPECT_NE(s.find("(achieved/benchmark = 3.4%): far below the benchmark"), std::string::npos) << s;
  s = sentence(0.98);
  EXPECT_NE(s.find("(achieved/benchmark = 98%): 75% to 125% of the benchmark, so the transfers run at the link's rate"),
            std::string::npos)
      << s;
  s = sentence(9.8);
  EXPECT_NE(s.find("(achieved/benchmark = 980%): above the benchmark (> 125%)"), std::string::npos) << s;
  EXPECT_NE(s.find("does not show the link to be the limit"), std::string::npos) << s;
  EXPECT_EQ(s.find("link's rate"), std::string::npos) << s;
  EXPECT_EQ(s.find("e+"), std::string::npos) << s;
  EXPECT_EQ(rep::percent_text(0.0999), "10.0%");
  EXPECT_EQ(rep::percent_text(4.8), "480%");
}

TEST(Report, NumberFormats) {
  EXPECT_EQ(rep::fmt_sig(51.23456), "51.23");
  EXPECT_EQ(rep::fmt_sig(1234.6), "1235");
  EXPECT_EQ(rep::fmt_sig(0.012345), "0.01235");
  EXPECT_EQ(rep::fmt_sig(NAN), "n/a");
  EXPECT_EQ(rep::fmt_pm(51.2345, 0.5), "51.23 ± 0.50");
  EXPECT_EQ(rep::fmt_pm(51.2345, NAN), "51.23 ± n/a");
  EXPECT_EQ(rep::fmt_pct(0.314), "31.4%");
  EXPECT_EQ(rep::fmt_count(1234567), "1,234,567");
  EXPECT_EQ(rep::fmt_count(12), "12");
}

TEST(Svg, EscapesAndIsWellFormed) {
  EXPECT_EQ(rep::svg::escape("a<b & \"c\">'"), "a&lt;b &amp; &quot;c&quot;&gt;&apos;");
  rep::svg::LineChart c;
  c.title = "t <1>";
  c.series.push_back({"s&1", {{1, 2}, {2, 3}, {4, 5}}, false, true});
  const std::string s = rep::svg::render(c);
  EXPECT_EQ(s.rfind("<?xml", 0), 0u);
  EXPECT_NE(s.find("t &lt;1&gt;"), std::string::npos);
  EXPECT_NE(s.find("s&amp;1"), std::string::npos);
  EXPECT_EQ(s.find("s&1"), std::string::npos);
  EXPECT_NE(s.find("<polyline"), std::string::npos);
  // Every opened element is closed (self-closing or with an end tag).
  size_t open = 0, close = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] == '<' && s[i + 1] != '/' && s[i + 1] != '?') ++open;
    if ((s[i] == '<' && s[i + 1] == '/') || (s[i] == '/' && s[i + 1] == '>')) ++close;
  }
  EXPECT_EQ(open, close);
  rep::svg::BarChart b;
  b.categories = {"x", "y"};
  b.series = {"p", "q"};
  b.values = {{1, 2}, {3, NAN}};
  b.stacked = true;
  const std::string bs = rep::svg::render(b);
  EXPECT_NE(bs.find("<rect"), std::string::npos);
  EXPECT_NE(bs.find("</svg>"), std::string::npos);
  rep::svg::BarChart empty;
  EXPECT_NE(rep::svg::render(empty).find("no data"), std::string::npos);
}

TEST(Svg, NiceTicks) {
  auto t = rep::svg::nice_ticks(0, 9.3);
  ASSERT_FALSE(t.empty());
  EXPECT_DOUBLE_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 9.3);
  EXPECT_DOUBLE_EQ(t[1] - t[0], 2);
  t = rep::svg::nice_ticks(3.5, 3.5);
  EXPECT_LE(t.front(), 3.5);
  EXPECT_GE(t.back(), 3.5);
  EXPECT_EQ(rep::svg::tick_label(0.25), "0.25");
  EXPECT_EQ(rep::svg::tick_label(1200), "1200");
}
