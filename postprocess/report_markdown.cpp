#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "lorabench/core/strings.hpp"
#include "report_render.hpp"

namespace lorabench::report {

namespace {

const char* kNA = "n/a";

// One Markdown table cell: pipes escaped, line breaks flattened.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out.empty() ? "" : out;
}

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  std::string str() const {
    std::string s = "|";
    for (const auto& h : header_) s += " " + cell(h) + " |";
    s += "\n|";
    for (size_t i = 0; i < header_.size(); ++i) s += " --- |";
    s += "\n";
    for (const auto& r : rows_) {
      s += "|";
      for (size_t i = 0; i < header_.size(); ++i) s += " " + (i < r.size() ? cell(r[i]) : std::string()) + " |";
      s += "\n";
    }
    return s;
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

int decimals_for(double v, int sig) {
  if (v == 0 || !std::isfinite(v)) return sig - 1;
  const int mag = int(std::floor(std::log10(std::abs(v))));
  return std::clamp(sig - 1 - mag, 0, 6);
}

std::string bytes(double b) { return known(b) ? format_bytes(b) : kNA; }
std::string ms(double s) { return known(s) ? fmt_sig(1e3 * s) : kNA; }
std::string intish(double v) { return known(v) ? strformat("%.0f", v) : kNA; }
std::string code(const std::string& s) { return s.empty() ? std::string(kNA) : "`" + s + "`"; }
std::string or_na(const std::string& s) { return s.empty() ? std::string(kNA) : s; }

std::string status_cell(const RunRecord& r) {
  if (r.status == "failed")
    return "**FAILED**" + (r.status_message.empty() ? std::string() : ": " + r.status_message);
  if (r.status == "preempted")
    return "**PREEMPTED**" + (r.status_message.empty() ? std::string() : ": " + r.status_message);
  if (r.status == "running") return "**RUNNING / NOT FINISHED** (no final status: still running, or killed)";
  return "**" + r.status + "**";
}

// How far an unfinished training run got: "steps 0-11 of 60 written (trial 1 of 1)".
std::string progress(const RunRecord& r) {
  auto st = r.steps.find("step");
  if (!r.is_train() || st == r.steps.end() || st->second.empty()) return "no steps written";
  auto tr = r.steps.find("trial");
  const double last_trial = tr == r.steps.end() ? 0 : *std::max_element(tr->second.begin(), tr->second.end());
  double last_step = 0;
  for (size_t i = 0; i < st->second.size(); ++i)
    if (tr == r.steps.end() || tr->second[i] == last_trial) last_step = std::max(last_step, st->second[i]);
  const double steps = num(r.config, "run.steps"), trials = num(r.config, "run.repeat");
  return strformat("steps 0-%.0f of %s written in trial %.0f of %s", last_step, intish(steps).c_str(),
                   last_trial + 1, intish(trials).c_str());
}

std::string batch_cell(const TrainRow& t) {
  if (!known(t.micro_batch) || !known(t.grad_accum) || !known(t.world)) return kNA;
  return strformat("%.0f x %.0f x %.0f = %s", t.micro_batch, t.grad_accum, t.world, intish(t.global_batch).c_str());
}

std::string config_label(const Analysis& a, const TrainRow& t) {
  return t.config >= 0 ? a.configs[size_t(t.config)].label : std::string("—");
}

std::string short_commit(const std::string& c) {
  if (c.size() <= 12) return c;
  const bool dirty = ends_with(c, "-dirty");
  return c.substr(0, 12) + (dirty ? "-dirty" : "");
}

void section_inputs(std::ostringstream& o, const std::vector<RunRecord>& runs, const MarkdownOptions& opt) {
  o << "## Inputs\n\n";
  Table t({"run", "kind", "status", "verdict", "git commit", "file"});
  for (const auto& r : runs)
    t.add({r.name, r.kind, r.status, or_na(r.verdict), code(short_commit(text(r.root, "git_commit"))), code(r.path)});
  o << t.str() << "\n";
  for (const auto& n : opt.notes) o << "- note: " << n << "\n";
  if (!opt.notes.empty()) o << "\n";
  std::vector<const RunRecord*> bad;
  for (const auto& r : runs)
    if (!r.completed()) bad.push_back(&r);
  if (!bad.empty()) {
    o << "> **Not completed** (reported with their status instead of metrics, left out of every comparison):\n";
    for (const RunRecord* r : bad) {
      o << "> - `" << r->name << "` (" << r->kind << "): " << status_cell(*r);
      if (r->is_train()) o << "; " << progress(*r);
      o << "\n";
    }
    o << "\n";
  }
}

void section_provenance(std::ostringstream& o, const Analysis& a) {
  o << "## Provenance warnings\n\n";
  if (a.differences.empty()) {
    o << "None: the completed runs share git commit, program version, CPU model, hosts, MPI/libtorch/HDF5/NCCL "
         "versions, and each configuration's runs differ only in the keys being compared.\n\n";
    return;
  }
  o << "The compared runs differ in more than the keys being compared (strategy and its tuning knobs, world "
       "size); read the comparisons below with that in mind.\n\n";
  for (const auto& d : a.differences) {
    o << "- **" << d.what << "**:";
    for (size_t i = 0; i < d.values.size(); ++i)
      o << (i ? ";" : "") << " `" << d.values[i].first << "` (" << d.values[i].second << ")";
    if (!d.note.empty()) o << " — " << d.note;
    o << "\n";
  }
  o << "\n";
}

void section_configs(std::ostringstream& o, const Analysis& a) {
  if (a.configs.empty()) return;
  o << "## Configurations\n\n";
  o << "Completed training runs with equal workload keys (every `model.*`, `lora.*`, `data.*`, `train.*` key, "
       "`parallel.threads_per_rank`, `parallel.backend`) form one configuration; only runs of the same "
       "configuration are compared with each other.\n\n";
  auto val = [](const Config& c, const std::string& k) {
    for (const auto& [key, v] : c.key)
      if (key == k) return v;
    return std::string(kNA);
  };
  Table t({"config", "runs", "model", "dtype", "seq_len", "micro_batch", "grad_accum", "lora (r)",
           "differs from C1 in"});
  for (const auto& c : a.configs) {
    std::vector<std::string> names;
    for (size_t i : c.rows) names.push_back(a.train[i].run->name);
    // A preset's name says its family and size (qwen3-0.6b); a snapshot directory's gets the family the
    // run recorded. A hybrid model's layer mix is named either way: it says what the step time is made of (the
    // linear-attention layers have no T x T term).
    std::string preset = val(c, "model.path");
    const TextMap* summary = c.rows.empty() ? nullptr : &a.train[c.rows.front()].run->summary;
    const std::string layers = summary ? text(*summary, "model_layers") : std::string();
    std::vector<std::string> about;
    if (preset.empty() || preset == kNA) {
      preset = val(c, "model.preset");
    } else if (summary && !text(*summary, "model_family").empty()) {
      about.push_back(text(*summary, "model_family"));
    }
    if (layers.find("linear") != std::string::npos) about.push_back(layers);
    if (!about.empty()) {
      preset += " (";  // appended piece by piece: GCC 12 misreads "(" + std::string&& as an overlapping copy
      preset += join(about, ", ");
      preset += ")";
    }
    std::vector<std::string> diff;
    if (&c != &a.configs.front()) {
      const Config& f = a.configs.front();
      std::map<std::string, std::string> m0(f.key.begin(), f.key.end()), m1(c.key.begin(), c.key.end());
      for (const auto& [k, v] : m1)
        if (!m0.count(k) || m0[k] != v) diff.push_back(k + "=" + v);
      for (const auto& [k, v] : m0)
        if (!m1.count(k)) diff.push_back(k + " (absent)");
    }
    const std::string lora = val(c, "lora.enabled") == "false" ? "off (full)" : val(c, "lora.r");
    t.add({c.label, join(names, ", "), preset, val(c, "model.dtype"), val(c, "data.seq_len"),
           val(c, "train.micro_batch"), val(c, "train.grad_accum"), lora, diff.empty() ? "—" : join(diff, ", ")});
  }
  o << t.str() << "\n";
}

void section_runs(std::ostringstream& o, const Analysis& a) {
  o << "## Runs\n\n";
  Table t({"run", "config", "strategy", "world", "dtype", "batch: micro x accum x world = global",
           "loss first → last", "step time (ms)", "tokens/s", "± over", "MFU", "peak tensor mem / rank",
           "peak RSS / rank", "trainable params", "verdict"});
  bool any_steps = false, any_trials = false;
  for (const auto& r : a.train) {
    const RunRecord& run = *r.run;
    if (!run.completed()) {
      t.add({run.name, "—", or_na(r.strategy), intish(r.world), or_na(r.dtype), batch_cell(r), "—", "—", "—",
             "—",
             "—", "—", "—", "—", status_cell(run)});
      continue;
    }
    std::string loss = (known(r.loss_first) ? strformat("%.4f", r.loss_first) : kNA) + " → " +
                       (known(r.loss_last) ? strformat("%.4f", r.loss_last) : kNA);
    if (known(r.resumed_at) && r.resumed_at > 0) loss += strformat(" (resumed: first = step %.0f)", r.resumed_at);
    std::string mfu = fmt_pct(r.mfu);
    if (known(r.mfu) && r.mfu > 1) mfu = "**" + mfu + "** (peak too low)";
    std::string over;
    if (r.std_over_steps) {
      over = strformat("%d steps", r.std_samples);
      any_steps = true;
    } else {
      over = strformat("%d trials", r.std_samples);
      any_trials = true;
    }
    const std::string ratio = known(r.trainable_ratio) ? strformat("%.3f%%", 100 * r.trainable_ratio) : kNA;
    const std::string params = known(r.trainable) ? fmt_count(r.trainable) + " (" + ratio + ")" : kNA;
    std::string verdict = or_na(run.verdict);
    if (verdict == "INVALID") verdict = "**INVALID**";
    t.add({run.name, config_label(a, r), r.strategy, intish(r.world), r.dtype, batch_cell(r), loss,
           fmt_pm(1e3 * r.step_mean, 1e3 * r.step_std), fmt_pm(r.tps_mean, r.tps_std), over, mfu,
           bytes(r.mem_peak), bytes(r.rss_peak), params, verdict});
  }
  if (t.empty()) {
    o << "No training runs among the inputs.\n\n";
    return;
  }
  o << t.str() << "\n";
  o << "Step time is the max over ranks of each step's wall time; tokens/s counts every rank's tokens per step "
       "divided by that time; both exclude the warm-up steps.";
  if (any_trials)
    o << " *N trials*: mean ± sample standard deviation of the per-trial means (`step_time_std_s`, "
         "`tokens_per_s_std`).";
  if (any_steps)
    o << " *N steps*: one trial, so ± is the sample standard deviation over the measured steps of the "
         "max-over-ranks step time (and of the per-step tokens/s), computed from `/metrics/steps` — step-to-step "
         "jitter, not run-to-run spread.";
  o << " MFU = model FLOPs / (step time x world x peak FLOP/s per rank).\n\n";
  // Notes the table's cells cannot hold: an INVALID verdict always says why (the run file's failed checks,
  // as the run's closing log printed them), and an MFU above 100% names the peak that is too low.
  bool any_note = false;
  for (const auto& r : a.train) {
    if (!r.run->completed()) continue;
    for (const auto& c : r.run->validation) {
      if (c.passed) continue;
      o << "- **" << r.run->name << "** is INVALID: `" << c.name << "`: " << c.detail << "\n";
      any_note = true;
    }
    if (known(r.mfu) && r.mfu > 1) {
      o << "- **" << r.run->name << "**: MFU " << fmt_pct(r.mfu) << " is above 100%: its peak of "
        << (known(r.peak_per_rank) ? strformat("%.1f GFLOP/s per rank", r.peak_per_rank / 1e9) : std::string(kNA))
        << " ("
        << (r.peak_source.empty() ? std::string("peak_flops_per_rank") : r.peak_source)
        << ") is below what the run achieved, so the peak is wrong and so is the MFU (set `profile.peak_gflops` "
           "to the device's peak, or 0 to calibrate it)\n";
      any_note = true;
    }
  }
  if (any_note) o << "\n";
}

// The planner's prediction beside the measurement, for every run that recorded one. GPU runs predict the
// caching allocator's reserved bytes (what must fit in the GPU) instead of the RSS: those columns appear
// when a run has them.
void section_prediction(std::ostringstream& o, const Analysis& a) {
  bool gpu = false;
  for (const auto& r : a.train) gpu = gpu || known(r.pred_reserved);
  std::vector<std::string> cols = {"run", "strategy", "world", "tensor peak / rank: predicted", "measured", "ratio",
                                   "RSS / rank: predicted", "measured", "ratio"};
  if (gpu) cols.insert(cols.end(), {"GPU reserved / rank: predicted", "measured", "ratio"});
  cols.insert(cols.end(), {"step time (ms): predicted", "measured", "ratio"});
  Table t(cols);
  auto ratio = [](double p, double m) { return known(p) && known(m) && m > 0 ? strformat("%.2f", p / m) : std::string(kNA); };
  for (const auto& r : a.train) {
    if (!r.run->completed()) continue;
    if (!(known(r.pred_mem_peak) || known(r.pred_step))) {
      if (!r.asked_prediction) continue;
      // run.predict was on and nothing was recorded: say so rather than leave the run out.
      std::vector<std::string> row(cols.size(), "—");
      row[0] = r.run->name;
      row[1] = or_na(r.strategy);
      row[2] = intish(r.world);
      row[3] = "**missing** (run.predict = true, none recorded)";
      t.add(row);
      continue;
    }
    std::vector<std::string> row = {r.run->name, or_na(r.strategy), intish(r.world), bytes(r.pred_mem_peak),
                                    bytes(r.mem_peak), ratio(r.pred_mem_peak, r.mem_peak), bytes(r.pred_rss),
                                    bytes(r.rss_peak), ratio(r.pred_rss, r.rss_peak)};
    if (gpu) {
      const double measured = known(r.pred_reserved) ? r.reserved_peak : NAN;
      row.insert(row.end(), {bytes(r.pred_reserved), bytes(measured), ratio(r.pred_reserved, measured)});
    }
    row.insert(row.end(), {ms(r.pred_step), ms(r.step_mean), ratio(r.pred_step, r.step_mean)});
    t.add(row);
  }
  if (t.empty()) return;
  o << "## Prediction vs measurement\n\n" << t.str() << "\n";
  o << "Predicted by the planner at the start of each run (`run.predict`, the same model as `lorabench plan`: "
       "model state + probed activations + strategy buffers; probed step time + collectives over the bus "
       "bandwidth), measured as in the tables above (peaks: max over ranks; step time: mean of the measured "
       "steps). Ratio = predicted / measured. docs/plan.md.\n\n";
}

// Held-out loss per evaluation (train.eval_every), one row per run that evaluated.
void section_eval(std::ostringstream& o, const Analysis& a) {
  Table t({"run", "strategy", "world", "evaluations (after step: loss / perplexity)", "held-out samples",
           "tokens", "last eval loss", "last train loss"});
  for (const auto& r : a.train) {
    const RunRecord& run = *r.run;
    auto it = run.eval.find("loss");
    if (it == run.eval.end() || it->second.empty()) continue;
    const auto& loss = it->second;
    const auto& step = run.eval.at("step");
    const auto& ppl = run.eval.at("perplexity");
    const auto& trial = run.eval.at("trial");
    std::string cells;
    for (size_t i = 0; i < loss.size(); ++i) {
      if (trial[i] != trial.back()) continue;  // the last trial's evaluations
      if (!cells.empty()) cells += ", ";
      cells += strformat("%.0f: %.4f / %.4g", step[i], loss[i], ppl[i]);
    }
    t.add({run.name, or_na(r.strategy), intish(r.world), cells, intish(run.eval.at("samples").back()),
           intish(run.eval.at("tokens").back()), strformat("%.4f", loss.back()),
           known(r.loss_last) ? strformat("%.4f", r.loss_last) : kNA});
  }
  if (t.empty()) return;
  o << "## Held-out evaluation\n\n" << t.str() << "\n";
  o << "Mean token loss over the held-out set (`data.eval_path`, `data.eval_fraction` or, for synthetic data, a "
       "token stream the training never draws from), forward only, every `train.eval_every` steps and after the "
       "last; perplexity = exp(loss). From `/metrics/eval`.\n\n";
}

void section_scaling(std::ostringstream& o, const Analysis& a) {
  o << "## Scaling\n\n";
  o << "speedup = tokens/s(N ranks) / tokens/s(the one-rank run of the same configuration); efficiency = "
       "speedup / N. The global batch grows with N (micro_batch x grad_accum x N), so this is throughput "
       "(weak) scaling.\n\n";
  Table t({"config", "run", "strategy", "world", "global batch", "tokens/s", "speedup", "efficiency",
           "baseline (1 rank)"});
  for (const auto& c : a.configs) {
    std::vector<const TrainRow*> rows;
    for (size_t i : c.rows) rows.push_back(&a.train[i]);
    std::stable_sort(rows.begin(), rows.end(),
                     [](const TrainRow* x, const TrainRow* y) { return x->world < y->world; });
    for (const TrainRow* r : rows) {
      t.add({c.label, r->run->name, r->strategy, intish(r->world), intish(r->global_batch), fmt_sig(r->tps_mean),
             known(r->speedup) ? strformat("%.2fx", r->speedup) : kNA, fmt_pct(r->efficiency),
             c.baseline ? c.baseline->run->name : "none"});
    }
  }
  if (t.empty()) {
    o << "No completed training runs.\n\n";
    return;
  }
  o << t.str() << "\n";
  bool notes = false;
  for (const auto& c : a.configs)
    if (!c.baseline_note.empty()) {
      o << "- " << c.label << ": " << c.baseline_note << "\n";
      notes = true;
    }
  if (notes) o << "\n";
}

void section_memory(std::ostringstream& o, const Analysis& a) {
  o << "## Memory\n\n";
  o << "Per rank. *vs DDP*: 1 - peak / peak of the DDP run with the same world size and configuration. "
       "*Measured model state*: the largest tensor memory any rank held at the end of the last step "
       "(`mem_current_bytes_max`: parameters, gradients and optimizer state that persist between steps); "
       "*predicted*: the strategy's accounting (`predicted_model_state_bytes`, formula in Ψc compute "
       "parameters and Ψt trainable parameters).\n\n";
  Table t({"run", "strategy", "world", "peak tensor mem", "vs DDP", "measured model state", "predicted model state",
           "measured / predicted", "prediction formula", "peak RSS"});
  for (const auto& r : a.train) {
    if (!r.run->completed()) continue;
    std::string vs = kNA;
    if (r.ddp == &r) {
      vs = "(reference)";
    } else if (r.ddp && known(r.saving_vs_ddp)) {
      vs = r.saving_vs_ddp >= 0 ? strformat("saves %.1f%%", 100 * r.saving_vs_ddp)
                                : strformat("uses %.1f%% more", -100 * r.saving_vs_ddp);
    } else if (!r.ddp) {
      vs = strformat("n/a (no DDP run at %s rank%s)", intish(r.world).c_str(), r.world == 1 ? "" : "s");
    }
    const double pred = num(r.run->summary, "predicted_model_state_bytes");
    const std::string ratio =
        known(pred) && pred > 0 && known(r.mem_state) ? strformat("%.2f", r.mem_state / pred) : kNA;
    const std::string formula = text(r.run->summary, "predicted_formula");
    t.add({r.run->name, r.strategy, intish(r.world), bytes(r.mem_peak), vs, bytes(r.mem_state), bytes(pred), ratio,
           formula.empty() ? kNA : "`" + formula + "`", bytes(r.rss_peak)});
  }
  if (t.empty()) {
    o << "No completed training runs.\n\n";
    return;
  }
  o << t.str() << "\n";
}

void section_phases(std::ostringstream& o, const Analysis& a) {
  o << "## Phase breakdown\n\n";
  o << "Share of the step per phase: `<phase>_s_rank_median / step_time_rank_median_s` (per-rank means over the "
       "measured steps, median over ranks); *other* = 100% - the five phases. The exposed communication splits "
       "into *wait for peers* (blocked before the last rank arrived at the collective) and *transfer* (blocked "
       "after every rank had arrived). Straggler ratio = slowest rank's mean compute time (step minus blocked "
       "time) / the median of the other ranks'; *stragglers*: balanced, persistent (the same rank slowest in most steps), "
       "intermittent or hiccup (docs/report.md).\n\n";
  Table t({"run", "strategy", "world", "step (rank median, ms)", "data", "forward", "backward", "comm (exposed)",
           "wait for peers", "transfer", "optimizer", "other", "straggler ratio", "slowest rank", "stragglers"});
  Table ranks({"run", "rank", "compute (ms)", "compute / others'", "wait for peers (ms)", "transfer (ms)",
               "data (ms)", "slowest in steps"});
  for (const auto& r : a.train) {
    if (!r.run->completed()) continue;
    std::vector<std::string> row = {r.run->name, r.strategy, intish(r.world), ms(r.step_rank_median)};
    for (int p = 0; p < kPhases; ++p) {
      row.push_back(fmt_pct(r.phase_share[size_t(p)]));
      if (p == 3) {
        row.push_back(fmt_pct(r.wait_share));
        row.push_back(fmt_pct(r.transfer_share));
      }
    }
    row.push_back(fmt_pct(r.other_share));
    const auto& g = r.stragglers;
    row.push_back(r.has_stragglers && known(g.ratio) ? strformat("%.3f", g.ratio) : kNA);
    row.push_back(r.has_stragglers ? strformat("%zu", g.slowest_rank) : kNA);
    row.push_back(r.has_stragglers ? g.kind : kNA);
    t.add(row);
    if (r.world < 2) continue;
    for (size_t k = 0; k < r.ranks.size(); ++k) {
      const RankStat& rs = r.ranks[k];
      ranks.add({r.run->name, strformat("%zu", k), ms(rs.compute_s),
                 known(rs.vs_others) ? strformat("%.3f", rs.vs_others) : kNA, ms(rs.wait_s), ms(rs.transfer_s),
                 ms(rs.data_s), strformat("%zu of %d", rs.slowest_steps, r.straggler_steps_measured)});
    }
  }
  if (t.empty()) {
    o << "No completed training runs.\n\n";
    return;
  }
  o << t.str() << "\n";
  if (!ranks.empty()) {
    o << strformat("Per rank (runs with several ranks): means per measured step; *compute / others'*: the rank's "
                   "compute over the median of the other ranks' (the slowest rank's is the straggler ratio); "
                   "*slowest in steps*: steps in which the rank computed at least %.2fx the others' median.\n\n",
                   a.rules.straggler_ratio);
    o << ranks.str() << "\n";
  }
}

// The compute phases against the roofline (runs whose files have it): per rank and step, FLOPs and the bytes
// the phase must move, the lower bound max(FLOPs / frame, bytes / bandwidth) and the measured time.
void section_roofline(std::ostringstream& o, const Analysis& a) {
  Table t({"run", "strategy", "world", "phase", "GFLOP", "bytes moved", "FLOP / byte", "limit", "bound (ms)",
           "measured (ms)", "of the bound"});
  Table bw({"run", "frame (GFLOP/s per rank)", "bandwidth (GB/s per rank)", "source", "ridge (FLOP / byte)"});
  for (const auto& r : a.train) {
    if (!r.run->completed() || !r.has_roofline) continue;
    bw.add({r.run->name, fmt_sig(r.peak_per_rank / 1e9, 4), fmt_sig(r.mem_bandwidth / 1e9, 4),
            or_na(r.bandwidth_source), fmt_sig(r.ridge, 3)});
    for (int i = 0; i < kRooflineCells; ++i) {
      const RooflineCell& c = r.roofline[size_t(i)];
      const bool step = i == kRooflineCells - 1;
      t.add({r.run->name, r.strategy, intish(r.world), step ? "**step**" : kRooflineCellNames[size_t(i)],
             fmt_sig(c.flops / 1e9, 4), bytes(c.bytes),
             known(c.bytes) && c.bytes > 0 ? fmt_sig(c.flops / c.bytes, 3) : kNA,
             c.limit == "memory" ? "**memory**" : c.limit, ms(c.bound_s), ms(c.measured_s), fmt_pct(c.fraction)});
    }
  }
  if (t.empty()) return;
  o << "## Roofline\n\n";
  o << "Per rank and step (docs/metrics.md, \"Bytes and the roofline\"): the phase's FLOPs (hardware FLOPs: "
       "with activation checkpointing backward includes the recomputed forward) and the bytes it must move "
       "(weights read per pass, the GEMM library's layout copies, the tensors kept for backward written and "
       "read back, gradients, the optimizer's state), its bound max(FLOPs / frame, bytes / bandwidth) and "
       "the median rank's measured time; *of the bound* = bound / measured (100% = at the roofline). A phase "
       "below the ridge (FLOP / byte) is **memory** bound. The step's bound is the sum of its phases'.\n\n";
  o << bw.str() << "\n" << t.str() << "\n";
}

void section_attribution(std::ostringstream& o, const Analysis& a) {
  o << "## Bottleneck attribution\n\n";
  const auto& R = a.rules;
  o << strformat("Rules (docs/report.md): *data-bound* when data is at least %.0f%% of the step; *straggler-bound* "
                 "when, in the median step, the slowest rank computes at least %.2fx the median of the other "
                 "ranks' compute time; *communication-bound* when the ranks stay blocked at least %.0f%% of the step after the "
                 "last rank arrived (transfer); when several hold, the largest cost wins (data share, the wait "
                 "for peers share, the transfer share); otherwise *compute-bound*, or *memory-bound* when the run's "
                 "roofline puts the compute phases' bound on memory. Achieved bus bandwidth = sum "
                 "over the measured steps of bytes_<op> x bus factor / sum of transfer_s.\n\n",
                 100 * R.data_share, R.straggler_ratio, 100 * R.transfer_share);
  bool any = false;
  for (const auto& r : a.train) {
    if (!r.run->completed()) continue;
    any = true;
    o << "- **" << r.run->name << "** (" << r.strategy << ", " << intish(r.world) << " rank"
      << (r.world == 1 ? "" : "s") << "): **" << r.attribution.verdict << "**";
    for (size_t i = 0; i < r.attribution.evidence.size(); ++i)
      o << (i ? "; " : ": ") << r.attribution.evidence[i];
    o << ".\n";
  }
  if (!any) o << "No completed training runs.\n";
  o << "\n";
}

std::string comm_col_name(const RunRecord& r, const char* col, size_t i, const std::vector<std::string>& names) {
  auto it = r.comm_results.find(col);
  if (it == r.comm_results.end() || i >= it->second.size()) return kNA;
  const size_t code = size_t(it->second[i]);
  return code < names.size() ? names[code] : strformat("%zu", code);
}

double comm_val(const RunRecord& r, const char* col, size_t i) {
  auto it = r.comm_results.find(col);
  return it == r.comm_results.end() || i >= it->second.size() ? NAN : it->second[i];
}

std::string us(double s) { return known(s) ? fmt_sig(1e6 * s) : kNA; }
std::string gbps(double v) { return known(v) ? fmt_sig(v, 3) : kNA; }

void section_comm(std::ostringstream& o, const Analysis& a) {
  o << "## Collective benchmark\n\n";
  if (a.comm.empty()) {
    o << "No `lorabench comm` runs among the inputs (run `mpirun -n N lorabench comm` to measure the "
         "collectives the bottleneck attribution compares with).\n\n";
    return;
  }
  o << "From `lorabench comm` run files (/comm/results): time per call averaged over ranks; algbw = size / "
       "time; busbw = algbw x bus factor (nccl-tests); raw MPI = the same operation as one blocking MPI call "
       "on host memory; memcpy = one copy of the same size.\n\n";
  for (const RunRecord* r : a.comm) {
    const std::string world = intish(num(r->comm_attrs, "world_size"));
    o << "### `" << r->name << "` (`" << r->path << "`)\n\n";
    if (!r->completed()) {
      o << "Status: " << status_cell(*r) << "\n\n";
      continue;
    }
    const std::string verdict = r->verdict == "VALID" ? r->verdict : "**" + or_na(r->verdict) + "**";
    o << strformat("%s ranks, backend %s, dtype %s, %s warm-up + %s timed calls per row, timing: %s. Verdict: %s.\n\n",
                   world.c_str(), or_na(text(r->comm_attrs, "backend")).c_str(),
                   or_na(text(r->comm_attrs, "dtype")).c_str(), or_na(text(r->comm_attrs, "warmup")).c_str(),
                   or_na(text(r->comm_attrs, "iters")).c_str(), or_na(text(r->comm_attrs, "timing")).c_str(),
                   verdict.c_str());
    Table t({"op", "dtype", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "raw MPI time (us)",
             "raw MPI busbw (GB/s)", "memcpy (GB/s)", "check"});
    const size_t n = r->comm_results.at("op").size();
    for (size_t i = 0; i < n; ++i) {
      const double chk = comm_val(*r, "check_passed", i);
      std::string check = kNA;
      if (chk == 1) check = "ok";
      else if (chk == 0)
        check = "**FAIL**" + (i < r->check_details.size() && !r->check_details[i].empty() ? ": " + r->check_details[i]
                                                                                          : std::string());
      else if (chk == -1) check = "not checked";
      t.add({comm_col_name(*r, "op", i, r->op_names), comm_col_name(*r, "dtype", i, r->dtype_names),
             bytes(comm_val(*r, "bytes", i)), us(comm_val(*r, "time_avg_s", i)), gbps(comm_val(*r, "algbw_GBps", i)),
             gbps(comm_val(*r, "busbw_GBps", i)), us(comm_val(*r, "raw_mpi_time_s", i)),
             gbps(comm_val(*r, "raw_mpi_busbw_GBps", i)), gbps(comm_val(*r, "memcpy_GBps", i)), check});
    }
    o << t.str() << "\n";
  }
}

void section_counters(std::ostringstream& o, const Analysis& a) {
  o << "## Hardware counters\n\n";
  o << "Per phase: each rank's mean per measured step, median over ranks (`/metrics/counters`, documented in "
       "docs/hdf5-schema.md). Units are the events' own (`perf::TASK-CLOCK`, `perf::CPU-CLOCK`: nanoseconds of CPU "
       "time of the rank's main thread). Phases nest (comm inside backward), so rows do not add up to the step.\n\n";
  bool any = false;
  // Runs without counters, grouped by their (usually identical) papi_status.
  std::vector<std::pair<std::string, std::vector<std::string>>> without;
  for (const auto& r : a.train) {
    if (!r.run->completed() || r.run->has_counters) continue;
    const std::string status = text(r.run->summary, "papi_status");
    auto it = std::find_if(without.begin(), without.end(), [&](const auto& p) { return p.first == status; });
    if (it == without.end()) without.push_back({status, {r.run->name}});
    else it->second.push_back(r.run->name);
  }
  for (const auto& [status, names] : without) {
    any = true;
    o << "- **" << join(names, "**, **") << "**: no counters in the run file (`/metrics/counters` absent); "
      << "papi_status: " << code(status) << "\n";
  }
  if (!without.empty()) o << "\n";
  for (const auto& r : a.train) {
    if (!r.run->completed() || !r.run->has_counters) continue;
    any = true;
    const std::string status = text(r.run->summary, "papi_status");
    CounterSummary cs = summarize_counters(*r.run, warmup_steps(*r.run));
    o << "- **" << r.run->name << "**: papi_status: " << code(status) << "\n\n";
    std::vector<std::string> header = {"phase"};
    for (const auto& e : cs.events) header.push_back(e);
    auto find = [&](const char* e) {
      auto it = std::find(cs.events.begin(), cs.events.end(), e);
      return it == cs.events.end() ? -1 : int(it - cs.events.begin());
    };
    const int ins = find("PAPI_TOT_INS"), cyc = find("PAPI_TOT_CYC");
    if (ins >= 0 && cyc >= 0) header.push_back("IPC");
    Table t(header);
    const char* names[kPhases] = {"data", "forward", "backward", "comm", "optimizer"};
    for (int p = 0; p < kPhases; ++p) {
      if (!cs.present[p]) continue;
      std::vector<std::string> row = {names[p]};
      for (double v : cs.values[p]) row.push_back(known(v) ? fmt_count(v) : kNA);
      if (ins >= 0 && cyc >= 0)
        row.push_back(cs.values[p][cyc] > 0 ? strformat("%.2f", cs.values[p][ins] / cs.values[p][cyc]) : kNA);
      t.add(row);
    }
    o << t.str() << "\n";
  }
  if (!any) o << "No completed training runs.\n";
  o << "\n";
}

void section_charts(std::ostringstream& o, const MarkdownOptions& opt) {
  if (opt.charts_dir.empty() || opt.charts.empty()) return;
  o << "## Charts\n\n";
  for (const auto& c : opt.charts) o << "![" << c.title << "](" << opt.charts_dir << "/" << c.file << ")\n\n";
}

}  // namespace

std::string fmt_sig(double v, int sig) {
  if (!known(v)) return kNA;
  return strformat("%.*f", decimals_for(v, sig), v);
}

std::string fmt_pm(double mean, double std, int sig) {
  if (!known(mean)) return kNA;
  const int d = decimals_for(mean, sig);
  return strformat("%.*f ± ", d, mean) + (known(std) ? strformat("%.*f", d, std) : std::string(kNA));
}

std::string fmt_pct(double share) { return known(share) ? strformat("%.1f%%", 100.0 * share) : kNA; }

std::string fmt_count(double v) {
  if (!known(v)) return kNA;
  std::string digits = strformat("%.0f", std::abs(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

std::string render_markdown(const std::vector<RunRecord>& runs, const Analysis& a, const MarkdownOptions& opt) {
  std::ostringstream o;
  size_t ntrain = 0, ncomm = 0;
  for (const auto& r : runs) (r.is_train() ? ntrain : ncomm)++;
  o << "# " << opt.title << "\n\n";
  o << "Generated by `lorabench-report` from " << runs.size() << " run file" << (runs.size() == 1 ? "" : "s") << " ("
    << ntrain << " training, " << ncomm << " collective benchmark). How each number is computed: docs/report.md.\n\n";
  section_inputs(o, runs, opt);
  section_provenance(o, a);
  section_configs(o, a);
  section_runs(o, a);
  section_eval(o, a);
  section_prediction(o, a);
  section_scaling(o, a);
  section_memory(o, a);
  section_phases(o, a);
  section_roofline(o, a);
  section_attribution(o, a);
  section_comm(o, a);
  section_counters(o, a);
  section_charts(o, opt);
  // Sections end with one blank line; collapse the runs of blank lines that optional parts leave.
  std::string s;
  for (char c : o.str()) {
    if (c == '\n' && s.size() >= 2 && s[s.size() - 1] == '\n' && s[s.size() - 2] == '\n') continue;
    s += c;
  }
  while (s.size() >= 2 && s[s.size() - 1] == '\n' && s[s.size() - 2] == '\n') s.pop_back();
  return s;
}

}  // namespace lorabench::report
