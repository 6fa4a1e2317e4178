#include "report_fixtures.hpp"

#include <cmath>
#include <filesystem>

#include "lorabench/io/h5.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/io/schema.hpp"
#include "lorabench/metrics/roofline.hpp"
#include "lorabench/metrics/stats.hpp"

namespace fs = std::filesystem;

namespace lorabench::report_test {

namespace {

namespace s = schema;

// Root attributes that depend on the build, the clock or the host: fixed values.
void pin_root(hid_t file, const std::string& git, bool finished) {
  h5::write_attr(file, s::kAttrGitCommit, git);
  h5::write_attr(file, s::kAttrProgramVersion, "0.1.0");
  h5::write_attr(file, s::kAttrCreated, "2026-01-01T00:00:00Z");
  if (finished) h5::write_attr(file, s::kAttrFinished, "2026-01-01T00:01:00Z");
}

io::KeyValues train_config(const TrainFixture& f) {
  std::map<std::string, std::string> c = {
      {"run.name", f.name},
      {"run.output_dir", "outputs"},
      {"run.steps", std::to_string(f.steps)},
      {"run.warmup_steps", std::to_string(f.warmup)},
      {"run.repeat", std::to_string(f.trials)},
      {"run.seed", "1"},
      {"run.log_every", "1"},
      {"run.quiet", "true"},
      {"run.overwrite", "false"},
      {"model.preset", "tiny"},
      {"model.path", ""},
      {"model.dtype", f.dtype},
      {"model.activation_checkpointing", "false"},
      {"lora.enabled", "true"},
      {"lora.r", "4"},
      {"lora.alpha", "8"},
      {"lora.targets", "q,k,v,o,gate,up,down"},
      {"data.format", "synthetic"},
      {"data.seq_len", "32"},
      {"train.micro_batch", "2"},
      {"train.grad_accum", "1"},
      {"train.lr", "0.001"},
      {"parallel.strategy", f.strategy},
      {"parallel.backend", "auto"},
      {"parallel.threads_per_rank", "1"},
      {"parallel.bucket_mb", "25"},
      {"profile.papi_events", "PAPI_TOT_INS,PAPI_TOT_CYC"},
      {"profile.peak_gflops", "50"},
  };
  for (const auto& [k, v] : f.config) c[k] = v;
  return io::KeyValues(c.begin(), c.end());
}

io::KeyValues provenance(int world, const std::map<std::string, std::string>& overrides, bool train) {
  std::map<std::string, std::string> p = {
      {"argv", "lorabench fixture"},
      {"hosts", "node01"},
      {"world_size", std::to_string(world)},
      {"mpi_library", "Open MPI v4.1.4"},
      {"hdf5_version", "1.10.8"},
      {"cpu_model", "Fixture CPU @ 2.00GHz"},
  };
  if (train) p["libtorch_version"] = "1.13.0";
  for (const auto& [k, v] : overrides) p[k] = v;
  return io::KeyValues(p.begin(), p.end());
}

void write_ranks(io::RunFileWriter& w, int world) {
  std::vector<io::RankRow> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back({r, "node01", r, 0, 1000 + r, 1, -1});
  w.write_ranks(ranks);
}

}  // namespace

void write_train_fixture(const std::string& dir, const TrainFixture& f) {
  const fs::path run_dir = fs::path(dir) / f.name;
  fs::create_directories(run_dir);
  io::RunFileWriter w((run_dir / "run.h5").string(), s::kKindTrain, f.name);
  w.write_config(train_config(f), "[run]\nsteps = 4\n", "inputs/fixture.ini", {});
  w.write_provenance(provenance(f.world, f.provenance, true));
  write_ranks(w, f.world);
  if (f.status == "running") {
    pin_root(w.file(), f.git_commit, false);
    w.flush();
    return;
  }

  const int steps = f.status == "failed" ? 2 : f.steps;
  const double tokens = 64;  // micro_batch 2 x seq_len 32
  const double peak = 50e9;
  std::vector<double> rows;
  std::vector<std::vector<double>> step_max(f.trials), tok_s(f.trials);
  std::vector<double> step_max_all, mfu_all;
  std::vector<std::vector<double>> per_rank_step(f.world);
  std::array<std::vector<std::vector<double>>, 5> per_rank_phase;
  for (auto& v : per_rank_phase) v.resize(f.world);
  std::array<std::vector<std::vector<double>>, 3> per_rank_sync;  // compute, wait, transfer
  for (auto& v : per_rank_sync) v.resize(f.world);
  std::vector<std::vector<double>> compute_by_step;
  for (int t = 0; t < f.trials; ++t)
    for (int st = 0; st < steps; ++st) {
      double smax = 0;
      std::vector<double> compute;  // the step without comm: step_s - comm_exposed_s
      for (int r = 0; r < f.world; ++r) {
        const auto ph = f.phases(t, st, r);
        compute.push_back(ph[0] + ph[1] + ph[2] + ph[4] + 0.001);
      }
      const auto step_straggler = metrics::summarize_ranks(compute);
      if (st >= f.warmup) compute_by_step.push_back(compute);
      for (int r = 0; r < f.world; ++r) {
        const auto ph = f.phases(t, st, r);
        const double step_s = ph[0] + ph[1] + ph[2] + ph[3] + ph[4] + 0.001;
        const double wait = f.wait ? f.wait(t, st, r) : 0.0;
        std::vector<double> row(s::kNumStepColumns, 0.0);
        row[s::kTrial] = t;
        row[s::kStep] = st;
        row[s::kRank] = r;
        row[s::kLoss] = 5.5 - 0.25 * st - 0.01 * t;
        row[s::kLr] = 1e-3;
        row[s::kGradNorm] = 1.0;
        row[s::kTokens] = tokens;
        row[s::kLossTokens] = tokens - 2;
        row[s::kStepS] = step_s;
        row[s::kDataS] = ph[0];
        row[s::kForwardS] = ph[1];
        row[s::kBackwardS] = ph[2];
        row[s::kCommExposedS] = ph[3];
        row[s::kOptimizerS] = ph[4];
        row[s::kComputeS] = compute[size_t(r)];
        row[s::kWaitPeersS] = wait;
        row[s::kTransferS] = ph[3] - wait;
        row[s::kCollectives] = 3;
        row[s::kStepStragglerRatio] = step_straggler.straggler_ratio;
        row[s::kStepSlowestRank] = double(step_straggler.slowest_rank);
        row[s::kTokensPerS] = tokens / step_s;
        row[s::kFlops] = tokens * 1e6;
        row[s::kMfu] = tokens * 1e6 / step_s / peak;
        row[s::kMemCurrent] = f.mem_state;
        row[s::kMemPeak] = f.mem_peak - r * 4096.0;
        row[s::kRssPeak] = f.rss;
        for (int k = 0; k < 5; ++k) row[s::kBytesAllReduce + k] = f.bytes[size_t(k)];
        rows.insert(rows.end(), row.begin(), row.end());
        smax = std::max(smax, step_s);
        if (st >= f.warmup) {
          per_rank_step[r].push_back(step_s);
          for (int p = 0; p < 5; ++p) per_rank_phase[p][r].push_back(ph[p]);
          per_rank_sync[0][r].push_back(compute[size_t(r)]);
          per_rank_sync[1][r].push_back(wait);
          per_rank_sync[2][r].push_back(ph[3] - wait);
        }
      }
      step_max[t].push_back(smax);
      tok_s[t].push_back(tokens * f.world / smax);
      if (st >= f.warmup) {
        step_max_all.push_back(smax);
        mfu_all.push_back(tokens * f.world * 1e6 / smax / (peak * f.world));
      }
    }
  w.append_steps(rows);

  if (!f.counter_events.empty()) {
    w.create_counters(f.counter_events, std::vector<std::string>(f.counter_events.size(), "papi"),
                      {"data", "forward", "backward", "comm", "optimizer"});
    std::vector<double> crow;
    for (int tr = 0; tr < f.trials; ++tr)
      for (int st = 0; st < steps; ++st)
        for (int r = 0; r < f.world; ++r)
          for (int p = 0; p < 5; ++p) {
            crow.insert(crow.end(), {double(tr), double(st), double(r), double(p), 1.0});
            for (size_t e = 0; e < f.counter_events.size(); ++e)
              crow.push_back(double(e + 1) * 1e6 * (p + 1) + st * 1000.0 + r * 10.0);
          }
    w.append_counters(crow);
  }

  if (f.status == "failed") {
    w.set_status(s::kStatusFailed, f.message);
    pin_root(w.file(), f.git_commit, true);
    w.flush();
    return;
  }

  const auto st = metrics::summarize_repeats(step_max, size_t(f.warmup));
  const auto tk = metrics::summarize_repeats(tok_s, size_t(f.warmup));
  w.write_summary("strategy", f.strategy);
  w.write_summary("world_size", double(f.world));
  w.write_summary("micro_batch", 2.0);
  w.write_summary("grad_accum", 1.0);
  w.write_summary("global_batch_size", 2.0 * f.world);
  w.write_summary("seq_len", 32.0);
  w.write_summary("dtype", f.dtype);
  w.write_summary("model", "tiny");
  w.write_summary("total_params", 1000000.0);
  w.write_summary("trainable_params", 12345.0);
  w.write_summary("trainable_ratio", 0.012345);
  w.write_summary("trials", double(f.trials));
  w.write_summary("measured_steps", double(st.steps_per_trial_used));
  w.write_summary("step_time_mean_s", st.mean);
  w.write_summary("step_time_std_s", f.trials > 1 ? st.stddev : 0.0);
  w.write_summary("step_time_median_s", metrics::median(step_max_all));
  w.write_summary("tokens_per_s_mean", tk.mean);
  w.write_summary("tokens_per_s_std", f.trials > 1 ? tk.stddev : 0.0);
  w.write_summary("loss_first", 5.5);
  w.write_summary("loss_last", 5.5 - 0.25 * (steps - 1));
  w.write_summary("mem_peak_bytes_max", f.mem_peak);
  w.write_summary("mem_current_bytes_max", f.mem_state);
  w.write_summary("rss_peak_bytes_max", f.rss);
  w.write_summary("flops_per_step", tokens * f.world * 1e6);
  w.write_summary("flops_per_token", 1e6);
  w.write_summary("peak_flops_per_rank", peak);
  w.write_summary("peak_flops_source", "configured");
  w.write_summary("peak_flops_detail", "profile.peak_gflops");
  w.write_summary("mfu_mean", metrics::mean(mfu_all));
  w.write_summary("predicted_model_state_bytes", f.predicted_state);
  w.write_summary("predicted_formula", f.formula);
  w.write_summary("papi_status", f.counter_events.empty()
                                     ? "counting nothing; unavailable: PAPI_TOT_INS (Event does not exist)"
                                     : "counting PAPI_TOT_INS,PAPI_TOT_CYC");
  auto means = [](const std::vector<std::vector<double>>& v) {
    std::vector<double> out;
    for (const auto& x : v) out.push_back(metrics::mean(x));
    return out;
  };
  const auto rs = metrics::summarize_ranks(means(per_rank_step));
  w.write_summary("step_time_rank_min_s", rs.min);
  w.write_summary("step_time_rank_median_s", rs.median);
  w.write_summary("step_time_rank_max_s", rs.max);
  auto rank_summary = [&](const std::string& prefix, const std::vector<std::vector<double>>& v) {
    const auto ps = metrics::summarize_ranks(means(v));
    w.write_summary(prefix + "_rank_min", ps.min);
    w.write_summary(prefix + "_rank_median", ps.median);
    w.write_summary(prefix + "_rank_max", ps.max);
  };
  const char* names[5] = {"data", "forward", "backward", "comm_exposed", "optimizer"};
  for (int p = 0; p < 5; ++p) rank_summary(std::string(names[p]) + "_s", per_rank_phase[p]);
  rank_summary("compute_s", per_rank_sync[0]);
  rank_summary("wait_peers_s", per_rank_sync[1]);
  rank_summary("transfer_s", per_rank_sync[2]);
  const int compute_phases[4] = {0, 1, 2, 4};  // metrics::kStragglerPhases
  std::vector<std::vector<double>> phase_means;
  for (int p : compute_phases) phase_means.push_back(means(per_rank_phase[p]));
  const auto sg = metrics::summarize_stragglers(compute_by_step, metrics::kStragglerThreshold, phase_means);
  for (const auto& a : metrics::straggler_summary_attributes(sg, metrics::kStragglerThreshold)) {
    if (a.is_text) w.write_summary(a.name, a.text);
    else w.write_summary(a.name, a.number);
  }
  if (f.mem_bandwidth > 0) {
    const std::array<double, 3> measured = {metrics::summarize_ranks(means(per_rank_phase[1])).median,
                                            metrics::summarize_ranks(means(per_rank_phase[2])).median,
                                            metrics::summarize_ranks(means(per_rank_phase[4])).median};
    metrics::StepTraffic traffic;
    traffic.forward = f.roofline_bytes[0];
    traffic.backward = f.roofline_bytes[1];
    traffic.optimizer = f.roofline_bytes[2];
    metrics::MemoryBandwidth bw{f.mem_bandwidth, "configured", "profile.mem_bandwidth_gbs"};
    const auto r = metrics::step_roofline(f.roofline_flops, traffic, measured, peak, f.mem_bandwidth);
    for (const auto& a : metrics::roofline_summary_attributes(r, bw, peak)) {
      if (a.is_text) w.write_summary(a.name, a.text);
      else w.write_summary(a.name, a.number);
    }
  }
  w.write_summary("clock_sync", "shared clock (one host: CLOCK_MONOTONIC)");
  w.write_summary("clock_offset_error_s", 0.0);
  for (const auto& [k, v] : f.summary) w.write_summary(k, v);
  std::vector<io::ValidationCheck> checks = {
      {"losses_finite", true, "every step's loss is finite"},
      {"replicas_identical", true, "the trainable state is bitwise identical on every rank"}};
  for (const auto& [name, detail] : f.failed_checks) checks.push_back({name, false, detail});
  w.write_validation(checks);
  w.set_status(s::kStatusCompleted);
  pin_root(w.file(), f.git_commit, true);
  w.flush();
}

void write_comm_fixture(const std::string& path, const std::string& name, int world, bool one_failed_check) {
  fs::create_directories(fs::path(path).parent_path());
  io::RunFileWriter w(path, s::kKindComm, name);
  w.write_config({{"comm.ops", "all_reduce,reduce_scatter"}, {"comm.dtype", "fp32"}}, "", "", {});
  w.write_provenance(provenance(world, {}, false));
  write_ranks(w, world);
  h5::Handle g = h5::require_group(w.file(), s::kComm);
  h5::write_attr(g, "backend", "mpi");
  h5::write_attr(g, "world_size", world);
  h5::write_attr(g, "hosts", 1);
  h5::write_attr(g, "dtype", "fp32");
  h5::write_attr(g, "warmup", 5);
  h5::write_attr(g, "iters", 20);
  h5::write_attr(g, "check", 1);
  h5::write_attr(g, "timing", "each call issued and waited for in turn");
  h5::write_strings(w.file(), s::kCommOpNames,
                    {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"});
  h5::write_strings(w.file(), s::kCommDtypeNames, {"fp32", "bf16", "fp16", "int32", "int64"});
  h5::Table t = h5::Table::create(w.file(), s::kCommResults, s::comm_result_table_columns(), 64);
  std::vector<double> rows;
  std::vector<std::string> details;
  const double n = world;
  size_t count = 0;
  for (int op : {0, 2})
    for (double bytes : {65536.0, 1048576.0, 16777216.0}) {
      // bus bandwidth 0.5, 1.6, 2.1 GB/s for the three sizes
      const double busbw = bytes == 65536.0 ? 0.5 : bytes == 1048576.0 ? 1.6 : 2.1;
      const double factor = op == 0 ? 2 * (n - 1) / n : (n - 1) / n;
      const double algbw = busbw / factor;
      const double time = bytes / (algbw * 1e9);
      const bool bad = one_failed_check && op == 2 && bytes == 65536.0;
      rows.insert(rows.end(), {double(op), 0.0, bytes, bytes / 4, time, time * 0.9, time * 1.1, algbw, busbw,
                               time * 1.2, busbw / 1.2, bytes / 8e9, 8.0, bad ? 0.0 : 1.0, bad ? 3.0 : 0.0});
      details.push_back(bad ? "3 wrong element(s) over all ranks; first: rank 1 element 0: got 2, expected 3" : "");
      ++count;
    }
  t.append(rows, count);
  h5::write_strings(w.file(), s::kCommCheckDetails, details);
  w.write_summary("world_size", n);
  w.write_summary("backend", "mpi");
  w.write_summary("rows", double(count));
  w.write_validation({{"comm.all_reduce.fp32", true, "3 sizes checked"},
                      {"comm.reduce_scatter.fp32", !one_failed_check,
                       one_failed_check ? "65536 B failed" : "3 sizes checked"}});
  w.set_status(s::kStatusCompleted);
  pin_root(w.file(), "0123456789abcdef0123456789abcdef01234567", true);
  w.flush();
}

void write_golden_set(const std::string& dir) {
  // single: 50 ms steps, compute-bound.
  TrainFixture single;
  single.name = "single";
  single.phases = [](int, int st, int) -> std::array<double, 5> {
    const double j = st == 0 ? 0.05 : 0.001 * (st % 2);  // a slow first step (warm-up), then jitter
    return {0.004, 0.015 + j, 0.025, 0.0, 0.005};
  };
  // On the roofline (50 GFLOP/s, 10 GB/s): forward and backward compute bound (12 and 20 ms against 5 and
  // 10 ms of bytes), the optimizer memory bound (2 ms): the step compute bound at 34 of its 45 ms.
  single.mem_bandwidth = 10e9;
  single.roofline_flops = {0.6e9, 1.0e9, 0.0};
  single.roofline_bytes = {0.05e9, 0.1e9, 0.02e9};
  write_train_fixture(dir, single);

  // ddp: 2 ranks, one all_reduce of 1 MiB per step, 20 ms exposed of which 2 ms waiting for the other rank:
  // 18 ms transfer (28% of the step) -> communication-bound.
  TrainFixture ddp;
  ddp.name = "ddp";
  ddp.strategy = "ddp";
  ddp.world = 2;
  ddp.phases = [](int, int st, int r) -> std::array<double, 5> {
    return {0.004, 0.015 + (st == 0 ? 0.05 : 0.0), 0.025 + 0.001 * r, 0.020, 0.005};
  };
  ddp.wait = [](int, int, int r) { return r == 0 ? 0.002 : 0.0; };
  ddp.bytes = {1048576.0, 0, 0, 0, 0};
  // Memory bound on the roofline (forward 12 ms of bytes against 4 of FLOPs, backward 20 against 8).
  ddp.mem_bandwidth = 10e9;
  ddp.roofline_flops = {0.2e9, 0.4e9, 0.0};
  ddp.roofline_bytes = {0.12e9, 0.2e9, 0.01e9};
  ddp.mem_peak = 9 << 20;
  ddp.mem_state = 2 << 20;
  ddp.counter_events = {"PAPI_TOT_INS", "PAPI_TOT_CYC", "perf::TASK-CLOCK"};
  write_train_fixture(dir, ddp);

  // fsdp: 2 ranks, 2 trials, rank 1 computes 20 ms longer in backward every step (a persistent straggler) and
  // rank 0 waits those 20 ms for it; a different commit and seed.
  TrainFixture fsdp;
  fsdp.name = "fsdp";
  fsdp.strategy = "fsdp";
  fsdp.world = 2;
  fsdp.trials = 2;
  fsdp.git_commit = "fedcba9876543210fedcba9876543210fedcba98-dirty";
  fsdp.config = {{"run.seed", "7"}, {"parallel.reshard_after_forward", "true"}};
  fsdp.phases = [](int t, int st, int r) -> std::array<double, 5> {
    return {0.004, 0.015 + (st == 0 ? 0.05 : 0.0) + 0.002 * t, 0.025 + 0.02 * r, 0.008 + (r == 0 ? 0.02 : 0.0),
            0.005};
  };
  fsdp.wait = [](int, int, int r) { return r == 0 ? 0.02 : 0.0; };
  fsdp.bytes = {0, 524288.0, 1048576.0, 0, 0};
  fsdp.mem_peak = 6 << 20;
  fsdp.mem_state = 1 << 20;
  fsdp.predicted_state = 1 << 20;
  fsdp.formula = "(2Ψc + 12Ψt) / N";
  write_train_fixture(dir, fsdp);

  // single-bf16: another configuration, data-bound.
  TrainFixture bf16;
  bf16.name = "single-bf16";
  bf16.dtype = "bf16";
  bf16.phases = [](int, int, int) -> std::array<double, 5> { return {0.030, 0.020, 0.030, 0.0, 0.005}; };
  write_train_fixture(dir, bf16);

  TrainFixture failed;
  failed.name = "failed";
  failed.strategy = "zero2";
  failed.world = 2;
  failed.status = "failed";
  failed.message = "non-finite loss at step 1 (train.on_nonfinite = stop; no optimizer update was applied)";
  failed.phases = [](int, int, int) -> std::array<double, 5> { return {0.004, 0.015, 0.025, 0.01, 0.005}; };
  write_train_fixture(dir, failed);

  TrainFixture running;
  running.name = "running";
  running.strategy = "zero1";
  running.world = 2;
  running.status = "running";
  write_train_fixture(dir, running);

  write_comm_fixture((fs::path(dir) / "comm" / "run.h5").string(), "comm", 2);
}

}  // namespace lorabench::report_test
