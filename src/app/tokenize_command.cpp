// lorabench tokenize: the tokenizer and chat template on stdin, one line in, one JSON line out.
//
//   lorabench tokenize [--tokenizer FILE] [--chat | --decode] < lines
//
//   (default)  each line is a text (a line that parses as a JSON string is that string, so "\n" and
//              other escapes can be given); prints its ids as a JSON array
//   --chat     each line is a chat, {"messages": [...]} or an array of {role, content}; prints the ids
//              of the Qwen2.5 chat-template rendering (default system message added when none)
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

std::string process_line(const data::Tokenizer& tok, const std::string& line, bool chat, bool decode) {
  if (decode) {
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
  if (chat) {
    ids = data::encode_chat(tok, data::parse_chat_json(line)).ids;
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
      ("chat", "each line is a chat JSON ({\"messages\": [...]} or an array of messages); prints the ids of "
               "the Qwen2.5 chat template")
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
                   "  --chat: chat JSON -> [ids]   --decode: [ids] -> \"text\"\n\n"
                << opts;
    }
    return 0;
  }
  const bool chat = vm.count("chat") > 0, decode = vm.count("decode") > 0;
  if (chat && decode) throw ConfigError("tokenize: --chat and --decode exclude each other");
  if (mpi.size() != 1) throw ConfigError("tokenize runs on one rank (start it without mpirun/srun -n N)");

  std::string path = vm.count("tokenizer") ? vm["tokenizer"].as<std::string>()
                                           : data::resolve_tokenizer_path("", "");
  data::Tokenizer tok = data::Tokenizer::from_file(path);

  std::ios::sync_with_stdio(false);
  std::string line;
  int64_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string out;
    try {
      out = process_line(tok, line, chat, decode);
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
