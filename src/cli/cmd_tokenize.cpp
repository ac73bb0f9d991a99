// `tensorfold tokenize`: the token ids (and pieces) a model's tokenizer gives a text.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_session.h"
#include "formats/model_files.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {

namespace {

std::string ids_line(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t k = 0; k < ids.size(); ++k) s += (k ? "," : "") + std::to_string(ids[k]);
  return s;
}

// The next line of in, without its newline; false at the end of in. A line past kMaxEncodeBytes
// is read to its end but kept only that far, and too_long says so.
bool next_line(std::istream& in, std::string& line, bool& too_long) {
  line.clear();
  too_long = false;
  bool any = false;
  char buf[1 << 16];
  for (;;) {
    in.get(buf, sizeof buf, '\n');  // up to the newline, which stays in the stream
    const auto got = static_cast<size_t>(in.gcount());
    if (got > 0) {
      any = true;
      const size_t keep = std::min(got, kMaxEncodeBytes - std::min(kMaxEncodeBytes, line.size()));
      line.append(buf, keep);
      too_long = too_long || keep < got;
    }
    if (in.eof()) return any;
    in.clear();  // get() fails when the newline comes first
    const int c = in.peek();
    if (c == std::char_traits<char>::eof()) return any;
    if (c == '\n') {
      in.ignore();
      return true;
    }
  }
}

// Per stdin line: a JSON string gives its ids; a JSON array of ids gives their decoded
// text (special tokens kept); an error gives {"error": ...}. One JSON value per line out.
int run_jsonl(const Tokenizer& tok, bool add_special, bool parse_special) {
  std::ios::sync_with_stdio(false);  // cin and cout unbuffered through stdio read a byte a call
  std::string line;
  bool too_long = false;
  while (next_line(std::cin, line, too_long)) {
    nlohmann::json out;
    try {
      TF_CHECK(!too_long, "tokenize --jsonl: a line longer than ", kMaxEncodeBytes >> 20, " MiB");
      const auto j = nlohmann::json::parse(line);
      if (j.is_array()) {
        std::vector<int32_t> ids;
        for (const auto& x : j) {
          TF_CHECK(x.is_number_integer(), "tokenize --jsonl: ids must be integers");
          ids.push_back(x.get<int32_t>());
        }
        out = tok.decode(ids, false);
      } else {
        TF_CHECK(j.is_string(), "tokenize --jsonl: each line must be a JSON string or id array");
        out = tok.encode(j.get<std::string>(), add_special, parse_special);
      }
    } catch (const std::exception& e) {
      out = {{"error", e.what()}};
    }
    std::cout << out.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) << '\n';
  }
  return 0;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Print the token ids of a text", "tensorfold tokenize"};
  std::string model, text, file;
  bool no_special = false, no_parse_special = false, pieces = false, jsonl = false, decode = false;
  app.add_option("--model,-m", model, "model folder or .gguf file")->required();
  auto* text_opt = app.add_option("--text,-t", text, "text to tokenize ('-' reads stdin)");
  auto* file_opt = app.add_option("--file,-f", file, "read the text from this file");
  text_opt->excludes(file_opt);
  app.add_flag("--no-special", no_special, "do not add BOS/EOS or other post-processor tokens");
  app.add_flag("--no-parse-special", no_parse_special, "treat special tokens written in the text as text");
  app.add_flag("--pieces", pieces, "print one `id<TAB>piece` line per token instead");
  app.add_flag("--decode", decode, "also print the decoded text of the ids on a second line");
  app.add_flag("--jsonl", jsonl, "read one JSON string per stdin line, print one JSON id array per line")
      ->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!jsonl && !*text_opt && !*file_opt) fail("tokenize: give --text TEXT, --text - or --file PATH");

  const ModelFiles files = open_tokenizer_files(model);
  const auto tok = load_tokenizer(files);
  const bool add_special = !no_special, parse_special = !no_parse_special;
  if (jsonl) return run_jsonl(*tok, add_special, parse_special);

  if (*file_opt) text = read_text_input(file);
  else if (text == "-") text = read_text_input("-");
  const auto ids = tok->encode(text, add_special, parse_special);
  if (pieces) {
    for (int32_t id : ids) std::printf("%d\t%s\n", id, tok->token_piece(id).c_str());
  } else {
    std::printf("%s\n", ids_line(ids).c_str());
  }
  if (decode) std::printf("%s\n", tok->decode(ids, false).c_str());
  return 0;
}

}  // namespace tf::cli
