#pragma once
// The OpenAI-compatible server: HTTP routes over one engine whose rounds run on their own
// thread. Health answers 503 until the model is loaded.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "engine/cache_fit.h"
#include "engine/engine.h"
#include "base/work_queue.h"
#include "formats/model_files.h"
#include "models/model.h"
#include "base/byte_budget.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tf {

struct ServeOptions {
  std::string model_path;
  std::string model_name;  // served id; default: the folder or file name
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  int parallel = 4;
  int context = 0;
  std::string api_key;
  int threads = 0;
  std::string device = "auto";
  std::string matmul_input = "f32";  // f32 | bf16 (MatmulInput)
  int http_threads = 2;
  int request_threads = 2;  // parse, template and tokenize POSTed requests off the io threads
  int max_queue = 256;
  // Bytes of POSTed bodies waiting for or held by the request threads, at most; past it 429.
  // At least one largest body (http.max_body_bytes); the CPU's memory plan counts it.
  uint64_t max_queue_bytes = 256ull << 20;
  int chunk = 0;  // prefill chunk grid; 0: 128 on the CPU, 512 on a GPU
  int round_tokens = 0;  // prefill tokens a round may take (EngineOptions); 0: default_round_tokens
  double memory_fraction = 0.9;     // of device memory, on a GPU
  double prompt_cache_gib = -1;     // -1: what the planner leaves
  bool prompt_cache_over_cap = false;
  double host_cache_gib = 0;        // second tier in host memory
  HttpServerOptions http;
};

class ApiServer {
 public:
  explicit ApiServer(ServeOptions opt);
  ~ApiServer();

  // Binds the port (health answers 503 from here on); returns the bound port.
  uint16_t listen();
  // Loads the model and starts the engine thread; health then answers 200.
  void load();
  // Serves until SIGINT/SIGTERM (or shutdown()), then finishes or cancels streams.
  void run();
  // Makes run() return after a graceful shutdown; callable from any thread.
  void shutdown();

 private:
  // POSTs go to the request threads (a long prompt's tokenizing would hold an io thread and
  // every stream on it); the rest is answered on the io thread.
  void handle(const HttpRequest& req, std::shared_ptr<HttpResponder> res);
  void handle_now(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  void route(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res);
  void completions(const HttpRequest& req, const std::shared_ptr<HttpResponder>& res, bool chat);
  std::string memory_json() const;
  MemoryPlan plan(EngineOptions& eo);
  void engine_loop();

  ServeOptions opt_;
  HttpServer http_;
  Metrics metrics_;
  std::atomic<bool> ready_{false};
  ByteBudget queued_bytes_;  // bodies posted to work_ and not yet handled (max_queue_bytes)
  ModelFiles files_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<Engine> engine_;
  MemoryPlan plan_;
  std::thread engine_thread_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ = false;
  std::unique_ptr<WorkQueue> work_;  // last: stopped before anything its tasks use goes away
  // On a GPU (or with TF_SERVER_DELIVERY=thread), hands the engine's token events to their requests
  // (text, stop strings, SSE writes) in order, so the engine thread goes on to its next round meanwhile.
  std::unique_ptr<WorkQueue> deliver_;
};

}  // namespace tf
