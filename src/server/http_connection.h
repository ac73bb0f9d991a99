#pragma once
// One client socket: reads requests with Beast, runs the handler, writes queued replies.
// Internal to the HTTP layer; routes see only HttpRequest and HttpResponder.
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http_server.h"

namespace tf::detail {

class HttpConnection;

// What a connection needs from its server, so it holds no pointer to the server itself.
class ConnectionRegistry {
 public:
  virtual ~ConnectionRegistry() = default;
  virtual void remove(HttpConnection* conn) = 0;
  // Takes n bytes of the budget for bodies being received; false (nothing taken) when short.
  virtual bool reserve_body(uint64_t n) = 0;
  virtual void release_body(uint64_t n) = 0;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  using tcp = boost::asio::ip::tcp;

  HttpConnection(tcp::socket socket, const HttpServerOptions& options,
                 std::shared_ptr<const HttpHandler> handler, ConnectionRegistry* registry);

  // All of these may be called from any thread; the work runs on the connection's strand.
  void start();
  void begin_shutdown();
  void force_close();
  void enqueue(std::string bytes, bool last);

  bool keep_alive() const { return keep_alive_.load(); }
  void disable_keep_alive() { keep_alive_.store(false); }

 private:
  enum class Phase { Idle, Header, Body, Handling, Closing, Closed };

  void read_request();
  void on_idle_ready(const boost::system::error_code& ec);
  void read_header();
  void read_more();
  void on_read(const boost::system::error_code& ec);
  void on_header();
  void fail_read(const boost::system::error_code& ec, bool in_header);
  void on_request();
  void release_body();  // gives back body_reserved_
  void watch();
  void on_watch(const boost::system::error_code& ec, size_t n);
  void push(std::string bytes, bool last);
  void do_write();
  void on_write(const boost::system::error_code& ec, bool last);
  void on_response_complete();
  void send_error(int status, const std::string& message);
  void linger_close();
  void close();
  void arm_timer(std::chrono::milliseconds d);
  void cancel_timer();

  tcp::socket socket_;
  boost::asio::steady_timer timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  const HttpServerOptions options_;
  std::shared_ptr<const HttpHandler> handler_;
  ConnectionRegistry* registry_;
  std::string remote_;

  // Strand-only state.
  Phase phase_ = Phase::Idle;
  uint64_t body_reserved_ = 0;  // of the registry's body budget, while this request's body arrives
  bool timed_out_ = false;
  uint64_t timer_gen_ = 0;
  uint64_t requests_ = 0;
  bool watching_ = false;
  bool response_done_ = false;
  bool shutting_down_ = false;
  bool write_pending_ = false;
  bool last_queued_ = false;
  std::deque<std::string> queue_;
  std::vector<std::string> writing_;
  std::shared_ptr<HttpResponder> responder_;
  std::shared_ptr<HttpConnection> self_hold_;  // keeps the connection while a handler owes a reply

  std::atomic<bool> keep_alive_{true};
};

}  // namespace tf::detail
