// Checks run files of the checkpoint end-to-end tests (tests/e2e/checkpoint_e2e.sh):
//   lorabench_checkpoint_check run RUN.h5 ROWS STATUS [MESSAGE]   readable; ROWS step rows; root status
//                                                                 (and status_message containing MESSAGE)
//   lorabench_checkpoint_check losses A.h5 B.h5 RTOL               every step both files have: |a-b|/|b| <= RTOL
//                                                                 (RTOL 0: bitwise equal); at least one step
//   lorabench_checkpoint_check provenance RUN.h5 KEY TEXT          /provenance KEY contains TEXT
// Prints what is wrong and exits 1, or prints "ok" and exits 0.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "checker.hpp"
#include "lorabench/io/run_file.hpp"

namespace {

using lbcheck::expect;

// step -> loss of rank 0's rows (the loss is global: every rank records the same value).
std::map<long, double> losses(const std::string& path) {
  lorabench::io::RunFileReader r(path);
  auto st = r.steps();
  std::map<long, double> out;
  for (size_t i = 0; i < st["step"].size(); ++i)
    if (st["rank"][i] == 0) out[long(st["step"][i])] = st["loss"][i];
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "lorabench_checkpoint_check run RUN.h5 ROWS STATUS [MESSAGE] | losses A B RTOL | "
                      "provenance RUN.h5 KEY TEXT";
  return lbcheck::checker_main(usage, [&] {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "run" && (argc == 5 || argc == 6)) {
      lorabench::io::RunFileReader r(argv[2]);
      auto st = r.steps();
      const size_t rows = std::stoul(argv[3]);
      expect(st["step"].size() == rows,
             "rows: " + std::to_string(st["step"].size()) + ", expected " + std::to_string(rows));
      auto root = r.root();
      expect(root["status"] == argv[4], "status is " + root["status"] + ", expected " + argv[4]);
      if (argc == 6)
        expect(root["status_message"].find(argv[5]) != std::string::npos,
               "status_message \"" + root["status_message"] + "\" lacks \"" + argv[5] + "\"");
    } else if (mode == "losses" && argc == 5) {
      auto a = losses(argv[2]), b = losses(argv[3]);
      const double rtol = std::atof(argv[4]);
      int compared = 0;
      for (const auto& [step, lb] : b) {
        auto it = a.find(step);
        if (it == a.end()) continue;
        ++compared;
        const double la = it->second;
        const bool ok = rtol == 0 ? la == lb : std::abs(la - lb) <= rtol * std::abs(lb);
        char buf[160];
        std::snprintf(buf, sizeof buf, "step %ld: loss %.17g vs %.17g (rel %.3g)", step, la, lb,
                      std::abs(la - lb) / std::abs(lb));
        expect(ok, buf);
      }
      expect(compared > 0, "no step in common");
      std::printf("%d steps compared\n", compared);
    } else if (mode == "provenance" && argc == 5) {
      lorabench::io::RunFileReader r(argv[2]);
      auto p = r.provenance();
      expect(p[argv[3]].find(argv[4]) != std::string::npos,
             std::string("provenance ") + argv[3] + " = \"" + p[argv[3]] + "\" lacks \"" + argv[4] + "\"");
    } else {
      return false;
    }
    return true;
  });
}
