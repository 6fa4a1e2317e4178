#include "report_analysis.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "lorabench/core/strings.hpp"
#include "lorabench/metrics/stats.hpp"

namespace lorabench::report {

namespace {

double pct(double share) { return 100.0 * share; }

// Sample std of at least two values, else NaN (metrics::sample_stddev's convention).
double std_or_nan(const std::vector<double>& v) { return v.size() >= 2 ? metrics::sample_stddev(v) : NAN; }

std::string human_bytes(double b) { return known(b) ? format_bytes(b) : "n/a"; }

// Per (trial, step): the max-over-ranks step time and the sum of the ranks' tokens.
struct StepAgg {
  double step_max = 0;
  double tokens = 0;
  double loss = NAN;
  int loss_rank = 1 << 30;
};

void fill_from_steps(TrainRow& t, const RunRecord& r) {
  const Columns& s = r.steps;
  auto col = [&](const char* name) -> const std::vector<double>* {
    auto it = s.find(name);
    return it == s.end() ? nullptr : &it->second;
  };
  const auto* trial = col("trial");
  const auto* step = col("step");
  const auto* rank = col("rank");
  const auto* step_s = col("step_s");
  if (!trial || !step || !rank || !step_s) return;
  const auto* tokens = col("tokens");
  const auto* loss = col("loss");
  const size_t n = step->size();
  const int warm = warmup_steps(r);

  std::map<std::pair<int, int64_t>, StepAgg> agg;
  for (size_t i = 0; i < n; ++i) {
    StepAgg& a = agg[{int((*trial)[i]), int64_t((*step)[i])}];
    a.step_max = std::max(a.step_max, (*step_s)[i]);
    if (tokens) a.tokens += (*tokens)[i];
    if (loss && int((*rank)[i]) < a.loss_rank) {
      a.loss_rank = int((*rank)[i]);
      a.loss = (*loss)[i];
    }
  }
  int first_trial = agg.empty() ? 0 : agg.begin()->first.first;
  std::vector<double> step_max, tps;
  for (const auto& [key, a] : agg) {
    if (key.first != first_trial) continue;
    t.loss_curve.push_back({double(key.second), a.loss});
    if (key.second >= warm) {
      step_max.push_back(a.step_max);
      if (tokens && a.step_max > 0) tps.push_back(a.tokens / a.step_max);
    }
  }
  if (t.trials <= 1) {
    t.std_over_steps = true;
    t.std_samples = int(step_max.size());
    t.step_std = std_or_nan(step_max);
    t.tps_std = std_or_nan(tps);
  }

  // Communication over the measured steps of every trial and rank.
  const auto* exposed = col("comm_exposed_s");
  if (!exposed) return;
  std::array<double, kCollectives> bytes{};
  std::array<const std::vector<double>*, kCollectives> bcol{};
  for (int k = 0; k < kCollectives; ++k) bcol[k] = col((std::string("bytes_") + kCollectiveNames[k]).c_str());
  double exposed_sum = 0, weighted = 0;
  size_t rows = 0;
  const int world = known(t.world) ? int(t.world) : 1;
  for (size_t i = 0; i < n; ++i) {
    if ((*step)[i] < warm) continue;
    ++rows;
    exposed_sum += (*exposed)[i];
    for (int k = 0; k < kCollectives; ++k) {
      if (!bcol[k]) continue;
      bytes[k] += (*bcol[k])[i];
      weighted += (*bcol[k])[i] * bus_factor(kCollectiveNames[k], world);
    }
  }
  if (rows == 0) return;
  double most = 0;
  for (int k = 0; k < kCollectives; ++k) {
    t.bytes_per_rank_step[k] = bcol[k] ? bytes[k] / double(rows) : NAN;
    if (bytes[k] > most) {
      most = bytes[k];
      t.dominant_op = k;
    }
  }
  t.comm_exposed_mean_s = exposed_sum / double(rows);
  if (weighted > 0 && exposed_sum > 0) t.achieved_busbw_GBps = weighted / exposed_sum / 1e9;
}

TrainRow make_row(const RunRecord& r) {
  TrainRow t;
  t.run = &r;
  const TextMap& m = r.summary;
  t.strategy = text(m, "strategy");
  if (t.strategy.empty()) t.strategy = text(r.config, "parallel.strategy");
  t.dtype = text(m, "dtype");
  if (t.dtype.empty()) t.dtype = text(r.config, "model.dtype");
  t.model = text(m, "model");
  if (t.model.empty()) t.model = text(r.config, "model.preset");
  t.world = num(m, "world_size");
  if (!known(t.world)) t.world = num(r.provenance, "world_size");
  t.micro_batch = num(m, "micro_batch");
  t.grad_accum = num(m, "grad_accum");
  t.global_batch = num(m, "global_batch_size");
  if (!r.completed()) return t;

  t.loss_first = num(m, "loss_first");
  t.loss_last = num(m, "loss_last");
  t.step_mean = num(m, "step_time_mean_s");
  t.tps_mean = num(m, "tokens_per_s_mean");
  const double trials = num(m, "trials");
  t.trials = known(trials) ? int(trials) : 1;
  if (t.trials > 1) {
    t.step_std = num(m, "step_time_std_s");
    t.tps_std = num(m, "tokens_per_s_std");
    t.std_samples = t.trials;
  }
  t.mfu = num(m, "mfu_mean");
  t.mem_peak = num(m, "mem_peak_bytes_max");
  t.rss_peak = num(m, "rss_peak_bytes_max");
  t.mem_state = num(m, "mem_current_bytes_max");
  t.trainable = num(m, "trainable_params");
  t.trainable_ratio = num(m, "trainable_ratio");

  t.step_rank_median = num(m, "step_time_rank_median_s");
  double sum = 0;
  bool all = known(t.step_rank_median) && t.step_rank_median > 0;
  for (int p = 0; p < kPhases; ++p) {
    const double v = num(m, std::string(kPhaseKeys[p]) + "_s_rank_median");
    t.phase_share[p] = all && known(v) ? v / t.step_rank_median : NAN;
    if (known(t.phase_share[p])) sum += t.phase_share[p];
    else all = false;
  }
  t.other_share = all ? 1.0 - sum : NAN;
  t.straggler = num(m, "straggler_ratio");
  t.slowest_rank = num(m, "slowest_rank");
  fill_from_steps(t, r);
  return t;
}

std::string comm_dtype(const RunRecord& c, size_t row) {
  auto it = c.comm_results.find("dtype");
  if (it != c.comm_results.end() && row < it->second.size()) {
    const size_t code = size_t(it->second[row]);
    if (code < c.dtype_names.size()) return c.dtype_names[code];
  }
  return text(c.comm_attrs, "dtype");
}

double comm_world(const RunRecord& c) {
  double w = num(c.comm_attrs, "world_size");
  if (!known(w)) w = num(c.summary, "world_size");
  return w;
}

// The benchmark row to compare a training run's dominant collective with: same world size; a comm run
// of the training dtype first; the size closest (log scale) to one call's payload, estimated as the
// per-step payload capped at parallel.bucket_mb.
CommReference find_reference(const TrainRow& t, const std::vector<const RunRecord*>& comm) {
  CommReference best;
  if (t.dominant_op < 0 || !known(t.world)) return best;
  const std::string op = kCollectiveNames[t.dominant_op];
  double call = t.bytes_per_rank_step[t.dominant_op];
  const double bucket_mb = num(t.run->config, "parallel.bucket_mb");
  if (known(bucket_mb) && bucket_mb > 0) call = std::min(call, bucket_mb * 1024.0 * 1024.0);
  if (!(call > 0)) return best;
  double best_score = INFINITY;
  for (const RunRecord* c : comm) {
    if (!c->completed() || comm_world(*c) != t.world) continue;
    const auto& ops = c->comm_results.at("op");
    const auto& bytes = c->comm_results.at("bytes");
    const auto& busbw = c->comm_results.at("busbw_GBps");
    for (size_t i = 0; i < ops.size(); ++i) {
      const size_t code = size_t(ops[i]);
      if (code >= c->op_names.size() || c->op_names[code] != op || !(bytes[i] > 0)) continue;
      const std::string dt = comm_dtype(*c, i);
      // Distance in octaves; a dtype mismatch costs more than any size difference.
      const double score = std::abs(std::log2(bytes[i] / call)) + (dt == t.dtype ? 0.0 : 1000.0);
      if (score < best_score) {
        best_score = score;
        best.run = c;
        best.row = i;
        best.busbw_GBps = busbw[i];
        best.bytes = bytes[i];
        best.op = op;
        best.dtype = dt;
      }
    }
  }
  return best;
}

// "1.6 GB/s", or "187 kB/s" / "12.3 MB/s" below 0.1 GB/s (decimal units, as the benchmark's GB/s).
std::string bandwidth(double GBps) {
  if (!known(GBps)) return "n/a";
  if (GBps >= 0.1) return strformat("%.3g GB/s", GBps);
  if (GBps >= 1e-4) return strformat("%.3g MB/s", GBps * 1e3);
  return strformat("%.3g kB/s", GBps * 1e6);
}

std::vector<std::string> comm_evidence(const TrainRow& t, const std::vector<const RunRecord*>& comm,
                                       const AttributionRules& rules) {
  std::vector<std::string> out;
  if (t.dominant_op < 0) return out;
  const std::string op = kCollectiveNames[t.dominant_op];
  std::string s = strformat("%s moved %s per rank per step", op.c_str(),
                            human_bytes(t.bytes_per_rank_step[t.dominant_op]).c_str());
  if (known(t.achieved_busbw_GBps)) {
    s += strformat(", i.e. %s bus bandwidth over the exposed communication time (%s per step)",
                   bandwidth(t.achieved_busbw_GBps).c_str(), strformat("%.3g ms", 1e3 * t.comm_exposed_mean_s).c_str());
  } else {
    s += ", with no exposed communication time (fully overlapped)";
  }
  const CommReference& ref = t.reference;
  if (ref.run) {
    s += strformat("; the collective benchmark (%s) reached %s busbw for %s %s at %s on %d ranks",
                   ref.run->name.c_str(), bandwidth(ref.busbw_GBps).c_str(), ref.op.c_str(), ref.dtype.c_str(),
                   human_bytes(ref.bytes).c_str(), int(t.world));
    if (known(t.achieved_busbw_GBps) && ref.busbw_GBps > 0) {
      const double ratio = t.achieved_busbw_GBps / ref.busbw_GBps;
      s += strformat(" (achieved/benchmark = %.2g%%)", 100.0 * ratio);
      if (ratio < rules.bandwidth_low)
        s += strformat(": far below the benchmark (< %.0f%%), so the exposed time is mostly not spent moving bytes "
                       "but waiting (for slower ranks, or per-call latency of small messages)",
                       100 * rules.bandwidth_low);
      else if (ratio >= rules.bandwidth_high)
        s += strformat(": at least %.0f%% of the benchmark, so the link bandwidth itself is the limit (fewer bytes "
                       "or more overlap would help, a faster link would)",
                       100 * rules.bandwidth_high);
    }
  } else {
    const RunRecord* same_world = nullptr;
    for (const RunRecord* c : comm)
      if (c->completed() && comm_world(*c) == t.world && !same_world) same_world = c;
    if (same_world) {
      s += strformat("; the collective benchmark with %d ranks (%s) has no %s rows to compare with (add it to "
                     "`lorabench comm --ops`)", int(t.world), same_world->name.c_str(), op.c_str());
    } else {
      s += strformat("; no collective benchmark with %d ranks among the inputs to compare with (run "
                     "`mpirun -n %d lorabench comm`)", int(t.world), int(t.world));
    }
  }
  out.push_back(s);
  return out;
}

std::string join_names(const std::vector<std::string>& v) { return join(v, ", "); }

std::set<std::string> host_set(const RunRecord& r) {
  std::set<std::string> out;
  for (const auto& h : split(text(r.provenance, "hosts"), ','))
    if (!h.empty()) out.insert(h);
  return out;
}

void add_field_difference(Analysis& a, const std::vector<const RunRecord*>& runs, const std::string& what,
                          bool root, const std::string& key, const std::string& note) {
  std::map<std::string, std::vector<std::string>> by_value;
  std::vector<std::string> order;
  for (const RunRecord* r : runs) {
    const std::string v = text(root ? r->root : r->provenance, key);
    if (v.empty()) continue;
    if (!by_value.count(v)) order.push_back(v);
    by_value[v].push_back(r->name);
  }
  if (by_value.size() < 2) return;
  Difference d;
  d.what = what;
  d.note = note;
  for (const auto& v : order) d.values.push_back({v, join_names(by_value[v])});
  a.differences.push_back(d);
}

}  // namespace

double bus_factor(const std::string& op, int n) {
  if (n <= 0) return NAN;
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return double(n - 1) / n;
}

bool is_workload_key(const std::string& k) {
  return starts_with(k, "model.") || starts_with(k, "lora.") || starts_with(k, "data.") || starts_with(k, "train.") ||
         k == "parallel.threads_per_rank" || k == "parallel.backend";
}

bool is_identity_key(const std::string& k) {
  static const std::set<std::string> keys = {"run.name",    "run.output_dir",        "run.quiet",
                                             "run.log_every", "run.overwrite",       "input_file",
                                             "checkpoint.keep_last", "checkpoint.save_adapter"};
  return keys.count(k) > 0;
}

bool is_role_key(const std::string& k) {
  static const std::set<std::string> keys = {"parallel.strategy", "parallel.bucket_mb", "parallel.grad_sync",
                                             "parallel.reshard_after_forward", "parallel.prefetch",
                                             "parallel.emulate_nodes"};
  return keys.count(k) > 0;
}

int warmup_steps(const RunRecord& r) {
  const double w = num(r.config, "run.warmup_steps");
  if (known(w)) return int(w);
  const double measured = num(r.summary, "measured_steps");
  auto it = r.steps.find("step");
  if (known(measured) && it != r.steps.end() && !it->second.empty()) {
    const double steps = *std::max_element(it->second.begin(), it->second.end()) + 1;
    return std::max(0, int(steps - measured));
  }
  return 0;
}

CounterSummary summarize_counters(const RunRecord& r, int warm) {
  CounterSummary out;
  if (!r.has_counters) return out;
  out.events = r.counters.events;
  const Columns& c = r.counters.cols;
  const auto& step = c.at("step");
  const auto& rank = c.at("rank");
  const auto& phase = c.at("phase");
  // [phase][event][rank] -> (sum, count)
  std::map<std::tuple<int, size_t, int>, std::pair<double, int>> acc;
  for (size_t i = 0; i < step.size(); ++i) {
    if (step[i] < warm) continue;
    const int p = int(phase[i]);
    if (p < 0 || p >= kPhases) continue;
    for (size_t e = 0; e < out.events.size(); ++e) {
      auto& s = acc[{p, e, int(rank[i])}];
      s.first += c.at(out.events[e])[i];
      s.second += 1;
    }
  }
  for (int p = 0; p < kPhases; ++p) {
    out.values[p].assign(out.events.size(), NAN);
    for (size_t e = 0; e < out.events.size(); ++e) {
      std::vector<double> per_rank;
      for (const auto& [key, s] : acc)
        if (std::get<0>(key) == p && std::get<1>(key) == e) per_rank.push_back(s.first / s.second);
      if (!per_rank.empty()) {
        out.values[p][e] = metrics::median(per_rank);
        out.present[p] = true;
      }
    }
  }
  return out;
}

Attribution attribute(const std::array<double, kPhases>& share, double straggler, double slowest_rank,
                      double mfu, const std::vector<std::string>& comm_ev, const AttributionRules& rules) {
  Attribution a;
  for (double s : share)
    if (!known(s)) {
      a.verdict = "n/a";
      a.evidence.push_back("the phase timings (<phase>_s_rank_median) are missing from /metrics/summary");
      return a;
    }
  const double data = share[0], comm = share[3];
  const double compute = share[1] + share[2] + share[4];
  const bool data_hit = data >= rules.data_share;
  const bool comm_hit = comm >= rules.comm_share;
  const bool strag_hit = known(straggler) && straggler >= rules.straggler_ratio;
  const double data_w = data_hit ? data : -1;
  const double sync_w = (comm_hit || strag_hit) ? std::max(comm, known(straggler) ? straggler - 1.0 : 0.0) : -1;

  const std::string data_sentence =
      strformat("building the batches (data) is %.0f%% of the step (threshold %.0f%%)", pct(data),
                pct(rules.data_share));
  std::string sync_sentence;
  if (comm_hit)
    sync_sentence = strformat("exposed communication is %.0f%% of the step (threshold %.0f%%)", pct(comm),
                              pct(rules.comm_share));
  if (strag_hit) {
    if (!sync_sentence.empty()) sync_sentence += "; ";
    sync_sentence += strformat("the slowest rank (%d) needs %.2fx the median rank's step time (threshold %.2fx), "
                               "so the others wait for it in the collectives",
                               int(slowest_rank), straggler, rules.straggler_ratio);
  }

  if (data_w < 0 && sync_w < 0) {
    a.verdict = "compute-bound";
    std::string s = strformat("forward + backward + optimizer are %.0f%% of the step; data %.0f%% and exposed "
                              "communication %.0f%% are below their %.0f%% thresholds",
                              pct(compute), pct(data), pct(comm), pct(rules.data_share));
    if (known(straggler)) s += strformat("; straggler ratio %.2f (< %.2f)", straggler, rules.straggler_ratio);
    if (known(mfu)) s += strformat("; MFU %.1f%%", pct(mfu));
    a.evidence.push_back(s);
  } else if (data_w >= sync_w) {
    a.verdict = "data-bound";
    a.evidence.push_back(data_sentence + strformat("; forward + backward + optimizer are %.0f%%", pct(compute)));
    if (sync_w >= 0) a.evidence.push_back("also synchronization: " + sync_sentence);
  } else {
    a.verdict = "synchronization-bound";
    a.evidence.push_back(sync_sentence);
    if (data_w >= 0) a.evidence.push_back("also data: " + data_sentence);
  }
  if (!(data_w < 0 && sync_w < 0) || comm > 0)
    for (const auto& e : comm_ev) a.evidence.push_back(e);
  return a;
}

Analysis analyze(const std::vector<RunRecord>& runs, const AttributionRules& rules) {
  Analysis a;
  a.rules = rules;
  for (const auto& r : runs) {
    if (r.is_train()) a.train.push_back(make_row(r));
    else a.comm.push_back(&r);
  }

  // Configurations: completed training runs with equal workload keys.
  std::map<std::vector<std::pair<std::string, std::string>>, size_t> index;
  for (size_t i = 0; i < a.train.size(); ++i) {
    TrainRow& t = a.train[i];
    if (!t.run->completed()) continue;
    std::vector<std::pair<std::string, std::string>> key;
    for (const auto& [k, v] : t.run->config)
      if (is_workload_key(k)) key.push_back({k, v});
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, a.configs.size()).first;
      Config c;
      c.label = "C" + std::to_string(a.configs.size() + 1);
      c.key = key;
      a.configs.push_back(c);
    }
    t.config = int(it->second);
    a.configs[it->second].rows.push_back(i);
  }

  for (auto& c : a.configs) {
    std::vector<const TrainRow*> ones;
    for (size_t i : c.rows)
      if (a.train[i].world == 1) ones.push_back(&a.train[i]);
    if (ones.empty()) {
      c.baseline_note = "no one-rank run of this configuration among the inputs";
    } else {
      c.baseline = ones.front();
      for (const TrainRow* t : ones)
        if (t->strategy == "single") {
          c.baseline = t;
          break;
        }
      if (ones.size() > 1)
        c.baseline_note = strformat("%zu one-rank runs; baseline %s (strategy single preferred, else the first)",
                                    ones.size(), c.baseline->run->name.c_str());
    }
    for (size_t i : c.rows) {
      TrainRow& t = a.train[i];
      if (c.baseline && known(c.baseline->tps_mean) && c.baseline->tps_mean > 0 && known(t.world)) {
        t.baseline = c.baseline;
        t.speedup = t.tps_mean / c.baseline->tps_mean;
        t.efficiency = t.speedup / t.world;
      }
      for (size_t j : c.rows) {
        const TrainRow& d = a.train[j];
        if (d.strategy == "ddp" && d.world == t.world) {
          t.ddp = &d;
          if (known(d.mem_peak) && d.mem_peak > 0 && known(t.mem_peak)) t.saving_vs_ddp = 1.0 - t.mem_peak / d.mem_peak;
          break;
        }
      }
    }
  }

  for (auto& t : a.train) {
    if (!t.run->completed()) continue;
    t.reference = find_reference(t, a.comm);
    t.attribution =
        attribute(t.phase_share, t.straggler, t.slowest_rank, t.mfu, comm_evidence(t, a.comm, rules), rules);
  }

  // Provenance differences between the compared runs (every completed input).
  std::vector<const RunRecord*> compared;
  for (const auto& r : runs)
    if (r.completed()) compared.push_back(&r);
  add_field_difference(a, compared, "git commit", true, "git_commit", "");
  add_field_difference(a, compared, "program version", true, "program_version", "");
  add_field_difference(a, compared, "CPU model", false, "cpu_model", "");
  add_field_difference(a, compared, "MPI library", false, "mpi_library", "");
  add_field_difference(a, compared, "libtorch version", false, "libtorch_version", "");
  add_field_difference(a, compared, "HDF5 version", false, "hdf5_version", "");
  add_field_difference(a, compared, "NCCL version", false, "nccl_version", "");
  {
    // Hosts: a difference only when two runs' host sets are not nested (a one-node baseline on one of an
    // N-node run's nodes is the normal scaling setup).
    bool disjoint = false;
    for (size_t i = 0; i < compared.size() && !disjoint; ++i)
      for (size_t j = i + 1; j < compared.size() && !disjoint; ++j) {
        auto x = host_set(*compared[i]), y = host_set(*compared[j]);
        if (x.empty() || y.empty()) continue;
        const bool nested = std::includes(x.begin(), x.end(), y.begin(), y.end()) ||
                            std::includes(y.begin(), y.end(), x.begin(), x.end());
        disjoint = !nested;
      }
    if (disjoint)
      add_field_difference(a, compared, "hosts", false, "hosts",
                           "some runs ran on hosts that are not a subset of another run's hosts");
  }
  // Configuration keys that differ inside a configuration (other than identity and role keys).
  for (const auto& c : a.configs) {
    if (c.rows.size() < 2) continue;
    std::set<std::string> keys;
    for (size_t i : c.rows)
      for (const auto& [k, v] : a.train[i].run->config) keys.insert(k);
    for (const auto& k : keys) {
      if (is_workload_key(k) || is_identity_key(k) || is_role_key(k)) continue;
      std::map<std::string, std::vector<std::string>> by_value;
      std::vector<std::string> order;
      for (size_t i : c.rows) {
        const RunRecord& r = *a.train[i].run;
        auto it = r.config.find(k);
        const std::string v = it == r.config.end() ? "(absent)" : it->second;
        if (!by_value.count(v)) order.push_back(v);
        by_value[v].push_back(r.name);
      }
      if (by_value.size() < 2) continue;
      Difference d;
      d.what = "config " + k + " (" + c.label + ")";
      for (const auto& v : order) d.values.push_back({v, join_names(by_value[v])});
      a.differences.push_back(d);
    }
  }
  return a;
}

}  // namespace lorabench::report
