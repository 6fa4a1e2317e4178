// The run file: written, read back, refused when foreign; and docs/hdf5-schema.md names every schema entry.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/io/schema.hpp"

using namespace lorabench;
namespace fs = std::filesystem;

namespace {
std::string tmp(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("lorabench_io_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}
}  // namespace

TEST(RunFile, WritesAndReadsBack) {
  const std::string path = tmp("run.h5");
  fs::remove(path);
  {
    io::RunFileWriter w(path, schema::kKindTrain, "t");
    w.write_config({{"run.steps", "3"}, {"train.lr", "0.001"}}, "[run]\nsteps = 3\n", "x.ini", {"train.lr=0.001"});
    w.write_provenance({{"argv", "lorabench x.ini"}});
    w.write_ranks({{0, "h0", 0, 0, 11, 1, -1}, {1, "h1", 0, 1, 12, 1, -1}});
    std::vector<double> rows(2 * schema::kNumStepColumns, 0.0);
    rows[schema::kRank] = 0;
    rows[schema::kNumStepColumns + schema::kRank] = 1;
    rows[schema::kLoss] = 2.5;
    w.append_steps(rows);
    w.create_counters({"perf::TASK-CLOCK"}, {"perf_event_open"}, {"data", "forward"});
    w.append_counters({0, 0, 0, 1, 2, 12345});
    w.write_summary("world_size", 2.0);
    w.write_summary("strategy", std::string("ddp"));
    w.write_validation({{"a", true, "fine"}, {"b", false, "not fine"}});
    w.set_status(schema::kStatusCompleted);
  }
  io::RunFileReader r(path);
  EXPECT_EQ(r.kind(), "train");
  EXPECT_EQ(r.root()["status"], "completed");
  EXPECT_EQ(r.root()["verdict"], "INVALID");
  EXPECT_EQ(r.config()["train.lr"], "0.001");
  EXPECT_EQ(r.config()["input_file"], "x.ini");
  EXPECT_EQ(r.ini_text(), "[run]\nsteps = 3\n");
  EXPECT_EQ(r.provenance()["argv"], "lorabench x.ini");
  EXPECT_EQ(r.rank_hosts(), (std::vector<std::string>{"h0", "h1"}));
  EXPECT_EQ(r.ranks()["pid"], (std::vector<double>{11, 12}));
  auto steps = r.steps();
  EXPECT_EQ(steps["rank"], (std::vector<double>{0, 1}));
  EXPECT_EQ(steps["loss"][0], 2.5);
  auto counters = h5::read_table(r.file(), schema::kCounters);
  EXPECT_EQ(counters["perf::TASK-CLOCK"], (std::vector<double>{12345}));
  EXPECT_EQ(r.summary()["strategy"], "ddp");
  auto v = r.validation();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FALSE(v[1].passed);
  EXPECT_EQ(v[1].detail, "not fine");
}

TEST(RunFile, NeverOverwritesAndRefusesForeignFiles) {
  const std::string path = tmp("exists.h5");
  fs::remove(path);
  { io::RunFileWriter w(path, schema::kKindTrain, "t"); }
  EXPECT_THROW(io::RunFileWriter(path, schema::kKindTrain, "t"), IoError);
  const std::string foreign = tmp("foreign.h5");
  { h5::Handle f = h5::create_truncate(foreign); }
  try {
    io::RunFileReader r(foreign);
    ADD_FAILURE() << "a foreign file was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not a lorabench run file"), std::string::npos) << e.what();
  }
  // Versions 2 and 3 share the layout (3 changed straggler_ratio's denominator): both open; 1 and 99 do not.
  for (int version : {1, 2, 3, 99}) {
    const std::string file = tmp("version" + std::to_string(version) + ".h5");
    {
      h5::Handle f = h5::create_truncate(file);
      h5::write_attr(f, schema::kAttrProgram, schema::kProgram);
      h5::write_attr(f, schema::kAttrSchemaVersion, version);
    }
    try {
      io::RunFileReader r(file);
      EXPECT_TRUE(version == 2 || version == 3) << "schema version " << version << " was accepted";
    } catch (const IoError& e) {
      EXPECT_FALSE(version == 2 || version == 3) << e.what();
      EXPECT_NE(std::string(e.what()).find("schema version " + std::to_string(version) + " (this build reads versions 2 to 3)"),
                std::string::npos) << e.what();
    }
  }
  const std::string text = tmp("text.h5");
  { FILE* f = fopen(text.c_str(), "w"); fputs("not hdf5", f); fclose(f); }
  EXPECT_THROW(io::RunFileReader r(text), IoError);
}

TEST(SchemaDocs, EveryNameIsDocumented) {
  const std::string doc = read_file(std::string(LORABENCH_SOURCE_DIR) + "/docs/hdf5-schema.md");
  for (const auto& c : schema::step_columns())
    EXPECT_NE(doc.find("| `" + std::string(c.name) + "` |"), std::string::npos) << "step column " << c.name;
  for (const auto& [name, meaning] : schema::summary_attributes())
    EXPECT_NE(doc.find("`" + std::string(name) + "`"), std::string::npos) << "summary attribute " << name;
  for (const auto& c : schema::rank_columns())
    EXPECT_NE(doc.find("| `" + c.name + "` |"), std::string::npos) << "rank column " << c.name;
  for (const char* a : {schema::kAttrSchemaVersion, schema::kAttrProgram, schema::kAttrGitCommit, schema::kAttrStatus,
                        schema::kAttrVerdict, schema::kAttrKind, schema::kAttrRunName, schema::kAttrCreated,
                        schema::kAttrFinished, schema::kAttrStatusMessage, schema::kAttrProgramVersion})
    EXPECT_NE(doc.find("`" + std::string(a) + "`"), std::string::npos) << "root attribute " << a;
}
