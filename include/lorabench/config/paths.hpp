// Where a run's files go and how the paths of an input file are read (docs/input-reference.md, "Paths
// and run names"). Torch-free; the filesystem checks run on rank 0 and their verdict is broadcast.
#pragma once

#include <string>
#include <vector>

#include "lorabench/config/run_config.hpp"

namespace lorabench {

// The rule for every path in an input file or a --set (data.path, data.eval_path, data.tokenizer, model.path,
// lora.init_from, run.output_dir, checkpoint.resume): a relative path is relative to the
// working directory lorabench was started in, never to the input file's directory. Returns the absolute,
// lexically normal form (nothing needs to exist).
std::string resolve_path(const std::string& path);

// "KEY = VALUE" with the absolute path when VALUE is relative, for error messages:
// "data.path = d/x.jsonl (resolved: /work/d/x.jsonl)".
std::string describe_path(const std::string& key, const std::string& value);

// The name a run gets when run.name is not set: the input file's stem, the strategy when the stem does
// not already name it, and the world size: inputs/ddp.ini on 2 ranks -> "ddp-n2",
// inputs/quickstart.ini with fsdp on 4 -> "quickstart-fsdp-n4".
std::string default_run_name(const std::string& input_path, const std::string& strategy, int world_size);

// The names of runs of one default base, in the order they were taken: base, base-2, base-3, ...
// first_free_run_name returns the first whose directory does not exist under output_dir;
// latest_run_name the last that does (base when none does).
std::string first_free_run_name(const std::string& output_dir, const std::string& base);
std::string latest_run_name(const std::string& output_dir, const std::string& base);

// Problems with the files an input names, checked before anything is written: every input path that is
// set must exist with the expected kind (file or directory). Each entry: "KEY = VALUE (resolved: ...):
// what is wrong". checkpoint.resume is checked by the checkpoint layer (it also accepts none/latest).
std::vector<std::string> input_path_problems(const RunConfig& cfg);

}  // namespace lorabench
