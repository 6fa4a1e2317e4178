#include "svg.hpp"

#include <algorithm>
#include <cmath>

#include "lorabench/core/strings.hpp"

namespace lorabench::report::svg {

namespace {

std::string num(double v) {
  std::string s = strformat("%.1f", v);
  if (s == "-0.0") s = "0.0";
  return s;
}

// Plot area of every chart: the legend sits to the right of it.
struct Frame {
  double width = 760, height = 420;
  double left = 78, right = 190, top = 44, bottom = 64;
  double x0() const { return left; }
  double x1() const { return width - right; }
  double y0() const { return height - bottom; }  // bottom of the plot (SVG y grows downwards)
  double y1() const { return top; }
};

enum class Key { kBox, kLine, kDashed };

void draw_legend(Document& d, const Frame& f, const std::vector<std::string>& names, const std::vector<Key>& keys) {
  double y = f.top + 6;
  for (size_t i = 0; i < names.size(); ++i) {
    const double x = f.x1() + 16;
    const Key k = i < keys.size() ? keys[i] : Key::kBox;
    if (k == Key::kBox) {
      d.rect(x, y - 6, 18, 12, color(i));
    } else {
      d.line(x, y, x + 18, y, color(i), 2, k == Key::kDashed ? "5,3" : "");
    }
    d.text(x + 24, y + 4, names[i], 11);
    y += 18;
  }
}

void draw_y_axis(Document& d, const Frame& f, const std::vector<double>& ticks, double lo, double hi,
                 const std::string& label) {
  for (double t : ticks) {
    const double y = f.y0() - (t - lo) / (hi - lo) * (f.y0() - f.y1());
    d.line(f.x0(), y, f.x1(), y, "#e0e0e0");
    d.text(f.x0() - 6, y + 4, tick_label(t), 11, "end");
  }
  d.line(f.x0(), f.y0(), f.x0(), f.y1(), "#444");
  d.text(18, (f.y0() + f.y1()) / 2, label, 12, "middle", -90);
}

void draw_title(Document& d, const Frame& f, const std::string& title) {
  d.text(f.width / 2, 24, title, 15, "middle");
}

}  // namespace

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

Document::Document(double width, double height) : width_(width), height_(height) {}

void Document::rect(double x, double y, double w, double h, const std::string& fill, const std::string& title) {
  body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
           "\" fill=\"" + escape(fill) + "\"";
  if (title.empty()) {
    body_ += "/>\n";
  } else {
    body_ += "><title>" + escape(title) + "</title></rect>\n";
  }
}

void Document::line(double x1, double y1, double x2, double y2, const std::string& stroke, double width,
                    const std::string& dash) {
  body_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) +
           "\" stroke=\"" + escape(stroke) + "\" stroke-width=\"" + num(width) + "\"";
  if (!dash.empty()) body_ += " stroke-dasharray=\"" + escape(dash) + "\"";
  body_ += "/>\n";
}

void Document::polyline(const std::vector<std::pair<double, double>>& pts, const std::string& stroke, double width,
                        const std::string& dash) {
  body_ += "<polyline fill=\"none\" stroke=\"" + escape(stroke) + "\" stroke-width=\"" + num(width) + "\"";
  if (!dash.empty()) body_ += " stroke-dasharray=\"" + escape(dash) + "\"";
  body_ += " points=\"";
  for (size_t i = 0; i < pts.size(); ++i) body_ += (i ? " " : "") + num(pts[i].first) + "," + num(pts[i].second);
  body_ += "\"/>\n";
}

void Document::circle(double cx, double cy, double r, const std::string& fill, const std::string& title) {
  body_ += "<circle cx=\"" + num(cx) + "\" cy=\"" + num(cy) + "\" r=\"" + num(r) + "\" fill=\"" + escape(fill) + "\"";
  if (title.empty()) {
    body_ += "/>\n";
  } else {
    body_ += "><title>" + escape(title) + "</title></circle>\n";
  }
}

void Document::text(double x, double y, const std::string& s, double size, const std::string& anchor, double rotate,
                    const std::string& fill) {
  body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\" fill=\"" + escape(fill) +
           "\"";
  if (anchor != "start") body_ += " text-anchor=\"" + escape(anchor) + "\"";
  if (rotate != 0) body_ += " transform=\"rotate(" + num(rotate) + " " + num(x) + " " + num(y) + ")\"";
  body_ += ">" + escape(s) + "</text>\n";
}

std::string Document::str() const {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(width_) + "\" height=\"" +
         num(height_) + "\" viewBox=\"0 0 " + num(width_) + " " + num(height_) +
         "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
         "<rect x=\"0\" y=\"0\" width=\"" + num(width_) + "\" height=\"" + num(height_) + "\" fill=\"#ffffff\"/>\n" +
         body_ + "</svg>\n";
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> out;
  const double first = std::floor(lo / step) * step;
  for (int i = 0; i < 1000; ++i) {
    const double t = first + step * i;
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    if (t >= hi - step * 1e-9) break;
  }
  return out;
}

std::string tick_label(double v) {
  if (v != 0 && (std::abs(v) >= 1e6 || std::abs(v) < 1e-3)) return strformat("%.3g", v);
  std::string s = strformat("%.6f", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

const std::string& color(size_t i) {
  static const std::vector<std::string> palette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return palette[i % palette.size()];
}

std::string render(const LineChart& c) {
  Frame f;
  Document d(f.width, f.height);
  draw_title(d, f, c.title);
  auto tx = [&](double x) { return c.log2_x ? std::log2(x) : x; };
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || (c.log2_x && x <= 0)) continue;
      xlo = std::min(xlo, tx(x));
      xhi = std::max(xhi, tx(x));
      ylo = std::min(ylo, y);
      yhi = std::max(yhi, y);
    }
  if (!std::isfinite(xlo)) {
    d.text(f.width / 2, f.height / 2, "no data", 14, "middle");
    return d.str();
  }
  if (c.y_from_zero) ylo = std::min(0.0, ylo);
  std::vector<double> yt = nice_ticks(ylo, yhi);
  ylo = std::min(ylo, yt.front());
  yhi = std::max(yhi, yt.back());
  std::vector<double> xt = c.x_ticks;
  if (xt.empty()) {
    xt = nice_ticks(xlo, xhi);
    if (c.log2_x)
      for (auto& t : xt) t = std::exp2(t);
  }
  if (xhi == xlo) {
    xlo -= 1;
    xhi += 1;
  }
  if (!c.x_ticks.empty())
    for (double t : c.x_ticks) {
      xlo = std::min(xlo, tx(t));
      xhi = std::max(xhi, tx(t));
    }
  const double pad = (xhi - xlo) * 0.04;
  xlo -= pad;
  xhi += pad;
  auto px = [&](double x) { return f.x0() + (tx(x) - xlo) / (xhi - xlo) * (f.x1() - f.x0()); };
  auto py = [&](double y) { return f.y0() - (y - ylo) / (yhi - ylo) * (f.y0() - f.y1()); };

  draw_y_axis(d, f, yt, ylo, yhi, c.y_label);
  d.line(f.x0(), f.y0(), f.x1(), f.y0(), "#444");
  for (double t : xt) {
    if (c.log2_x && t <= 0) continue;
    const double x = px(t);
    if (x < f.x0() - 0.5 || x > f.x1() + 0.5) continue;
    d.line(x, f.y0(), x, f.y0() + 5, "#444");
    d.text(x, f.y0() + 18, tick_label(t), 11, "middle");
  }
  d.text((f.x0() + f.x1()) / 2, f.height - 18, c.x_label, 12, "middle");

  std::vector<std::string> names;
  std::vector<Key> keys;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const Series& s = c.series[i];
    std::vector<std::pair<double, double>> pts;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y) && (!c.log2_x || x > 0)) pts.push_back({px(x), py(y)});
    if (pts.size() > 1) d.polyline(pts, color(i), 2, s.dashed ? "6,4" : "");
    if (s.markers)
      for (size_t k = 0; k < pts.size(); ++k) {
        const auto& src = s.points[k];
        d.circle(pts[k].first, pts[k].second, 3.5, color(i),
                 s.name + ": " + tick_label(src.first) + ", " + strformat("%.4g", src.second));
      }
    names.push_back(s.name);
    keys.push_back(s.dashed ? Key::kDashed : Key::kLine);
  }
  draw_legend(d, f, names, keys);
  return d.str();
}

std::string render(const BarChart& c) {
  Frame f;
  bool rotate = c.categories.size() > 4;
  for (const auto& cat : c.categories) rotate = rotate || cat.size() > 14;
  if (rotate) {
    f.bottom = 110;
    f.height = 466;
  }
  Document d(f.width, f.height);
  draw_title(d, f, c.title);
  double yhi = 0;
  for (const auto& row : c.values) {
    double sum = 0;
    for (double v : row)
      if (std::isfinite(v) && v > 0) {
        sum += v;
        yhi = std::max(yhi, v);
      }
    if (c.stacked) yhi = std::max(yhi, sum);
  }
  if (c.categories.empty() || yhi <= 0) {
    d.text(f.width / 2, f.height / 2, "no data", 14, "middle");
    return d.str();
  }
  std::vector<double> yt = nice_ticks(0, yhi);
  const double ylo = 0, ytop = std::max(yhi, yt.back());
  auto py = [&](double y) { return f.y0() - (y - ylo) / (ytop - ylo) * (f.y0() - f.y1()); };
  draw_y_axis(d, f, yt, ylo, ytop, c.y_label);
  d.line(f.x0(), f.y0(), f.x1(), f.y0(), "#444");

  const double group = (f.x1() - f.x0()) / double(c.categories.size());
  const size_t ns = std::max<size_t>(1, c.series.size());
  for (size_t k = 0; k < c.categories.size(); ++k) {
    const double gx = f.x0() + group * double(k);
    if (c.stacked) {
      const double w = group * 0.6;
      double acc = 0;
      for (size_t s = 0; s < c.values[k].size(); ++s) {
        const double v = c.values[k][s];
        if (!std::isfinite(v) || v <= 0) continue;
        const double top = py(acc + v), bottom = py(acc);
        d.rect(gx + (group - w) / 2, top, w, bottom - top, color(s),
               c.categories[k] + " " + (s < c.series.size() ? c.series[s] : "") + ": " + strformat("%.4g", v));
        acc += v;
      }
    } else {
      const double w = group * 0.8 / double(ns);
      for (size_t s = 0; s < c.values[k].size(); ++s) {
        const double v = c.values[k][s];
        if (!std::isfinite(v)) continue;
        const double top = py(std::max(0.0, v));
        d.rect(gx + group * 0.1 + w * double(s), top, w * 0.92, f.y0() - top, color(s),
               c.categories[k] + " " + (s < c.series.size() ? c.series[s] : "") + ": " + strformat("%.4g", v));
      }
    }
    const double cx = gx + group / 2;
    if (rotate) {
      d.text(cx, f.y0() + 14, c.categories[k], 11, "end", -35);
    } else {
      d.text(cx, f.y0() + 18, c.categories[k], 11, "middle");
    }
  }
  draw_legend(d, f, c.series, {});
  return d.str();
}

}  // namespace lorabench::report::svg
