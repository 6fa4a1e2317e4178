#include <algorithm>
#include <map>
#include <set>

#include "lorabench/core/strings.hpp"
#include "report_render.hpp"
#include "svg.hpp"

namespace lorabench::report {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::string run_label(const TrainRow& t) {
  return t.run->name + " (" + t.strategy + " x" + strformat("%d", int(t.world)) + ")";
}

std::vector<const TrainRow*> completed(const Analysis& a) {
  std::vector<const TrainRow*> out;
  for (const auto& t : a.train)
    if (t.run->completed()) out.push_back(&t);
  return out;
}

}  // namespace

std::vector<Chart> make_charts(const Analysis& a) {
  std::vector<Chart> out;
  const auto runs = completed(a);
  if (runs.empty()) return out;
  const bool many_configs = a.configs.size() > 1;

  {
    svg::LineChart c;
    c.title = "Loss per step (first trial)";
    c.x_label = "optimizer step";
    c.y_label = "loss (nats)";
    for (const TrainRow* t : runs) {
      svg::Series s;
      s.name = run_label(*t);
      s.points = t->loss_curve;
      s.markers = t->loss_curve.size() <= 60;
      c.series.push_back(s);
    }
    out.push_back({"loss.svg", c.title, svg::render(c)});
  }

  {
    svg::LineChart c;
    c.title = "Tokens/s against world size";
    c.x_label = "world size (ranks)";
    c.y_label = "tokens/s (all ranks)";
    c.log2_x = true;
    c.y_from_zero = true;
    std::set<double> worlds;
    for (const auto& cfg : a.configs) {
      std::map<std::string, svg::Series> by_strategy;
      std::vector<std::string> order;
      std::set<double> cfg_worlds;
      for (size_t i : cfg.rows) {
        const TrainRow& t = a.train[i];
        if (!known(t.world) || !known(t.tps_mean)) continue;
        const std::string name = (many_configs ? cfg.label + " " : "") + t.strategy;
        if (!by_strategy.count(name)) {
          order.push_back(name);
          by_strategy[name].name = name;
        }
        by_strategy[name].points.push_back({t.world, t.tps_mean});
        worlds.insert(t.world);
        cfg_worlds.insert(t.world);
      }
      for (const auto& n : order) {
        auto s = by_strategy[n];
        std::sort(s.points.begin(), s.points.end());
        c.series.push_back(s);
      }
      if (cfg.baseline && known(cfg.baseline->tps_mean) && cfg_worlds.size() > 1) {
        svg::Series ideal;
        ideal.name = (many_configs ? cfg.label + " " : "") + "ideal (N x 1 rank)";
        ideal.dashed = true;
        ideal.markers = false;
        for (double w : cfg_worlds) ideal.points.push_back({w, w * cfg.baseline->tps_mean});
        c.series.push_back(ideal);
      }
    }
    c.x_ticks.assign(worlds.begin(), worlds.end());
    out.push_back({"tokens_per_s.svg", c.title, svg::render(c)});
  }

  {
    svg::BarChart c;
    c.title = "Memory per rank";
    c.y_label = "MiB per rank";
    c.series = {"peak tensor memory", "model state (measured)", "model state (predicted)"};
    for (const TrainRow* t : runs) {
      c.categories.push_back(run_label(*t));
      c.values.push_back({t->mem_peak / kMiB, t->mem_state / kMiB,
                          num(t->run->summary, "predicted_model_state_bytes") / kMiB});
    }
    out.push_back({"memory.svg", c.title, svg::render(c)});
  }

  {
    svg::BarChart c;
    c.title = "Phase breakdown of the step (rank medians)";
    c.y_label = "% of the step";
    c.stacked = true;
    for (const char* p : kPhaseLabels) c.series.push_back(p);
    c.series.push_back("other");
    for (const TrainRow* t : runs) {
      c.categories.push_back(run_label(*t));
      std::vector<double> v;
      for (double s : t->phase_share) v.push_back(100.0 * s);
      v.push_back(100.0 * t->other_share);
      c.values.push_back(v);
    }
    out.push_back({"phases.svg", c.title, svg::render(c)});
  }
  return out;
}

}  // namespace lorabench::report
