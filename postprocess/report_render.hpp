// lorabench-report, part 3: the Markdown report and its SVG charts, from an Analysis. Deterministic: the
// same run files give byte-identical output (no clock, no absolute paths unless given as inputs).
#pragma once

#include <string>
#include <vector>

#include "report_analysis.hpp"

namespace lorabench::report {

struct Chart {
  std::string file;     // "loss.svg"
  std::string title;    // alt text / caption
  std::string content;  // the SVG document
};

// The charts that have data: loss per step per run, tokens/s against world size per strategy, peak
// memory per rank per run, phase breakdown (stacked). Empty without completed training runs.
std::vector<Chart> make_charts(const Analysis& a);

struct MarkdownOptions {
  std::string title = "lorabench report";
  std::string charts_dir;         // link prefix of the charts, relative to the report ("" = no charts)
  std::vector<Chart> charts;      // the charts that were written (their file and title are linked)
  std::vector<std::string> notes; // input notes (skipped files), listed under "Inputs"
};

std::string render_markdown(const std::vector<RunRecord>& runs, const Analysis& a, const MarkdownOptions& o);

// Number formatting shared by the tables (unit-tested): n/a for NaN.
std::string fmt_sig(double v, int sig = 4);                // 4 significant digits, no exponent
std::string fmt_pm(double mean, double std, int sig = 4);  // "12.34 ± 0.56" (std with mean's decimals)
std::string fmt_pct(double share);                         // 0.314 -> "31.4%"
std::string fmt_count(double v);                           // 1234567 -> "1,234,567"

}  // namespace lorabench::report
