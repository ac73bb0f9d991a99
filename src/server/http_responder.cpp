#include "server/http_responder.h"

#include <boost/beast/http/status.hpp>

#include "base/log.h"
#include "server/http_connection.h"

namespace tf {

namespace {

// Header names and values lose CR and LF so no caller can inject extra header lines.
std::string header_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (c != '\r' && c != '\n') out += c;
  return out;
}

// Framing headers belong to this layer; a caller's copy would contradict ours.
bool reserved_header(const std::string& name) {
  return iequals_ascii(name, "content-length") || iequals_ascii(name, "transfer-encoding") ||
         iequals_ascii(name, "connection");
}

std::string hex(size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), digits[n & 15]);
    n >>= 4;
  } while (n);
  return out;
}

}  // namespace

HttpResponder::HttpResponder(std::weak_ptr<detail::HttpConnection> conn, bool http10)
    : conn_(std::move(conn)), http10_(http10) {}

std::string HttpResponder::head(int status, const std::string& content_type, const HttpHeaders& extra,
                                const std::string& framing, bool keep_alive) const {
  if (status < 100 || status > 999) status = 500;
  auto reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  std::string out = cat("HTTP/1.1 ", status, " ", std::string(reason.data(), reason.size()), "\r\n");
  if (!content_type.empty()) out += "Content-Type: " + header_safe(content_type) + "\r\n";
  for (const auto& [k, v] : extra) {
    if (k.empty() || reserved_header(k)) continue;
    out += header_safe(k) + ": " + header_safe(v) + "\r\n";
  }
  out += framing;
  if (!keep_alive)
    out += "Connection: close\r\n";
  else if (http10_)
    out += "Connection: keep-alive\r\n";
  out += "\r\n";
  return out;
}

bool HttpResponder::deliver(std::string bytes, bool last) {
  auto conn = conn_.lock();
  if (!conn) return false;
  conn->enqueue(std::move(bytes), last);
  return true;
}

void HttpResponder::send(int status, const std::string& content_type, std::string body,
                         const HttpHeaders& extra) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::Fresh || gone_) return;
  state_ = State::Done;
  auto conn = conn_.lock();
  if (!conn) {
    gone_ = true;
    return;
  }
  std::string out = head(status, content_type, extra, cat("Content-Length: ", body.size(), "\r\n"),
                         conn->keep_alive());
  out += body;
  conn->enqueue(std::move(out), true);
}

void HttpResponder::start_stream(int status, const std::string& content_type, const HttpHeaders& extra) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::Fresh || gone_) return;
  state_ = State::Streaming;
  auto conn = conn_.lock();
  if (!conn) {
    gone_ = true;
    return;
  }
  // HTTP/1.0 has no chunked encoding: the stream is delimited by closing the connection.
  chunked_ = !http10_;
  if (!chunked_) conn->disable_keep_alive();
  std::string framing = chunked_ ? "Transfer-Encoding: chunked\r\n" : "";
  framing += "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
  conn->enqueue(head(status, content_type, extra, framing, conn->keep_alive()), false);
}

bool HttpResponder::write(std::string data) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::Streaming || gone_) return false;
  // An empty chunk would read as the end of the stream.
  if (data.empty()) return true;
  if (chunked_) data = hex(data.size()) + "\r\n" + data + "\r\n";
  if (!deliver(std::move(data), false)) gone_ = true;
  return !gone_;
}

void HttpResponder::end() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::Streaming) return;
  state_ = State::Done;
  if (gone_) return;
  if (!deliver(chunked_ ? "0\r\n\r\n" : "", true)) gone_ = true;
}

bool HttpResponder::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

bool HttpResponder::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void HttpResponder::on_close(std::function<void()> cb) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fired_) {
      if (state_ != State::Done) on_close_ = std::move(cb);
      return;
    }
  }
  if (cb) cb();
}

void HttpResponder::notify_closed(bool gone) {
  std::function<void()> cb;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone) gone_ = true;
    if (fired_ || state_ == State::Done) return;
    fired_ = true;
    cb = std::move(on_close_);
  }
  if (!cb) return;
  try {
    cb();
  } catch (const std::exception& e) {
    log_error("http: on_close callback failed: ", e.what());
  } catch (...) {
    log_error("http: on_close callback failed with a non-standard exception");
  }
}

void HttpResponder::fail_from_handler(const std::string& what) {
  State state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state = state_;
  }
  if (state == State::Fresh) {
    send(500, "application/json", openai_error_body("internal server error: " + what, "server_error"));
    return;
  }
  if (state == State::Streaming) {
    // Half a stream cannot be turned into an error reply; the client sees the connection drop.
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone_ = true;
    }
    if (auto conn = conn_.lock()) conn->force_close();
  }
}

}  // namespace tf
