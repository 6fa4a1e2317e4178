// The input file and --set overrides, as `lorabench INPUT.ini --set k=v ...` reads them: parse, validate,
// and print the effective configuration. The fuzz input is the ini text; the lines after a line
// "--set" are overrides (one per line). Accepted failure: ConfigError.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "lorabench/config/options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string ini = input;
  std::vector<std::string> overrides;
  const size_t cut = input.find("\n--set\n");
  if (cut != std::string::npos) {
    ini = input.substr(0, cut + 1);
    size_t pos = cut + 7;
    while (pos <= input.size()) {
      size_t nl = input.find('\n', pos);
      if (nl == std::string::npos) nl = input.size();
      if (nl > pos) overrides.push_back(input.substr(pos, nl - pos));
      pos = nl + 1;
    }
  }
  lbfuzz::expect_clean("", [&] {
    lorabench::RunConfig cfg = lorabench::parse_run_config("fuzz.ini", ini, overrides);
    lorabench::ValidationContext ctx;
    ctx.world_size = 1 + static_cast<int>(size % 4);
    lorabench::validate_run_config(cfg, ctx);
    (void)lorabench::effective_config_table(cfg);
    (void)lorabench::resolved_values(cfg);
  });
  return 0;
}
