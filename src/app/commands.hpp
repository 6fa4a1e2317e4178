// The subcommands of the lorabench binary. Each takes the arguments after its name (argv[0] is the
// subcommand) and returns the process exit code; errors are exceptions handled once in main().
#pragma once

#include <boost/program_options.hpp>

#include <string>
#include <vector>

#include "lorabench/config/run_config.hpp"
#include "lorabench/core/mpi_session.hpp"

namespace lorabench::app {

// The input file read on rank 0, broadcast and parsed with the --set overrides on every rank
// (ConfigError naming the file when it cannot be read).
RunConfig read_run_config(MpiSession& mpi, const std::string& input, const std::vector<std::string>& sets);

// Parses a command line of `desc`'s options with one positional INPUT.ini into *input; a bad command line
// is a ConfigError "<what>: <problem> (<help>)".
void parse_input_command_line(int argc, char** argv, boost::program_options::options_description& desc,
                              std::string* input, const std::string& what, const std::string& help);

int train_main(MpiSession& mpi, int argc, char** argv);  // lorabench INPUT.ini [--set k=v ...]
int keys_main(MpiSession& mpi, int argc, char** argv);   // lorabench keys [--markdown]
int forward_main(MpiSession& mpi, int argc, char** argv);  // lorabench forward --model DIR --ids ...
int tokenize_main(MpiSession& mpi, int argc, char** argv);  // lorabench tokenize [--tokenizer F] [--chat|--decode]
int comm_main(MpiSession& mpi, int argc, char** argv);      // lorabench comm [--ops ...] [--config F.ini] (collective)
int doctor_main(MpiSession& mpi, int argc, char** argv);    // lorabench doctor [--json] (collective)
int checkpoint_main(MpiSession& mpi, int argc, char** argv);  // lorabench checkpoint info F | verify A B
int plan_main(MpiSession& mpi, int argc, char** argv);        // lorabench plan INPUT.ini [-n N ...]

}  // namespace lorabench::app
