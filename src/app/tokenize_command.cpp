// lorabench tokenize: the tokenizer and chat template on stdin, one line in, one JSON line out.
//
//   lorabench tokenize [--tokenizer FILE] [--chat [--chat-template T] [--no-thinking] [--render] | --decode]
//
//   (default)  each line is a text (a line that parses as a JSON string is that string, so "\n" and
//              other escapes can be given); prints its ids as a JSON array
//   --chat     each line is a chat, {"messages": [...], "tools": [...]} or an array of messages; prints
//              the ids of its chat-template rendering (--chat-template qwen2.5, the default, or qwen3;
//              --no-thinking: qwen3's non-thinking mode); --render prints the rendered text and the
//              trained parts instead, {"text": ..., "trained": [...]}
//   --decode   each line is a JSON array of ids; prints the decoded text as a JSON string
// A bad line stops with "stdin:LINE: ..." (exit 2). Runs on one rank.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "lorabench/config/options.hpp"
#include "lorabench/core/error.hpp"
#include "lorabench/data/chat_template.hpp"
#include "lorabench/data/sft_source.hpp"
#include "lorabench/data/tokenizer.hpp"

namespace lorabench::app {

namespace po = boost::program_options;
using nlohmann::json;

namespace {

struct Mode {
  bool chat = false, decode = false, render = false;
  data::ChatOptions options;
};

std::string process_line(const data::Tokenizer& tok, const std::string& line, const Mode& mode) {
  if (mode.decode) {
    json j = json::parse(line);  // parse_error is reported by the caller
    if (!j.is_array()) throw IoError("expected a JSON array of token ids");
    std::vector<data::TokenId> ids;
    for (const auto& v : j) {
      if (!v.is_number_integer()) throw IoError("expected a JSON array of token ids, found " + v.dump());
      int64_t id = v.get<int64_t>();
      if (id < 0 || id >= tok.vocab_size()) throw IoError("token id " + std::to_string(id) + " is out of range");
      ids.push_back(data::TokenId(id));
    }
    return json(tok.decode(ids)).dump();
  }
  std::vector<data::TokenId> ids;
  if (mode.chat) {
    std::vector<std::string> tools;
    const auto messages = data::parse_chat_json(line, mode.options.tmpl, &tools);
    const data::EncodedExample ex = data::encode_chat(tok, messages, mode.options, tools);
    if (mode.render) {
      return json{{"text", tok.decode(ex.ids)}, {"trained", data::trained_parts(tok, ex)}}.dump();
    }
    ids = ex.ids;
  } else {
    std::string text = line;
    if (!line.empty() && line.front() == '"') {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_string()) text = j.get<std::string>();
    }
    if (!data::is_valid_utf8(text)) throw IoError("invalid UTF-8");
    ids = tok.encode(text);
  }
  return json(ids).dump();
}

}  // namespace

int tokenize_main(MpiSession& mpi, int argc, char** argv) {
  po::options_description opts("lorabench tokenize [options] < lines");
  opts.add_options()
      ("help,h", "this text")
      ("tokenizer", po::value<std::string>(),
       "tokenizer.json (default: as a run resolves it: $LORABENCH_DATA_DIR/qwen2.5/tokenizer.json, else the "
       "one scripts/install-deps.sh fetches)")
      ("chat", "each line is a chat JSON ({\"messages\": [...], \"tools\": [...]} or an array of messages); "
               "prints the ids of its chat-template rendering")
      ("chat-template", po::value<std::string>()->default_value("qwen2.5"),
       "with --chat: qwen2.5 or qwen3 (the default tokenizer is then that family's)")
      ("no-thinking", "with --chat-template qwen3: the non-thinking mode (reasoning dropped, the empty think "
                      "block is prompt)")
      ("render", "with --chat: print {\"text\": the rendering, \"trained\": the parts that carry loss} "
                 "instead of the ids")
      ("decode", "each line is a JSON array of ids; prints the text as a JSON string");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(std::string("tokenize: ") + e.what() + " (lorabench tokenize --help)");
  }
  if (vm.count("help")) {
    if (mpi.rank() == 0) {
      std::cout << "Reads one item per line on stdin and prints one JSON line per item:\n"
                   "  text (a JSON string line is decoded first) -> [ids]\n"
                   "  --chat: chat JSON -> [ids]   --decode: [ids] -> \"text\"\n"
                   "  --chat --render: chat JSON -> {\"text\": rendering, \"trained\": [parts with loss]}\n\n"
                << opts;
    }
    return 0;
  }
  Mode mode;
  mode.chat = vm.count("chat") > 0;
  mode.decode = vm.count("decode") > 0;
  mode.render = vm.count("render") > 0;
  if (mode.chat && mode.decode) throw ConfigError("tokenize: --chat and --decode exclude each other");
  const std::string tmpl = vm["chat-template"].as<std::string>();
  if (tmpl != "qwen2.5" && tmpl != "qwen3")
    throw ConfigError("tokenize: --chat-template takes qwen2.5 or qwen3, got '" + tmpl + "'");
  mode.options.tmpl = data::parse_chat_template(tmpl);
  mode.options.enable_thinking = vm.count("no-thinking") == 0;
  for (const char* needs_chat : {"render", "no-thinking"}) {
    if (vm.count(needs_chat) && !mode.chat) throw ConfigError(std::string("tokenize: --") + needs_chat + " needs --chat");
  }
  if (!vm["chat-template"].defaulted() && !mode.chat) throw ConfigError("tokenize: --chat-template needs --chat");
  if (!mode.options.enable_thinking && mode.options.tmpl != data::ChatTemplate::kQwen3)
    throw ConfigError("tokenize: --no-thinking needs --chat-template qwen3");
  if (mpi.size() != 1) throw ConfigError("tokenize runs on one rank (start it without mpirun/srun -n N)");

  std::string path = vm.count("tokenizer") ? vm["tokenizer"].as<std::string>()
                                           : data::resolve_tokenizer_path("", "", tmpl);
  data::Tokenizer tok = data::Tokenizer::from_file(path);

  std::ios::sync_with_stdio(false);
  std::string line;
  int64_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string out;
    try {
      out = process_line(tok, line, mode);
    } catch (const json::exception& e) {
      throw ConfigError("stdin:" + std::to_string(n) + ": malformed JSON: " + e.what());
    } catch (const Error& e) {  // IoError, or an unknown id from decode()
      throw ConfigError("stdin:" + std::to_string(n) + ": " + e.what());
    }
    std::cout << out << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace lorabench::app
