// Helpers shared by the strategy implementations (private to src/strategy).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/model/layout.hpp"
#include "lorabench/strategy/strategy.hpp"

namespace lorabench::strategy {

// Units in the order backward finishes them: lm_head (untied), final norm, layers L-1..0, embedding.
std::vector<int> backward_order(const model::ModelLayout& m);

// Fills a unit's full buffers from the init source (random or snapshot; LoRA always random).
void fill_unit(const model::ModelLayout& m, int u, const InitSource& src, const at::Tensor& compute,
               const at::Tensor& trainable);

std::unique_ptr<TrainingStrategy> make_replicated(const std::string& name, const StrategySpec& spec,
                                                  const model::ModelLayout& m, at::ScalarType dtype,
                                                  comm::Communicator* comm, device::Device& dev);
// fsdp over `comm`; with `replicate` (hsdp) `comm` is the shard group and the gradient shards are also summed
// over `replicate`.
std::unique_ptr<TrainingStrategy> make_fsdp(const StrategySpec& spec, const model::ModelLayout& m, at::ScalarType dtype,
                                            comm::Communicator* comm, device::Device& dev,
                                            comm::Communicator* replicate = nullptr);

// `spec` (single or ddp over `dp`, which may be null) on this rank's part of the model split over mesh.tp.
std::unique_ptr<TrainingStrategy> make_tensor_parallel(const StrategySpec& spec, const model::ModelLayout& m,
                                                       at::ScalarType dtype, comm::Communicator* dp,
                                                       device::Device& dev, const MeshGroups& mesh);

}  // namespace lorabench::strategy
