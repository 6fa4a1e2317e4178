// Checkpoint write times, gathered (rank 0, POSIX driver) vs parallel (MPI-IO, collective, every rank its
// rows), for the trainable state of a layout (params + exp_avg + exp_avg_sq, fp32), including the fsync;
// and the time to read such a file back with every digest checked.
// Not a test: the numbers behind the write-mode choice in docs/checkpoints.md.
//
//   mpirun -n N lorabench_checkpoint_bench DIR [REPEATS]      (LB_BENCH_KEEP=1 keeps the last files)
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lorabench/core/mpi_session.hpp"
#include "lorabench/io/checkpoint.hpp"
#include "lorabench/model/layout.hpp"
#include "lorabench/model/shape.hpp"

using namespace lorabench;
namespace fs = std::filesystem;

namespace {

struct Case {
  const char* name;
  const char* preset;
  bool lora;
};

std::vector<io::TensorPiece> pieces(const model::ModelLayout& m, const std::vector<float>& buf, bool whole, int rank,
                                    int world) {
  std::vector<io::TensorPiece> out;
  const char* prefix[3] = {"trainable/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"};
  int64_t base = 0;
  for (int k = 0; k < 3; ++k)
    for (const auto& u : m.units) {
      for (const auto& s : u.trainable) {
        io::TensorPiece p;
        p.path = prefix[k] + s.name;
        p.shape = s.shape;
        const int64_t rows = s.shape[0], per_row = s.numel / rows;
        std::tie(p.row_begin, p.row_end) = whole ? std::make_pair(int64_t(0), rows) : io::even_rows(rows, rank, world);
        p.data = buf.data() + base + s.offset + p.row_begin * per_row;
        out.push_back(p);
      }
      base += u.trainable_numel;
    }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  const std::string dir = argc > 1 ? argv[1] : "ckpt_bench";
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const int rank = mpi.rank(), world = mpi.size();
  if (rank == 0) fs::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const Case cases[] = {{"qwen2.5-0.5b LoRA r16 all targets", "qwen2.5-0.5b", true},
                        {"small full fine-tune", "small", false}};
  for (const auto& c : cases) {
    model::LoraSpec lora = model::make_lora_spec(c.lora, 16, 32, 0, false, {"q", "k", "v", "o", "gate", "up", "down"});
    model::ModelLayout m = model::build_layout(model::preset_shape(c.preset), lora);
    const int64_t n = m.trainable_params();
    std::vector<float> buf(size_t(3 * n));
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = float((i * 2654435761u) % 1000003) * 1e-6f;
    for (auto mode : {io::CheckpointWriteMode::kGathered, io::CheckpointWriteMode::kParallel}) {
      std::vector<double> t;
      for (int r = 0; r < reps; ++r) {
        const std::string path = dir + "/bench_" + io::write_mode_name(mode) + ".h5";
        auto p = pieces(m, buf, mode == io::CheckpointWriteMode::kGathered, rank, world);
        t.push_back(io::write_checkpoint_file(path, MPI_COMM_WORLD, mode, 1, {{"state", {{"step", int64_t(1)}}}}, p,
                                              std::vector<int64_t>(size_t(world), 1)));
        if (rank == 0 && r + 1 == reps && mode == io::CheckpointWriteMode::kGathered) {
          const double t0 = MPI_Wtime();
          io::CheckpointReader reader(path);
          reader.verify_all();
          std::printf("%-36s open + read + digest check of every tensor (one rank): %.3f s\n", c.name,
                      MPI_Wtime() - t0);
        }
        if (rank == 0 && !std::getenv("LB_BENCH_KEEP")) fs::remove(path);
        MPI_Barrier(MPI_COMM_WORLD);
      }
      std::sort(t.begin(), t.end());
      if (rank == 0)
        std::printf("%-36s ranks %d  %-9s  %8.1f MB  %4zu tensors  min %.3f s  median %.3f s  (%.2f GB/s)\n", c.name,
                    world, io::write_mode_name(mode), 3.0 * double(n) * 4 / 1e6,
                    pieces(m, buf, true, 0, 1).size(), t.front(), t[t.size() / 2], 3.0 * double(n) * 4 / 1e9 / t.front());
    }
  }
  return 0;
}
