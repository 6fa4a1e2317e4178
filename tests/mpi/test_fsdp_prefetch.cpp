// FSDP's prefetch under a memory bound (parallel.prefetch_within_peak): with the counting allocator
// installed, the per-step tensor-memory peak of the bounded prefetch stays within the peak of no
// prefetch at all, while unbounded prefetching raises it; the bounded run still prefetches some layers,
// and all three compute the same training bitwise (prefetching only moves when a gather is issued).
// Ranks whose own peaks differ still prefetch the same layers (under the collective checker).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>

#include "lorabench/comm/checked_communicator.hpp"
#include "lorabench/comm/mpi_communicator.hpp"
#include "lorabench/device/device.hpp"
#include "lorabench/data/batch.hpp"
#include "lorabench/metrics/memory.hpp"
#include "lorabench/strategy/strategy.hpp"
#include "lorabench/train/step_runner.hpp"

using namespace lorabench;

namespace {

const int kSteps = 5;

struct Outcome {
  std::vector<double> loss;
  int64_t steady_peak = 0;  // max over steps 2.. of the step's tensor-memory peak, over ranks
  int64_t prefetched = 0;   // summed over ranks
  int64_t prefetched_here = 0;  // on this rank
};

// The CPU device with `extra` bytes added to every peak it reports: a rank whose step peaks higher than the
// others' (as a data-dependent allocation makes it), so that its own bound would allow other prefetches.
class HigherPeakDevice final : public device::Device {
 public:
  explicit HigherPeakDevice(int64_t extra) : extra_(extra) {}
  device::Kind kind() const override { return cpu().kind(); }
  std::string str() const override { return cpu().str(); }
  void synchronize() override { cpu().synchronize(); }
  device::MemoryStats memory() const override {
    device::MemoryStats m = cpu().memory();
    m.peak += extra_;
    m.reserved_peak += extra_;
    return m;
  }
  void reset_peak() override { cpu().reset_peak(); }
  int64_t window_peak() const override { return cpu().window_peak(); }
  void reset_window_peak() override { cpu().reset_window_peak(); }
  bool memory_tracked() const override { return cpu().memory_tracked(); }
  int64_t memory_available() const override { return cpu().memory_available(); }
  std::unique_ptr<comm::SyncTimer> make_sync_timer() override { return cpu().make_sync_timer(); }
  std::vector<std::pair<std::string, std::string>> describe() const override { return cpu().describe(); }

 private:
  static device::Device& cpu() { return device::cpu_device(); }
  int64_t extra_;
};

// extra_peak_on_rank1 > 0: rank 1 runs on a HigherPeakDevice, and every collective goes through the
// checker, which throws when the ranks issue different ones.
Outcome train_fsdp(bool prefetch, bool within_peak, int64_t extra_peak_on_rank1 = 0) {
  // 64 tokens (seq 64 x micro-batch 1): the peak sits at the start of the backward, where a prefetched
  // layer adds to it, and later layers leave room to prefetch. (With 128 tokens the peak sits where no
  // gathered layer is held, and prefetching cannot raise it: 3.40 MB with and without, measured.)
  model::ModelShape shape = model::preset_shape("tiny");
  shape.vocab_size = 1000;
  shape.layers = 4;
  model::LoraSpec lora = model::make_lora_spec(true, 4, 8, 0, false, {"q", "k", "v", "o", "gate", "up", "down"});
  model::ModelLayout layout = model::build_layout(shape, lora);
  std::unique_ptr<comm::Communicator> comm = comm::make_mpi_communicator(MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  HigherPeakDevice dev(rank == 1 ? extra_peak_on_rank1 : 0);
  if (extra_peak_on_rank1 > 0) comm = comm::make_checked_communicator(std::move(comm), MPI_COMM_WORLD);
  strategy::StrategySpec spec;
  spec.name = "fsdp";
  spec.sync_every_micro = true;
  spec.prefetch = prefetch;
  spec.prefetch_within_peak = within_peak;
  auto s = strategy::TrainingStrategy::create(spec, layout, at::kFloat, comm.get(), &dev);
  strategy::InitSource src;
  src.seed = 3;
  s->initialize(src);
  data::SyntheticSpec ds;
  ds.seed = 11;
  ds.vocab_size = 1000;
  ds.geo.seq_len = 64;
  ds.geo.micro_batch = 1;
  ds.geo.grad_accum = 1;
  ds.geo.world_size = comm->size();
  auto source = data::make_synthetic_source(ds);
  train::StepConfig sc;
  sc.grad_accum = 1;
  sc.seed = 5;
  sc.schedule.lr = 1e-3;
  sc.schedule.total_steps = kSteps;
  sc.options.head_chunk = 256;
  train::StepRunner runner(layout, *s, *source, sc, MPI_COMM_WORLD);
  Outcome o;
  for (int step = 0; step < kSteps; ++step) {
    metrics::reset_tensor_peak();
    train::StepResult r = runner.run(step);
    o.loss.push_back(r.loss);
    if (step >= 1) o.steady_peak = std::max(o.steady_peak, metrics::tensor_bytes_peak());
  }
  MPI_Allreduce(MPI_IN_PLACE, &o.steady_peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  o.prefetched = o.prefetched_here = s->prefetched_layers();
  MPI_Allreduce(MPI_IN_PLACE, &o.prefetched, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return o;
}

TEST(FsdpPrefetch, BoundedPrefetchNeverRaisesThePeak) {
  metrics::install_memory_counter();
  ASSERT_TRUE(metrics::memory_counter_installed());
  const Outcome none = train_fsdp(false, false);
  const Outcome all = train_fsdp(true, false);
  const Outcome bounded = train_fsdp(true, true);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("steady peak: no prefetch %lld B, unbounded %lld B (%lld prefetches), bounded %lld B (%lld)\n",
                (long long)none.steady_peak, (long long)all.steady_peak, (long long)all.prefetched,
                (long long)bounded.steady_peak, (long long)bounded.prefetched);

  EXPECT_EQ(none.prefetched, 0);
  EXPECT_GT(all.prefetched, bounded.prefetched);
  EXPECT_GT(bounded.prefetched, 0) << "the bound left no room to prefetch at all";
  EXPECT_GT(all.steady_peak, none.steady_peak) << "unbounded prefetching should raise the peak here";
  EXPECT_LE(bounded.steady_peak, none.steady_peak);
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(all.loss[i], none.loss[i]) << "step " << i;
    EXPECT_EQ(bounded.loss[i], none.loss[i]) << "step " << i;
  }
}

TEST(FsdpPrefetch, RanksWithDifferentPeaksPrefetchTheSameLayers) {
  metrics::install_memory_counter();
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  const Outcome none = train_fsdp(false, false);
  // Rank 1's peaks read 1 MiB higher: by its own bound it would prefetch layers rank 0 does not, and in
  // the backward its gather of a layer would meet rank 0's reduce-scatter of the previous one.
  Outcome bounded;
  ASSERT_NO_THROW(bounded = train_fsdp(true, true, int64_t(1) << 20));
  std::vector<int64_t> each(static_cast<size_t>(world));
  MPI_Allgather(&bounded.prefetched_here, 1, MPI_INT64_T, each.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  EXPECT_GT(each[0], 0) << "the bound left no room to prefetch at all";
  for (int r = 1; r < world; ++r) EXPECT_EQ(each[size_t(r)], each[0]) << "rank " << r;
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(bounded.loss[i], none.loss[i]) << "step " << i;
}

}  // namespace
