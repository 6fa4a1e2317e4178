// Named ranges for libtorch's op profiler (bench/profile_ops.cpp attributes op time to them). When no
// profiler is active a scope costs one flag check.
#pragma once

#include <ATen/record_function.h>

namespace lorabench::model {

class ProfileScope {
 public:
  explicit ProfileScope(const char* name) : rf_(at::RecordScope::USER_SCOPE) {
    if (rf_.isActive()) rf_.before(name);
  }
  void end() { rf_.end(); }

 private:
  at::RecordFunction rf_;
};

}  // namespace lorabench::model
