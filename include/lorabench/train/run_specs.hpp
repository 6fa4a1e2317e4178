// The one place where a run's configuration becomes the values the layers below take: the model's shape,
// LoRA and dtype, the batch geometry, the data sources' specs, the strategy's and the step's settings.
// Below train, no layer reads RunConfig: data, model, strategy and optim see only these values.
#pragma once

#include <ATen/core/ScalarType.h>

#include <string>

#include "lorabench/config/run_config.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/metrics/flops.hpp"
#include "lorabench/model/layout.hpp"
#include "lorabench/optim/schedule.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"

namespace lorabench::train {

model::ModelShape model_shape_of(const RunConfig& c);  // the preset's, or model.path's config.json
// Keys that the model bounds: data.seq_len up to its max_position_embeddings (positions it was never trained
// at), lora.r up to the smaller dimension of every targeted projection (a rank above it adds parameters and
// no capacity). Throws one ConfigError naming each key, where it was set, and the model's numbers.
void check_config_fits_model(const RunConfig& c, const model::ModelShape& shape);
model::LoraSpec lora_spec_of(const RunConfig& c);      // lora.*
at::ScalarType dtype_of(const RunConfig& c);           // model.dtype
metrics::TransformerShape flops_shape(const model::ModelShape& s);
// model.fused_kernels, model.cuda_attention, model.cpu_attention.
model::KernelOptions kernel_options_of(const RunConfig& c);
// The model a run trains: `shape` (model_shape_of, or a cut-down copy of it) with the run's LoRA and kernels.
model::ModelLayout layout_of(const RunConfig& c, const model::ModelShape& shape);

// train.micro_batch, train.grad_accum, data.seq_len and the job's data-parallel ranks.
// world_size: the job's ranks; the geometry's are the data-parallel ones (world_size / parallel.tp).
data::BatchGeometry batch_geometry_of(const RunConfig& c, int world_size);
// Synthetic tokens over the model's vocabulary (data.format = synthetic).
data::SyntheticSpec synthetic_spec_of(const RunConfig& c, int vocab_size, int world_size);
// A dataset file (data.format = auto, alpaca or chat): data.*, run.seed, the geometry, the tokenizer of
// tokenizer_path_of. REQUIRES: data.format is not synthetic.
data::SftSpec sft_spec_of(const RunConfig& c, int world_size);
// data.tokenizer, else <model.path>/tokenizer.json, else the bundled tokenizer of the model's family
// (data::resolve_tokenizer_path).
std::string tokenizer_path_of(const RunConfig& c);
// data.chat_template (auto: the model family's) and data.enable_thinking.
data::ChatOptions chat_options_of(const RunConfig& c);

strategy::StrategySpec strategy_spec_of(const RunConfig& c);
optim::ScheduleSpec schedule_of(const RunConfig& c);  // train.schedule, lr, min_lr, warmup_steps; run.steps
StepConfig step_config_of(const RunConfig& c);

}  // namespace lorabench::train
