// Checks the outputs of the comm/doctor end-to-end tests:
//   lorabench_e2e_check comm-run RUN.h5 ROWS RANKS   a completed, VALID comm run file with ROWS result rows
//   lorabench_e2e_check train-run RUN.h5 RANKS STEPS  a completed, VALID training run with every schema name
//   lorabench_e2e_check gpu-run RUN.h5 RANKS STEPS    train-run, on CUDA devices: provenance names the GPU,
//                                                    /ranks the device, memory rows the caching allocator's
//   lorabench_e2e_check doctor-json FILE             lorabench doctor --json output: one object, every check
//   lorabench_e2e_check eval-equal TOL REF.h5 RUN.h5...  every run's /metrics/eval has REF's steps, and each
//                                                    loss within relative TOL of REF's (perplexity = exp(loss))
//   lorabench_e2e_check validation-check RUN.h5 NAME passed|failed [TEXT]
//                                                    /validation has the check NAME in that state (its detail
//                                                    containing TEXT) and the verdict follows the checks;
//                                                    prints the check
// Prints what is wrong and exits 1, or prints "ok" and exits 0.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "checker.hpp"
#include "lorabench/io/run_file.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/io/schema.hpp"

namespace {

using lbcheck::expect;

void check_comm_run(const std::string& path, size_t rows, size_t ranks) {
  namespace s = lorabench::schema;
  lorabench::io::RunFileReader r(path);
  auto root = r.root();
  expect(r.kind() == s::kKindComm, "kind is " + r.kind());
  expect(root["status"] == s::kStatusCompleted, "status is " + root["status"]);
  expect(root["verdict"] == "VALID", "verdict is " + root["verdict"]);
  auto t = lorabench::h5::read_table(r.file(), s::kCommResults);
  for (const auto& c : s::comm_result_columns()) expect(t.count(c.name) == 1, std::string("column ") + c.name);
  expect(t["op"].size() == rows, "rows: " + std::to_string(t["op"].size()) + " expected " + std::to_string(rows));
  for (size_t i = 0; i < t["op"].size(); ++i) {
    expect(t["check_passed"][i] == 1, "row " + std::to_string(i) + " check_passed");
    expect(t["wrong"][i] == 0, "row " + std::to_string(i) + " wrong");
    expect(t["time_avg_s"][i] > 0 && t["busbw_GBps"][i] > 0, "row " + std::to_string(i) + " time/busbw");
    expect(t["raw_mpi_time_s"][i] > 0 && t["memcpy_time_s"][i] > 0, "row " + std::to_string(i) + " raw/memcpy");
    expect(t["op"][i] >= 0 && t["op"][i] < 5, "row " + std::to_string(i) + " op code");
  }
  auto ops = lorabench::h5::read_strings(r.file(), s::kCommOpNames);
  expect(ops.size() == 5 && ops[0] == "all_reduce" && ops[4] == "all_to_all", "op names");
  auto dtypes = lorabench::h5::read_strings(r.file(), s::kCommDtypeNames);
  expect(dtypes.size() == 6 && dtypes[1] == "bf16" && dtypes[5] == "fp64", "dtype names");
  auto prov = r.provenance();
  for (const char* k : {"mpi_library", "host", "cpu_model", "hdf5_version", "argv"})
    expect(!prov[k].empty(), std::string("provenance ") + k);
  auto cfg = r.config();
  for (const char* k : {"comm.ops", "comm.min_bytes", "comm.max_bytes", "comm.dtype", "comm.iters", "comm.backend"})
    expect(cfg.count(k) == 1, std::string("config ") + k);
  expect(r.ranks()["rank"].size() == ranks, "ranks rows");
  auto v = r.validation();
  expect(!v.empty(), "validation checks");
  for (const auto& c : v) expect(c.passed, "validation " + c.name + ": " + c.detail);
}

void check_eval_equal(double tol, const std::string& ref_path, const std::vector<std::string>& runs) {
  auto ref = lorabench::io::RunFileReader(ref_path).eval();
  expect(!ref["loss"].empty(), ref_path + ": no /metrics/eval rows");
  for (const auto& path : runs) {
    auto e = lorabench::io::RunFileReader(path).eval();
    expect(e["step"] == ref["step"], path + ": evaluated after other steps than " + ref_path);
    for (size_t i = 0; i < e["loss"].size(); ++i) {
      const double a = e["loss"][i], b = ref["loss"][i];
      char line[256];
      std::snprintf(line, sizeof line, "%s: eval after step %g: loss %.9g vs %.9g (rel %.2e > %g)", path.c_str(),
                    e["step"][i], a, b, std::fabs(a - b) / std::fabs(b), tol);
      expect(std::isfinite(a) && std::fabs(a - b) <= tol * std::fabs(b), line);
      expect(std::fabs(e["perplexity"][i] - std::exp(a)) <= 1e-9 * std::exp(a), path + ": perplexity is not exp(loss)");
      expect(e["tokens"][i] == ref["tokens"][i] && e["samples"][i] == ref["samples"][i], path + ": other tokens/samples");
    }
    std::printf("%s: %zu evaluations equal to %s within %g\n", path.c_str(), e["loss"].size(), ref_path.c_str(), tol);
  }
}

void check_doctor_json(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  nlohmann::json j = nlohmann::json::parse(text);  // one object, nothing else on stdout
  expect(j.is_object(), "a JSON object");
  expect(j.value("ok", false), "ok is true");
  std::set<std::string> names;
  for (const auto& c : j.at("checks")) {
    names.insert(c.at("name").get<std::string>());
    std::string st = c.at("status").get<std::string>();
    expect(st == "ok" || st == "info" || st == "warn", c.at("name").get<std::string>() + " status " + st);
  }
  for (const char* n : {"mpi", "rendezvous", "ranks", "output_dir", "hdf5", "gpu_collective", "papi", "cuda", "libtorch",
                        "blas"})
    expect(names.count(n) == 1, std::string("check ") + n);
  for (const auto& c : j.at("checks")) {
    if (c.at("name") == "hdf5") expect(c.at("status") == "ok", "hdf5 collective test passed");
    // An identified, optimised BLAS behind libtorch's fp32 GEMM (MKL inside the official libtorch).
    if (c.at("name") == "blas") {
      expect(c.at("status") == "ok", "blas: " + c.value("message", std::string()));
      // How bf16 GEMMs run on this CPU: oneDNN, or fp32 on widened values where there is no AVX-512.
      const std::string bf16 = c.at("details").value("bf16_gemm_cpu", std::string());
      expect(bf16 == "ATen (oneDNN)" || bf16.rfind("fp32 ", 0) == 0, "blas: bf16_gemm_cpu '" + bf16 + "'");
    }
    if (c.at("name") == "cuda") {
      // One NCCL in the process, and where the communicator is built, the very file CMake linked it to.
      auto libs = c.at("details").at("nccl_libraries").get<std::vector<std::string>>();
      expect(libs.size() <= 1, std::to_string(libs.size()) + " NCCL libraries loaded");
      const std::string want = LORABENCH_EXPECT_NCCL;
      if (!want.empty())
        expect(libs.size() == 1 && libs[0] == want, "NCCL loaded from " + (libs.empty() ? "nowhere" : libs[0]) +
                                                        ", built against " + want);
    }
  }
}

// A completed training run file: every documented attribute, dataset, column and summary attribute,
// one row per (step, rank), a VALID verdict, and the provenance a user needs.
void check_train_run(const std::string& path, size_t ranks, size_t steps) {
  namespace s = lorabench::schema;
  lorabench::io::RunFileReader r(path);
  auto root = r.root();
  for (const char* a : {s::kAttrSchemaVersion, s::kAttrProgram, s::kAttrProgramVersion, s::kAttrGitCommit,
                        s::kAttrKind, s::kAttrRunName, s::kAttrStatus, s::kAttrStatusMessage, s::kAttrVerdict,
                        s::kAttrCreated, s::kAttrFinished})
    expect(root.count(a) == 1, std::string("root attribute ") + a);
  expect(r.kind() == s::kKindTrain, "kind is " + r.kind());
  expect(root["status"] == s::kStatusCompleted, "status is " + root["status"] + " " + root["status_message"]);
  expect(root["verdict"] == "VALID", "verdict is " + root["verdict"]);
  auto cfg = r.config();
  for (const char* k : {"run.steps", "model.preset", "parallel.strategy", "train.micro_batch", "lora.r", "input_file"})
    expect(cfg.count(k) == 1, std::string("config ") + k);
  expect(!r.ini_text().empty(), "config/ini_text");
  auto prov = r.provenance();
  for (const char* k : {"argv", "hosts", "mpi_library", "hdf5_version", "libtorch_version", "cpu_model",
                        "world_size", "node_count", "threads_per_rank", "slurm_job_id"})
    expect(prov.count(k) == 1, std::string("provenance ") + k);
  auto rk = r.ranks();
  for (const auto& c : s::rank_columns()) expect(rk.count(c.name) == 1, std::string("/ranks column ") + c.name);
  expect(rk["rank"].size() == ranks, "/ranks rows");
  expect(r.rank_hosts().size() == ranks, "/ranks_hosts");
  auto st = r.steps();
  for (const auto& c : s::step_columns()) expect(st.count(c.name) == 1, std::string("step column ") + c.name);
  expect(st["step"].size() == ranks * steps,
         "step rows: " + std::to_string(st["step"].size()) + ", expected " + std::to_string(ranks * steps));
  for (size_t i = 0; i < st["step"].size(); ++i) {
    expect(st["step"][i] == double(i / ranks) && st["rank"][i] == double(i % ranks), "row order (step, rank)");
    expect(st["step_s"][i] > 0 && st["tokens"][i] > 0 && st["tokens_per_s"][i] > 0, "row timing");
    expect(st["mem_peak_bytes"][i] > 0 && st["rss_peak_bytes"][i] > 0, "row memory");
    // The wait/transfer split: compute + wait for peers + transfer is the step, none negative; every rank
    // of a step recorded the same number of collectives (at least the two control-plane all-reduces).
    const std::string row = "row " + std::to_string(i);
    const double wait = st["wait_peers_s"][i], transfer = st["transfer_s"][i], compute = st["compute_s"][i];
    expect(wait >= 0 && transfer >= -1e-9 && compute > 0, row + ": compute/wait/transfer " +
                                                              std::to_string(compute) + "/" + std::to_string(wait) +
                                                              "/" + std::to_string(transfer));
    expect(std::abs(compute + wait + transfer - st["step_s"][i]) <= 1e-9 * st["step_s"][i] + 1e-12,
           row + ": compute + wait + transfer != step_s");
    expect(std::abs(wait + transfer - st["comm_exposed_s"][i]) <= 1e-12 + 1e-9 * st["comm_exposed_s"][i],
           row + ": wait + transfer != comm_exposed_s");
    const size_t first = i - i % ranks;  // the step's rank 0 row
    expect(st["collectives"][i] >= 2 && st["collectives"][i] == st["collectives"][first], row + ": collectives");
    expect(st["straggler_ratio"][i] >= 1 && st["straggler_ratio"][i] == st["straggler_ratio"][first],
           row + ": straggler_ratio");
    expect(st["slowest_rank"][i] >= 0 && st["slowest_rank"][i] < double(ranks) &&
               st["slowest_rank"][i] == st["slowest_rank"][first],
           row + ": slowest_rank");
  }
  auto sum = r.summary();
  for (const auto& [name, meaning] : s::summary_attributes())
    expect(sum.count(name) == 1, std::string("summary attribute ") + name);
  expect(sum["world_size"] == std::to_string(ranks), "summary world_size " + sum["world_size"]);
  auto v = r.validation();
  expect(v.size() >= 3, "validation checks");
  for (const auto& c : v) expect(c.passed, "validation " + c.name + ": " + c.detail);
}

// A Chrome trace file: valid JSON, complete events with the fields Perfetto needs, every named event.
void check_trace(const std::string& path, const std::vector<std::string>& names) {
  std::ifstream in(path);
  expect(static_cast<bool>(in), "cannot open " + path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::set<std::string> seen;
  for (const auto& e : j.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    expect(e.contains("ts") && e.contains("dur") && e.contains("pid") && e.contains("tid"), "event fields");
    expect(e.at("dur").get<double>() >= 0, "non-negative duration");
    seen.insert(e.at("name").get<std::string>());
  }
  for (const auto& n : names) expect(seen.count(n) == 1, "trace event \"" + n + "\" in " + path);
}

// `lorabench forward` output against a reference safetensors file (the fixtures' logits and loss).
void check_forward(const std::string& got_path, const std::string& ref_path, double tol) {
  lorabench::io::SafeTensorsFile got(got_path), ref(ref_path);
  for (const char* name : {"logits", "loss"}) {
    const auto* g = got.find(name);
    const auto* w = ref.find(name);
    expect(g != nullptr && w != nullptr, std::string("tensor ") + name + " in both files");
    if (!g || !w) continue;
    expect(g->dtype == "F32" && w->dtype == "F32" && g->numel() == w->numel(), std::string(name) + " shape/dtype");
    if (g->numel() != w->numel()) continue;
    const float* a = static_cast<const float*>(got.data(*g));
    const float* b = static_cast<const float*>(ref.data(*w));
    double worst = 0;
    for (int64_t i = 0; i < g->numel(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
    expect(worst <= tol, std::string(name) + " max abs difference " + std::to_string(worst));
  }
}

}  // namespace

void check_gpu_run(const std::string& path, size_t ranks, size_t steps) {
  check_train_run(path, ranks, steps);
  lorabench::io::RunFileReader r(path);
  auto prov = r.provenance();
  for (const char* k : {"device", "gpu_name", "gpu_memory_bytes", "gpu_uuid", "cuda_driver", "cuda_runtime", "nccl"})
    expect(prov.count(k) == 1 && !prov[k].empty(), std::string("provenance ") + k);
  expect(prov["device"].rfind("cuda:", 0) == 0, "provenance device is " + prov["device"]);
  auto rk = r.ranks();
  for (size_t i = 0; i < rk["cuda_device"].size(); ++i)
    expect(rk["cuda_device"][i] >= 0, "/ranks cuda_device of row " + std::to_string(i));
  auto st = r.steps();
  for (size_t i = 0; i < st["step"].size(); ++i) {
    expect(st["mem_reserved_peak_bytes"][i] >= st["mem_peak_bytes"][i], "row " + std::to_string(i) + ": reserved < allocated");
    expect(st["mem_peak_bytes"][i] >= st["mem_current_bytes"][i], "row " + std::to_string(i) + ": peak < current");
  }
}

void check_validation(const std::string& path, const std::string& name, const std::string& state,
                      const std::string& text) {
  expect(state == "passed" || state == "failed", "state must be passed or failed, got " + state);
  lorabench::io::RunFileReader r(path);
  bool found = false, all = true;
  for (const auto& c : r.validation()) {
    all = all && c.passed;
    if (c.name != name) continue;
    found = true;
    std::printf("%s: %s %s: %s\n", path.c_str(), c.name.c_str(), c.passed ? "passed" : "FAILED", c.detail.c_str());
    expect(c.passed == (state == "passed"), "check " + name + " is " + (c.passed ? "passed" : "failed"));
    expect(c.detail.find(text) != std::string::npos, "check " + name + ": \"" + text + "\" not in " + c.detail);
  }
  expect(found, "no validation check named " + name);
  const std::string verdict = r.root()["verdict"];
  std::printf("%s: verdict %s\n", path.c_str(), verdict.c_str());
  expect(verdict == (all ? "VALID" : "INVALID"), "verdict " + verdict + " does not follow the checks");
}

// Every attribute a real run file has at its root, in /provenance and in /metrics/summary is on
// docs/hdf5-schema.md: a summary attribute as `name` in the section of /metrics/summary, a root or provenance
// attribute as `name` or as a word of the layout's list (env.<NAME> stands for the env.* attributes).
// Catches what the writer adds and the page (or schema::summary_attributes) forgets.
void check_schema_doc(const std::string& path, const std::string& doc_path) {
  std::ifstream in(doc_path);
  expect(static_cast<bool>(in), "cannot open " + doc_path);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t from = doc.find("## `/metrics/summary` attributes");
  expect(from != std::string::npos, doc_path + ": no section \"## `/metrics/summary` attributes\"");
  const size_t to = doc.find("\n## ", from + 1);
  const std::string summary_section = doc.substr(from, to == std::string::npos ? std::string::npos : to - from);
  auto is_word_in = [](const std::string& text, const std::string& w) {
    for (size_t at = text.find(w); at != std::string::npos; at = text.find(w, at + 1)) {
      auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
      const bool left = at == 0 || !word_char(text[at - 1]);
      const bool right = at + w.size() >= text.size() || !word_char(text[at + w.size()]);
      if (left && right) return true;
    }
    return false;
  };
  lorabench::io::RunFileReader r(path);
  std::vector<std::string> missing;
  for (const auto& [name, value] : r.summary())
    if (summary_section.find("`" + name + "`") == std::string::npos) missing.push_back("/metrics/summary " + name);
  for (const auto& [name, value] : r.provenance()) {
    if (name.rfind("env.", 0) == 0) continue;  // env.<NAME>
    if (!is_word_in(doc, name)) missing.push_back("/provenance " + name);
  }
  for (const auto& [name, value] : r.root())
    if (!is_word_in(doc, name)) missing.push_back("root " + name);
  for (const auto& m : missing) std::fprintf(stderr, "%s: %s is not on %s\n", path.c_str(), m.c_str(), doc_path.c_str());
  expect(missing.empty(), std::to_string(missing.size()) + " attribute(s) of " + path + " are not documented");
  std::printf("%s: %zu summary, %zu provenance and %zu root attributes, all on %s\n", path.c_str(), r.summary().size(),
              r.provenance().size(), r.root().size(), doc_path.c_str());
}

int main(int argc, char** argv) {
  const char* usage = "lorabench_e2e_check comm-run RUN.h5 ROWS RANKS | train-run RUN.h5 RANKS STEPS | gpu-run RUN.h5 RANKS STEPS | "
                      "trace FILE NAMES... | forward OUT REF TOL | doctor-json FILE | eval-equal TOL REF RUN... | "
                      "validation-check RUN.h5 NAME passed|failed [TEXT] | schema-doc RUN.h5 DOC.md";
  return lbcheck::checker_main(usage, [&] {
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "comm-run" && argc == 5) {
      check_comm_run(argv[2], std::stoul(argv[3]), std::stoul(argv[4]));
    } else if (mode == "train-run" && argc == 5) {
      check_train_run(argv[2], std::stoul(argv[3]), std::stoul(argv[4]));
    } else if (mode == "gpu-run" && argc == 5) {
      check_gpu_run(argv[2], std::stoul(argv[3]), std::stoul(argv[4]));
    } else if (mode == "forward" && argc == 5) {
      check_forward(argv[2], argv[3], std::stod(argv[4]));
    } else if (mode == "trace" && argc >= 3) {
      check_trace(argv[2], std::vector<std::string>(argv + 3, argv + argc));
    } else if (mode == "eval-equal" && argc >= 5) {
      check_eval_equal(std::stod(argv[2]), argv[3], std::vector<std::string>(argv + 4, argv + argc));
    } else if (mode == "doctor-json" && argc == 3) {
      check_doctor_json(argv[2]);
    } else if (mode == "validation-check" && (argc == 5 || argc == 6)) {
      check_validation(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : "");
    } else if (mode == "schema-doc" && argc == 4) {
      check_schema_doc(argv[2], argv[3]);
    } else {
      return false;
    }
    return true;
  });
}
