#pragma once
// HTTP/1.1 server (Boost.Beast underneath) that hands plain requests to one handler.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/http_request.h"
#include "server/http_responder.h"

namespace tf {

struct HttpServerOptions {
  size_t max_body_bytes = 16u << 20;         // larger bodies get 413
  size_t max_header_bytes = 16u << 10;       // request line plus headers; larger get 431
  size_t max_headers = 100;                  // more header fields get 431
  std::chrono::milliseconds header_read_timeout{10'000};  // from first byte to end of headers
  std::chrono::milliseconds body_read_timeout{60'000};    // whole body, so trickling is cut off
  std::chrono::milliseconds keep_alive_idle_timeout{60'000};
  // A reply's bytes the client has not taken within this close the connection (its request is
  // cancelled), so a client that stops reading holds neither a connection nor queued bytes.
  std::chrono::milliseconds write_timeout{60'000};
  size_t max_connections = 1024;             // beyond: 503 and close
  // Bodies being received, all connections together (a declared length counts in full, a chunked
  // body as max_body_bytes); a request that would pass it gets 503 before its body is read.
  size_t max_body_bytes_in_flight = 256u << 20;
  std::chrono::milliseconds signal_grace{5'000};  // grace used by stop_on_signals without a callback
};

// Runs on an io thread and must return quickly; long work goes elsewhere with the responder.
// An exception escaping it becomes a 500 JSON reply.
using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpResponder>)>;

class HttpServer {
 public:
  using Handler = HttpHandler;

  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();  // shuts down with no grace when still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Takes effect for connections accepted afterwards.
  void set_handler(HttpHandler handler);

  // Binds and listens (call before run()/start()); port 0 picks a free port. Returns the bound port; throws tf::Error
  // naming host:port when the address cannot be resolved or bound.
  uint16_t listen(const std::string& host, uint16_t port);

  // Serves on io_threads threads, the caller being one of them, until shutdown.
  void run(int io_threads);
  // Serves on io_threads background threads and returns.
  void start(int io_threads);
  // shutdown with no grace.
  void stop();

  // Stops accepting, fires every in-flight responder's on_close, waits up to grace for
  // their responses to end, then closes everything. From a non-io thread it returns once
  // all is closed and io threads are joined; from an io thread (a signal handler) it only
  // begins the shutdown, and run() returns when done. Safe to call more than once.
  void shutdown(std::chrono::milliseconds grace);

  // On SIGINT/SIGTERM calls on_signal on an io thread, or without one begins
  // shutdown(options.signal_grace). Call before run()/start().
  void stop_on_signals(std::function<void()> on_signal = {});

  // Open connections right now.
  size_t connection_count() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tf
