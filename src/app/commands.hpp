// The subcommands of the lorabench binary. Each takes the arguments after its name (argv[0] is the
// subcommand) and returns the process exit code; errors are exceptions handled once in main().
#pragma once

#include "lorabench/core/mpi_session.hpp"

namespace lorabench::app {

int train_main(MpiSession& mpi, int argc, char** argv);  // lorabench INPUT.ini [--set k=v ...]
int keys_main(MpiSession& mpi, int argc, char** argv);   // lorabench keys [--markdown]
int forward_main(MpiSession& mpi, int argc, char** argv);  // lorabench forward --model DIR --ids ...
int tokenize_main(MpiSession& mpi, int argc, char** argv);  // lorabench tokenize [--tokenizer F] [--chat|--decode]
int comm_main(MpiSession& mpi, int argc, char** argv);      // lorabench comm [--ops ...] [--config F.ini] (collective)
int doctor_main(MpiSession& mpi, int argc, char** argv);    // lorabench doctor [--json] (collective)
int checkpoint_main(MpiSession& mpi, int argc, char** argv);  // lorabench checkpoint info F | verify A B

}  // namespace lorabench::app
