#include "lorabench/model/dense.hpp"

#include <ATen/ATen.h>

namespace lorabench::model {

DenseModel::DenseModel(ModelLayout m, at::ScalarType dtype) : m_(std::move(m)), dtype_(dtype) {
  for (const auto& u : m_.units) {
    at::Tensor c = at::zeros({u.compute_numel}, at::TensorOptions().dtype(dtype));
    at::Tensor t;
    if (u.trainable_numel > 0) {
      t = (m_.full_finetune && dtype == at::kFloat) ? c : at::zeros({u.trainable_numel}, at::kFloat);
    }
    compute_.push_back(c);
    trainable_.push_back(t);
    grad_.push_back(u.trainable_numel > 0 ? at::zeros({u.trainable_numel}, at::kFloat) : at::Tensor());
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
