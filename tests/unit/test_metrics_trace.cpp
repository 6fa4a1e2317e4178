// Chrome trace recorder: the JSON parses, holds the recorded events with the right fields, escapes
// names, and a disabled recorder allocates nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "lorabench/metrics/trace.hpp"

using lorabench::metrics::TraceEvent;
using lorabench::metrics::TraceRecorder;
using lorabench::metrics::TraceScope;
using json = nlohmann::json;

// Counts heap allocations while g_counting is set (replaces the global operator new of this binary).
namespace {
std::atomic<bool> g_counting{false};
std::atomic<size_t> g_allocations{0};
}  // namespace

// GCC 12 flags free() in a replaced operator delete as mismatched with operator new once both are
// inlined into library code; the pair below is matched (malloc/free) by construction.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/lorabench_trace_XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d != nullptr ? d : "/tmp";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The "X" events of a parsed trace.
std::vector<json> complete_events(const json& doc) {
  std::vector<json> out;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X") out.push_back(e);
  }
  return out;
}

}  // namespace

TEST(Trace, DisabledRecorderRecordsAndAllocatesNothing) {
  TraceRecorder rec;  // disabled
  EXPECT_FALSE(rec.enabled());
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 1000; ++i) {
    TraceScope scope(rec, "forward", "phase");
    rec.record("allreduce", "comm", 1.0, 2.0, 1);
  }
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0u);
  EXPECT_TRUE(rec.events().empty());
  EXPECT_EQ(rec.now_us(), 0.0);
  const json doc = json::parse(rec.to_json());
  EXPECT_TRUE(doc.at("traceEvents").empty());
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
}

TEST(Trace, RecordsCompleteEventsWithTheChromeFields) {
  TraceRecorder rec = TraceRecorder::enabled_for_rank(3);
  rec.set_thread_name(1, "comm");
  rec.set_metadata("run", "ddp_2");
  {
    TraceScope step(rec, "step", "train");
    {
      TraceScope fwd(rec, "forward", "phase");
      usleep(2000);
    }
    rec.record("allreduce", "comm", rec.now_us(), 12.5, 1);
  }
  TraceEvent with_args;
  with_args.name = "bucket";
  with_args.cat = "comm";
  with_args.ts_us = 5;
  with_args.dur_us = 1;
  with_args.args = {{"bytes", 4096.0}};
  rec.record(with_args);
  ASSERT_EQ(rec.events().size(), 4u);

  const json doc = json::parse(rec.to_json());
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  EXPECT_EQ(doc.at("otherData").at("run"), "ddp_2");
  EXPECT_EQ(doc.at("otherData").at("rank"), 3);
  EXPECT_TRUE(doc.at("otherData").contains("origin_unix_us"));

  bool process_named = false, thread_named = false;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") process_named = e.at("args").at("name") == "rank 3";
    if (e.at("ph") == "M" && e.at("name") == "thread_name") thread_named = e.at("tid") == 1 && e.at("args").at("name") == "comm";
  }
  EXPECT_TRUE(process_named);
  EXPECT_TRUE(thread_named);

  const auto xs = complete_events(doc);
  ASSERT_EQ(xs.size(), 4u);
  const json *step = nullptr, *fwd = nullptr, *ar = nullptr, *bucket = nullptr;
  for (const auto& e : xs) {
    for (const char* key : {"name", "cat", "ph", "ts", "dur", "pid", "tid"}) EXPECT_TRUE(e.contains(key)) << key;
    EXPECT_EQ(e.at("pid"), 3);
    if (e.at("name") == "step") step = &e;
    if (e.at("name") == "forward") fwd = &e;
    if (e.at("name") == "allreduce") ar = &e;
    if (e.at("name") == "bucket") bucket = &e;
  }
  ASSERT_TRUE(step && fwd && ar && bucket);
  EXPECT_EQ(fwd->at("cat"), "phase");
  EXPECT_EQ(ar->at("tid"), 1);
  EXPECT_DOUBLE_EQ(ar->at("dur").get<double>(), 12.5);
  EXPECT_EQ(bucket->at("args").at("bytes"), 4096.0);
  // Microseconds: the forward scope slept 2 ms; it nests inside the step scope.
  EXPECT_GE(fwd->at("dur").get<double>(), 2000.0);
  EXPECT_LT(fwd->at("dur").get<double>(), 2e6);
  const double s0 = step->at("ts"), s1 = s0 + step->at("dur").get<double>();
  const double f0 = fwd->at("ts"), f1 = f0 + fwd->at("dur").get<double>();
  EXPECT_LE(s0, f0);
  EXPECT_LE(f1, s1);
}

TEST(Trace, EscapesNamesAndWritesAFile) {
  TraceRecorder rec = TraceRecorder::enabled_for_rank(0);
  const std::string odd = "layer \"7\" \\ back\nslash\t\xc3\xa9";
  TraceEvent e;
  e.name = odd;
  e.cat = "phase";
  e.dur_us = 1;
  rec.record(e);
  const std::string dir = temp_dir();
  const std::string path = dir + "/trace_rank0.json";
  rec.write(path);
  const json doc = json::parse(slurp(path));
  const auto xs = complete_events(doc);
  ASSERT_EQ(xs.size(), 1u);
  EXPECT_EQ(xs[0].at("name"), odd);
  std::remove(path.c_str());
  rmdir(dir.c_str());
}

TEST(Trace, MergeShiftsRanksOntoOneTimeAxis) {
  const auto origin = TraceRecorder::Clock::now();
  TraceRecorder r0 = TraceRecorder::enabled_for_rank(0, origin);
  TraceRecorder r1 = TraceRecorder::enabled_for_rank(1, origin + std::chrono::milliseconds(500));
  r0.record("forward", "phase", 100, 10);
  r1.record("forward", "phase", 100, 10);
  const std::string dir = temp_dir();
  r0.write(dir + "/r0.json");
  r1.write(dir + "/r1.json");
  lorabench::metrics::merge_trace_files({dir + "/r0.json", dir + "/r1.json"}, dir + "/all.json");
  const json doc = json::parse(slurp(dir + "/all.json"));
  double ts0 = -1, ts1 = -1;
  for (const auto& e : complete_events(doc)) (e.at("pid") == 0 ? ts0 : ts1) = e.at("ts").get<double>();
  EXPECT_NEAR(ts0, 100, 5);
  EXPECT_NEAR(ts1, 100 + 500000, 5);  // rank 1's origin is 500 ms later
  EXPECT_EQ(doc.at("otherData").at("merged_from").size(), 2u);
  for (const char* f : {"/r0.json", "/r1.json", "/all.json"}) std::remove((dir + f).c_str());
  rmdir(dir.c_str());
}
