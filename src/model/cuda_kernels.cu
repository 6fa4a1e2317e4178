// lorabench's CUDA kernels for the elementwise and row-wise parts of a decoder layer and the LM head's
// online softmax (what eager PyTorch does in several kernels each). See cuda_kernels.cuh.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_kernels.cuh"

namespace lorabench::model::cuda {

namespace {

template <bool BF16>
struct Io;
template <>
struct Io<false> {
  using T = float;
  static __device__ __forceinline__ float load(const T* p, int64_t i) { return p[i]; }
  static __device__ __forceinline__ void store(T* p, int64_t i, float v) { p[i] = v; }
  static __device__ __forceinline__ float round(float v) { return v; }
};
template <>
struct Io<true> {
  using T = __nv_bfloat16;
  static __device__ __forceinline__ float load(const T* p, int64_t i) { return __bfloat162float(p[i]); }
  static __device__ __forceinline__ void store(T* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
  static __device__ __forceinline__ float round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
};

constexpr int kThreads = 256;

int64_t blocks_for(int64_t n) { return (n + kThreads - 1) / kThreads; }

// Sum of v over the block (every thread gets it); `scratch` holds kThreads / 32 floats.
__device__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? scratch[threadIdx.x] : 0.f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) scratch[0] = v;
  __syncthreads();
  v = scratch[0];
  __syncthreads();
  return v;
}

__device__ float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? scratch[threadIdx.x] : -INFINITY;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (threadIdx.x == 0) scratch[0] = v;
  __syncthreads();
  v = scratch[0];
  __syncthreads();
  return v;
}

// a = silu(g) * u, fp32, one rounding.
template <bool BF16>
__global__ void swiglu_fwd(const typename Io<BF16>::T* gu, typename Io<BF16>::T* a, int64_t N, int64_t I) {
  using IO = Io<BF16>;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < N * I; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / I, i = k - n * I;
    const float g = IO::load(gu, n * 2 * I + i), u = IO::load(gu, n * 2 * I + I + i);
    IO::store(a, k, g / (1.f + expf(-g)) * u);  // silu as ATen computes it
  }
}

// dg = da * u * s * (1 + g (1 - s)), du = da * g * s.
template <bool BF16>
__global__ void swiglu_bwd(const typename Io<BF16>::T* gu, const typename Io<BF16>::T* da, typename Io<BF16>::T* dgu,
                           int64_t N, int64_t I) {
  using IO = Io<BF16>;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < N * I; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / I, i = k - n * I;
    const float g = IO::load(gu, n * 2 * I + i), u = IO::load(gu, n * 2 * I + I + i), d = IO::load(da, k);
    const float s = 1.f / (1.f + expf(-g));
    IO::store(dgu, n * 2 * I + i, d * u * s * (1.f + g * (1.f - s)));
    IO::store(dgu, n * 2 * I + I + i, d * g * s);
  }
}

// One block per row: rstd = rsqrt(sum(x^2) / D + eps); y = w * round(x * rstd) (transformers' order).
template <bool BF16>
__global__ void rmsnorm_fwd(const typename Io<BF16>::T* x, const typename Io<BF16>::T* w, typename Io<BF16>::T* y,
                            float* rstd, int64_t D, float eps) {
  using IO = Io<BF16>;
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const auto* xr = x + row * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = IO::load(xr, i);
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss, scratch) * (1.f / float(D)) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    IO::store(y + row * D, i, IO::load(w, i) * IO::round(IO::load(xr, i) * r));
}

// The q and k heads of each row rotated by their position's angle, in place (values untouched).
template <bool BF16>
__global__ void rope(typename Io<BF16>::T* qkv, const float* cos, const float* sin, int64_t B, int64_t T, int64_t H,
                     int64_t K, int64_t d, float sign) {
  using IO = Io<BF16>;
  const int64_t half = d / 2, heads = H + K, total = B * T * heads * half;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k % half, h = (k / half) % heads, row = k / (half * heads), t = row % T;
    auto* base = qkv + (row * (H + 2 * K) + h) * d;
    const float c = cos[t * half + i], s = sign * sin[t * half + i];
    const float x1 = IO::load(base, i), x2 = IO::load(base, i + half);
    IO::store(base, i, x1 * c - x2 * s);
    IO::store(base, i + half, x2 * c + x1 * s);
  }
}

// One block per row of a vocabulary chunk: the running max and sum of exponentials, the chunk's
// probabilities (unnormalised, in the storage type) and the target logit.
template <bool BF16>
__global__ void online_softmax(const typename Io<BF16>::T* z, float* m, float* se, float* rescale,
                               typename Io<BF16>::T* p, const int64_t* target, float* zt, int64_t C) {
  using IO = Io<BF16>;
  __shared__ float scratch[kThreads / 32];
  const int64_t row = blockIdx.x;
  const auto* zr = z + row * C;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, IO::load(zr, c));
  const float m_old = m[row];
  const float m_new = fmaxf(m_old, block_max(mx, scratch));
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float e = expf(IO::load(zr, c) - m_new);
    IO::store(p + row * C, c, e);
    s += e;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const float f = expf(m_old - m_new);
    rescale[row] = f;
    se[row] = se[row] * f + s;
    m[row] = m_new;
    const int64_t t = target[row];
    if (t >= 0 && t < C) zt[row] += IO::load(zr, t);
  }
}

int launched() { return int(cudaGetLastError()); }

int64_t grid(int64_t n) {
  const int64_t b = blocks_for(n);
  return b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8;
}

}  // namespace

int launch_swiglu_forward(const void* gu, void* a, int64_t N, int64_t I, bool bf16, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (bf16)
    swiglu_fwd<true><<<grid(N * I), kThreads, 0, st>>>(static_cast<const __nv_bfloat16*>(gu),
                                                       static_cast<__nv_bfloat16*>(a), N, I);
  else
    swiglu_fwd<false><<<grid(N * I), kThreads, 0, st>>>(static_cast<const float*>(gu), static_cast<float*>(a), N, I);
  return launched();
}

int launch_swiglu_backward(const void* gu, const void* da, void* dgu, int64_t N, int64_t I, bool bf16, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (bf16)
    swiglu_bwd<true><<<grid(N * I), kThreads, 0, st>>>(static_cast<const __nv_bfloat16*>(gu),
                                                       static_cast<const __nv_bfloat16*>(da),
                                                       static_cast<__nv_bfloat16*>(dgu), N, I);
  else
    swiglu_bwd<false><<<grid(N * I), kThreads, 0, st>>>(static_cast<const float*>(gu), static_cast<const float*>(da),
                                                        static_cast<float*>(dgu), N, I);
  return launched();
}

int launch_rmsnorm_forward(const void* x, const void* w, void* y, float* rstd, int64_t N, int64_t D, float eps,
                           bool bf16, void* stream) {
  if (N == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  if (bf16)
    rmsnorm_fwd<true><<<N, kThreads, 0, st>>>(static_cast<const __nv_bfloat16*>(x),
                                              static_cast<const __nv_bfloat16*>(w), static_cast<__nv_bfloat16*>(y),
                                              rstd, D, eps);
  else
    rmsnorm_fwd<false><<<N, kThreads, 0, st>>>(static_cast<const float*>(x), static_cast<const float*>(w),
                                               static_cast<float*>(y), rstd, D, eps);
  return launched();
}

int launch_rope_qkv(void* qkv, const float* cos, const float* sin, int64_t B, int64_t T, int64_t H, int64_t K,
                    int64_t d, bool inverse, bool bf16, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  const int64_t n = B * T * (H + K) * (d / 2);
  const float sign = inverse ? -1.f : 1.f;
  if (bf16)
    rope<true><<<grid(n), kThreads, 0, st>>>(static_cast<__nv_bfloat16*>(qkv), cos, sin, B, T, H, K, d, sign);
  else
    rope<false><<<grid(n), kThreads, 0, st>>>(static_cast<float*>(qkv), cos, sin, B, T, H, K, d, sign);
  return launched();
}

int launch_online_softmax_chunk(const void* z, float* m, float* se, float* rescale, void* p, const int64_t* target,
                                float* zt, int64_t N, int64_t C, bool bf16, void* stream) {
  if (N == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  if (bf16)
    online_softmax<true><<<N, kThreads, 0, st>>>(static_cast<const __nv_bfloat16*>(z), m, se, rescale,
                                                 static_cast<__nv_bfloat16*>(p), target, zt, C);
  else
    online_softmax<false><<<N, kThreads, 0, st>>>(static_cast<const float*>(z), m, se, rescale,
                                                  static_cast<float*>(p), target, zt, C);
  return launched();
}

const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace lorabench::model::cuda
