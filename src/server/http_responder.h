#pragma once
// One request's reply: a whole body or a chunked stream, usable from any thread.
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "server/http_request.h"

namespace tf {

namespace detail {
class HttpConnection;
}

// Writes are queued in order on the connection's strand; no call blocks the caller.
// The responder holds its connection weakly, so it may outlive the client (calls turn
// into no-ops) but must not be used after the HttpServer is destroyed.
class HttpResponder {
 public:
  HttpResponder(std::weak_ptr<detail::HttpConnection> conn, bool http10);
  HttpResponder(const HttpResponder&) = delete;
  HttpResponder& operator=(const HttpResponder&) = delete;

  // A complete response with Content-Length; ignored once a response was started.
  void send(int status, const std::string& content_type, std::string body,
            const HttpHeaders& extra = {});

  // Status line and headers of a chunked stream; chunks follow through write().
  void start_stream(int status, const std::string& content_type = "text/event-stream",
                    const HttpHeaders& extra = {});

  // Queues one chunk; false once the client is gone (or no stream was started).
  bool write(std::string data);

  // Terminates the stream; later writes return false.
  void end();

  // True once the client is gone, so nothing written reaches it any more.
  bool closed() const;

  // True once on_close has fired (client gone or server shutting down).
  bool cancelled() const;

  // Fires once, on an io thread, when the client leaves before the response ends, or
  // when the server shuts down (writes then still work until the grace ends, so a
  // stream can finish). Registered after that moment, it runs at once on the caller.
  // Keep it short: it runs on the connection's strand.
  void on_close(std::function<void()> cb);

  // Connection side: the client left (gone) or the server is shutting down.
  void notify_closed(bool gone);
  // Connection side: the handler threw; answers 500 or drops a started stream.
  void fail_from_handler(const std::string& what);

 private:
  enum class State { Fresh, Streaming, Done };

  std::string head(int status, const std::string& content_type, const HttpHeaders& extra,
                   const std::string& framing, bool keep_alive) const;
  bool deliver(std::string bytes, bool last);

  std::weak_ptr<detail::HttpConnection> conn_;
  const bool http10_;
  mutable std::mutex mu_;
  State state_ = State::Fresh;
  bool gone_ = false;
  bool fired_ = false;
  bool chunked_ = true;
  std::function<void()> on_close_;
};

}  // namespace tf
