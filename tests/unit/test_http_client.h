#pragma once
// A tiny blocking HTTP/1.1 client over POSIX sockets for the HTTP layer's tests.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http_request.h"
#include "server/http_server.h"

namespace tf::testing_http {

struct Response {
  int status = 0;
  HttpHeaders headers;
  std::string body;
  std::vector<std::string> chunks;  // chunk payloads when chunked

  std::string header(const std::string& name) const {
    for (const auto& [k, v] : headers)
      if (iequals_ascii(k, name)) return v;
    return {};
  }
};

class Client {
 public:
  // rcvbuf > 0 shrinks the receive buffer first, so a client that stops reading stalls the server soon.
  explicit Client(uint16_t port, int recv_timeout_ms = 3000, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Closes with a reset instead of a FIN, as a crashed client would.
  void reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close();
  }

  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // True once the peer has closed (EOF or reset) within timeout_ms; unread data is skipped.
  bool wait_closed(int timeout_ms) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      until - std::chrono::steady_clock::now())
                                      .count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return true;
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

  // Status line and headers; nullopt when the connection ends first.
  std::optional<Response> read_head() {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return std::nullopt;
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    Response r;
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t v = line.find_first_not_of(' ', colon + 1);
        r.headers.emplace_back(line.substr(0, colon), v == std::string::npos ? "" : line.substr(v));
      }
      pos = e + 2;
    }
    return r;
  }

  // Next chunk payload of a chunked body; "" at the terminating chunk, nullopt on error.
  std::optional<std::string> read_chunk() {
    size_t e;
    while ((e = buf_.find("\r\n")) == std::string::npos)
      if (!fill()) return std::nullopt;
    size_t size = std::stoul(buf_.substr(0, e), nullptr, 16);
    buf_.erase(0, e + 2);
    while (buf_.size() < size + 2)
      if (!fill()) return std::nullopt;
    std::string data = buf_.substr(0, size);
    if (buf_.compare(size, 2, "\r\n") != 0) return std::nullopt;
    buf_.erase(0, size + 2);
    return data;
  }

  // A whole response: Content-Length, chunked, or delimited by close.
  std::optional<Response> read_response() {
    auto r = read_head();
    if (!r) return r;
    if (iequals_ascii(r->header("Transfer-Encoding"), "chunked")) {
      for (;;) {
        auto c = read_chunk();
        if (!c) return std::nullopt;
        if (c->empty()) break;
        r->body += *c;
        r->chunks.push_back(*c);
      }
    } else if (!r->header("Content-Length").empty()) {
      size_t n = std::stoul(r->header("Content-Length"));
      while (buf_.size() < n)
        if (!fill()) return std::nullopt;
      r->body = buf_.substr(0, n);
      buf_.erase(0, n);
    } else if (r->status >= 200 && r->status != 204 && r->status != 304) {
      while (fill()) {
      }
      r->body = std::move(buf_);
      buf_.clear();
    }
    return r;
  }

 private:
  bool fill() {
    char tmp[4096];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

// A server on 127.0.0.1 with an ephemeral port, serving on two io threads.
struct TestServer {
  TestServer(HttpServerOptions options, HttpHandler handler) : server(std::move(options)) {
    server.set_handler(std::move(handler));
    port = server.listen("127.0.0.1", 0);
    server.start(2);
  }
  HttpServer server;
  uint16_t port = 0;
};

inline std::string get_request(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: localhost\r\n" + extra + "\r\n";
}

inline std::string post_request(const std::string& target, const std::string& body,
                                const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n" + extra + "\r\n" + body;
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tf::testing_http
