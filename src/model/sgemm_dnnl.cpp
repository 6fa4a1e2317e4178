#include <oneapi/dnnl/dnnl.h>

#include "sgemm.hpp"

namespace lorabench::model {

bool sgemm_available() { return true; }

bool sgemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  return dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == dnnl_success;
}

}  // namespace lorabench::model
