#include <CLI/CLI.hpp>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/model_session.h"
#include "server/api_server.h"

namespace tf::cli {

int cmd_serve(int argc, char** argv) {
  CLI::App app{"Serve a model over an OpenAI-compatible HTTP API", "tensorfold serve"};
  ServeOptions o;
  int port = 8080;
  app.add_option("--model", o.model_path, "model folder or .gguf file (default: the built-in model)");
  app.add_option("--served-model-name", o.model_name, "model id clients use (default: the folder or file name)");
  app.add_option("--host", o.host, "address to listen on")->capture_default_str();
  app.add_option("--port", port, "port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--parallel", o.parallel, "lanes: requests decoded at once")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--context", o.context, "tokens per lane (default: the model's full window)")->check(CLI::Range(0, 1 << 24));
  app.add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' on /v1/ routes");
  add_device_options(app, o.device, o.threads, o.matmul_input);
  app.add_option("--max-queue", o.max_queue, "requests waiting for a lane before 429")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  double queue_mib = static_cast<double>(o.max_queue_bytes) / (1 << 20);
  app.add_option("--max-queue-mib", queue_mib, "request bodies waiting to be tokenized, at most (MiB; at least one 16 MiB body); past it 429")
      ->check(finite_range(16.0, 1048576.0))
      ->capture_default_str();
  app.add_option("--chunk", o.chunk, "prefill chunk grid in tokens, a multiple of 16 (default: 128 on the CPU, 512 on a GPU)")
      ->check(CLI::Range(16, 1 << 16));
  app.add_option("--round-tokens", o.round_tokens,
                 "prefill tokens one round may take, in whole chunks of several prompts (default: 4096 on a GPU, "
                 "one chunk on the CPU)")
      ->check(CLI::Range(16, 1 << 15));
  app.add_option("--memory-fraction", o.memory_fraction, "share of GPU memory the server may use")->check(finite_range(0.05, 1.0))->capture_default_str();
  app.add_option("--prompt-cache-gib", o.prompt_cache_gib, "prompt cache size (default: what the memory planner leaves)")->check(finite_range(0.0, 1e6));
  app.add_flag("--prompt-cache-over-cap", o.prompt_cache_over_cap, "allow --prompt-cache-gib above the planner's cap");
  app.add_option("--host-cache-gib", o.host_cache_gib, "second prompt-cache tier in host memory")->check(finite_range(0.0, 1e6))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.model_path.empty()) {
    o.model_path = default_model_path();
    if (o.model_name.empty()) o.model_name = "default";
  }
  o.port = static_cast<uint16_t>(port);
  o.max_queue_bytes = static_cast<uint64_t>(queue_mib * (1 << 20));
  ApiServer server(o);
  server.listen();
  log_info("loading ", o.model_path, " (health answers 503 until ready)");
  server.load();
  server.run();
  return 0;
}

}  // namespace tf::cli
