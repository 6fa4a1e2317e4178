// lorabench forward: one forward pass of a Hugging Face snapshot (+ optional PEFT adapter) on given token
// ids, logits (and the causal-LM loss when labels are given) written to a safetensors file. A debugging
// tool for users and the hook for reference tests against transformers.
#include <ATen/ATen.h>
#include <boost/program_options.hpp>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "commands.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/core/strings.hpp"
#include "lorabench/io/safetensors.hpp"
#include "lorabench/lora/adapter.hpp"
#include "lorabench/model/dense.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace lorabench::app {

namespace {

// "1,2,3;4,5,6" -> a (2, 3) int64 tensor. Every row must have the same length.
at::Tensor parse_rows(const std::string& text, const char* flag) {
  std::vector<std::vector<int64_t>> rows;
  for (const auto& row : split(text, ';')) {
    std::vector<int64_t> r;
    for (const auto& item : split(row, ',')) {
      char* end = nullptr;
      long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0') throw ConfigError(std::string(flag) + ": \"" + item + "\" is not an integer");
      r.push_back(v);
    }
    if (r.empty()) throw ConfigError(std::string(flag) + ": empty row");
    if (!rows.empty() && r.size() != rows[0].size())
      throw ConfigError(std::string(flag) + ": every row needs the same length (row 1 has " +
                        std::to_string(rows[0].size()) + ", row " + std::to_string(rows.size() + 1) + " has " +
                        std::to_string(r.size()) + ")");
    rows.push_back(r);
  }
  if (rows.empty()) throw ConfigError(std::string(flag) + ": no ids");
  at::Tensor t = at::empty({int64_t(rows.size()), int64_t(rows[0].size())}, at::kLong);
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < rows[i].size(); ++j) t[int64_t(i)][int64_t(j)] = rows[i][j];
  return t;
}

struct ForwardArgs {
  std::string model_dir, adapter_dir, ids_text, labels_text, dtype = "fp32", out;
  bool help = false;
};

ForwardArgs parse_forward_args(MpiSession& mpi, int argc, char** argv) {
  ForwardArgs a;
  po::options_description desc("lorabench forward options");
  desc.add_options()("help,h", po::bool_switch(&a.help), "this text")(
      "model", po::value(&a.model_dir), "Hugging Face snapshot directory (config.json + *.safetensors)")(
      "adapter", po::value(&a.adapter_dir), "PEFT adapter directory (adapter_config.json + adapter_model.safetensors)")(
      "ids", po::value(&a.ids_text), "token ids: rows separated by ';', ids by ',' (\"1,2,3;4,5,6\")")(
      "labels", po::value(&a.labels_text), "labels in the same shape (-100 = no loss); adds \"loss\" to the output")(
      "dtype", po::value(&a.dtype), "fp32 | bf16")("out", po::value(&a.out), "output .safetensors file");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(std::string("forward: ") + e.what());
  }
  if (a.help) {
    if (mpi.rank() == 0) {
      std::printf("usage: lorabench forward --model DIR [--adapter DIR] --ids \"1,2,3;4,5,6\" [--labels ...] "
                  "[--dtype fp32|bf16] --out FILE.safetensors\n\nWrites logits [batch, seq, vocab] (fp32) and, with "
                  "--labels, the causal-LM loss (shift by one, -100 ignored, mean over counted tokens).\n\n");
      std::ostringstream ss;
      ss << desc;
      std::printf("%s", ss.str().c_str());
    }
    return a;
  }
  if (a.model_dir.empty()) throw ConfigError("forward: --model is required");
  if (a.ids_text.empty()) throw ConfigError("forward: --ids is required");
  if (a.out.empty()) throw ConfigError("forward: --out is required");
  if (a.dtype != "fp32" && a.dtype != "bf16") throw ConfigError("forward: --dtype must be fp32 or bf16, got " + a.dtype);
  if (mpi.size() != 1) throw ConfigError("forward: runs on one rank");
  return a;
}

// The causal-LM loss of fp32 logits (B, T, V) against labels (B, T): shift by one, -100 ignored, mean.
double causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels) {
  at::Tensor targets = model::shift_targets(labels).reshape({-1});
  at::Tensor logp = at::log_softmax(logits.reshape({-1, logits.size(-1)}), 1);
  at::Tensor valid = targets.ne(-100);
  const int64_t counted = valid.sum().item<int64_t>();
  if (counted == 0) throw ConfigError("forward: --labels leave no token with a loss");
  return (-logp.gather(1, targets.clamp_min(0).view({-1, 1})).view({-1}) * valid).sum().item<double>() / double(counted);
}

}  // namespace

int forward_main(MpiSession& mpi, int argc, char** argv) {
  const ForwardArgs a = parse_forward_args(mpi, argc, argv);
  if (a.help) return 0;
  at::Tensor ids = parse_rows(a.ids_text, "--ids");
  at::Tensor labels;
  if (!a.labels_text.empty()) {
    labels = parse_rows(a.labels_text, "--labels");
    if (labels.sizes() != ids.sizes()) throw ConfigError("forward: --labels must have the shape of --ids");
  }
  model::ModelShape shape = model::load_hf_config((fs::path(a.model_dir) / "config.json").string());
  if (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= shape.vocab_size)
    throw ConfigError("forward: --ids must lie in [0, " + std::to_string(shape.vocab_size) + ")");
  model::LoraSpec lora;
  lora.enabled = false;
  if (!a.adapter_dir.empty()) lora = lora::lora_spec_of(lora::read_adapter_config(a.adapter_dir));
  model::DenseModel m(model::build_layout(shape, lora), a.dtype == "bf16" ? at::kBFloat16 : at::kFloat);
  m.load_snapshot(model::Snapshot(a.model_dir));
  if (!a.adapter_dir.empty()) lora::load_adapter(a.adapter_dir, m.layout(), m.trainable_flats());

  at::Tensor logits = model::forward_logits(m.layout(), m, ids).contiguous();
  std::vector<io::TensorToWrite> tensors = {{"logits", "F32", logits.sizes().vec(), logits.data_ptr()}};
  const double loss = labels.defined() ? causal_lm_loss(logits, labels) : 0;
  at::Tensor lt = at::full({}, loss, at::kFloat);  // kept alive until written
  if (labels.defined()) tensors.push_back({"loss", "F32", {}, lt.data_ptr()});
  io::write_safetensors(a.out, tensors, {{"format", "pt"}, {"producer", "lorabench forward"}});
  std::printf("wrote %s: logits %s%s\n", a.out.c_str(), io::shape_string(logits.sizes().vec()).c_str(),
              labels.defined() ? strformat(", loss %.8f", loss).c_str() : "");
  return 0;
}

}  // namespace lorabench::app
