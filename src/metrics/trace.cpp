#include "lorabench/metrics/trace.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::metrics {

using json = nlohmann::json;

TraceRecorder TraceRecorder::enabled_for_rank(int rank, Clock::time_point origin, size_t reserve_events) {
  TraceRecorder r;
  r.enabled_ = true;
  r.rank_ = rank;
  r.origin_ = origin;
  const auto since_origin = Clock::now() - origin;
  const auto wall = std::chrono::system_clock::now() - std::chrono::duration_cast<std::chrono::system_clock::duration>(since_origin);
  r.origin_unix_us_ = std::chrono::duration_cast<std::chrono::microseconds>(wall.time_since_epoch()).count();
  r.process_name_ = "rank " + std::to_string(rank);
  r.events_.reserve(reserve_events);
  return r;
}

double TraceRecorder::to_us(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

double TraceRecorder::now_us() const { return enabled_ ? to_us(Clock::now()) : 0.0; }

void TraceRecorder::record(const char* name, const char* cat, double ts_us, double dur_us, int tid) {
  if (!enabled_) return;
  LB_CHECK(dur_us >= 0, "trace event '" + std::string(name) + "' has a negative duration");
  TraceEvent& e = events_.emplace_back();
  e.name = name;
  e.cat = cat;
  e.ts_us = ts_us;
  e.dur_us = dur_us;
  e.tid = tid;
}

void TraceRecorder::record(TraceEvent event) {
  if (!enabled_) return;
  LB_CHECK(event.dur_us >= 0, "trace event '" + event.name + "' has a negative duration");
  events_.push_back(std::move(event));
}

void TraceRecorder::set_process_name(const std::string& name) {
  if (enabled_) process_name_ = name;
}

void TraceRecorder::set_thread_name(int tid, const std::string& name) {
  if (!enabled_) return;
  for (auto& t : thread_names_) {
    if (t.first == tid) {
      t.second = name;
      return;
    }
  }
  thread_names_.emplace_back(tid, name);
}

void TraceRecorder::set_metadata(const std::string& key, const std::string& value) {
  if (!enabled_) return;
  for (auto& m : metadata_) {
    if (m.first == key) {
      m.second = value;
      return;
    }
  }
  metadata_.emplace_back(key, value);
}

std::string TraceRecorder::to_json() const {
  // Streamed event by event: a long run has many events and one big json tree would double the memory.
  std::ostringstream out;
  out << "{\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const json& j) {
    out << (first ? "\n" : ",\n") << j.dump();
    first = false;
  };
  if (enabled_) {
    emit(json{{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0}, {"args", {{"name", process_name_}}}});
    emit(json{{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"tid", 0},
              {"args", {{"sort_index", rank_}}}});
    for (const auto& [tid, name] : thread_names_) {
      emit(json{{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", tid}, {"args", {{"name", name}}}});
    }
    for (const TraceEvent& e : events_) {
      json j{{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"ts", e.ts_us},
             {"dur", e.dur_us}, {"pid", rank_}, {"tid", e.tid}};
      if (!e.args.empty()) {
        json args = json::object();
        for (const auto& [k, v] : e.args) args[k] = v;
        j["args"] = std::move(args);
      }
      emit(j);
    }
  }
  json other = json::object();
  other["rank"] = rank_;
  other["origin_unix_us"] = origin_unix_us_;
  other["time_unit"] = "ts and dur in microseconds since origin_unix_us";
  for (const auto& [k, v] : metadata_) other[k] = v;
  out << "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":" << other.dump() << "}\n";
  return out.str();
}

namespace {

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(tmp + ": cannot create: " + std::strerror(errno));
    out << text;
    out.flush();
    if (!out) throw IoError(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw IoError(path + ": rename failed: " + std::strerror(errno));
  }
}

}  // namespace

void TraceRecorder::write(const std::string& path) const { write_text_atomically(path, to_json()); }

void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<json> docs;
  int64_t min_origin = 0;
  for (const std::string& path : inputs) {
    json doc;
    try {
      doc = json::parse(read_file(path));
    } catch (const json::exception& e) {
      throw IoError(path + ": not a JSON trace: " + e.what());
    }
    if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
      throw IoError(path + ": no \"traceEvents\" array");
    }
    const int64_t origin = doc.value("/otherData/origin_unix_us"_json_pointer, int64_t{0});
    if (docs.empty() || origin < min_origin) min_origin = origin;
    docs.push_back(std::move(doc));
  }
  // Each file's ts count from its own origin; shift them onto the earliest one (wall clock, so ranks on
  // different hosts line up only as well as their clocks agree).
  json events = json::array();
  json other = json::object();
  json sources = json::array();
  for (size_t i = 0; i < docs.size(); ++i) {
    json& doc = docs[i];
    const double shift = static_cast<double>(doc.value("/otherData/origin_unix_us"_json_pointer, int64_t{0}) - min_origin);
    for (auto& e : doc["traceEvents"]) {
      if (e.is_object() && e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift;
      events.push_back(std::move(e));
    }
    if (other.empty() && doc.contains("otherData") && doc["otherData"].is_object()) other = doc["otherData"];
    sources.push_back(inputs[i]);
  }
  other.erase("rank");
  other["origin_unix_us"] = min_origin;
  other["merged_from"] = sources;
  json merged{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
  write_text_atomically(output, merged.dump() + "\n");
}

}  // namespace lorabench::metrics
