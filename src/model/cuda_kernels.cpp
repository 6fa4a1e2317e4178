// The tensor side of lorabench's CUDA kernels (cuda_kernels.hpp): checks, allocation on the input's device
// and the launch on the current stream.
#include "cuda_kernels.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

#include "cuda_kernels.cuh"
#include "lorabench/core/error.hpp"

namespace lorabench::model::cuda {

namespace {

void check(const at::Tensor& t, at::ScalarType dt, const char* what) {
  LB_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == dt,
           std::string("cuda kernel: ") + what + " must be a contiguous CUDA tensor of " + c10::toString(dt));
}

void* stream_of(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void launched(int rc, const char* what) {
  LB_CHECK(rc == 0, std::string("cuda kernel ") + what + ": " + error_string(rc));
}

bool bf16_or_f32(const at::Tensor& t, const char* what) {
  LB_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat,
           std::string("cuda kernel: ") + what + " must be fp32 or bf16");
  return t.scalar_type() == at::kBFloat16;
}

}  // namespace

bool available() { return true; }

at::Tensor swiglu_forward(const at::Tensor& gu_in) {
  at::Tensor gu = gu_in.contiguous();
  const bool bf16 = bf16_or_f32(gu, "swiglu gu");
  const c10::cuda::CUDAGuard guard(gu.device());
  const int64_t N = gu.size(0), I = gu.size(1) / 2;
  at::Tensor a = at::empty({N, I}, gu.options());
  launched(launch_swiglu_forward(gu.data_ptr(), a.data_ptr(), N, I, bf16, stream_of(gu)), "swiglu_forward");
  return a;
}

at::Tensor swiglu_backward(const at::Tensor& gu_in, const at::Tensor& da_in) {
  at::Tensor gu = gu_in.contiguous(), da = da_in.contiguous();
  const bool bf16 = bf16_or_f32(gu, "swiglu gu");
  check(da, gu.scalar_type(), "swiglu da");
  const c10::cuda::CUDAGuard guard(gu.device());
  const int64_t N = gu.size(0), I = gu.size(1) / 2;
  at::Tensor dgu = at::empty({N, 2 * I}, gu.options());
  launched(launch_swiglu_backward(gu.data_ptr(), da.data_ptr(), dgu.data_ptr(), N, I, bf16, stream_of(gu)),
           "swiglu_backward");
  return dgu;
}

at::Tensor rmsnorm_forward(const at::Tensor& x_in, const at::Tensor& w_in, double eps, at::Tensor* rstd) {
  at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const bool bf16 = bf16_or_f32(x, "rmsnorm x");
  check(w, x.scalar_type(), "rmsnorm weight");
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t D = x.size(-1), N = x.numel() / D;
  at::Tensor y = at::empty_like(x);
  at::Tensor r = at::empty({N, 1}, x.options().dtype(at::kFloat));
  launched(launch_rmsnorm_forward(x.data_ptr(), w.data_ptr(), y.data_ptr(), r.data_ptr<float>(), N, D, float(eps),
                                  bf16, stream_of(x)),
           "rmsnorm_forward");
  if (rstd) *rstd = r;
  return y;
}

void rope_qkv(at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t B, int64_t T, int64_t H,
              int64_t K, int64_t d, bool inverse) {
  const bool bf16 = bf16_or_f32(qkv, "rope qkv");
  check(qkv, qkv.scalar_type(), "rope qkv");
  check(cos, at::kFloat, "rope cos");
  check(sin, at::kFloat, "rope sin");
  const c10::cuda::CUDAGuard guard(qkv.device());
  launched(launch_rope_qkv(qkv.data_ptr(), cos.data_ptr<float>(), sin.data_ptr<float>(), B, T, H, K, d, inverse, bf16,
                           stream_of(qkv)),
           "rope_qkv");
}

void online_softmax_chunk(const at::Tensor& z_in, at::Tensor& m, at::Tensor& se, at::Tensor& rescale, at::Tensor& p,
                          const at::Tensor& target_local, at::Tensor& zt) {
  at::Tensor z = z_in.contiguous();
  const bool bf16 = bf16_or_f32(z, "online softmax z");
  for (const at::Tensor* t : {&m, &se, &rescale, &zt}) check(*t, at::kFloat, "online softmax state");
  at::Tensor target = target_local.contiguous();
  check(target, at::kLong, "online softmax target");
  const c10::cuda::CUDAGuard guard(z.device());
  const int64_t N = z.size(0), C = z.size(1);
  if (!p.defined() || p.numel() < N * C || p.scalar_type() != z.scalar_type() || p.device() != z.device())
    p = at::empty({N * C}, z.options());
  launched(launch_online_softmax_chunk(z.data_ptr(), m.data_ptr<float>(), se.data_ptr<float>(),
                                       rescale.data_ptr<float>(), p.data_ptr(), target.data_ptr<int64_t>(),
                                       zt.data_ptr<float>(), N, C, bf16, stream_of(z)),
           "online_softmax_chunk");
}

}  // namespace lorabench::model::cuda
