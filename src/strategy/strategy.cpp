#include "lorabench/strategy/strategy.hpp"

#include <ATen/ATen.h>

#include <algorithm>

#include "lorabench/core/error.hpp"
#include "lorabench/device/torch_device.hpp"
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
  if (src.fill) {
    src.fill(m, u, compute, trainable);
    return;
  }
  if (!src.random_values) {
    compute.fill_(0.01);
    if (trainable.defined()) trainable.fill_(0.01);
    return;
  }
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

TrainingStrategy::TrainingStrategy(const model::ModelLayout& m, at::ScalarType dtype, comm::Communicator* comm,
                                   device::Device& dev)
    : m_(m), dtype_(dtype), comm_(comm), dev_(dev) {}

at::TensorOptions TrainingStrategy::opts(at::ScalarType t) const {
  return at::TensorOptions().dtype(t).device(device::torch_device(dev_));
}

namespace {

// x[0..n) := op over all ranks, in fp64, through a device buffer where the communicator takes those.
void all_reduce_f64(comm::Communicator* comm, const at::TensorOptions& on_device, double* x, int64_t n,
                    comm::ReduceOp op) {
  if (comm == nullptr || comm->size() == 1 || n == 0) return;
  if (!comm->device_buffers()) {
    comm->all_reduce(x, n, comm::DataType::kFloat64, op);
    return;
  }
  at::Tensor t = at::from_blob(x, {n}, at::kDouble).to(on_device);
  comm->all_reduce(t.data_ptr(), n, comm::DataType::kFloat64, op);
  t = t.to(at::kCPU);
  if (t.data_ptr<double>() != x) std::copy(t.data_ptr<double>(), t.data_ptr<double>() + n, x);
}

}  // namespace

double TrainingStrategy::all_reduce_sum(double x) const {
  all_reduce_f64(comm_, opts(at::kDouble), &x, 1, comm::ReduceOp::kSum);
  return x;
}

void TrainingStrategy::all_reduce_min(std::vector<double>& x) const {
  all_reduce_f64(comm_, opts(at::kDouble), x.data(), static_cast<int64_t>(x.size()), comm::ReduceOp::kMin);
}

MemoryPrediction predict_model_state(const std::string& strategy, const model::ModelLayout& m, at::ScalarType dtype,
                                     int world) {
  const int64_t pc = m.compute_params(), pt = m.trainable_params();
  const int64_t ds = at::elementSize(dtype);
  const bool alias = m.full_finetune && dtype == at::kFloat;  // fp32 full FT: master weights = compute weights
  const std::string w = std::to_string(world);
  const std::string c = alias ? "" : std::to_string(ds) + "Ψc + ";
  MemoryPrediction p;
  if (strategy == "fsdp" || strategy == "hsdp") {  // hsdp: `world` is its shard group's size
    p.params = ((alias ? 0 : pc * ds) + pt * 4) / world;
    p.grads = pt * 4 / world;
    p.optimizer = pt * 8 / world;
    p.formula = "(" + c + "4Ψt)/" + w + " + 4Ψt/" + w + " + 8Ψt/" + w;
    return p;
  }
  const bool zero = strategy == "zero1" || strategy == "zero2";
  const int64_t n = zero ? world : 1;
  p.params = (alias ? 0 : pc * ds) + pt * 4;
  p.grads = strategy == "zero2" ? pt * 4 / n : pt * 4;
  p.optimizer = 8 * pt / n;
  p.formula = c + "4Ψt + " + (strategy == "zero2" ? "4Ψt/" + w : "4Ψt") + " + " + (zero ? "8Ψt/" + w : "8Ψt");
  return p;
}

std::unique_ptr<TrainingStrategy> TrainingStrategy::create(const StrategySpec& spec, const model::ModelLayout& m,
                                                           at::ScalarType dtype, comm::Communicator* comm,
                                                           device::Device* dev_or_null, const MeshGroups& mesh) {
  device::Device& dev = dev_or_null ? *dev_or_null : device::cpu_device();
  if (mesh.tp != nullptr && mesh.tp->size() > 1) return make_tensor_parallel(spec, m, dtype, comm, dev, mesh);
  const int world = comm ? comm->size() : 1;
  if (dev.is_cuda() && comm != nullptr && !comm->device_buffers())
    throw Error("strategy " + spec.name + ": the model is on " + dev.str() + " but the " + comm->backend_name() +
                " communicator takes host buffers (wrap it with device::make_staging_communicator)");
  if (spec.name == "single") {
    if (world != 1) throw ConfigError("parallel.strategy: single needs exactly one rank, the job has " +
                                      std::to_string(world));
    return make_replicated(spec.name, spec, m, dtype, comm, dev);
  }
  if (comm == nullptr) throw Error("strategy " + spec.name + " needs a communicator");
  if (spec.name == "ddp" || spec.name == "zero1" || spec.name == "zero2")
    return make_replicated(spec.name, spec, m, dtype, comm, dev);
  if (spec.name == "fsdp") return make_fsdp(spec, m, dtype, comm, dev);
  if (spec.name == "hsdp") {
    if (mesh.shard == nullptr || mesh.replicate == nullptr)
      throw Error("strategy hsdp needs the mesh's shard and replicate communicators (comm::split_mesh)");
    if (mesh.shard->size() * mesh.replicate->size() != world)
      throw Error("strategy hsdp: the mesh's groups (" + std::to_string(mesh.replicate->size()) + " x " +
                  std::to_string(mesh.shard->size()) + ") do not cover the " + std::to_string(world) + " ranks");
    if (dev.is_cuda() && !(mesh.shard->device_buffers() && mesh.replicate->device_buffers()))
      throw Error("strategy hsdp: the model is on " + dev.str() + " but the mesh's communicators take host buffers");
    return make_fsdp(spec, m, dtype, mesh.shard, dev, mesh.replicate);
  }
  throw ConfigError("parallel.strategy: unknown strategy \"" + spec.name + "\"");
}

}  // namespace lorabench::strategy
