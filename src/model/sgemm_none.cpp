#include "sgemm.hpp"

namespace lorabench::model {

// Built without oneDNN: model::gemm uses ATen for fp32.
bool sgemm_available() { return false; }

bool sgemm(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
           int64_t) {
  return false;
}

}  // namespace lorabench::model
