// The optional fast fp32 GEMM behind model::gemm (private to src/model). Exactly one of sgemm_dnnl.cpp /
// sgemm_none.cpp is compiled, chosen by CMake (LORABENCH_WITH_DNNL).
#pragma once

#include <cstdint>

namespace lorabench::model {

bool sgemm_available();
// Row-major C = alpha op(A) op(B) + beta C (oneDNN's dnnl_sgemm convention). Returns false on failure.
bool sgemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace lorabench::model
