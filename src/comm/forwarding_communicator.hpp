// The base of the communicator decorators (checked_communicator.cpp, delayed_communicator.cpp): owns the
// wrapped communicator and forwards what a decorator leaves alone. Private to src/comm.
#pragma once

#include <memory>
#include <string>

#include "lorabench/comm/communicator.hpp"
#include "lorabench/core/error.hpp"

namespace lorabench::comm {

class ForwardingCommunicator : public Communicator {
 public:
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend_name() const override { return inner_->backend_name(); }
  bool device_buffers() const override { return inner_->device_buffers(); }
  bool async_progress() const override { return inner_->async_progress(); }
  void progress() override { inner_->progress(); }

 protected:
  // `maker` names the factory in the error for a null `inner`.
  ForwardingCommunicator(std::unique_ptr<Communicator> inner, const char* maker) : inner_(std::move(inner)) {
    LB_CHECK(inner_ != nullptr, std::string(maker) + " needs a communicator to wrap");
  }
  std::unique_ptr<Communicator> inner_;
};

}  // namespace lorabench::comm
