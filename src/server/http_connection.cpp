#include "server/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>

#include "base/log.h"

namespace tf::detail {

namespace net = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

// Bytes kept from a client that sends ahead while its reply is pending (pipelining).
constexpr size_t kWatchSlack = 64u << 10;
// How long a closing connection drains unread input so the client sees our reply, not a reset.
constexpr std::chrono::milliseconds kLinger{1000};

std::string sv(boost::beast::string_view s) { return std::string(s.data(), s.size()); }

std::string error_response(int status, const std::string& message) {
  std::string body = openai_error_body(message, status >= 500 ? "server_error" : "invalid_request_error");
  auto reason = http::obsolete_reason(static_cast<http::status>(status));
  return cat("HTTP/1.1 ", status, " ", sv(reason), "\r\nContent-Type: application/json\r\n",
             "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

HttpConnection::HttpConnection(tcp::socket socket, const HttpServerOptions& options,
                               std::shared_ptr<const HttpHandler> handler,
                               ConnectionRegistry* registry)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      options_(options),
      handler_(std::move(handler)),
      registry_(registry) {
  error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) remote_ = cat(ep.address().to_string(), ":", ep.port());
}

void HttpConnection::start() {
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void HttpConnection::begin_shutdown() {
  net::post(socket_.get_executor(), [self = shared_from_this()] {
    self->shutting_down_ = true;
    self->keep_alive_.store(false);
    switch (self->phase_) {
      case Phase::Idle:
      case Phase::Header:
      case Phase::Body:
        self->close();
        break;
      case Phase::Handling:
        if (self->responder_ && !self->response_done_)
          self->responder_->notify_closed(false);
        else
          self->close();
        break;
      case Phase::Closing:
      case Phase::Closed:
        break;
    }
  });
}

void HttpConnection::force_close() {
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->close(); });
}

void HttpConnection::enqueue(std::string bytes, bool last) {
  net::post(socket_.get_executor(), [self = shared_from_this(), b = std::move(bytes), last]() mutable {
    if (self->phase_ != Phase::Handling || self->response_done_ || self->last_queued_) return;
    self->push(std::move(b), last);
  });
}

void HttpConnection::read_request() {
  response_done_ = false;
  last_queued_ = false;
  timed_out_ = false;
  if (shutting_down_) return close();
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(options_.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(static_cast<std::uint64_t>(options_.max_body_bytes));
  if (requests_ > 0 && buffer_.size() == 0) {
    // Between requests only the idle timeout applies; the header clock starts at the first byte.
    phase_ = Phase::Idle;
    arm_timer(options_.keep_alive_idle_timeout);
    socket_.async_wait(tcp::socket::wait_read,
                       [self = shared_from_this()](const error_code& ec) { self->on_idle_ready(ec); });
    return;
  }
  read_header();
}

void HttpConnection::on_idle_ready(const error_code& ec) {
  if (phase_ != Phase::Idle) return;
  cancel_timer();
  if (ec || timed_out_) return close();
  read_header();
}

void HttpConnection::read_header() {
  phase_ = Phase::Header;
  arm_timer(options_.header_read_timeout);
  read_more();
}

// Reads one piece at a time so a deadline is checked between reads: a cancel that lands
// while a read's completion is already queued would otherwise be missed.
void HttpConnection::read_more() {
  http::async_read_some(socket_, buffer_, *parser_,
                        [self = shared_from_this()](const error_code& ec, size_t) { self->on_read(ec); });
}

void HttpConnection::on_read(const error_code& ec) {
  if (phase_ != Phase::Header && phase_ != Phase::Body) return;
  bool in_header = phase_ == Phase::Header;
  if (timed_out_) return fail_read(net::error::operation_aborted, in_header);
  if (ec) {
    cancel_timer();
    return fail_read(ec, in_header);
  }
  if (in_header && parser_->is_header_done()) return on_header();
  if (!in_header && parser_->is_done()) {
    cancel_timer();
    return on_request();
  }
  read_more();
}

void HttpConnection::on_header() {
  cancel_timer();
  const auto& msg = parser_->get();
  size_t n_fields = 0;
  for (auto it = msg.begin(); it != msg.end(); ++it) ++n_fields;
  if (n_fields > options_.max_headers)
    return send_error(431, cat("request has ", n_fields, " header fields; the limit is ", options_.max_headers));
  if (parser_->is_done()) return on_request();
  // The body's bytes come out of the server's budget for bodies in flight before any is read.
  const auto declared = parser_->content_length();
  const uint64_t want = std::min<uint64_t>(declared ? *declared : options_.max_body_bytes, options_.max_body_bytes);
  if (!registry_->reserve_body(want))
    return send_error(503, cat("the server is receiving as many request bodies as it holds (",
                               options_.max_body_bytes_in_flight, " bytes); retry later"));
  body_reserved_ = want;
  if (boost::beast::iequals(msg[http::field::expect], "100-continue"))
    push("HTTP/1.1 100 Continue\r\n\r\n", false);
  phase_ = Phase::Body;
  // One deadline for the whole body, so a client trickling bytes is still cut off.
  arm_timer(options_.body_read_timeout);
  read_more();
}

void HttpConnection::fail_read(const error_code& ec, bool in_header) {
  if (ec == net::error::operation_aborted) {
    // A timeout with nothing received yet is an idle client: close without a reply.
    if (timed_out_ && !shutting_down_ && (!in_header || parser_->got_some()))
      return send_error(408, in_header ? cat("request headers not received within ",
                                             options_.header_read_timeout.count(), " ms")
                                       : cat("request body not received within ",
                                             options_.body_read_timeout.count(), " ms"));
    return close();
  }
  if (ec == http::error::header_limit || (in_header && ec == http::error::buffer_overflow))
    return send_error(431, cat("request headers exceed ", options_.max_header_bytes, " bytes"));
  if (ec == http::error::body_limit || ec == http::error::buffer_overflow)
    return send_error(413, cat("request body exceeds ", options_.max_body_bytes, " bytes"));
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec.category() != http::make_error_code(http::error::bad_method).category())
    return close();
  send_error(400, cat("malformed HTTP request: ", ec.message()));
}

void HttpConnection::on_request() {
  phase_ = Phase::Handling;
  ++requests_;
  if (!parser_->keep_alive() || shutting_down_) keep_alive_.store(false);
  auto msg = parser_->release();
  HttpRequest req;
  req.method = sv(msg.method_string());
  std::string target = sv(msg.target());
  size_t q = target.find('?');
  req.path = target.substr(0, q);
  if (q != std::string::npos) req.query = target.substr(q + 1);
  for (const auto& f : msg) req.headers.emplace_back(sv(f.name_string()), sv(f.value()));
  req.body = std::move(msg.body());
  req.remote = remote_;

  auto responder = std::make_shared<HttpResponder>(weak_from_this(), msg.version() < 11);
  responder_ = responder;
  self_hold_ = shared_from_this();
  watch();
  try {
    if (!*handler_) fail("no request handler is installed");
    (*handler_)(req, responder);
  } catch (const std::exception& e) {
    log_error("http: handler failed on ", req.method, " ", req.path, ": ", e.what());
    responder->fail_from_handler(e.what());
  } catch (...) {
    log_error("http: handler failed on ", req.method, " ", req.path, " with a non-standard exception");
    responder->fail_from_handler("unknown error");
  }
  release_body();  // the handler has the body now (or is done with it)
}

void HttpConnection::watch() {
  // A read stays pending while a reply is owed, so a peer's EOF or reset is seen at once.
  if (watching_ || phase_ == Phase::Closed) return;
  if (phase_ == Phase::Handling && buffer_.size() >= options_.max_header_bytes + kWatchSlack) return;
  watching_ = true;
  socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](const error_code& ec, size_t n) {
    self->on_watch(ec, n);
  });
}

void HttpConnection::on_watch(const error_code& ec, size_t n) {
  watching_ = false;
  if (phase_ == Phase::Closed) return;
  if (!ec) buffer_.commit(n);
  if (phase_ == Phase::Closing) {
    buffer_.consume(buffer_.size());
    if (ec) return close();
    return watch();
  }
  if (phase_ != Phase::Handling) return;
  if (ec && ec != net::error::operation_aborted) return close();
  if (response_done_) return read_request();
  if (!ec) watch();
}

void HttpConnection::push(std::string bytes, bool last) {
  queue_.push_back(std::move(bytes));
  if (last) last_queued_ = true;
  if (!write_pending_) do_write();
}

void HttpConnection::do_write() {
  if (queue_.empty()) return;
  writing_.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  bool last = last_queued_;
  std::vector<net::const_buffer> bufs;
  bufs.reserve(writing_.size());
  for (const auto& s : writing_) bufs.emplace_back(net::buffer(s));
  write_pending_ = true;
  net::async_write(socket_, bufs, [self = shared_from_this(), last](const error_code& ec, size_t) {
    self->on_write(ec, last);
  });
  // A closing connection has its linger deadline; a reply being handled gets one per write.
  if (phase_ == Phase::Handling) arm_timer(options_.write_timeout);
}

void HttpConnection::on_write(const error_code& ec, bool last) {
  write_pending_ = false;
  writing_.clear();
  if (phase_ == Phase::Closed) return;
  if (ec) return close();
  if (last) return on_response_complete();
  if (phase_ == Phase::Handling && queue_.empty()) cancel_timer();
  do_write();
}

void HttpConnection::on_response_complete() {
  responder_.reset();
  response_done_ = true;
  auto keep = std::move(self_hold_);
  if (phase_ == Phase::Closing || !keep_alive_.load() || shutting_down_) return linger_close();
  // The watch read resumes into read_request once cancelled; data already read is kept.
  if (watching_) {
    error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  read_request();
}

void HttpConnection::send_error(int status, const std::string& message) {
  keep_alive_.store(false);
  phase_ = Phase::Closing;
  arm_timer(kLinger);  // a client that never reads the reply must not hold the connection
  queue_.clear();
  last_queued_ = false;
  push(error_response(status, message), true);
}

void HttpConnection::linger_close() {
  phase_ = Phase::Closing;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  // With no unread input a close sends FIN, not a reset, so there is nothing to drain.
  if (buffer_.size() == 0 && socket_.available(ignored) == 0 && !ignored) return close();
  arm_timer(kLinger);
  watch();
}

void HttpConnection::release_body() {
  if (body_reserved_ == 0) return;
  registry_->release_body(body_reserved_);
  body_reserved_ = 0;
}

void HttpConnection::close() {
  if (phase_ == Phase::Closed) return;
  auto keep = shared_from_this();
  release_body();
  phase_ = Phase::Closed;
  cancel_timer();
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  queue_.clear();
  auto responder = std::move(responder_);
  self_hold_.reset();
  if (responder && !response_done_) responder->notify_closed(true);
  registry_->remove(this);
}

void HttpConnection::arm_timer(std::chrono::milliseconds d) {
  uint64_t gen = ++timer_gen_;
  timed_out_ = false;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (ec || gen != self->timer_gen_ || self->phase_ == Phase::Closed) return;
    if (self->phase_ == Phase::Closing) return self->close();
    // While a reply is handled the timer guards a write: one still pending ends the connection.
    if (self->phase_ == Phase::Handling) {
      if (self->write_pending_) self->close();
      return;
    }
    self->timed_out_ = true;
    error_code ignored;
    self->socket_.cancel(ignored);
  });
}

void HttpConnection::cancel_timer() {
  ++timer_gen_;
  timer_.cancel();
}

}  // namespace tf::detail
