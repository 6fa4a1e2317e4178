// Every unit of the model materialised in one process: the reference for tests, `lorabench forward`,
// and weight export. Training strategies keep their own storage (strategy/).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "lorabench/model/step.hpp"
#include "lorabench/model/weights.hpp"

namespace lorabench::model {

class DenseModel final : public UnitProvider {
 public:
  // Allocates the buffers (zeros) on `device`. With full fine-tuning in fp32 the compute buffers are the masters.
  DenseModel(ModelLayout m, at::ScalarType dtype, c10::Device device = c10::Device(c10::DeviceType::CPU));

  void init_random(uint64_t seed);
  void load_snapshot(const Snapshot& snap);  // base weights; LoRA keeps its values
  void zero_grad();

  const ModelLayout& layout() const { return m_; }
  at::ScalarType dtype() const { return dtype_; }
  std::vector<at::Tensor>& compute_flats() { return compute_; }
  std::vector<at::Tensor>& trainable_flats() { return trainable_; }
  std::vector<at::Tensor>& grad_flats() { return grad_; }

  at::Tensor compute(int unit, Pass) override { return compute_[unit]; }
  at::Tensor trainable(int unit, Pass) override { return trainable_[unit]; }
  at::Tensor grad(int unit) override { return grad_[unit]; }

 private:
  ModelLayout m_;
  at::ScalarType dtype_;
  std::vector<at::Tensor> compute_, trainable_, grad_;
};

}  // namespace lorabench::model
