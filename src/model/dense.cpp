#include "lorabench/model/dense.hpp"

#include <ATen/ATen.h>

namespace lorabench::model {

DenseModel::DenseModel(ModelLayout m, at::ScalarType dtype, c10::Device device) : m_(std::move(m)), dtype_(dtype) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  for (const auto& u : m_.units) {
    at::Tensor c = at::zeros({u.compute_numel}, at::TensorOptions().dtype(dtype).device(device));
    at::Tensor t;
    if (u.trainable_numel > 0) {
      t = (m_.full_finetune && dtype == at::kFloat) ? c : at::zeros({u.trainable_numel}, f32);
    }
    compute_.push_back(c);
    trainable_.push_back(t);
    grad_.push_back(u.trainable_numel > 0 ? at::zeros({u.trainable_numel}, f32) : at::Tensor());
  }
}

void DenseModel::init_random(uint64_t seed) {
  for (size_t u = 0; u < m_.units.size(); ++u) init_unit(m_, static_cast<int>(u), compute_[u], trainable_[u], seed);
}

void DenseModel::load_snapshot(const Snapshot& snap) {
  check_snapshot_complete(snap, m_);
  for (size_t u = 0; u < m_.units.size(); ++u) load_unit(snap, m_, static_cast<int>(u), compute_[u], trainable_[u]);
}

void DenseModel::zero_grad() {
  for (auto& g : grad_)
    if (g.defined()) g.zero_();
}

}  // namespace lorabench::model
