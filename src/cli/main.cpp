#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "base/log.h"
#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*fn)(int, char**);
  const char* help;
};

const Command kCommands[] = {
    {"serve", tf::cli::cmd_serve, "serve a model over an OpenAI-compatible HTTP API"},
    {"run", tf::cli::cmd_run, "generate text from a prompt"},
    {"tokenize", tf::cli::cmd_tokenize, "print the token ids of a text"},
    {"perplexity", tf::cli::cmd_perplexity, "perplexity of a model over a text file"},
    {"bench", tf::cli::cmd_bench, "prompt and generation speed of a model"},
};

void usage() {
  std::fprintf(stderr, "usage: tensorfold <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-11s %s\n", c.name, c.help);
  std::fprintf(stderr, "\n`tensorfold <command> --help` lists a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.fn(argc - 1, argv + 1);
    } catch (const std::exception& e) {
      tf::log_error(e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "tensorfold: unknown command '%s'\n\n", argv[1]);
  usage();
  return 2;
}
