// lorabench: fine-tune Qwen2.5 with LoRA and measure what distributed training costs.
//
//   lorabench INPUT.ini [--set section.key=value ...]     train (one rank, or under mpirun/srun)
//   lorabench <subcommand> ...                            see --help
//
// The MPI session is the first object; main() holds the only try/catch: a configuration error exits 2
// with one message from rank 0, any other failure prints "[rank r@host] error: ..." and aborts the job
// so no rank hangs in a collective.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/log.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/sysinfo.hpp"
#include "lorabench/core/version.hpp"
#include "lorabench/io/h5.hpp"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(lorabench::MpiSession&, int, char**);
  const char* summary;
};

const Subcommand kSubcommands[] = {
    {"train", &lorabench::app::train_main, "train from an input file (the default: lorabench INPUT.ini)"},
    {"tokenize", &lorabench::app::tokenize_main, "text, chat JSON or ids on stdin -> token ids or text (Qwen2.5, Qwen3)"},
    {"comm", &lorabench::app::comm_main, "collective benchmark (nccl-tests style) -> table + run file"},
    {"doctor", &lorabench::app::doctor_main, "check MPI, rendezvous, HDF5, PAPI, CUDA/NCCL, threads, BLAS"},
    {"forward", &lorabench::app::forward_main, "logits (and loss) of a snapshot + adapter on token ids -> safetensors"},
    {"keys", &lorabench::app::keys_main, "every input key with type, default and meaning (--markdown for docs)"},
    {"checkpoint", &lorabench::app::checkpoint_main, "inspect (info), compare (verify) or export-adapter checkpoints"},
    {"plan", &lorabench::app::plan_main, "predict per-rank memory and step time of each strategy and world size"},
};

void print_usage() {
  std::printf("usage: lorabench INPUT.ini [--set section.key=value ...]\n"
              "       lorabench <subcommand> [options]   (lorabench <subcommand> --help)\n\nsubcommands:\n");
  for (const auto& s : kSubcommands) std::printf("  %-12s %s\n", s.name, s.summary);
  std::printf("\nlorabench keys prints every input key (docs/input-reference.md); lorabench --version.\n");
}

// A first argument that names no file and has neither a '/' nor an extension is a mistyped command
// ("lorabench trian"), not an input file that cannot be read.
bool looks_like_command(const char* arg) {
  const std::string a = arg;
  if (a.empty() || a[0] == '-') return false;  // options: the training command line reports them
  struct stat st;
  return a.find('/') == std::string::npos && a.find('.') == std::string::npos && stat(arg, &st) != 0;
}

}  // namespace

int main(int argc, char** argv) {
  lorabench::sys::keep_freed_memory_in_heap();  // steady-state steps without page faults (sysinfo.hpp)
  lorabench::h5::open_library();  // before MPI_Init: libhdf5 shuts down when MpiSession says, not in MPI_Finalize
  lorabench::MpiSession mpi(&argc, &argv);
  mpi.before_finalize(lorabench::h5::close_library);
  lorabench::log::init(mpi.rank());
  try {
    if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
      if (mpi.rank() == 0) print_usage();
      return argc < 2 ? 2 : 0;
    }
    if (std::strcmp(argv[1], "--version") == 0 || std::strcmp(argv[1], "version") == 0) {
      if (mpi.rank() == 0) std::printf("lorabench %s (commit %s)\n", lorabench::program_version(), lorabench::git_commit());
      return 0;
    }
    for (const auto& s : kSubcommands) {
      if (std::strcmp(argv[1], s.name) == 0) return s.run(mpi, argc - 1, argv + 1);
    }
    if (looks_like_command(argv[1])) {
      std::string names;
      for (const auto& s : kSubcommands) names += std::string(names.empty() ? "" : ", ") + s.name;
      throw lorabench::ConfigError(std::string("unknown command \"") + argv[1] + "\" (commands: " + names +
                                   "; or an input file: lorabench INPUT.ini; lorabench --help)");
    }
    // No subcommand name: the arguments are a training run (lorabench INPUT.ini ...).
    return lorabench::app::train_main(mpi, argc, argv);
  } catch (const lorabench::ConfigError& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "lorabench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    lorabench::log::error(e.what());
    lorabench::MpiSession::abort(1);
  }
}
