#include <gtest/gtest.h>

#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"

using lorabench::ConfigError;
using lorabench::parse_run_config;
using lorabench::RunConfig;
using lorabench::validate_run_config;
using lorabench::ValidationContext;

namespace {

// Returns the ConfigError message of parsing `text` (fails the test when parsing succeeds).
std::string parse_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    parse_run_config("inputs/x.ini", text, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError for:\n" << text;
  return "";
}

std::string validate_error(const RunConfig& c, int world) {
  try {
    validate_run_config(c, ValidationContext{world, false, false});
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a validation ConfigError";
  return "";
}

}  // namespace

TEST(Config, DefaultsComeFromTheTable) {
  RunConfig c = lorabench::default_run_config();
  EXPECT_EQ(c.model.preset, "qwen2.5-0.5b");
  EXPECT_EQ(c.run.output_dir, "outputs");
  EXPECT_EQ(c.train.micro_batch, 1);
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.999);
  EXPECT_EQ(c.lora.targets.size(), 7u);
  for (const auto& o : lorabench::option_table()) {
    // The printed value reads back as the same value (what the run file and the table show is exact).
    RunConfig d = lorabench::default_run_config();
    o.set(d, o.get(c));
    EXPECT_EQ(o.get(d), o.get(c)) << o.key;
  }
}

TEST(Config, ParsesSectionsAndOverrides) {
  RunConfig c = parse_run_config("a.ini",
                                 "[run]\nsteps = 7\n# comment\n[train]\nlr = 3e-4\ngrad_accum=4\n"
                                 "[lora]\ntargets = q, v\n",
                                 {"train.lr=5e-5", "parallel.strategy=ddp"});
  EXPECT_EQ(c.run.steps, 7);
  EXPECT_DOUBLE_EQ(c.train.lr, 5e-5);  // --set wins over the file
  EXPECT_EQ(c.train.grad_accum, 4);
  EXPECT_EQ(c.parallel.strategy, "ddp");
  EXPECT_EQ(c.lora.targets, (std::vector<std::string>{"q", "v"}));
  EXPECT_EQ(c.origin.at("run.steps"), "a.ini:2");
  EXPECT_EQ(c.origin.at("train.lr"), "--set");
  EXPECT_EQ(c.origin.at("model.dtype"), "default");
}

TEST(Config, UnknownKeyNamesFileLineAndKey) {
  std::string e = parse_error("[run]\nsteps = 3\n[train]\nlearning_rate = 1\n");
  EXPECT_NE(e.find("inputs/x.ini:4"), std::string::npos) << e;
  EXPECT_NE(e.find("train.learning_rate"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key"), std::string::npos) << e;
}

TEST(Config, BadValuesNameTheirKeys) {
  std::string e = parse_error("[train]\nlr = fast\nmicro_batch = 0\n[model]\ndtype = fp8\n[run]\nquiet = maybe\n");
  EXPECT_NE(e.find("inputs/x.ini:2: train.lr: expected a finite number"), std::string::npos) << e;
  EXPECT_NE(e.find("inputs/x.ini:3: train.micro_batch: must be in [1, 1048576], got 0"), std::string::npos) << e;
  EXPECT_NE(e.find("inputs/x.ini:5: model.dtype: expected one of fp32|bf16"), std::string::npos) << e;
  EXPECT_NE(e.find("inputs/x.ini:7: run.quiet: expected true or false"), std::string::npos) << e;
}

TEST(Config, EveryTypedKeyRejectsGarbage) {
  // Each key that is not a free-form string or list must refuse a nonsense value and name itself.
  for (const auto& o : lorabench::option_table()) {
    if (o.type == "string" || o.type == "list") continue;
    std::string e = parse_error("", {o.key + "=@@"});
    EXPECT_NE(e.find("--set: " + o.key + ":"), std::string::npos) << o.key << " -> " << e;
  }
}

TEST(Config, DuplicateKeysAndSyntax) {
  std::string e = parse_error("[run]\nsteps = 3\nsteps = 4\n");
  EXPECT_NE(e.find("inputs/x.ini:3: run.steps: set more than once (first on line 2)"), std::string::npos) << e;
  e = parse_error("[run]\nthis line is not a key\n");
  EXPECT_NE(e.find("inputs/x.ini:2"), std::string::npos) << e;
}

// The same key in two --set: the last one wins, and the warning names both values in order.
TEST(Config, RepeatedSetTakesTheLastAndSaysSo) {
  const std::vector<std::string> sets = {"train.lr=1e-3", "run.steps=3", " train.lr =3e-4", "run.name=a"};
  EXPECT_DOUBLE_EQ(lorabench::parse_run_config("", "", sets).train.lr, 3e-4);
  const auto w = lorabench::repeated_overrides(sets);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "--set train.lr=1e-3, then --set  train.lr =3e-4: the last one is used");
  EXPECT_TRUE(lorabench::repeated_overrides({"train.lr=1e-3", "run.steps=3"}).empty());
}

TEST(Config, SetOverrideErrors) {
  std::string e = parse_error("", {"nonsense"});
  EXPECT_NE(e.find("expected section.key=value"), std::string::npos) << e;
  e = parse_error("", {"train.nope=1"});
  EXPECT_NE(e.find("--set: train.nope: unknown key"), std::string::npos) << e;
  e = parse_error("", {"lora.targets=q,qq"});
  EXPECT_NE(e.find("lora.targets: unknown target \"qq\""), std::string::npos) << e;
  e = parse_error("", {"train.betas=0.9"});
  EXPECT_NE(e.find("train.betas"), std::string::npos) << e;
}

TEST(Config, ValidationNamesKeyAndWhere) {
  RunConfig c = parse_run_config("a.ini", "[parallel]\nstrategy = single\n", {});
  std::string e = validate_error(c, 2);
  EXPECT_NE(e.find("a.ini:2: parallel.strategy: single runs on one rank"), std::string::npos) << e;
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{1, false, false}));

  c = parse_run_config("a.ini", "[parallel]\nstrategy = ddp\nbackend = nccl\n", {});
  e = validate_error(c, 2);
  EXPECT_NE(e.find("a.ini:3: parallel.backend: nccl was asked for but this build has no NCCL"), std::string::npos) << e;

  c = parse_run_config("a.ini", "[run]\nsteps = 2\nwarmup_steps = 2\n[data]\nformat = alpaca\n", {});
  e = validate_error(c, 1);
  EXPECT_NE(e.find("run.warmup_steps"), std::string::npos) << e;
  EXPECT_NE(e.find("data.path"), std::string::npos) << e;  // every problem in one message
}

TEST(Config, HsdpMeshKeys) {
  // dp_replicate belongs to hsdp, and must divide the ranks; 0 (one replica per node) is placed at start.
  RunConfig c = parse_run_config("a.ini", "[parallel]\nstrategy = fsdp\ndp_replicate = 2\n", {});
  std::string e = validate_error(c, 4);
  EXPECT_NE(e.find("a.ini:3: parallel.dp_replicate: sets the replicas of hsdp's mesh, but parallel.strategy is fsdp"),
            std::string::npos)
      << e;
  c = parse_run_config("a.ini", "[parallel]\nstrategy = hsdp\ndp_replicate = 3\n", {});
  e = validate_error(c, 4);
  EXPECT_NE(e.find("a.ini:3: parallel.dp_replicate: 3 replicas do not divide the 4 ranks"), std::string::npos) << e;
  c = parse_run_config("a.ini", "[parallel]\nstrategy = hsdp\ndp_replicate = 2\n", {});
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{4, false, false}));
  c = parse_run_config("a.ini", "[parallel]\nstrategy = hsdp\n[model]\nfused_head = false\n", {});
  e = validate_error(c, 2);
  EXPECT_NE(e.find("model.fused_head: the unfused reference head needs the whole head on one rank; hsdp shards it"),
            std::string::npos)
      << e;
}

TEST(Config, TensorParallelKeys) {
  // parallel.tp divides the ranks; its groups run single (one group) or ddp; LoRA only; the fused head.
  RunConfig c = parse_run_config("t.ini", "[parallel]\nstrategy = ddp\ntp = 4\n", {});
  std::string e = validate_error(c, 6);
  EXPECT_NE(e.find("t.ini:3: parallel.tp: 4 tensor-parallel ranks per group do not divide the 6 ranks"),
            std::string::npos)
      << e;
  c = parse_run_config("t.ini", "[parallel]\nstrategy = zero2\ntp = 2\n", {});
  e = validate_error(c, 4);
  EXPECT_NE(e.find("parallel.tp: tensor parallelism combines with parallel.strategy single (one group) or ddp"),
            std::string::npos)
      << e;
  c = parse_run_config("t.ini", "[parallel]\ntp = 2\n[lora]\nenabled = false\n", {});
  e = validate_error(c, 2);
  EXPECT_NE(e.find("parallel.tp: tensor parallelism trains LoRA adapters"), std::string::npos) << e;
  // single is one tensor-parallel group: tp ranks, not more.
  c = parse_run_config("t.ini", "[parallel]\ntp = 2\n", {});
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{2, false, false}));
  e = validate_error(c, 4);
  EXPECT_NE(e.find("parallel.strategy: single runs on one rank per tensor-parallel group but the job has 4 ranks"),
            std::string::npos)
      << e;
  c = parse_run_config("t.ini", "[parallel]\nstrategy = ddp\ntp = 2\n", {});
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{4, false, false}));
}

TEST(Config, CudaAttentionKernel) {
  // model.cuda_attention: auto by default; flash has no fp32 kernel, refused naming the key and its line.
  RunConfig c = lorabench::default_run_config();
  EXPECT_EQ(c.model.cuda_attention, "auto");
  EXPECT_NE(parse_error("[model]\ncuda_attention = flash2\n").find("x.ini:2: model.cuda_attention"),
            std::string::npos);
  c = parse_run_config("m.ini", "[model]\ndtype = fp32\ncuda_attention = flash\n", {});
  const std::string e = validate_error(c, 1);
  EXPECT_NE(e.find("m.ini:3: model.cuda_attention: flash (FlashAttention-2) has no fp32 kernel"), std::string::npos)
      << e;
  for (const char* ok : {"[model]\ndtype = bf16\ncuda_attention = flash\n",
                         "[model]\ndtype = fp32\ncuda_attention = efficient\n",
                         "[model]\ndtype = fp32\ncuda_attention = auto\n"}) {
    c = parse_run_config("m.ini", ok, {});
    EXPECT_NO_THROW(validate_run_config(c, ValidationContext{1, false, false})) << ok;
  }
  EXPECT_EQ(parse_run_config("m.ini", "", {"model.cuda_attention=efficient"}).model.cuda_attention, "efficient");
}

TEST(Config, CpuAttentionKernel) {
  // model.cpu_attention: auto by default; blocked is bf16 only, and refused on a CPU without AVX-512 BF16,
  // naming the key and its line.
  RunConfig c = lorabench::default_run_config();
  EXPECT_EQ(c.model.cpu_attention, "auto");
  EXPECT_NE(parse_error("[model]\ncpu_attention = fast\n").find("x.ini:2: model.cpu_attention"), std::string::npos);
  c = parse_run_config("m.ini", "[model]\ndtype = fp32\ncpu_attention = blocked\n", {});
  std::string e = validate_error(c, 1);
  EXPECT_NE(e.find("m.ini:3: model.cpu_attention: blocked is a bf16 kernel"), std::string::npos) << e;
  c = parse_run_config("m.ini", "[model]\ndtype = bf16\ncpu_attention = blocked\n", {});
  ValidationContext no_bf16{1, false, false};
  no_bf16.cpu_blocked_attention = false;
  try {
    validate_run_config(c, no_bf16);
    ADD_FAILURE() << "blocked accepted on a CPU without it";
  } catch (const lorabench::ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("m.ini:3: model.cpu_attention: blocked needs a CPU with AVX-512 BF16"),
              std::string::npos)
        << err.what();
  }
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{1, false, false}));
  for (const char* ok :
       {"[model]\ndtype = fp32\ncpu_attention = flash\n", "[model]\ndtype = fp32\ncpu_attention = auto\n"}) {
    c = parse_run_config("m.ini", ok, {});
    EXPECT_NO_THROW(validate_run_config(c, no_bf16)) << ok;
  }
  EXPECT_EQ(parse_run_config("m.ini", "", {"model.cpu_attention=flash"}).model.cpu_attention, "flash");
}

TEST(Config, BottleneckFaultKeys) {
  // Values out of range name the file, the line and the key.
  std::string e = parse_error("[fault]\nslow_factor = 0.5\ndata_delay_ms = -1\ncomm_delay_ms = soon\nslow_rank = -2\n");
  EXPECT_NE(e.find("inputs/x.ini:2: fault.slow_factor: must be in [1, inf), got 0.5"), std::string::npos) << e;
  EXPECT_NE(e.find("inputs/x.ini:3: fault.data_delay_ms: must be in [0, inf), got -1"), std::string::npos) << e;
  EXPECT_NE(e.find("inputs/x.ini:4: fault.comm_delay_ms: expected a finite number"), std::string::npos) << e;
  EXPECT_NE(e.find("inputs/x.ini:5: fault.slow_rank: must be >= -1, got -2"), std::string::npos) << e;
  // A rank that does not exist, a factor without a rank, a rank without a factor.
  RunConfig c = parse_run_config("f.ini", "[parallel]\nstrategy = ddp\n[fault]\nslow_rank = 2\nslow_factor = 3\n", {});
  e = validate_error(c, 2);
  EXPECT_NE(e.find("f.ini:4: fault.slow_rank: rank 2 does not exist in a job of 2 ranks"), std::string::npos) << e;
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{3, false, false}));
  c = parse_run_config("f.ini", "[fault]\nslow_factor = 3\n", {});
  e = validate_error(c, 1);
  EXPECT_NE(e.find("fault.slow_rank: fault.slow_factor is 3 but no rank is chosen"), std::string::npos) << e;
  c = parse_run_config("f.ini", "[fault]\nslow_rank = 0\n", {});
  e = validate_error(c, 1);
  EXPECT_NE(e.find("f.ini (default): fault.slow_factor: fault.slow_rank is set but slow_factor is 1"),
            std::string::npos)
      << e;
  c = parse_run_config("f.ini", "[parallel]\nstrategy = ddp\n[fault]\ndata_delay_ms = 50\ncomm_delay_ms = 20\n", {});
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{2, false, false}));
  EXPECT_DOUBLE_EQ(c.fault.data_delay_ms, 50);
  EXPECT_DOUBLE_EQ(c.fault.comm_delay_ms, 20);
}

TEST(Config, DriftFaultKey) {
  // fault.drift_rank: a rank that exists; not where no other copy of the state could disagree.
  RunConfig c = parse_run_config("f.ini", "[parallel]\nstrategy = fsdp\n[fault]\ndrift_rank = 2\n", {});
  std::string e = validate_error(c, 2);
  EXPECT_NE(e.find("f.ini:4: fault.drift_rank: rank 2 does not exist in a job of 2 ranks"), std::string::npos) << e;
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{3, false, false}));
  EXPECT_EQ(c.fault.drift_rank, 2);
  c = parse_run_config("f.ini", "[fault]\ndrift_rank = 0\n", {});
  e = validate_error(c, 1);
  EXPECT_NE(e.find("fault.drift_rank: one rank of single has no other copy of the state"), std::string::npos) << e;
  c = parse_run_config("f.ini", "[parallel]\nstrategy = zero2\n[fault]\ndrift_rank = 0\n", {});
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{1, false, false}));  // its shard vs the gather
  EXPECT_EQ(lorabench::default_run_config().fault.drift_rank, -1);
}

TEST(Config, HelpAndMarkdownListEveryKey) {
  std::string help = lorabench::options_help();
  std::string md = lorabench::options_markdown();
  for (const auto& o : lorabench::option_table()) {
    EXPECT_NE(help.find(o.key), std::string::npos) << o.key;
    EXPECT_NE(md.find("`" + o.key + "`"), std::string::npos) << o.key;
  }
}

TEST(Config, SignalFaultKeys) {
  std::string e = parse_error("[fault]\nsignal = hup\n");
  EXPECT_NE(e.find("inputs/x.ini:2: fault.signal"), std::string::npos) << e;
  RunConfig c = parse_run_config("f.ini", "[parallel]\nstrategy = ddp\n[fault]\nsignal_rank = 2\nsignal_at_step = 3\n", {});
  e = validate_error(c, 2);
  EXPECT_NE(e.find("f.ini:4: fault.signal_rank: rank 2 does not exist in a job of 2 ranks"), std::string::npos) << e;
  EXPECT_NO_THROW(validate_run_config(c, ValidationContext{3, false, false}));
  c = parse_run_config("f.ini", "[fault]\nsignal_rank = 0\n", {});
  e = validate_error(c, 1);
  EXPECT_NE(e.find("fault.signal_at_step: fault.signal_rank and fault.signal_at_step must be set together"),
            std::string::npos)
      << e;
  c = parse_run_config("f.ini", "[fault]\nsignal_at_step = 4\nsignal = term\nsignal_again = true\n", {});
  e = validate_error(c, 1);
  EXPECT_NE(e.find("must be set together"), std::string::npos) << e;
}
