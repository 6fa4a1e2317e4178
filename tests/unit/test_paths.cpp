// Run names and the path rule (lorabench/config/paths.hpp; docs/input-reference.md "Paths and run names").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lorabench/config/options.hpp"
#include "lorabench/config/paths.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace lorabench;

using lbtest::TempDir;

TEST(Paths, DefaultRunNameSaysInputStrategyAndRanks) {
  EXPECT_EQ(default_run_name("inputs/ddp.ini", "ddp", 2), "ddp-n2");
  EXPECT_EQ(default_run_name("inputs/ddp.ini", "ddp", 1), "ddp-n1");
  EXPECT_EQ(default_run_name("/x/quickstart.ini", "fsdp", 4), "quickstart-fsdp-n4");
  EXPECT_EQ(default_run_name("tiny.ini", "single", 1), "tiny-single-n1");
}

TEST(Paths, NumberedNamesNeverMeetAnExistingRun) {
  TempDir t;
  const std::string out = t.path.string();
  EXPECT_EQ(first_free_run_name(out, "ddp-n2"), "ddp-n2");
  EXPECT_EQ(latest_run_name(out, "ddp-n2"), "ddp-n2");
  fs::create_directories(t.path / "ddp-n2");
  EXPECT_EQ(first_free_run_name(out, "ddp-n2"), "ddp-n2-2");
  EXPECT_EQ(latest_run_name(out, "ddp-n2"), "ddp-n2");
  fs::create_directories(t.path / "ddp-n2-2");
  EXPECT_EQ(first_free_run_name(out, "ddp-n2"), "ddp-n2-3");
  EXPECT_EQ(latest_run_name(out, "ddp-n2"), "ddp-n2-2");
  // A file in the way counts as taken too; a neighbouring base does not.
  std::ofstream(t.path / "ddp-n2-3") << "x";
  fs::create_directories(t.path / "ddp-n1");
  EXPECT_EQ(first_free_run_name(out, "ddp-n2"), "ddp-n2-4");
}

TEST(Paths, RelativePathsResolveAgainstTheWorkingDirectory) {
  const std::string cwd = fs::current_path().string();
  EXPECT_EQ(resolve_path("d/x.jsonl"), cwd + "/d/x.jsonl");
  EXPECT_EQ(resolve_path("./a/../b"), cwd + "/b");
  EXPECT_EQ(resolve_path("/abs/p"), "/abs/p");
  EXPECT_EQ(describe_path("data.path", "d.jsonl"),
            "data.path = d.jsonl (resolved against the working directory: " + cwd + "/d.jsonl)");
  EXPECT_EQ(describe_path("data.path", "/abs.jsonl"), "data.path = /abs.jsonl");
}

TEST(Paths, MissingInputFilesAreNamedWithTheirResolvedPath) {
  TempDir t;
  RunConfig c = parse_run_config("in.ini", "[data]\nformat = alpaca\npath = nope.jsonl\n", {});
  auto p = input_path_problems(c);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("data.path = nope.jsonl (resolved against the working directory: " +
                      fs::current_path().string() + "/nope.jsonl): does not exist"), std::string::npos) << p[0];

  // A directory where a file belongs, a snapshot without config.json, a tokenizer that is missing.
  const std::string dir = t.path.string();
  c = parse_run_config("in.ini",
                       "[data]\nformat = alpaca\npath = " + dir + "\ntokenizer = " + dir + "/tok.json\n"
                       "[model]\npath = " + dir + "\n", {});
  p = input_path_problems(c);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], "data.path = " + dir + ": is a directory, not a file");
  EXPECT_EQ(p[1], "data.tokenizer = " + dir + "/tok.json: does not exist");
  EXPECT_EQ(p[2], "model.path = " + dir + ": has no config.json (expected a Hugging Face snapshot directory)");

  // Everything present: no problem. Synthetic data ignores data.path.
  std::ofstream(t.path / "config.json") << "{}";
  std::ofstream(t.path / "d.jsonl") << "{}\n";
  c = parse_run_config("in.ini", "[data]\nformat = alpaca\npath = " + dir + "/d.jsonl\n[model]\npath = " + dir + "\n", {});
  EXPECT_TRUE(input_path_problems(c).empty());
  c = parse_run_config("in.ini", "[data]\nformat = synthetic\n", {});
  EXPECT_TRUE(input_path_problems(c).empty());
}
