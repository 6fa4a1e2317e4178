#include "lorabench/train/run_specs.hpp"

#include <algorithm>
#include <filesystem>

#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/model/qwen2.hpp"
#include "lorabench/model/shape.hpp"
#include "lorabench/model/tensor_parallel.hpp"

namespace lorabench::train {

model::ModelShape model_shape_of(const RunConfig& c) {
  if (c.model.path.empty()) return model::preset_shape(c.model.preset);
  return model::load_hf_config((std::filesystem::path(c.model.path) / "config.json").string());
}

void check_config_fits_model(const RunConfig& c, const model::ModelShape& shape) {
  const std::string model = c.model.path.empty() ? "the preset " + c.model.preset
                                                  : (std::filesystem::path(c.model.path) / "config.json").string();
  ConfigProblems problems(c);
  if (shape.max_positions > 0 && c.data.seq_len > shape.max_positions)
    problems.add("data.seq_len", strformat("%d is above the model's max_position_embeddings = %lld (%s): positions "
                                           "beyond it were never trained; lower data.seq_len",
                                           c.data.seq_len, (long long)shape.max_positions, model.c_str()));
  const metrics::LoraSpec lora = metrics::LoraSpec::from_names(c.lora.enabled, c.lora.r, c.lora.targets);
  // Qwen3.5 has a tokenizer (vocabulary 248320) and a chat template of its own, neither of which lorabench
  // bundles or renders: instruction data needs the snapshot's tokenizer and a template named on purpose.
  if (shape.family == "qwen3_5" && c.data.format != "synthetic") {
    if (c.data.tokenizer.empty() && c.model.path.empty())
      problems.add("data.format", strformat("%s data for %s needs Qwen3.5's tokenizer, which lorabench does not "
                                            "bundle: set model.path to a Qwen3.5 snapshot (its tokenizer.json) or "
                                            "data.tokenizer, or train on data.format = synthetic",
                                            c.data.format.c_str(), model.c_str()));
    if (c.data.chat_template == "auto")
      problems.add("data.chat_template", strformat("auto has no template for %s: lorabench renders Qwen2.5's and "
                                                   "Qwen3's, not Qwen3.5's; name one of them on purpose, or train "
                                                   "on data.format = synthetic",
                                                   model.c_str()));
  }
  if (c.parallel.tp > 1) {  // whole heads and MLP slices per tensor-parallel rank
    try {
      model::tp_local_shape(shape, c.parallel.tp);
    } catch (const ConfigError& e) {
      const std::string msg = e.what(), lead = "parallel.tp = " + std::to_string(c.parallel.tp) + ": ";
      problems.add("parallel.tp", msg.rfind(lead, 0) == 0 ? msg.substr(lead.size()) : msg);
    }
  }
  const metrics::TransformerShape fs = flops_shape(shape);
  for (int i = 0; i < metrics::kLoraTargetCount; ++i) {
    const auto t = static_cast<metrics::LoraTarget>(i);
    if (!lora.targeted(t)) continue;
    bool present = false;
    for (int64_t l = 0; l < fs.layers && !present; ++l) present = metrics::layer_has(fs, l, t);
    if (!present) {
      problems.add("lora.targets", strformat("names %s, which no layer of %s (%s, %s) has; leave it out",
                                             metrics::lora_target_name(t), model.c_str(), shape.family.c_str(),
                                             shape.layer_mix().c_str()));
      continue;
    }
    const metrics::ProjectionShape p = metrics::projection_shape(fs, t);
    if (c.lora.r > std::min(p.in, p.out))
      problems.add("lora.r", strformat("%d is above the smaller dimension of the targeted %s projection (%lld in x "
                                       "%lld out, %s), which bounds the rank of any update to it; lower lora.r or "
                                       "leave %s out of lora.targets",
                                       c.lora.r, metrics::lora_target_name(t), (long long)p.in, (long long)p.out,
                                       model.c_str(), metrics::lora_target_name(t)));
  }
  problems.throw_if_any();
}

model::LoraSpec lora_spec_of(const RunConfig& c) {
  return model::make_lora_spec(c.lora.enabled, c.lora.r, c.lora.alpha, c.lora.dropout, c.lora.rslora, c.lora.targets);
}

model::KernelOptions kernel_options_of(const RunConfig& c) {
  model::KernelOptions k;
  k.fused = c.model.fused_kernels;
  k.cuda_attention = model::parse_cuda_attention(c.model.cuda_attention);
  k.cpu_attention = model::parse_cpu_attention(c.model.cpu_attention);
  return k;
}

model::ModelLayout layout_of(const RunConfig& c, const model::ModelShape& shape) {
  model::ModelLayout m = model::build_layout(shape, lora_spec_of(c));
  m.kernels = kernel_options_of(c);
  return m;
}

at::ScalarType dtype_of(const RunConfig& c) { return c.model.dtype == "bf16" ? at::kBFloat16 : at::kFloat; }

data::BatchGeometry batch_geometry_of(const RunConfig& c, int world_size) {
  // The ranks of a tensor-parallel group read the same micro-batches: the data-parallel ranks are world / tp.
  const int tp = c.parallel.tp;
  const int dp = tp > 1 && world_size % tp == 0 ? world_size / tp : world_size;
  return data::BatchGeometry{c.train.micro_batch, c.train.grad_accum, dp, c.data.seq_len};
}

data::SyntheticSpec synthetic_spec_of(const RunConfig& c, int vocab_size, int world_size) {
  data::SyntheticSpec s;
  s.seed = c.run.seed;
  s.vocab_size = vocab_size;
  s.geo = batch_geometry_of(c, world_size);
  return s;
}

std::string tokenizer_path_of(const RunConfig& c) {
  // The family decides the bundled tokenizer only: data.tokenizer and model.path's own come first.
  if (!c.data.tokenizer.empty() || !c.model.path.empty())
    return data::resolve_tokenizer_path(c.data.tokenizer, c.model.path);
  return data::resolve_tokenizer_path("", "", data::tokenizer_name_of_family(model_shape_of(c).family));
}

data::ChatOptions chat_options_of(const RunConfig& c) {
  data::ChatOptions o;
  o.tmpl = c.data.chat_template == "auto" ? data::chat_template_of_family(model_shape_of(c).family)
                                          : data::parse_chat_template(c.data.chat_template);
  o.enable_thinking = c.data.enable_thinking;
  return o;
}

data::SftSpec sft_spec_of(const RunConfig& c, int world_size) {
  data::SftSpec s;
  s.path = c.data.path;
  s.format = data::parse_sft_format(c.data.format);
  s.chat = chat_options_of(c);
  s.tokenizer_path = tokenizer_path_of(c);
  s.geo = batch_geometry_of(c, world_size);
  s.pack = c.data.pack;
  s.shuffle = c.data.shuffle;
  s.holdout_fraction = c.data.eval_fraction;
  s.on_bad_record = data::parse_bad_record_policy(c.data.on_bad_record);
  s.seed = c.run.seed;
  return s;
}


metrics::TransformerShape flops_shape(const model::ModelShape& s) {
  metrics::TransformerShape t;
  t.layers = s.layers;
  t.hidden = s.hidden;
  t.intermediate = s.intermediate;
  t.heads = s.heads;
  t.kv_heads = s.kv_heads;
  t.head_dim = s.head_dim;
  t.vocab = s.vocab_size;
  t.tied_embeddings = s.tie_embeddings;
  t.qkv_bias = s.qkv_bias;
  t.qk_norm = s.qk_norm;
  t.attn_output_gate = s.attn_output_gate;
  t.linear = s.linear;
  t.lin_k_heads = s.lin_k_heads;
  t.lin_v_heads = s.lin_v_heads;
  t.lin_k_dim = s.lin_k_dim;
  t.lin_v_dim = s.lin_v_dim;
  t.conv_kernel = s.conv_kernel;
  t.delta_chunk = model::kDeltaRuleChunk;
  return t;
}

strategy::StrategySpec strategy_spec_of(const RunConfig& c) {
  strategy::StrategySpec sp;
  sp.name = c.parallel.strategy;
  sp.bucket_mb = c.parallel.bucket_mb;
  sp.grad_accum = c.train.grad_accum;
  sp.reshard_after_forward = c.parallel.reshard_after_forward;
  sp.prefetch = c.parallel.prefetch;
  sp.prefetch_within_peak = c.parallel.prefetch_within_peak;
  // auto: DDP and ZeRO-1 communicate on the last micro-step only (local accumulation); ZeRO-2 and FSDP
  // reduce every micro-step, which is what lets them drop full-size gradients between micro-steps.
  const std::string& gs = c.parallel.grad_sync;
  sp.sync_every_micro =
      gs == "every" || (gs == "auto" && (c.parallel.strategy == "zero2" || c.parallel.strategy == "fsdp" ||
                                         c.parallel.strategy == "hsdp"));
  return sp;
}

optim::ScheduleSpec schedule_of(const RunConfig& c) {
  optim::ScheduleSpec s;
  s.kind = c.train.schedule;
  s.lr = c.train.lr;
  s.min_lr = c.train.min_lr;
  s.warmup_steps = c.train.warmup_steps;
  s.total_steps = c.run.steps;
  return s;
}

StepConfig step_config_of(const RunConfig& c) {
  StepConfig sc;
  sc.grad_accum = c.train.grad_accum;
  sc.seed = c.run.seed;
  sc.lora_dropout = c.lora.enabled && c.lora.dropout > 0;
  sc.max_grad_norm = c.train.max_grad_norm;
  sc.adamw.beta1 = c.train.beta1;
  sc.adamw.beta2 = c.train.beta2;
  sc.adamw.eps = c.train.eps;
  sc.adamw.weight_decay = c.train.weight_decay;
  sc.schedule = schedule_of(c);
  sc.options.activation_checkpointing = c.model.activation_checkpointing;
  if (!c.model.fused_head) sc.options.head_chunk = 0;
  sc.nan_at_step = c.fault.nan_at_step;
  sc.data_delay_s = c.fault.data_delay_ms / 1000.0;
  return sc;
}

}  // namespace lorabench::train
