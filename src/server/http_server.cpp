#include "server/http_server.h"

#include <condition_variable>
#include <csignal>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "base/byte_budget.h"
#include "base/log.h"
#include "server/http_connection.h"

namespace tf {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {
// Marks io threads so shutdown() knows whether it may block.
thread_local const void* tl_io_server = nullptr;
}  // namespace

struct HttpServer::Impl : detail::ConnectionRegistry {
  explicit Impl(HttpServerOptions o)
      : options(std::move(o)),
        work(net::make_work_guard(ioc)),
        strand(net::make_strand(ioc)),
        grace_timer(strand),
        retry_timer(strand) {}

  void remove(detail::HttpConnection* conn) override;
  bool reserve_body(uint64_t n) override { return body_bytes.take(n); }
  void release_body(uint64_t n) override { body_bytes.give(n); }
  void do_accept(tcp::acceptor* acceptor);
  void on_accept(tcp::acceptor* acceptor, const error_code& ec, tcp::socket socket);
  void begin_shutdown(std::chrono::milliseconds grace);
  void finish();
  void io_loop();
  std::vector<std::shared_ptr<detail::HttpConnection>> snapshot();

  HttpServerOptions options;
  ByteBudget body_bytes{options.max_body_bytes_in_flight};  // reserved by connections receiving a body
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  net::strand<net::io_context::executor_type> strand;  // acceptors, signals, grace timer
  net::steady_timer grace_timer;
  net::steady_timer retry_timer;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::optional<net::signal_set> signals;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<const HttpHandler> handler = std::make_shared<HttpHandler>();
  std::unordered_map<detail::HttpConnection*, std::weak_ptr<detail::HttpConnection>> conns;
  bool shutting_down = false;
  bool started = false;  // io threads were asked to run
  bool finished = false;
  std::vector<std::thread> threads;  // owned by start()
  std::mutex join_mu;
};

void HttpServer::Impl::remove(detail::HttpConnection* conn) {
  bool done;
  {
    std::lock_guard<std::mutex> lock(mu);
    conns.erase(conn);
    done = shutting_down && conns.empty();
  }
  if (done) net::post(strand, [this] { finish(); });
}

std::vector<std::shared_ptr<detail::HttpConnection>> HttpServer::Impl::snapshot() {
  std::vector<std::shared_ptr<detail::HttpConnection>> out;
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [p, w] : conns)
    if (auto c = w.lock()) out.push_back(std::move(c));
  return out;
}

void HttpServer::Impl::do_accept(tcp::acceptor* acceptor) {
  acceptor->async_accept(net::make_strand(ioc), [this, acceptor](const error_code& ec, tcp::socket s) {
    on_accept(acceptor, ec, std::move(s));
  });
}

void HttpServer::Impl::on_accept(tcp::acceptor* acceptor, const error_code& ec, tcp::socket socket) {
  std::shared_ptr<const HttpHandler> h;
  bool over = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (shutting_down || !acceptor->is_open()) return;
    h = handler;
    over = conns.size() >= options.max_connections;
  }
  if (ec) {
    if (ec == net::error::operation_aborted) return;
    // Out of descriptors and the like: pause briefly instead of spinning.
    log_warn("http: accept failed: ", ec.message());
    retry_timer.expires_after(std::chrono::milliseconds(50));
    retry_timer.async_wait([this, acceptor](const error_code& e) {
      if (!e) do_accept(acceptor);
    });
    return;
  }
  if (over) {
    // Best effort 503 without waiting: a full kernel buffer just means a plain close.
    static const std::string body = openai_error_body("server has too many open connections", "server_error");
    static const std::string resp = cat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n",
                                        "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
    error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(net::buffer(resp), ignored);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  } else {
    // Streamed tokens are small writes; Nagle would hold each one back for an ACK.
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto conn = std::make_shared<detail::HttpConnection>(std::move(socket), options, std::move(h), this);
    {
      std::lock_guard<std::mutex> lock(mu);
      conns.emplace(conn.get(), conn);
    }
    conn->start();
  }
  do_accept(acceptor);
}

void HttpServer::Impl::begin_shutdown(std::chrono::milliseconds grace) {
  net::post(strand, [this, grace] {
    error_code ignored;
    for (auto& a : acceptors) a->close(ignored);
    if (signals) signals->cancel(ignored);
    retry_timer.cancel();
    auto live = snapshot();
    if (live.empty()) return finish();
    for (auto& c : live) c->begin_shutdown();
    grace_timer.expires_after(grace);
    grace_timer.async_wait([this](const error_code& ec) {
      if (ec) return;
      for (auto& c : snapshot()) c->force_close();
    });
  });
}

void HttpServer::Impl::finish() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return;
    finished = true;
  }
  grace_timer.cancel();
  work.reset();
  ioc.stop();
  cv.notify_all();
}

void HttpServer::Impl::io_loop() {
  tl_io_server = this;
  for (;;) {
    try {
      ioc.run();
      break;
    } catch (const std::exception& e) {
      // Handlers catch their own errors; this keeps an unexpected one from ending the server.
      log_error("http: io thread caught: ", e.what());
    }
  }
  tl_io_server = nullptr;
}

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  TF_CHECK(impl_->options.max_connections > 0, "http: max_connections must be positive");
  TF_CHECK(impl_->options.max_header_bytes > 0, "http: max_header_bytes must be positive");
}

HttpServer::~HttpServer() {
  bool running;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    running = !impl_->finished;
  }
  if (running && tl_io_server != impl_.get()) shutdown(std::chrono::milliseconds(0));
  std::lock_guard<std::mutex> lock(impl_->join_mu);
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
}

void HttpServer::set_handler(HttpHandler handler) {
  auto h = std::make_shared<const HttpHandler>(std::move(handler));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->handler = std::move(h);
}

uint16_t HttpServer::listen(const std::string& host, uint16_t port) {
  std::string where = cat(host, ":", port);
  error_code ec;
  tcp::resolver resolver(impl_->ioc);
  auto results = resolver.resolve(host, std::to_string(port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) fail("http: cannot resolve ", where, ": ", ec ? ec.message() : "no address");
  tcp::endpoint ep = results.begin()->endpoint();
  auto acceptor = std::make_unique<tcp::acceptor>(impl_->strand);
  if (!acceptor->open(ep.protocol(), ec))
    if (!acceptor->set_option(tcp::acceptor::reuse_address(true), ec))
      if (!acceptor->bind(ep, ec)) acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("http: cannot listen on ", where, ": ", ec.message());
  uint16_t bound = acceptor->local_endpoint(ec).port();
  if (ec) fail("http: cannot read the bound port of ", where, ": ", ec.message());
  tcp::acceptor* raw = acceptor.get();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    TF_CHECK(!impl_->shutting_down, "http: listen on ", where, " after shutdown");
  }
  impl_->acceptors.push_back(std::move(acceptor));
  net::post(impl_->strand, [impl = impl_.get(), raw] { impl->do_accept(raw); });
  return bound;
}

void HttpServer::run(int io_threads) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->finished) return;
    impl_->started = true;
  }
  std::vector<std::thread> extra;
  for (int i = 1; i < io_threads; ++i) extra.emplace_back([this] { impl_->io_loop(); });
  impl_->io_loop();
  for (auto& t : extra) t.join();
}

void HttpServer::start(int io_threads) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->finished) return;
    impl_->started = true;
  }
  std::lock_guard<std::mutex> lock(impl_->join_mu);
  for (int i = 0; i < std::max(io_threads, 1); ++i)
    impl_->threads.emplace_back([this] { impl_->io_loop(); });
}

void HttpServer::stop() { shutdown(std::chrono::milliseconds(0)); }

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  bool first, started;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    first = !impl_->shutting_down;
    impl_->shutting_down = true;
    started = impl_->started;
    // Never run: nothing is in flight, so closing the listeners here is all there is.
    if (!started) impl_->finished = true;
  }
  if (!started) {
    error_code ignored;
    for (auto& a : impl_->acceptors) a->close(ignored);
    return;
  }
  if (first) impl_->begin_shutdown(grace);
  if (tl_io_server == impl_.get()) return;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait(lock, [&] { return impl_->finished; });
  }
  std::lock_guard<std::mutex> lock(impl_->join_mu);
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->threads.clear();
}

void HttpServer::stop_on_signals(std::function<void()> on_signal) {
  auto* impl = impl_.get();
  impl->signals.emplace(impl->strand, SIGINT, SIGTERM);
  impl->signals->async_wait([this, impl, cb = std::move(on_signal)](const error_code& ec, int sig) {
    if (ec) return;
    log_info("http: caught signal ", sig, ", shutting down");
    if (cb)
      cb();
    else
      shutdown(impl->options.signal_grace);
  });
}

size_t HttpServer::connection_count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->conns.size();
}

}  // namespace tf
