// A run file (outputs/<run>/run.h5, a `lorabench comm` file) as lorabench-report reads it: load_run, then
// the analysis and the Markdown report with its charts. Input: HDF5 bytes or an edit script on
// corpus/run_file/run.h5 (h5_input.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "h5_input.hpp"
#include "report_analysis.hpp"
#include "report_data.hpp"
#include "report_render.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = lbfuzz::h5_input("run.h5", LORABENCH_FUZZ_RUN_FILE_BASE, data, size);
  if (path.empty()) return 0;
  lbfuzz::expect_clean(path, [&] {
    std::vector<lorabench::report::RunRecord> runs;
    runs.push_back(lorabench::report::load_run(path, path));
    const lorabench::report::Analysis a = lorabench::report::analyze(runs);
    lorabench::report::MarkdownOptions mo;
    mo.charts = lorabench::report::make_charts(a);
    mo.charts_dir = "charts";
    (void)lorabench::report::render_markdown(runs, a, mo);
  });
  return 0;
}
