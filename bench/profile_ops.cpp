// Where lorabench's training step goes: runs the bench workload (single rank, LoRA r16 on every
// projection, seq 256, micro-batch 1) with libtorch's op profiler on the measured steps, and prints the
// self time of every ATen op and a breakdown of the whole step by category, attributed through the lb::
// ranges the model code marks (src/model/profile_scope.hpp). Time inside a range but in no ATen op is
// lorabench's own fused kernels; time in no op and no range (data, bookkeeping) is the wall time minus
// everything the profiler saw.
//
// --device cuda profiles the step on GPU 0 (the GPU benchmark's workload with --seq 2048 --batch 8): every
// op and range then records CUDA events on the compute stream, and its time is the GPU's between them (the
// kernels it queued, while the GPU is kept busy), not the host's time to launch them.
//
//   lorabench-profile-ops [--preset qwen2.5-0.5b] [--dtype bf16|fp32] [--device cpu|cuda] [--seq 256]
//                         [--batch 1] [--steps 3] [--warmup 1] [--top 25]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "bench_cli.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/model/shape.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"

using namespace lorabench;
namespace prof = torch::autograd::profiler;

namespace {

bool is_gemm(const std::string& op) {
  return op == "aten::mm" || op == "aten::addmm" || op == "aten::addmm_" || op == "aten::bmm" ||
         op == "aten::baddbmm" || op == "aten::matmul" || op == "aten::mkldnn_matmul" || op == "aten::_mkldnn_matmul";
}

// libtorch's fused attention (the CPU's flash kernel; on a GPU FlashAttention-2 or the memory-efficient
// kernel, whose work is in the inner _flash_attention_* / _efficient_attention_* ops).
bool is_fused_attention(const std::string& op) {
  return op.rfind("aten::_scaled_dot_product", 0) == 0 || op.rfind("aten::_flash_attention", 0) == 0 ||
         op.rfind("aten::_efficient_attention", 0) == 0;
}

// lorabench's blocked CPU attention (src/model/attention_cpu.cpp): its block products run through brgemm,
// which the profiler does not see as ops, so the whole range (and its buffer allocations) is one category.
const char* const kBlockedAttention = "attention: lorabench's blocked kernel (brgemm products, softmax)";

// lorabench's gated delta rule (Qwen3.5's linear layers): its CPU kernel's products are its own code, not ops.
const char* const kDeltaRuleKernel = "linear attention: gated delta rule, lorabench's CPU kernel";

std::string category(const std::string& op, const std::string& scope) {
  if (scope == "lb::attention_kernel") return kBlockedAttention;
  if (scope == "lb::delta_rule") return is_gemm(op) ? "linear attention: gated delta rule, ATen products"
                                                    : "linear attention: gated delta rule, other ATen ops";
  if (scope == "lb::head_loss") return is_gemm(op) ? "head + loss: GEMMs" : "head + loss: softmax, exp, gather";
  if (scope == "lb::optimizer") return "optimizer (AdamW)";
  if (is_gemm(op)) return scope == "lb::attention" ? "attention: QK^T and PV GEMMs" : "projection GEMMs (base + LoRA)";
  if (is_fused_attention(op)) return "attention: libtorch's fused kernels";
  if (scope == "lb::attention") return "attention: other ATen ops (casts, layout copies)";
  if (scope == "lb::norm") return "RMSNorm";
  if (scope == "lb::swiglu") return "SwiGLU (silu, multiply, casts)";
  if (scope == "lb::projections") return "projections: LoRA adds, casts, bias";
  if (scope == "lb::conv") return "linear attention: causal conv + SiLU (ATen)";
  if (scope == "lb::linear_attention") return "linear attention: gates, gated norm, copies (ATen)";
  if (scope == "lb::rope") return "partial RoPE (ATen)";
  return "other (embedding, residual adds, gradient buffers, data)";
}

// Time inside an lb:: range that no ATen op accounts for: the fused kernels the range runs.
std::string kernel_category(const std::string& scope) {
  if (scope == "lb::norm") return "RMSNorm: fused kernels";
  if (scope == "lb::swiglu") return "SwiGLU: fused kernels";
  if (scope == "lb::attention_kernel") return kBlockedAttention;
  if (scope == "lb::attention") return "attention: fused RoPE kernel";
  if (scope == "lb::head_loss") return "head + loss: fused online softmax";
  if (scope == "lb::optimizer") return "optimizer: fused AdamW";
  if (scope == "lb::delta_rule") return kDeltaRuleKernel;
  return "other lorabench code inside " + scope;
}

// The coarse groups the peer's profile uses too (bench/profile_peer.py).
std::string group(const std::string& cat) {
  if (cat.find("GEMMs") != std::string::npos) return "GEMMs";
  if (cat.rfind("outside", 0) == 0 || cat.rfind("optimizer", 0) == 0) return "optimizer, data and bookkeeping";
  if (cat.rfind("attention: libtorch's", 0) == 0) return "attention (libtorch's fused kernels)";
  if (cat == kBlockedAttention) return "attention (lorabench's blocked kernel)";
  if (cat == kDeltaRuleKernel) return "gated delta rule (lorabench's CPU kernel)";
  if (cat.find("fused") != std::string::npos) return "fused kernels (norm, SwiGLU, RoPE, softmax)";
  return "other ATen ops (copies, casts, adds, indexing)";
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "qwen2.5-0.5b", dtype = "bf16", device_name = "cpu";
  int steps = 3, warmup = 1, top = 25, seq = 256, batch = 1, head_chunk = 0;
  const char* usage = "lorabench-profile-ops [--preset qwen2.5-0.5b] [--dtype bf16|fp32] [--device cpu|cuda] "
                      "[--seq 256] [--batch 1] [--steps 3] [--warmup 1] [--top 25] [--head-chunk N]";
  bench::parse_flags(argc, argv, usage,
                     {{"--preset", &preset, nullptr, model::preset_names()},
                      {"--dtype", &dtype, nullptr, {"bf16", "fp32"}},
                      {"--device", &device_name, nullptr, {"cpu", "cuda"}},
                      {"--seq", nullptr, &seq, {}},
                      {"--batch", nullptr, &batch, {}},
                      {"--steps", nullptr, &steps, {}},
                      {"--warmup", nullptr, &warmup, {}},
                      {"--top", nullptr, &top, {}},
                      {"--head-chunk", nullptr, &head_chunk, {}}});
  sys::keep_freed_memory_in_heap();  // the step as lorabench's main runs it
  const bool cuda = device_name == "cuda";
  // Refused, not profiled on the CPU instead.
  if (cuda && !device::cuda_built()) bench::usage_exit(usage, 2, "--device cuda: this build has no CUDA path");
  if (cuda && device::cuda_visible_devices() < 1) bench::usage_exit(usage, 2, "--device cuda: this process sees no CUDA device");
  MPI_Init(&argc, &argv);
  at::set_num_threads(1);
  std::unique_ptr<device::Device> gpu;
  if (cuda) gpu = device::make_device({device::Kind::kCuda, 0, "mpi", "lorabench-profile-ops --device cuda"});
  model::ModelShape shape = model::preset_shape(preset);
  model::LoraSpec lora = model::make_lora_spec(true, 16, 32, 0, false, {"q", "k", "v", "o", "gate", "up", "down"});
  model::ModelLayout layout = model::build_layout(shape, lora);
  strategy::StrategySpec spec;
  spec.name = "single";
  auto s = strategy::TrainingStrategy::create(spec, layout, dtype == "bf16" ? at::kBFloat16 : at::kFloat, nullptr,
                                              gpu.get());
  s->initialize(strategy::InitSource{1234, nullptr});
  data::SyntheticSpec ds{1234, int(shape.vocab_size), {batch, 1, 1, seq}};
  auto source = data::make_synthetic_source(ds);
  train::StepConfig sc;
  sc.schedule.lr = 1e-4;
  if (head_chunk > 0) sc.options.head_chunk = head_chunk;  // the vocabulary chunk of the fused head
  train::StepRunner runner(layout, *s, *source, sc, MPI_COMM_SELF);
  for (int i = 0; i < warmup; ++i) runner.run(i);

  // Each step ends with host synchronisations (its loss, its timers), so the wall clock spans the GPU's work.
  if (gpu) gpu->synchronize();
  using torch::profiler::impl::ProfilerState;
  prof::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(cuda ? ProfilerState::CUDA : ProfilerState::CPU));
  const double t0 = sys::now_s();
  for (int i = 0; i < steps; ++i) runner.run(warmup + i);
  if (gpu) gpu->synchronize();
  const double wall = (sys::now_s() - t0) / steps;
  prof::thread_event_lists lists = prof::disableProfilerLegacy();

  // Self time per (op, innermost lb:: scope), from the push/pop nesting of each thread's events.
  std::map<std::string, double> op_self, cat_self;
  double total = 0, top_us = 0;
  for (auto& list : lists) {
    struct Frame {
      const prof::LegacyEvent* push;
      double child_us;
      std::string scope;
    };
    std::vector<Frame> stack;
    for (const auto& e : list) {
      const std::string kind = e.kindStr();
      if (kind == "push") {
        std::string name = e.name();
        std::string scope = stack.empty() ? "" : stack.back().scope;
        if (name.rfind("lb::", 0) == 0) scope = name;
        stack.push_back({&e, 0.0, scope});
      } else if (kind == "pop" && !stack.empty()) {
        Frame f = stack.back();
        stack.pop_back();
        // On a GPU every event has its CUDA events (libtorch throws for one that lacks them): no CPU time mixed in.
        const double dur = cuda ? f.push->cudaElapsedUs(e) : f.push->cpuElapsedUs(e);
        if (!stack.empty()) stack.back().child_us += dur;
        else top_us += dur;
        const std::string name = f.push->name();
        const double self = dur - f.child_us;
        if (name.rfind("lb::", 0) == 0) {
          cat_self[kernel_category(name)] += self;
          continue;
        }
        op_self[name] += self;
        cat_self[category(name, f.scope)] += self;
        total += self;
      }
    }
  }
  const double wall_us = wall * 1e6 * steps;
  cat_self["outside ops and ranges: data, bookkeeping"] += std::max(0.0, wall_us - top_us);
  std::printf("%s %s, seq %d, micro-batch %d, %s: %.3f s per step (wall, profiler on); %.3f s of ATen op self time "
              "per step%s\n\n",
              preset.c_str(), dtype.c_str(), seq, batch, cuda ? "cuda:0" : "cpu", wall, total / 1e6 / steps,
              cuda ? " (GPU time between each op's CUDA events)" : "");
  std::printf("| category | s per step | share of the step |\n| --- | --- | --- |\n");
  std::vector<std::pair<double, std::string>> cats;
  std::map<std::string, double> groups;
  for (auto& [k, v] : cat_self) {
    cats.push_back({v, k});
    groups[group(k)] += v;
  }
  std::sort(cats.rbegin(), cats.rend());
  for (auto& [v, k] : cats) std::printf("| %s | %.3f | %.1f%% |\n", k.c_str(), v / 1e6 / steps, 100 * v / wall_us);
  std::printf("\n| group | s per step | share of the step |\n| --- | --- | --- |\n");
  for (auto& [k, v] : groups) std::printf("| %s | %.3f | %.1f%% |\n", k.c_str(), v / 1e6 / steps, 100 * v / wall_us);
  std::printf("\n| op | s per step | share of ATen op time |\n| --- | --- | --- |\n");
  std::vector<std::pair<double, std::string>> ops;
  for (auto& [k, v] : op_self) ops.push_back({v, k});
  std::sort(ops.rbegin(), ops.rend());
  for (int i = 0; i < std::min<int>(top, ops.size()); ++i)
    std::printf("| %s | %.3f | %.1f%% |\n", ops[i].second.c_str(), ops[i].first / 1e6 / steps, 100 * ops[i].first / total);
  MPI_Finalize();
  return 0;
}
