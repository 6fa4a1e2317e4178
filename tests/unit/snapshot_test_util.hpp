// Shared by the model-family tests (test_model_qwen3, test_model_qwen3_5): fixtures' tensors, a snapshot loaded into
// a model, and one micro-step's mean loss with its gradients.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "lorabench/io/safetensors.hpp"
#include "lorabench/model/dense.hpp"
#include "lorabench/model/step.hpp"
#include "lorabench/model/weights.hpp"

namespace lbtest {

inline const std::string& fixtures() {
  static const std::string dir = LORABENCH_FIXTURES;
  return dir;
}

// A fixture's tensor: int64 as it is, every float dtype as fp32.
inline at::Tensor ref(const lorabench::io::SafeTensorsFile& f, const std::string& name) {
  const lorabench::io::SafeTensorInfo* t = f.find(name);
  if (!t) throw std::runtime_error("fixture lacks " + name);
  return lorabench::model::read_tensor(f, *t, t->dtype == "I64" ? at::kLong : at::kFloat);
}

inline double max_abs(const at::Tensor& a) { return a.abs().max().item<double>(); }

inline std::unique_ptr<lorabench::model::DenseModel> load(const std::string& dir, const lorabench::model::LoraSpec& lora,
                                                          at::ScalarType dt) {
  namespace model = lorabench::model;
  model::ModelShape shape = model::load_hf_config(dir + "/config.json");
  auto m = std::make_unique<model::DenseModel>(model::build_layout(shape, lora), dt);
  m->load_snapshot(model::Snapshot(dir));
  return m;
}

inline lorabench::model::LoraSpec no_lora() {
  lorabench::model::LoraSpec off;
  off.enabled = false;
  return off;
}

// The mean loss over the counted tokens; the gradients of that mean are left in m's gradient buffers.
inline double loss_and_grads(lorabench::model::DenseModel& m, const at::Tensor& ids, const at::Tensor& labels,
                             lorabench::model::StepOptions opts = {}) {
  namespace model = lorabench::model;
  model::MicroBatch mb;
  mb.ids = ids;
  mb.targets = model::shift_targets(labels);
  const int64_t counted = mb.targets.ne(-100).sum().item<int64_t>();
  mb.grad_scale = 1.0 / double(counted);
  m.zero_grad();
  model::MicroResult r = model::forward_backward(m.layout(), m, mb, opts);
  EXPECT_EQ(r.tokens(), counted);
  return r.loss() / double(r.tokens());
}

}  // namespace lbtest
