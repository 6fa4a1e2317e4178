// The model, its metrics and the staging communicator on a real GPU (label gpu; Skipped without one):
//   - training on CUDA follows the CPU reference of the same seed (LoRA dropout on: the masks are drawn on
//     the CPU and copied, so both runs drop the same activations): fp32 losses and weights within 1e-4,
//     bf16 within 2e-2 (with FlashAttention-2 and with the memory-efficient kernel);
//   - each CUDA attention kernel against libtorch's CPU kernel;
//   - the CUDA caching allocator's statistics (current, peak, window peak, reserved), readable before any CUDA
//     tensor exists, and the event timer;
//   - every collective through MPI with device buffers staged via pinned host memory, ranks sharing GPU 0.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>

#include "../../src/model/attention.hpp"
#include "../../src/model/cuda_kernels.hpp"
#include "../../src/model/kernels.hpp"
#include "../mpi/comm_test_util.hpp"
#include "../mpi/state_compare.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/device/torch_device.hpp"
#include "lorabench/model/qwen2.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"

using namespace lorabench;

namespace {

device::Device& gpu() {
  static std::unique_ptr<device::Device> d = device::make_device({device::Kind::kCuda, 0, "mpi", "test"});
  return *d;
}

struct Trained {
  std::vector<double> loss;
  std::vector<at::Tensor> params;  // on the CPU
};

Trained train_single(device::Device& dev, at::ScalarType dtype, int steps, model::KernelOptions kernels = {},
                     const std::string& preset = "tiny") {
  model::ModelShape shape = model::preset_shape(preset);
  shape.vocab_size = 1000;
  std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"};
  if (shape.linear_layers() > 0)  // Qwen3.5: the linear-attention layers' projections too
    for (const char* t : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"}) targets.push_back(t);
  model::LoraSpec lora = model::make_lora_spec(true, 8, 16, 0.1, false, targets);
  model::ModelLayout layout = model::build_layout(shape, lora);
  layout.kernels = kernels;
  strategy::StrategySpec spec;
  spec.name = "single";
  auto s = strategy::TrainingStrategy::create(spec, layout, dtype, nullptr, &dev);
  s->initialize(strategy::InitSource{7, nullptr});
  data::SyntheticSpec ds{31, 1000, {2, 1, 1, 32}};
  auto source = data::make_synthetic_source(ds);
  train::StepConfig sc;
  sc.seed = 3;
  sc.lora_dropout = true;
  sc.schedule.lr = 2e-3;
  sc.options.head_chunk = 256;
  train::StepRunner runner(layout, *s, *source, sc, MPI_COMM_SELF);
  Trained r;
  for (int step = 0; step < steps; ++step) r.loss.push_back(runner.run(step).loss);
  for (const at::Tensor& p : s->gather_state().params) r.params.push_back(p.defined() ? p.to(at::kCPU) : p);
  return r;
}

}  // namespace

// First in this file, so that no CUDA tensor exists yet in the process: a training run reads the allocator's
// statistics before it makes any (the fit check, the planner), and libtorch sets its allocator up only with
// the first tensor unless the device does it.
TEST(GpuDevice, MemoryStatisticsBeforeAnyTensor) {
  device::Device& d = gpu();
  const device::MemoryStats m = d.memory();
  EXPECT_EQ(m.current, 0);
  EXPECT_GT(d.memory_available(), 0);
  d.reset_peak();
  EXPECT_EQ(d.window_peak(), 0);
}

TEST(GpuModel, Fp32TrainingFollowsTheCpuReference) {
  const Trained cpu = train_single(device::cpu_device(), at::kFloat, 4);
  const Trained cuda = train_single(gpu(), at::kFloat, 4);
  for (size_t i = 0; i < cpu.loss.size(); ++i)
    EXPECT_NEAR(cuda.loss[i], cpu.loss[i], 1e-4 * std::abs(cpu.loss[i])) << "step " << i;
  EXPECT_LE(lbtest::norm_rel(cuda.params, cpu.params), 1e-4);
}

// Qwen3.5's hybrid layers (the gated delta rule, the convolution, the gated and zero-centred norms, the gated
// attention) run on ATen ops on the GPU: the same training as on the CPU.
TEST(GpuModel, Qwen3_5HybridTrainingFollowsTheCpuReference) {
  const Trained cpu = train_single(device::cpu_device(), at::kFloat, 4, {}, "qwen3.5-tiny");
  const Trained cuda = train_single(gpu(), at::kFloat, 4, {}, "qwen3.5-tiny");
  for (size_t i = 0; i < cpu.loss.size(); ++i)
    EXPECT_NEAR(cuda.loss[i], cpu.loss[i], 1e-4 * std::abs(cpu.loss[i])) << "step " << i;
  EXPECT_LE(lbtest::norm_rel(cuda.params, cpu.params), 1e-4);
}

TEST(GpuModel, Bf16TrainingFollowsTheCpuReference) {
  const Trained cpu = train_single(device::cpu_device(), at::kBFloat16, 4);
  // With each attention kernel a GPU can run in bf16 (model.cuda_attention; auto is flash).
  for (model::CudaAttention kernel : {model::CudaAttention::kFlash, model::CudaAttention::kEfficient}) {
    model::KernelOptions k;
    k.cuda_attention = kernel;
    const Trained cuda = train_single(gpu(), at::kBFloat16, 4, k);
    const char* name = kernel == model::CudaAttention::kFlash ? "flash" : "efficient";
    for (size_t i = 0; i < cpu.loss.size(); ++i)
      EXPECT_NEAR(cuda.loss[i], cpu.loss[i], 2e-2) << name << ", step " << i;
    EXPECT_LE(lbtest::norm_rel(cuda.params, cpu.params), 2e-2) << name;
  }
}

// Each CUDA attention kernel against libtorch's CPU kernel in fp32 on the same q|k|v rows, with grouped
// key/value heads (H = 4 query heads on K = 2) and a length that is no multiple of a kernel's tile: the
// output and d(qkv) within 1e-4 (fp32) or 2e-2 (bf16) of the largest value.
TEST(GpuAttention, EachKernelMatchesTheCpuKernel) {
  const int64_t B = 2, T = 37, H = 4, K = 2, d = 64;
  at::manual_seed(11);
  const at::Tensor qkv = at::randn({B * T, (H + 2 * K) * d}), dout = at::randn({B * T, H * d});
  at::Tensor lse;
  const model::KernelOptions cpu;
  const at::Tensor out = model::attention_forward(cpu, qkv, B, T, H, K, d, &lse);
  const at::Tensor dqkv = model::attention_backward(cpu, dout, qkv, out, lse, B, T, H, K, d);
  const auto dev = device::torch_device(gpu());
  struct Case {
    model::CudaAttention kernel;
    at::ScalarType dt;
    const char* name;
  };
  for (const Case& c : {Case{model::CudaAttention::kAuto, at::kFloat, "auto fp32 (efficient)"},
                        Case{model::CudaAttention::kEfficient, at::kFloat, "efficient fp32"},
                        Case{model::CudaAttention::kAuto, at::kBFloat16, "auto bf16 (flash)"},
                        Case{model::CudaAttention::kFlash, at::kBFloat16, "flash bf16"},
                        Case{model::CudaAttention::kEfficient, at::kBFloat16, "efficient bf16"}}) {
    model::KernelOptions k;
    k.cuda_attention = c.kernel;
    const at::Tensor g_qkv = qkv.to(dev, c.dt), g_dout = dout.to(dev, c.dt);
    at::Tensor g_lse;
    const at::Tensor g_out = model::attention_forward(k, g_qkv, B, T, H, K, d, &g_lse);
    const at::Tensor g_dqkv = model::attention_backward(k, g_dout, g_qkv, g_out, g_lse, B, T, H, K, d);
    const double tol = c.dt == at::kFloat ? 1e-4 : 2e-2;
    auto rel = [](const at::Tensor& a, const at::Tensor& b) {
      return (a.to(at::kCPU, at::kFloat) - b).abs().max().item<double>() / b.abs().max().item<double>();
    };
    EXPECT_LE(rel(g_out, out), tol) << c.name << ": output";
    EXPECT_LE(rel(g_dqkv, dqkv), tol) << c.name << ": d(qkv)";
  }
  // FlashAttention-2 has no fp32 kernel: asked for, it is refused, not replaced.
  model::KernelOptions flash;
  flash.cuda_attention = model::CudaAttention::kFlash;
  EXPECT_THROW(model::attention_forward(flash, qkv.to(dev), B, T, H, K, d, &lse), Error);
}

// lorabench's CUDA kernels (model.fused_kernels = true) against the device-generic ATen compositions
// (false) on the same CUDA tensors: fp32 to 1e-5 relative, bf16 to one rounding (2e-2).
void expect_close(const at::Tensor& a, const at::Tensor& b, const char* what) {
  const double tol = a.scalar_type() == at::kFloat ? 1e-5 : 2e-2;
  const double scale = std::max(b.to(at::kFloat).abs().max().item<double>(), 1e-6);
  EXPECT_LE((a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>() / scale, tol)
      << what << " " << c10::toString(a.scalar_type());
}

TEST(GpuKernels, OwnCudaKernelsMatchTheAtenCompositions) {
  ASSERT_TRUE(model::cuda::available()) << "a CUDA build compiles cuda_kernels.cu";
  const auto dev = device::torch_device(gpu());
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const auto on = at::TensorOptions().dtype(dt).device(dev);
    at::manual_seed(5);
    const int64_t N = 37, D = 896, I = 600, B = 2, T = 5, H = 4, K = 2, d = 64, C = 1000;
    at::Tensor x = at::randn({N, D}, on), w = at::randn({D}, on), gu = at::randn({N, 2 * I}, on);
    at::Tensor da = at::randn({N, I}, on), qkv = at::randn({B * T, (H + 2 * K) * d}, on);
    at::Tensor z = at::randn({N, C}, on) * 4, target = at::randint(-50, C + 50, {N}, on.dtype(at::kLong));
    const auto f32 = at::TensorOptions().dtype(at::kFloat).device(dev);
    const at::Tensor angle = at::rand({T, d / 2}, f32) * 6;
    const at::Tensor cos = at::cos(angle), sin = at::sin(angle);
    auto run = [&](bool fused) {
      std::vector<at::Tensor> out;
      at::Tensor r;
      out.push_back(model::kernels::rmsnorm_forward(fused, x, w, 1e-6, &r));
      out.push_back(r);
      out.push_back(model::kernels::swiglu_forward(fused, gu));
      out.push_back(model::kernels::swiglu_backward(fused, gu, da));
      at::Tensor q = qkv.clone();
      model::kernels::rope_qkv(fused, q, cos, sin, B, T, H, K, d, false);
      out.push_back(q.clone());
      model::kernels::rope_qkv(fused, q, cos, sin, B, T, H, K, d, true);
      out.push_back(q);
      at::Tensor m = at::full({N}, -1.0, f32), se = at::ones({N}, f32), rescale = at::empty({N}, f32);
      at::Tensor zt = at::zeros({N}, f32), p;
      model::kernels::online_softmax_chunk(fused, z, m, se, rescale, p, target, zt);
      for (const at::Tensor& t : {m, se, rescale, zt, p.narrow(0, 0, N * C)}) out.push_back(t.clone());
      return out;
    };
    const std::vector<at::Tensor> mine = run(true), aten = run(false);
    const char* names[] = {"rmsnorm y", "rmsnorm rstd", "swiglu", "swiglu backward", "rope", "rope inverse",
                           "softmax m", "softmax se", "softmax rescale", "softmax zt", "softmax p"};
    for (size_t i = 0; i < mine.size(); ++i) expect_close(mine[i], aten[i], names[i]);
  }
}

TEST(GpuMetrics, CachingAllocatorStatisticsAndWindow) {
  device::Device& d = gpu();
  ASSERT_TRUE(d.memory_tracked());
  const auto on = at::TensorOptions().dtype(at::kFloat).device(device::torch_device(d));
  d.synchronize();
  d.reset_peak();
  const int64_t base = d.memory().current;
  {
    at::Tensor big = at::empty({int64_t(16) << 20}, on);  // 64 MiB
    EXPECT_GE(d.memory().current - base, int64_t(64) << 20);
    EXPECT_GE(d.memory().reserved, d.memory().current);
  }
  EXPECT_LT(d.memory().current - base, int64_t(64) << 20);
  d.reset_window_peak();
  {
    at::Tensor small = at::empty({int64_t(1) << 20}, on);  // 4 MiB
    EXPECT_GE(d.window_peak() - base, int64_t(4) << 20);
  }
  EXPECT_LT(d.window_peak() - base, int64_t(64) << 20);
  EXPECT_GE(d.memory().peak - base, int64_t(64) << 20);  // the window did not lose the step's peak
  EXPECT_GE(d.memory().reserved_peak, d.memory().peak);
  d.reset_peak();
  EXPECT_LT(d.memory().peak - base, int64_t(64) << 20);
}

TEST(GpuDevice, HostTensorIsPageLockedAndArrivesWhole) {
  const c10::Device on = device::torch_device(gpu());
  at::Tensor h = device::host_tensor({64, 257}, at::kLong, on);
  EXPECT_TRUE(h.device().is_cpu());
  EXPECT_TRUE(h.is_pinned());  // so that .to(on, non_blocking) does not wait for the queued work
  h.copy_(at::arange(64 * 257, at::kLong).view({64, 257}));
  at::Tensor d = h.to(on, /*non_blocking=*/true);
  EXPECT_TRUE(d.is_cuda());
  EXPECT_TRUE(at::equal(d.to(at::kCPU), h));
}

TEST(GpuMetrics, EventTimerSeesTheKernelsNotTheLaunch) {
  device::Device& d = gpu();
  const auto on = at::TensorOptions().dtype(at::kFloat).device(device::torch_device(d));
  at::Tensor a = at::randn({4096, 4096}, on);
  at::Tensor c = at::mm(a, a);
  auto t = d.make_sync_timer();
  const int64_t m0 = t->mark();
  for (int i = 0; i < 20; ++i) c = at::mm(a, a);  // about 55 GFLOP: tens of ms on any GPU
  const int64_t m1 = t->mark();
  const std::vector<double> v = t->resolve();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_GT(v[size_t(m1)] - v[size_t(m0)], 0.0);
  EXPECT_LT(v[size_t(m1)] - v[size_t(m0)], 10.0);
}

TEST(GpuStaging, EveryCollectiveOnDeviceBuffersThroughHostMemory) {
  auto c = device::make_staging_communicator(comm::make_mpi_communicator(MPI_COMM_WORLD), gpu());
  EXPECT_TRUE(c->device_buffers());
  lbtest::check_everything(*c, gpu().index());
  c->barrier();
}
