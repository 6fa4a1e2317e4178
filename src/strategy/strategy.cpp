#include "lorabench/strategy/strategy.hpp"

#include <ATen/ATen.h>

#include "lorabench/core/error.hpp"
#include "strategy_common.hpp"

namespace lorabench::strategy {

comm::DataType comm_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return comm::DataType::kFloat32;
    case at::kBFloat16: return comm::DataType::kBFloat16;
    case at::kHalf: return comm::DataType::kFloat16;
    case at::kInt: return comm::DataType::kInt32;
    case at::kLong: return comm::DataType::kInt64;
    case at::kDouble: return comm::DataType::kFloat64;
    default: throw Error(std::string("no communicator type for ") + c10::toString(t));
  }
}

std::vector<int> backward_order(const model::ModelLayout& m) {
  std::vector<int> order;
  if (!m.shape.tie_embeddings) order.push_back(m.head_unit());
  order.push_back(m.final_unit());
  for (int l = static_cast<int>(m.shape.layers) - 1; l >= 0; --l) order.push_back(1 + l);
  order.push_back(0);
  return order;
}

void fill_unit(const model::ModelLayout& m, int u, const InitSource& src, const at::Tensor& compute,
               const at::Tensor& trainable) {
  if (src.snapshot == nullptr) {
    model::init_unit(m, u, compute, trainable, src.seed);
    return;
  }
  model::load_unit(*src.snapshot, m, u, compute, trainable);
  if (!m.full_finetune && trainable.defined()) {
    trainable.zero_();
    model::init_lora(m, u, trainable, src.seed);
  }
}

double all_reduce_sum(comm::Communicator* comm, double x) {
  comm->all_reduce(&x, 1, comm::DataType::kFloat64, comm::ReduceOp::kSum);
  return x;
}

std::unique_ptr<TrainingStrategy> TrainingStrategy::create(const StrategySpec& spec, const model::ModelLayout& m,
                                                           at::ScalarType dtype, comm::Communicator* comm) {
  const int world = comm ? comm->size() : 1;
  if (spec.name == "single") {
    if (world != 1) throw ConfigError("parallel.strategy: single needs exactly one rank, the job has " +
                                      std::to_string(world));
    return make_replicated(spec.name, spec, m, dtype, comm);
  }
  if (comm == nullptr) throw Error("strategy " + spec.name + " needs a communicator");
  if (spec.name == "ddp" || spec.name == "zero1" || spec.name == "zero2")
    return make_replicated(spec.name, spec, m, dtype, comm);
  if (spec.name == "fsdp") return make_fsdp(spec, m, dtype, comm);
  throw ConfigError("parallel.strategy: unknown strategy \"" + spec.name + "\"");
}

}  // namespace lorabench::strategy
