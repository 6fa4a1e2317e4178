#include "report_analysis.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "lorabench/core/strings.hpp"
#include "lorabench/metrics/stats.hpp"

namespace lorabench::report {

namespace {

double pct(double share) { return 100.0 * share; }

// Seconds as milliseconds: 3 significant digits, whole milliseconds from 100 ms on ("1270 ms", "8.5 ms").
std::string ms_text(double s) {
  if (!known(s)) return "n/a";
  return std::abs(1e3 * s) >= 100 ? strformat("%.0f ms", 1e3 * s) : strformat("%.3g ms", 1e3 * s);
}

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

  // Communication over the measured steps of every trial and rank. The bandwidth divides by the transfer
  // time (blocked after every rank arrived); rows whose split is unknown (NaN) are left out of it.
  const auto* exposed = col("comm_exposed_s");
  const auto* transfer = col("transfer_s");
  if (!exposed) return;
  std::array<double, kCollectives> bytes{};
  std::array<const std::vector<double>*, kCollectives> bcol{};
  for (int k = 0; k < kCollectives; ++k) bcol[k] = col((std::string("bytes_") + kCollectiveNames[k]).c_str());
  double exposed_sum = 0, transfer_sum = 0, weighted = 0;
  size_t rows = 0, transfer_rows = 0;
  const int world = known(t.world) ? int(t.world) : 1;
  for (size_t i = 0; i < n; ++i) {
    if ((*step)[i] < warm) continue;
    ++rows;
    exposed_sum += (*exposed)[i];
    const bool split = transfer && known((*transfer)[i]);
    if (split) {
      ++transfer_rows;
      transfer_sum += (*transfer)[i];
    }
    for (int k = 0; k < kCollectives; ++k) {
      if (!bcol[k]) continue;
      bytes[k] += (*bcol[k])[i];
      if (split) weighted += (*bcol[k])[i] * bus_factor(kCollectiveNames[k], world);
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
  if (transfer_rows > 0) t.transfer_mean_s = transfer_sum / double(transfer_rows);
  if (weighted > 0 && transfer_sum > 0) t.achieved_busbw_GBps = weighted / transfer_sum / 1e9;
}

// Stragglers from compute time and the per-rank means, from /metrics/steps (measured steps of every
// trial; a step counts only when every rank has a row).
void fill_stragglers(TrainRow& t, const RunRecord& r, double threshold) {
  const Columns& s = r.steps;
  const char* need[] = {"trial", "step", "rank", "compute_s", "wait_peers_s", "transfer_s",
                        "data_s", "forward_s", "backward_s", "optimizer_s"};
  for (const char* c : need)
    if (!s.count(c)) return;
  if (!known(t.world) || t.world < 1) return;
  const size_t world = size_t(t.world);
  const auto &trial = s.at("trial"), &step = s.at("step"), &rank = s.at("rank");
  const int warm = warmup_steps(r);
  // (trial, step) -> row index per rank
  std::map<std::pair<int, int64_t>, std::vector<long>> by_step;
  for (size_t i = 0; i < step.size(); ++i) {
    if (step[i] < warm || rank[i] < 0 || size_t(rank[i]) >= world) continue;
    auto& v = by_step[{int(trial[i]), int64_t(step[i])}];
    if (v.empty()) v.assign(world, -1);
    v[size_t(rank[i])] = long(i);
  }
  const char* phase_cols[] = {"data_s", "forward_s", "backward_s", "optimizer_s"};  // metrics::kStragglerPhases
  std::vector<std::vector<double>> compute;
  std::vector<std::vector<double>> phase_sum(4, std::vector<double>(world, 0.0));
  std::vector<RankStat> ranks(world);
  for (auto& rs : ranks) rs.compute_s = rs.wait_s = rs.transfer_s = rs.data_s = 0;
  for (const auto& [key, idx] : by_step) {
    if (std::find(idx.begin(), idx.end(), -1L) != idx.end()) continue;
    compute.emplace_back();
    for (size_t w = 0; w < world; ++w) {
      const size_t i = size_t(idx[w]);
      compute.back().push_back(s.at("compute_s")[i]);
      ranks[w].compute_s += s.at("compute_s")[i];
      ranks[w].wait_s += s.at("wait_peers_s")[i];
      ranks[w].transfer_s += s.at("transfer_s")[i];
      ranks[w].data_s += s.at("data_s")[i];
      for (int p = 0; p < 4; ++p) phase_sum[p][w] += s.at(phase_cols[p])[i];
    }
  }
  if (compute.empty()) return;
  const double n = double(compute.size());
  for (auto& rs : ranks) {
    rs.compute_s /= n;
    rs.wait_s /= n;
    rs.transfer_s /= n;
    rs.data_s /= n;
  }
  for (auto& p : phase_sum)
    for (double& v : p) v /= n;
  std::vector<double> means;
  for (const auto& rs : ranks) means.push_back(rs.compute_s);
  for (size_t w = 0; w < world; ++w) ranks[w].vs_others = metrics::ratio_to_others(means, w);
  t.stragglers = metrics::summarize_stragglers(compute, threshold, phase_sum);
  for (const auto& st : t.stragglers.steps)
    if (st.ratio >= threshold) ++ranks[st.slowest_rank].slowest_steps;
  t.ranks = ranks;
  t.straggler_steps_measured = int(compute.size());
  t.has_stragglers = true;
}

// The roofline attributes of /metrics/summary (all of them, or the run has none).
void fill_roofline(TrainRow& t, const TextMap& m) {
  t.mem_bandwidth = num(m, "mem_bandwidth_per_rank");
  t.ridge = num(m, "roofline_ridge_flops_per_byte");
  t.bandwidth_source = text(m, "mem_bandwidth_source");
  bool all = known(t.mem_bandwidth) && known(t.ridge);
  for (int i = 0; i < kRooflineCells; ++i) {
    const std::string p = std::string("roofline_") + kRooflineCellNames[size_t(i)] + "_";
    RooflineCell& c = t.roofline[size_t(i)];
    c.flops = num(m, p + "flops");
    c.bytes = num(m, p + "bytes");
    c.bound_s = num(m, p + "bound_s");
    c.measured_s = num(m, p + "measured_s");
    c.fraction = num(m, p + "fraction");
    c.limit = text(m, p + "limit");
    all = all && known(c.bytes) && known(c.bound_s) && (c.limit == "memory" || c.limit == "compute");
  }
  t.has_roofline = all;
}

TrainRow make_row(const RunRecord& r) {
  TrainRow t;
  t.run = &r;
  const TextMap& m = r.summary;
  t.strategy = text(m, "strategy");
  if (t.strategy.empty()) t.strategy = text(r.config, "parallel.strategy");
  // A mesh (hsdp, tensor parallelism) names its shape, so that runs group by mesh: "hsdp (2 x 2)" = 2 replicas of
  // 2 shards; "ddp (dp 2 x tp 2)" = ddp across 2 tensor-parallel groups of 2 ranks, "single (tp 2)" one group.
  int replicas = 0, shards = 0, tp = 0;
  const int dims = std::sscanf(text(m, "mesh").c_str(), "dp_replicate %d x dp_shard %d x tp %d", &replicas, &shards, &tp);
  if (dims == 3 && tp > 1)
    t.strategy += replicas > 1 ? " (dp " + std::to_string(replicas) + " x tp " + std::to_string(tp) + ")"
                               : " (tp " + std::to_string(tp) + ")";
  else if (dims >= 2)
    t.strategy += " (" + std::to_string(replicas) + " x " + std::to_string(shards) + ")";
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
  t.peak_per_rank = num(m, "peak_flops_per_rank");
  t.peak_source = text(m, "peak_flops_source");
  t.resumed_at = num(m, "resumed_at_step");
  t.asked_prediction = text(r.config, "run.predict") == "true";
  t.mem_peak = num(m, "mem_peak_bytes_max");
  t.rss_peak = num(m, "rss_peak_bytes_max");
  t.pred_mem_peak = num(m, "predicted_tensor_peak_bytes");
  t.pred_rss = num(m, "predicted_rss_bytes");
  t.reserved_peak = num(m, "mem_reserved_peak_bytes_max");
  t.pred_reserved = num(m, "predicted_reserved_bytes");
  t.pred_step = num(m, "predicted_step_time_s");
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
  if (known(t.step_rank_median) && t.step_rank_median > 0) {
    t.wait_share = num(m, "wait_peers_s_rank_median") / t.step_rank_median;
    t.transfer_share = num(m, "transfer_s_rank_median") / t.step_rank_median;
  }
  fill_roofline(t, m);
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

}  // namespace

std::string percent_text(double ratio) {
  const double pct = 100.0 * ratio;
  return std::abs(pct) < 10 ? strformat("%.1f%%", pct) : strformat("%.0f%%", pct);
}

namespace {

// "1.6 GB/s", or "187 kB/s" / "12.3 MB/s" below 0.1 GB/s (decimal units, as the benchmark's GB/s).
std::string bandwidth(double GBps) {
  if (!known(GBps)) return "n/a";
  if (GBps >= 0.1) return strformat("%.3g GB/s", GBps);
  if (GBps >= 1e-4) return strformat("%.3g MB/s", GBps * 1e3);
  return strformat("%.3g kB/s", GBps * 1e6);
}

}  // namespace

std::vector<std::string> comm_evidence(const TrainRow& t, const std::vector<const RunRecord*>& comm,
                                       const AttributionRules& rules) {
  std::vector<std::string> out;
  if (t.dominant_op < 0) return out;
  const std::string op = kCollectiveNames[t.dominant_op];
  std::string s = strformat("%s moved %s per rank per step", op.c_str(),
                            human_bytes(t.bytes_per_rank_step[t.dominant_op]).c_str());
  if (known(t.achieved_busbw_GBps)) {
    s += strformat(", i.e. %s bus bandwidth over the transfer time (%s per step blocked after every rank "
                   "arrived)",
                   bandwidth(t.achieved_busbw_GBps).c_str(), ms_text(t.transfer_mean_s).c_str());
  } else {
    s += ", with no transfer time (fully overlapped, or the wait/transfer split is unknown)";
  }
  const CommReference& ref = t.reference;
  if (ref.run) {
    s += strformat("; the collective benchmark (%s) reached %s busbw for %s %s at %s on %d ranks",
                   ref.run->name.c_str(), bandwidth(ref.busbw_GBps).c_str(), ref.op.c_str(), ref.dtype.c_str(),
                   human_bytes(ref.bytes).c_str(), int(t.world));
    if (known(t.achieved_busbw_GBps) && ref.busbw_GBps > 0) {
      const double ratio = t.achieved_busbw_GBps / ref.busbw_GBps;
      s += " (achieved/benchmark = " + percent_text(ratio) + ")";
      if (ratio < rules.bandwidth_low)
        s += strformat(": far below the benchmark (< %.0f%%), so the transfer time is mostly not spent moving "
                       "bytes (per-call latency of small messages, progress of non-blocking collectives, or a "
                       "slowed link)",
                       100 * rules.bandwidth_low);
      else if (ratio > rules.bandwidth_above)
        s += strformat(": above the benchmark (> %.0f%%), which no transfer over the same link can be: the "
                       "transfer time undercounts how long the bytes took (the collective overlapped compute "
                       "before the last rank arrived), or the benchmark's size or placement is not comparable; "
                       "this does not show the link to be the limit",
                       100 * rules.bandwidth_above);
      else if (ratio >= rules.bandwidth_high)
        s += strformat(": %.0f%% to %.0f%% of the benchmark, so the transfers run at the link's rate (fewer bytes "
                       "or more overlap would shorten them, and a faster link would)",
                       100 * rules.bandwidth_high, 100 * rules.bandwidth_above);
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

namespace {

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
                                             "parallel.emulate_nodes", "parallel.dp_replicate", "parallel.tp"};
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

namespace {

// The straggler sentence: who, by how much, in which phase, how often, and what it costs the others.
std::string straggler_sentence(const AttributionInput& in, const AttributionRules& rules) {
  const metrics::StragglerSummary& g = in.stragglers;
  const size_t named = g.named_rank;
  std::vector<double> others;
  for (size_t r = 0; r < in.rank_compute_s.size(); ++r)
    if (r != named) others.push_back(in.rank_compute_s[r]);
  const double mine = named < in.rank_compute_s.size() ? in.rank_compute_s[named] : NAN;
  const double rest = others.empty() ? NAN : metrics::median(others);
  std::string s;
  if (g.kind == "persistent") {
    s = strformat("rank %zu computes %.2fx as long as the other ranks (%s vs %s per step, their median); it is the "
                  "slowest, with a step straggler ratio of at least %.2f, in %zu of %d measured steps (a persistent "
                  "straggler)",
                  named, g.factor, ms_text(mine).c_str(), ms_text(rest).c_str(), rules.straggler_ratio,
                  g.named_steps, in.measured_steps);
    if (g.phase >= 0)
      s += strformat("; its largest excess is in %s (+%s per step)", metrics::kStragglerPhases[size_t(g.phase)],
                     ms_text(g.phase_excess_s).c_str());
  } else {
    s = strformat("no single slow rank: in the median step the straggler ratio is %.3f (threshold %.2f), but the slowest rank changes from step to step (rank %zu in %zu of %d measured steps; "
                  "the slowest on average computes %.2fx the others)",
                  g.step_ratio_median, rules.straggler_ratio, named, g.named_steps, in.measured_steps, g.factor);
  }
  s += strformat("; straggler ratio %.3f (slowest / the other ranks' median mean compute; median step %.3f, threshold %.2f); "
                 "the ranks wait for it: waiting for peers is %.0f%% of the step",
                 g.ratio, g.step_ratio_median, rules.straggler_ratio, pct(in.wait_share));
  return s;
}

}  // namespace

namespace {

// The roofline sentence: the compute phases' bound, how much of it the step achieves, and each phase's limit.
std::string roofline_sentence(const AttributionInput& in) {
  const RooflineCell& st = in.roofline[3];
  std::string s = strformat("on the roofline (docs/metrics.md) forward + backward + optimizer are %s: their lower bound "
                            "is %s per step and they take %s, %.0f%% of the bound achieved",
                            st.limit == "memory" ? "memory bound" : "compute bound", ms_text(st.bound_s).c_str(),
                            ms_text(st.measured_s).c_str(), pct(st.fraction));
  std::vector<std::string> parts;
  for (int i = 0; i < 3; ++i) {
    const RooflineCell& c = in.roofline[size_t(i)];
    if (c.limit == "memory" && known(c.flops) && c.flops > 0 && known(c.bytes) && c.bytes > 0)
      parts.push_back(strformat("%s at %.1f FLOP/byte", kRooflineCellNames[size_t(i)], c.flops / c.bytes));
    else if (c.limit == "memory")
      parts.push_back(kRooflineCellNames[size_t(i)]);
  }
  if (parts.empty()) {
    s += "; no phase is memory bound";
  } else {
    s += "; memory bound: ";
    for (size_t k = 0; k < parts.size(); ++k) s += (k ? ", " : "") + parts[k];
    if (known(in.ridge)) s += strformat(" (the ridge is at %.1f FLOP/byte)", in.ridge);
  }
  return s;
}

}  // namespace

Attribution attribute(const AttributionInput& in, const AttributionRules& rules) {
  Attribution a;
  for (double s : in.share)
    if (!known(s)) {
      a.verdict = "n/a";
      a.evidence.push_back("the phase timings (<phase>_s_rank_median) are missing from /metrics/summary");
      return a;
    }
  if (!known(in.wait_share) || !known(in.transfer_share) || !in.has_stragglers) {
    a.verdict = "n/a";
    a.evidence.push_back("the split of the blocked time (wait_peers_s, transfer_s) or compute_s is missing or "
                         "unknown (the ranks' collective timelines did not match)");
    return a;
  }
  const metrics::StragglerSummary& g = in.stragglers;
  const double data = in.share[0], comm = in.share[3];
  const double compute = in.share[1] + in.share[2] + in.share[4];
  // Each cause that reaches its threshold, with the share of the step it costs.
  struct Cause {
    const char* verdict;
    double weight;
    std::string sentence;
  };
  std::vector<Cause> hits;
  if (data >= rules.data_share)
    hits.push_back({"data-bound", data,
                    strformat("building the batches (data) is %.0f%% of the step (threshold %.0f%%); forward + "
                              "backward + optimizer are %.0f%%",
                              pct(data), pct(rules.data_share), pct(compute))});
  if (known(g.step_ratio_median) && g.step_ratio_median >= rules.straggler_ratio)
    hits.push_back({"straggler-bound", in.wait_share, straggler_sentence(in, rules)});
  if (in.transfer_share >= rules.transfer_share)
    hits.push_back({"communication-bound", in.transfer_share,
                    strformat("the ranks arrive together (waiting for peers is %.0f%% of the step) yet stay blocked "
                              "%.0f%% of the step after the last one arrived (transfer, threshold %.0f%%)",
                              pct(in.wait_share), pct(in.transfer_share), pct(rules.transfer_share))});
  if (hits.empty()) {
    a.verdict = in.has_roofline && in.roofline[3].limit == "memory" ? "memory-bound" : "compute-bound";
    std::string s = strformat("forward + backward + optimizer are %.0f%% of the step; data %.0f%% and transfer %.0f%% "
                              "are below their thresholds (%.0f%%, %.0f%%), waiting for peers is %.0f%%",
                              pct(compute), pct(data), pct(in.transfer_share), pct(rules.data_share),
                              pct(rules.transfer_share), pct(in.wait_share));
    if (known(g.step_ratio_median))
      s += strformat("; the median step's straggler ratio is %.3f (< %.2f)", g.step_ratio_median,
                     rules.straggler_ratio);
    if (known(in.mfu)) s += strformat("; MFU %.1f%%", pct(in.mfu));
    a.evidence.push_back(s);
    if (in.has_roofline) a.evidence.push_back(roofline_sentence(in));
  } else {
    // The largest cost wins (the first listed among equals); the others are named.
    const auto win = std::max_element(hits.begin(), hits.end(),
                                      [](const Cause& x, const Cause& y) { return x.weight < y.weight; });
    a.verdict = win->verdict;
    a.evidence.push_back(win->sentence);
    for (const auto& h : hits) {
      if (&h == &*win) continue;
      std::string what = h.verdict;
      what = what.substr(0, what.find('-'));
      a.evidence.push_back("also " + what + ": " + h.sentence);
    }
  }
  if (g.kind == "hiccup")
    a.evidence.push_back(strformat("hiccups, not a straggler: %zu of %d measured steps had a rank computing at least "
                                   "%.2fx the median of the other ranks' (rank %d in %zu of them), the median step did not "
                                   "(%.3f)",
                                   g.steps_over, in.measured_steps, rules.straggler_ratio, g.top_rank, g.top_steps,
                                   g.step_ratio_median));
  if (in.has_roofline && !hits.empty()) a.evidence.push_back("also " + roofline_sentence(in));
  if ((a.verdict != "compute-bound" && a.verdict != "memory-bound") || comm > 0)
    for (const auto& e : in.comm_evidence) a.evidence.push_back(e);
  return a;
}

Analysis analyze(const std::vector<RunRecord>& runs, const AttributionRules& rules) {
  Analysis a;
  a.rules = rules;
  for (const auto& r : runs) {
    if (r.is_train()) {
      a.train.push_back(make_row(r));
      if (r.completed()) fill_stragglers(a.train.back(), r, rules.straggler_ratio);
    } else {
      a.comm.push_back(&r);
    }
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
    AttributionInput in;
    in.share = t.phase_share;
    in.wait_share = t.wait_share;
    in.transfer_share = t.transfer_share;
    in.has_stragglers = t.has_stragglers;
    in.stragglers = t.stragglers;
    for (const auto& rs : t.ranks) in.rank_compute_s.push_back(rs.compute_s);
    in.measured_steps = t.straggler_steps_measured;
    in.mfu = t.mfu;
    in.comm_evidence = comm_evidence(t, a.comm, rules);
    in.has_roofline = t.has_roofline;
    in.roofline = t.roofline;
    in.ridge = t.ridge;
    t.attribution = attribute(in, rules);
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
