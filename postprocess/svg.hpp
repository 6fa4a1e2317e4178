// A small SVG writer and the two chart shapes lorabench-report draws (line charts and bar charts). No
// external tools: the output is plain SVG 1.1 text, deterministic for the same input (coordinates
// printed with one decimal).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lorabench::report::svg {

// Escapes &, <, >, " and ' for text and attribute values.
std::string escape(const std::string& s);

class Document {
 public:
  Document(double width, double height);
  void rect(double x, double y, double w, double h, const std::string& fill, const std::string& title = "");
  void line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
            const std::string& dash = "");
  void polyline(const std::vector<std::pair<double, double>>& pts, const std::string& stroke, double width = 2,
                const std::string& dash = "");
  void circle(double cx, double cy, double r, const std::string& fill, const std::string& title = "");
  // anchor: "start", "middle" or "end"; rotate: degrees around (x, y).
  void text(double x, double y, const std::string& s, double size = 12, const std::string& anchor = "start",
            double rotate = 0, const std::string& fill = "#222");
  std::string str() const;  // the complete document
  double width() const { return width_; }
  double height() const { return height_; }

 private:
  double width_, height_;
  std::string body_;
};

// "Nice" axis ticks (1, 2, 5 x 10^k steps) covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// A tick label without trailing zeros ("0.25", "1200", "1e+06").
std::string tick_label(double v);

// The fixed colour palette (colour i of series i, cycling).
const std::string& color(size_t i);

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
  bool dashed = false;
  bool markers = true;
};

struct LineChart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool log2_x = false;           // x positioned on a log2 scale (world sizes 1, 2, 4, ...)
  std::vector<double> x_ticks;   // explicit x ticks (empty = nice ticks)
  bool y_from_zero = false;
};
std::string render(const LineChart& c);

struct BarChart {
  std::string title, y_label;
  std::vector<std::string> categories;   // one group (or one stacked bar) per category
  std::vector<std::string> series;       // legend entries
  std::vector<std::vector<double>> values;  // [category][series]; NaN = no bar
  bool stacked = false;
};
std::string render(const BarChart& c);

}  // namespace lorabench::report::svg
