#include "lorabench/train/checkpoint.hpp"

#include "lorabench/train/run_specs.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <unistd.h>

#include "lorabench/config/paths.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/hash.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/core/version.hpp"
#include "lorabench/data/sampler.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/lora/adapter.hpp"
#include "lorabench/model/shape.hpp"
#include "lorabench/comm/control.hpp"
#include "lorabench/train/step_runner.hpp"
#include "lorabench/optim/schedule.hpp"

namespace fs = std::filesystem;

namespace lorabench::train {

namespace {

// Gathered writes: rank 0 writes the file with the POSIX driver. Measured against collective MPI-IO
// writes in docs/checkpoints.md ("Write path"): faster at every size measured here.
constexpr io::CheckpointWriteMode kWriteMode = io::CheckpointWriteMode::kGathered;

// FNV-1a where each string ends with a NUL, so ("ab", "c") and ("a", "bc") differ.
struct Fnv : Fnv1a {
  void add(const void* p, size_t n) { Fnv1a::add(p, n); }
  void add(const std::string& s) {
    Fnv1a::add(s);
    Fnv1a::add("\0", 1);
  }
  std::string hex() const { return strformat("%016llx", static_cast<unsigned long long>(h)); }
};

// FNV-1a over a whole file, streamed; "size=<n> fnv1a64=<hex>".
std::string file_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot read (for the checkpoint fingerprint)");
  Fnv f;
  std::vector<char> buf(1 << 20);
  int64_t size = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    f.add(buf.data(), static_cast<size_t>(n));
    size += n;
  }
  return strformat("size=%lld fnv1a64=%s", static_cast<long long>(size), f.hex().c_str());
}

std::string shape_text(const model::ModelShape& s) {
  std::string t = strformat("vocab=%lld hidden=%lld intermediate=%lld layers=%lld heads=%lld kv_heads=%lld head_dim=%lld "
                            "tied=%s rope_theta=%g",
                            (long long)s.vocab_size, (long long)s.hidden, (long long)s.intermediate, (long long)s.layers,
                            (long long)s.heads, (long long)s.kv_heads, (long long)s.head_dim,
                            s.tie_embeddings ? "true" : "false", s.rope_theta);
  if (!s.linear.empty()) {  // Qwen3.5: the layer kinds and the linear layers' sizes (other families' text is unchanged)
    std::string kinds;
    for (bool l : s.linear) kinds += l ? 'L' : 'F';
    t += strformat(" family=%s layer_types=%s rotary_dim=%lld linear=%lldx%lld/%lldx%lld conv=%lld", s.family.c_str(),
                   kinds.c_str(), (long long)s.rope_dim(), (long long)s.lin_k_heads, (long long)s.lin_k_dim,
                   (long long)s.lin_v_heads, (long long)s.lin_v_dim, (long long)s.conv_kernel);
  }
  return t;
}

std::string fmt(double x) { return strformat("%.10g", x); }

Fingerprint fingerprint_of(const io::AttrGroup* g) {
  Fingerprint f;
  if (g == nullptr) return f;
  for (const auto& [k, v] : g->attrs)
    if (k != "digest") f.emplace_back(k, io::attr_text(v));
  return f;
}

std::string serialize(const Fingerprint& f) {
  std::string s;
  for (const auto& [k, v] : f) s += k + "=" + v + "\n";
  return s;
}

Fingerprint deserialize(const std::string& s) {
  Fingerprint f;
  for (const auto& line : split(s, '\n')) {
    if (line.empty()) continue;
    const auto eq = line.find('=');
    f.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return f;
}

int64_t attr_int(const io::CheckpointContents& c, const std::string& group, const std::string& name) {
  const io::AttrGroup* g = c.group(group);
  const io::AttrValue* v = g ? io::find_attr(g->attrs, name) : nullptr;
  if (v == nullptr || !std::holds_alternative<int64_t>(*v))
    throw IoError(c.path + ": missing integer attribute /" + group + " " + name);
  return std::get<int64_t>(*v);
}

// The schedule and optimizer settings a run may change on resume (a warning lists what changed).
Fingerprint hyperparameters(const RunConfig& c) {
  return {{"schedule.kind", c.train.schedule},
          {"schedule.lr", fmt(c.train.lr)},
          {"schedule.min_lr", fmt(c.train.min_lr)},
          {"schedule.warmup_steps", std::to_string(c.train.warmup_steps)},
          {"schedule.total_steps", std::to_string(c.run.steps)},
          {"optimizer.beta1", fmt(c.train.beta1)},
          {"optimizer.beta2", fmt(c.train.beta2)},
          {"optimizer.eps", fmt(c.train.eps)},
          {"optimizer.weight_decay", fmt(c.train.weight_decay)},
          {"optimizer.max_grad_norm", fmt(c.train.max_grad_norm)},
          {"lora.dropout", fmt(c.lora.dropout)}};
}

Fingerprint stored_hyperparameters(const io::CheckpointContents& c) {
  Fingerprint f;
  auto take = [&](const char* group, const std::vector<const char*>& names) {
    const io::AttrGroup* g = c.group(group);
    for (const char* n : names) {
      const io::AttrValue* v = g ? io::find_attr(g->attrs, n) : nullptr;
      std::string text = v == nullptr ? "(absent)"
                         : std::holds_alternative<double>(*v) ? fmt(std::get<double>(*v))
                                                              : io::attr_text(*v);
      f.emplace_back(std::string(group) + "." + n, text);
    }
  };
  take("schedule", {"kind", "lr", "min_lr", "warmup_steps", "total_steps"});
  take("optimizer", {"beta1", "beta2", "eps", "weight_decay", "max_grad_norm"});
  take("lora", {"dropout"});
  return f;
}

}  // namespace

// ---- fingerprint ----------------------------------------------------------------------------------

std::string base_weights_digest(const RunConfig& c) {
  if (c.model.path.empty()) return strformat("random-init preset=%s seed=%llu", c.model.preset.c_str(),
                                             static_cast<unsigned long long>(c.run.seed));
  Fnv f;
  const fs::path dir(c.model.path);
  f.add(read_file((dir / "config.json").string()));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {  // model.safetensors or the shards model-*-of-*.safetensors
    const std::string n = e.path().filename().string();
    if (ends_with(n, ".safetensors") && (n == "model.safetensors" || starts_with(n, "model-"))) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw IoError(c.model.path + ": no model*.safetensors files (for the base-weights digest)");
  for (const auto& p : files) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw IoError(p.string() + ": cannot read");
    const uint64_t size = fs::file_size(p);
    f.add(p.filename().string());
    f.add(&size, sizeof size);
    uint64_t hlen = 0;
    in.read(reinterpret_cast<char*>(&hlen), 8);
    if (!in || hlen > size - 8) throw IoError(p.string() + ": not a safetensors file");
    std::string header(static_cast<size_t>(hlen), '\0');
    in.read(header.data(), static_cast<std::streamsize>(hlen));
    f.add(header);
    const uint64_t block = 4096, span = size > block ? size - block : 0;
    std::vector<char> buf(block);
    for (uint64_t i = 0; i < 16; ++i) {
      in.clear();
      in.seekg(static_cast<std::streamoff>(span * i / 15));
      in.read(buf.data(), static_cast<std::streamsize>(block));
      f.add(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  return "safetensors-sampled-v1:" + f.hex();
}

Fingerprint training_fingerprint(const RunConfig& c, int world_size) {
  Fingerprint f;
  const model::ModelShape shape = c.model.path.empty()
                                      ? model::preset_shape(c.model.preset)
                                      : model::load_hf_config((fs::path(c.model.path) / "config.json").string());
  f.emplace_back("model.source", c.model.path.empty() ? "preset " + c.model.preset : "snapshot");
  f.emplace_back("model.shape", shape_text(shape));
  f.emplace_back("model.base_weights", base_weights_digest(c));
  f.emplace_back("model.dtype", c.model.dtype);
  f.emplace_back("lora.enabled", c.lora.enabled ? "true" : "false");
  if (c.lora.enabled) {
    f.emplace_back("lora.r", std::to_string(c.lora.r));
    f.emplace_back("lora.alpha", fmt(c.lora.alpha));
    f.emplace_back("lora.rslora", c.lora.rslora ? "true" : "false");
    std::vector<std::string> t = c.lora.targets;
    std::sort(t.begin(), t.end());
    f.emplace_back("lora.targets", join(t, ","));
  }
  f.emplace_back("data.format", c.data.format);
  if (c.data.format != "synthetic") {
    f.emplace_back("data.content", file_digest(c.data.path));
    f.emplace_back("data.tokenizer", file_digest(tokenizer_path_of(c)));
    // The rendering: only where it is not the Qwen2.5 template (checkpoints written before Qwen3 match).
    if (const data::ChatOptions chat = chat_options_of(c); chat.tmpl != data::ChatTemplate::kQwen25) {
      f.emplace_back("data.chat_template", data::chat_template_name(chat.tmpl));
      f.emplace_back("data.enable_thinking", chat.enable_thinking ? "true" : "false");
    }
    f.emplace_back("data.pack", c.data.pack ? "true" : "false");
    f.emplace_back("data.shuffle", c.data.shuffle ? "true" : "false");
    f.emplace_back("data.on_bad_record", c.data.on_bad_record);
    if (c.data.eval_fraction > 0) f.emplace_back("data.eval_fraction", fmt(c.data.eval_fraction));  // the training part
  }
  f.emplace_back("data.seq_len", std::to_string(c.data.seq_len));
  f.emplace_back("run.seed", std::to_string(c.run.seed));
  f.emplace_back("train.global_batch", std::to_string(batch_geometry_of(c, world_size).global_batch()));
  return f;
}

std::string fingerprint_digest(const Fingerprint& f) {
  Fnv h;
  for (const auto& [k, v] : f) {
    h.add(k);
    h.add(v);
  }
  return h.hex();
}

std::vector<std::string> fingerprint_differences(const Fingerprint& stored, const Fingerprint& current) {
  std::map<std::string, std::string> a(stored.begin(), stored.end()), b(current.begin(), current.end());
  std::vector<std::string> out;
  auto line = [](const std::string& k, const std::string& x, const std::string& y) {
    return k + ": checkpoint " + x + ", configuration " + y;
  };
  for (const auto& [k, v] : current) {  // in the fingerprint's order
    auto it = a.find(k);
    if (it == a.end()) {
      out.push_back(line(k, "(absent)", v));
    } else if (it->second != v) {
      out.push_back(line(k, it->second, v));
    }
  }
  for (const auto& [k, v] : stored)
    if (!b.count(k)) out.push_back(line(k, v, "(absent)"));
  return out;
}

void validate_checkpoint_config(const RunConfig& c) {
  std::vector<std::string> problems;
  const bool resume = c.checkpoint.resume != "none";
  if (c.run.repeat > 1 && (c.checkpoint.every > 0 || resume))
    problems.push_back(std::string(c.checkpoint.every > 0 ? "checkpoint.every" : "checkpoint.resume") +
                       ": checkpoints need run.repeat = 1 (every trial restarts from step 0), got run.repeat = " +
                       std::to_string(c.run.repeat));
  if (c.checkpoint.resume.empty())
    problems.push_back("checkpoint.resume: expected none, latest, auto or a checkpoint path");
  if ((c.checkpoint.resume == "latest" || c.checkpoint.resume == "auto") && c.run.overwrite)
    problems.push_back("run.overwrite: true would delete the run directory whose checkpoints checkpoint.resume = " +
                       c.checkpoint.resume + " resumes from (set one of them)");
  if (problems.empty()) return;
  throw ConfigError((problems.size() == 1 ? "configuration error:\n  " : "configuration errors:\n  ") +
                    join(problems, "\n  "));
}

namespace {

// checkpoint.resume = auto found no checkpoint file: the run starts at step 0.
struct NothingToResume {};

// Collective. Every rank reads the checkpoint it resumes from (Checkpointer::resume), but rank 0 alone
// writes checkpoints, so on node-local storage (run.output_dir on a disk of rank 0's node) they exist only
// there. Refused here on every rank, naming the file and the hosts that lack it, before the run directory
// is touched; otherwise the other nodes' ranks fail later with "missing" and the run file is already renamed.
void require_visible_everywhere(const std::string& path, MPI_Comm world) {
  int n = 0;
  LB_MPI_CHECK(MPI_Comm_size(world, &n));
  int visible = fs::is_regular_file(path) ? 1 : 0;
  std::vector<int> vis(static_cast<size_t>(n));
  LB_MPI_CHECK(MPI_Allgather(&visible, 1, MPI_INT, vis.data(), 1, MPI_INT, world));
  if (std::all_of(vis.begin(), vis.end(), [](int v) { return v == 1; })) return;
  constexpr int kHostLen = 256;
  char mine[kHostLen] = {};
  gethostname(mine, kHostLen - 1);
  std::vector<char> hosts(static_cast<size_t>(n) * kHostLen);
  LB_MPI_CHECK(MPI_Allgather(mine, kHostLen, MPI_CHAR, hosts.data(), kHostLen, MPI_CHAR, world));
  std::map<std::string, std::vector<int>> blind;  // host -> ranks that cannot see the file
  for (int r = 0; r < n; ++r)
    if (!vis[static_cast<size_t>(r)]) blind[std::string(&hosts[static_cast<size_t>(r) * kHostLen])].push_back(r);
  std::vector<std::string> where;
  for (const auto& [host, ranks] : blind) where.push_back("node " + host + " (rank(s) " + format_rank_list(ranks) + ")");
  throw ConfigError("checkpoint.resume: " + resolve_path(path) + " is not visible from " + join(where, ", ") +
                    ": every rank reads the checkpoint it resumes from, but rank 0 alone wrote it, on " +
                    std::string(&hosts[0]) +
                    "; run.output_dir is on storage that not every node sees (node-local scratch?). Put run.output_dir "
                    "on a file system every node mounts, or copy the run directory to one and resume from there");
}

}  // namespace

ResumePoint select_resume_checkpoint(const RunConfig& c, const std::string& run_dir, int world_size, MPI_Comm world) {
  ResumePoint rp;
  if (c.checkpoint.resume == "none") return rp;
  int rank = 0;
  LB_MPI_CHECK(MPI_Comm_rank(world, &rank));
  bool ok = true;
  std::string msg;
  if (rank == 0) {
    try {
      // auto = latest when the run directory has checkpoint files, else a start at step 0 (a requeued job
      // that had written none). Files that exist but are all unusable are an error, as for latest.
      const bool is_auto = c.checkpoint.resume == "auto";
      const bool latest = c.checkpoint.resume == "latest" || is_auto;
      const std::string dir = (fs::path(run_dir) / "checkpoints").string();
      std::vector<std::string> candidates = latest ? io::list_checkpoints(dir) : std::vector<std::string>{c.checkpoint.resume};
      if (is_auto && candidates.empty()) {
        log::info("checkpoint.resume = auto: no checkpoint in " + resolve_path(dir) + ": starting at step 0");
        throw NothingToResume();
      }
      std::vector<std::string> skipped;
      io::CheckpointContents chosen;
      for (const auto& p : candidates) {
        try {
          io::CheckpointReader r(p);
          r.verify_all();
          chosen = r.contents();
          rp.path = p;
          break;
        } catch (const IoError& e) {
          if (!latest) throw ConfigError(describe_path("checkpoint.resume", p) + ": cannot resume (" + e.what() + ")");
          log::warn(std::string("skipping checkpoint ") + e.what());
          skipped.push_back(e.what());
        }
      }
      if (rp.path.empty())
        throw ConfigError("checkpoint.resume = " + c.checkpoint.resume + ": no complete checkpoint in " + resolve_path(dir) +
                          (skipped.empty() ? std::string(" (none written)") : "; skipped:\n    " + join(skipped, "\n    ")));
      rp.step = chosen.step;
      const auto diffs = fingerprint_differences(fingerprint_of(chosen.group("fingerprint")),
                                                 training_fingerprint(c, world_size));
      if (!diffs.empty())
        throw ConfigError("checkpoint.resume: " + rp.path + " was written by a different training (" +
                          std::to_string(diffs.size()) + " field" + (diffs.size() == 1 ? "" : "s") +
                          " differ):\n    " + join(diffs, "\n    "));
      if (rp.step >= c.run.steps)
        throw ConfigError(strformat("run.steps: %s already completed %lld steps; run.steps = %d leaves nothing to run",
                                    rp.path.c_str(), (long long)rp.step, c.run.steps));
      if (c.run.steps - rp.step <= c.run.warmup_steps)
        throw ConfigError(strformat("run.warmup_steps: resuming at step %lld leaves %lld steps, not more than the "
                                    "%d benchmark warm-up steps",
                                    (long long)rp.step, (long long)(c.run.steps - rp.step), c.run.warmup_steps));
      for (const auto& p : io::list_checkpoints(dir))
        if (io::checkpoint_step_of(fs::path(p).filename().string()) > rp.step)
          log::warn("checkpoint " + p + " is newer than the one resumed from; it stays until this run writes a "
                    "checkpoint of the same step");
    } catch (const NothingToResume&) {
      rp = ResumePoint{};
    } catch (const ConfigError& e) {
      ok = false;
      msg = e.what();
    } catch (const std::exception& e) {
      ok = false;
      msg = std::string("checkpoint.resume: ") + e.what();
    }
  }
  if (!comm::broadcast_status(world, ok, msg)) throw ConfigError(msg);
  rp.path = comm::broadcast_string(world, rp.path);
  long long step = rp.step;
  LB_MPI_CHECK(MPI_Bcast(&step, 1, MPI_LONG_LONG, 0, world));
  rp.step = step;
  if (!rp.path.empty()) require_visible_everywhere(rp.path, world);
  return rp;
}

// ---- tensors --------------------------------------------------------------------------------------

std::vector<io::TensorPiece> state_pieces(const model::ModelLayout& m, const strategy::FullState& s, bool whole,
                                          int rank, int world) {
  std::vector<io::TensorPiece> out;
  const std::vector<at::Tensor>* kinds[3] = {&s.params, &s.exp_avg, &s.exp_avg_sq};
  const char* prefix[3] = {"trainable/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"};
  for (int k = 0; k < 3; ++k) {
    for (size_t u = 0; u < m.units.size(); ++u) {
      const at::Tensor& flat = (*kinds[k])[u];
      if (m.units[u].trainable.empty()) continue;
      LB_CHECK(flat.defined() && flat.is_contiguous() && flat.scalar_type() == at::kFloat &&
                   flat.numel() == m.units[u].trainable_numel,
               "trainable state of unit " + m.units[u].name);
      for (const auto& slot : m.units[u].trainable) {
        io::TensorPiece p;
        p.path = prefix[k] + slot.name;
        p.shape = slot.shape;
        const int64_t rows = slot.shape.empty() ? 1 : slot.shape[0];
        const int64_t per_row = slot.numel / std::max<int64_t>(rows, 1);
        std::tie(p.row_begin, p.row_end) = whole ? std::make_pair(int64_t(0), rows) : io::even_rows(rows, rank, world);
        p.data = flat.data_ptr<float>() + slot.offset + p.row_begin * per_row;
        out.push_back(p);
      }
    }
  }
  return out;
}

strategy::FullState state_from_checkpoint(const model::ModelLayout& m, const io::CheckpointContents& c,
                                          const io::CheckpointReader* reader) {
  strategy::FullState s;
  s.step = attr_int(c, "optimizer", "step");
  std::vector<at::Tensor>* kinds[3] = {&s.params, &s.exp_avg, &s.exp_avg_sq};
  const char* prefix[3] = {"trainable/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"};
  size_t expected = 0;
  for (int k = 0; k < 3; ++k) {
    for (size_t u = 0; u < m.units.size(); ++u) {
      const auto& unit = m.units[u];
      if (unit.trainable.empty()) {
        kinds[k]->emplace_back();
        continue;
      }
      at::Tensor flat = at::empty({unit.trainable_numel}, at::kFloat);
      for (const auto& slot : unit.trainable) {
        const std::string path = prefix[k] + slot.name;
        const io::StoredTensor* t = c.tensor(path);
        if (t == nullptr) throw IoError(c.path + ": missing tensor " + path);
        if (t->shape != slot.shape)
          throw IoError(c.path + ": tensor " + path + " has shape " + io::shape_string(t->shape) + ", expected " +
                        io::shape_string(slot.shape));
        float* dst = flat.data_ptr<float>() + slot.offset;
        if (reader) {
          reader->read(*t, dst);
        } else {
          LB_CHECK(int64_t(t->data.size()) == slot.numel, "tensor data of " + path + " was not read");
          std::memcpy(dst, t->data.data(), sizeof(float) * size_t(slot.numel));
        }
        ++expected;
      }
      kinds[k]->push_back(flat);
    }
  }
  if (c.tensors.size() != expected) {
    std::vector<std::string> extra;
    for (const auto& t : c.tensors) {
      bool known = false;
      for (int k = 0; k < 3 && !known; ++k)
        if (starts_with(t.path, prefix[k])) {
          const std::string name = t.path.substr(std::strlen(prefix[k]));
          for (const auto& u : m.units)
            if (u.find_trainable(name)) known = true;
        }
      if (!known) extra.push_back(t.path);
    }
    throw IoError(c.path + ": tensors the model does not have: " + join(extra, ", "));
  }
  return s;
}

// ---- the checkpointer -----------------------------------------------------------------------------

Checkpointer::Checkpointer(const RunConfig& c, const model::ModelLayout& m, const data::BatchSource& source,
                           MPI_Comm world, const std::string& run_dir, io::RunFileWriter* run)
    : c_(c), m_(m), source_(source), world_(world), dir_((fs::path(run_dir) / "checkpoints").string()), run_(run) {
  LB_MPI_CHECK(MPI_Comm_rank(world, &rank_));
  LB_MPI_CHECK(MPI_Comm_size(world, &world_size_));
  // With checkpoint.every = 0 only a stop signal writes one: save() computes the fingerprint then.
  if (c.checkpoint.every > 0) compute_fingerprint();
}

void Checkpointer::compute_fingerprint() {
  // Rank 0 reads the files the fingerprint hashes; every rank writes the same attributes.
  bool ok = true;
  std::string text;
  if (rank_ == 0) {
    try {
      text = serialize(training_fingerprint(c_, world_size_));
    } catch (const std::exception& e) {
      ok = false;
      text = e.what();
    }
  }
  if (!comm::broadcast_status(world_, ok, text)) throw IoError(text);
  fingerprint_ = deserialize(comm::broadcast_string(world_, text));
}

int64_t Checkpointer::resume(strategy::TrainingStrategy& s, const std::string& path) {
  if (path.empty()) return 0;
  // Every rank reads the full tensors (verifying their digests) and keeps its part through load_state.
  io::CheckpointReader reader(path);
  const io::CheckpointContents& ck = reader.contents();
  strategy::FullState st = state_from_checkpoint(m_, ck, &reader);
  s.load_state(st);
  tokens_base_ = attr_int(ck, "state", "tokens_seen");
  tokens_local_ = 0;
  const int64_t step = attr_int(ck, "state", "step");
  const Fingerprint now = hyperparameters(c_);
  std::vector<std::string> changed = fingerprint_differences(stored_hyperparameters(ck), now);
  if (!changed.empty())
    log::info("resume: training settings differ from the checkpoint's (the configured ones apply):\n    " +
              join(changed, "\n    "));
  std::string writer;
  if (const io::AttrGroup* w = ck.group("writer")) {
    const io::AttrValue* strat = io::find_attr(w->attrs, "strategy");
    const io::AttrValue* ws = io::find_attr(w->attrs, "world_size");
    if (strat && ws) writer = " (written by " + io::attr_text(*strat) + " on " + io::attr_text(*ws) + " ranks)";
  }
  log::info(strformat("resume: %s, step %lld, %lld tokens seen%s", path.c_str(), (long long)step,
                      (long long)tokens_base_, writer.c_str()));
  if (run_) {
    run_->write_summary("resumed_from", path);
    run_->write_summary("resumed_at_step", double(step));
    run_->flush();
  }
  return step;
}

void Checkpointer::after_step(strategy::TrainingStrategy& s, int64_t steps_done, int64_t local_tokens) {
  tokens_local_ += local_tokens;
  const int every = c_.checkpoint.every;
  if (every <= 0) return;
  if (steps_done % every == 0 || steps_done == c_.run.steps) save(s, steps_done);
}

std::vector<io::AttrGroup> Checkpointer::groups(int64_t steps_done, int64_t optimizer_step,
                                                int64_t tokens_seen) const {
  using io::AttrValue;
  const data::BatchGeometry geo = batch_geometry_of(c_, world_size_);
  const int64_t G = geo.global_batch();
  const int64_t next_sample = steps_done * G;
  const int64_t epoch_size = source_.epoch_size();
  data::SampleCursor cur = epoch_size > 0 ? data::sample_cursor(next_sample, epoch_size)
                                          : data::SampleCursor{0, next_sample};
  std::vector<io::AttrGroup> g;
  g.push_back({"state",
               {{"step", steps_done},
                {"optimizer_step", optimizer_step},
                {"tokens_seen", tokens_seen},
                {"samples_seen", next_sample}}});
  const optim::ScheduleSpec sc = schedule_of(c_);
  g.push_back({"schedule",
               {{"kind", sc.kind},
                {"lr", sc.lr},
                {"min_lr", sc.min_lr},
                {"warmup_steps", sc.warmup_steps},
                {"total_steps", sc.total_steps},
                {"next_lr", optim::lr_at(sc, steps_done)},
                {"note", std::string("the LR is a pure function of the step (optim/schedule.hpp)")}}});
  g.push_back({"optimizer",
               {{"type", std::string("adamw")},
                {"step", optimizer_step},
                {"beta1", c_.train.beta1},
                {"beta2", c_.train.beta2},
                {"eps", c_.train.eps},
                {"weight_decay", c_.train.weight_decay},
                {"max_grad_norm", c_.train.max_grad_norm}}});
  g.push_back({"lora", {{"dropout", c_.lora.dropout}}});
  g.push_back({"data",
               {{"next_sample", next_sample},
                {"epoch", cur.epoch},
                {"position", cur.position},
                {"epoch_size", epoch_size},
                {"global_batch", G},
                {"micro_batch", int64_t(geo.micro_batch)},
                {"grad_accum", int64_t(geo.grad_accum)},
                {"world_size", int64_t(geo.world_size)},
                {"source", source_.describe()}}});
  g.push_back({"rng",
               {{"kind", std::string("counter-based")},
                {"seed", static_cast<int64_t>(c_.run.seed)},
                {"description",
                 std::string("no stateful generator: dropout masks derive from (seed, step, micro-step, first sample "
                             "index, layer, projection), init from (seed, tensor name), data order and synthetic "
                             "tokens from (seed, epoch / sample index); rank_seeds lists each rank's seed")}}});
  io::AttrList fp;
  for (const auto& [k, v] : fingerprint_) fp.emplace_back(k, v);
  fp.emplace_back("digest", fingerprint_digest(fingerprint_));
  g.push_back({"fingerprint", fp});
  g.push_back({"writer",
               {{"program_version", std::string(program_version())},
                {"git_commit", std::string(git_commit())},
                {"run_name", c_.run.name},
                {"base_model", lora::base_model_name(c_.model.path, c_.model.preset)},
                {"created_utc", sys::utc_now_iso8601()},
                {"strategy", c_.parallel.strategy},
                {"world_size", int64_t(world_size_)},
                {"write_mode", std::string(io::write_mode_name(kWriteMode))}}});
  return g;
}

io::CheckpointWriteResult Checkpointer::save(strategy::TrainingStrategy& s, int64_t steps_done) {
  if (fingerprint_.empty()) compute_fingerprint();
  strategy::FullState st = s.gather_state();
  for (auto* v : {&st.params, &st.exp_avg, &st.exp_avg_sq})  // host memory for HDF5 (a no-op on CPU)
    for (auto& t : *v)
      if (t.defined()) t = t.to(at::kCPU).contiguous();
  const int64_t tokens = tokens_base_ + comm::allreduce_sum(world_, tokens_local_);
  const bool whole = kWriteMode == io::CheckpointWriteMode::kGathered;
  std::vector<io::TensorPiece> pieces = state_pieces(m_, st, whole, rank_, world_size_);
  std::vector<int64_t> seeds(static_cast<size_t>(world_size_), static_cast<int64_t>(c_.run.seed));
  io::CheckpointWriteResult r =
      io::save_checkpoint(dir_, steps_done, world_, kWriteMode, groups(steps_done, st.step, tokens), pieces, seeds,
                          c_.checkpoint.keep_last, before_commit);
  ++written_;
  last_step_ = steps_done;
  last_path_ = r.path;
  write_s_total_ += r.write_s + r.commit_s;
  log::info(strformat("checkpoint: %s (%s, write %.3f s, commit %.3f s%s)", r.path.c_str(),
                      format_bytes(double(r.bytes)).c_str(), r.write_s, r.commit_s,
                      r.pruned.empty() ? "" : (", pruned " + join(r.pruned, ", ")).c_str()));
  comm::agreed_writes(world_, [&] {
    if (!run_) return;
    run_->write_summary("checkpoints_written", double(written_));
    run_->write_summary("checkpoint_last", r.path);
    run_->write_summary("checkpoint_write_s_total", write_s_total_);
    run_->flush();  // the run file stays readable if the job is killed before the next log flush
  });
  return r;
}

}  // namespace lorabench::train
