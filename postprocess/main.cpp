// lorabench-report: run files (training and `lorabench comm`) -> a Markdown report with SVG charts.
// Never links libtorch (postprocess/CMakeLists.txt checks). Usage and every number: docs/report.md.
//
// Exit codes: 0 report written; 1 an input could not be read (not a run file, other schema version,
// damaged, a required field missing) or an output could not be written; 2 bad command line.
#include <boost/program_options.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "lorabench/core/error.hpp"
#include "lorabench/core/version.hpp"
#include "report_analysis.hpp"
#include "report_data.hpp"
#include "report_render.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace lorabench;

namespace {

void write_file(const fs::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) throw IoError(path.string() + ": cannot write");
}

struct ReportArgs {
  std::vector<std::string> inputs;
  std::string output, charts, title = "lorabench report";
  bool no_charts = false;
  int exit_now = -1;  // >= 0: help, version or a usage error was handled; exit with it
};

ReportArgs parse_report_args(int argc, char** argv) {
  ReportArgs a;
  po::options_description opts("Options", 100);
  opts.add_options()
      ("help,h", "print this help and exit")
      ("output,o", po::value(&a.output), "write the Markdown report to this file (default: standard output)")
      ("charts", po::value(&a.charts),
       "write SVG charts into this directory (default: <directory of -o>/charts; without -o: no charts)")
      ("no-charts", "write no charts")
      ("title", po::value(&a.title), "the report's heading (default: \"lorabench report\")")
      ("version", "print the version and exit");
  po::options_description hidden;
  hidden.add_options()("inputs", po::value(&a.inputs), "run files or directories");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("inputs", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "lorabench-report: %s (see --help)\n", e.what());
    a.exit_now = 2;
    return a;
  }
  a.no_charts = vm.count("no-charts") > 0;
  if (vm.count("help")) {
    std::cout << "Usage: lorabench-report RUN_OR_DIR... [-o report.md] [--charts DIR]\n\n"
                 "Reads lorabench run files (outputs/<run>/run.h5 of training runs and `lorabench comm` run\n"
                 "files) and writes a Markdown report: per-run table, scaling, memory, phase breakdown,\n"
                 "bottleneck attribution, collective benchmark, hardware counters, provenance warnings, and\n"
                 "SVG charts. A directory means every run.h5 below it and every *.h5 of kind comm.\n"
                 "Documentation: docs/report.md.\n\n"
              << opts << "\nExit status: 0 written; 1 an input could not be read or an output written; 2 usage.\n";
    a.exit_now = 0;
  } else if (vm.count("version")) {
    std::printf("lorabench-report %s (%s)\n", program_version(), git_commit());
    a.exit_now = 0;
  } else if (a.inputs.empty()) {
    std::fprintf(stderr,
                 "lorabench-report: no run files given (usage: lorabench-report RUN_OR_DIR... [-o report.md])\n");
    a.exit_now = 2;
  } else if (a.no_charts && !a.charts.empty()) {
    std::fprintf(stderr, "lorabench-report: --charts and --no-charts contradict each other\n");
    a.exit_now = 2;
  }
  return a;
}

// The charts' directory: --charts, else beside -o; none with --no-charts or without -o.
fs::path charts_dir_of(const ReportArgs& a) {
  if (a.no_charts) return {};
  if (!a.charts.empty()) return a.charts;
  if (!a.output.empty()) return fs::path(a.output).parent_path() / "charts";
  return {};
}

// Writes the charts into `dir` and sets mo.charts and mo.charts_dir (as the report links them: relative to
// the report's directory).
void write_charts(const report::Analysis& analysis, const fs::path& dir, const std::string& output,
                  report::MarkdownOptions& mo) {
  mo.charts = report::make_charts(analysis);
  if (mo.charts.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir.string() + ": cannot create the charts directory: " + ec.message());
  for (const auto& c : mo.charts) write_file(dir / c.file, c.content);
  const fs::path base = output.empty() ? fs::current_path() : fs::absolute(fs::path(output)).parent_path();
  fs::path rel = fs::absolute(dir).lexically_normal().lexically_relative(base.lexically_normal());
  mo.charts_dir = rel.empty() ? fs::absolute(dir).string() : rel.generic_string();
}

int run(int argc, char** argv) {
  const ReportArgs args = parse_report_args(argc, argv);
  if (args.exit_now >= 0) return args.exit_now;
  std::vector<std::string> notes;
  const auto paths = report::expand_inputs(args.inputs, &notes);
  std::vector<report::RunRecord> runs;
  runs.reserve(paths.size());
  for (const auto& p : paths) runs.push_back(report::load_run(p, p));
  for (const auto& n : notes) std::fprintf(stderr, "lorabench-report: note: %s\n", n.c_str());

  const report::Analysis analysis = report::analyze(runs);
  report::MarkdownOptions mo;
  mo.title = args.title;
  mo.notes = notes;
  const fs::path charts_dir = charts_dir_of(args);
  if (!charts_dir.empty()) write_charts(analysis, charts_dir, args.output, mo);
  const std::string md = report::render_markdown(runs, analysis, mo);
  if (args.output.empty()) {
    std::fwrite(md.data(), 1, md.size(), stdout);
    return 0;
  }
  write_file(args.output, md);
  std::fprintf(stderr, "lorabench-report: wrote %s (%zu run files%s)\n", args.output.c_str(), runs.size(),
               mo.charts.empty() ? "" : (", charts in " + charts_dir.string()).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Read files that a running job still holds open (HDF5 file locking would refuse them); the writer
  // flushes at log intervals, so what is read is consistent up to the last flush. A user's setting wins.
  setenv("HDF5_USE_FILE_LOCKING", "FALSE", 0);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lorabench-report: error: %s\n", e.what());
    return 1;
  }
}
