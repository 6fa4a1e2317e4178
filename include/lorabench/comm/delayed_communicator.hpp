// A fault-injection decorator that makes every collective's transfer slower (fault.comm_delay_ms): a
// collective completes `delay_s` seconds after the wrapped backend completed it. The rank waits for the
// delay inside wait() (sleeping), after the last rank has arrived, so it is transfer time in the
// timeline's split and never hidden behind compute (a slower link that every rank sees alike). Torch-free.
#pragma once

#include <memory>

#include "lorabench/comm/communicator.hpp"

namespace lorabench::comm {

// Takes ownership of `inner`; forwards every call to it (backend_name(), device_buffers() are inner's).
// REQUIRES: delay_s >= 0.
std::unique_ptr<Communicator> make_delayed_communicator(std::unique_ptr<Communicator> inner, double delay_s);

}  // namespace lorabench::comm
