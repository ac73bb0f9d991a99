#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <thread>

#include "test_http_client.h"

namespace tf {
namespace {

using namespace testing_http;
using namespace std::chrono_literals;

void ok_handler(const HttpRequest& req, std::shared_ptr<HttpResponder> r) {
  r->send(200, "text/plain", "ok " + std::to_string(req.body.size()));
}

void expect_error(Client& c, int status) {
  auto r = c.read_response();
  ASSERT_TRUE(r) << "no response, expected " << status;
  EXPECT_EQ(r->status, status);
  auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(iequals_ascii(r->header("Connection"), "close"));
  EXPECT_TRUE(c.wait_closed(2000));
}

void expect_served(uint16_t port) {
  Client c(port);
  ASSERT_TRUE(c.send(post_request("/next", "tiny")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok 4");
}

TEST(HttpLimits, BodyOverLimitGets413AndServerGoesOn) {
  HttpServerOptions o;
  o.max_body_bytes = 1024;
  TestServer s(o, ok_handler);
  {
    Client c(s.port);
    ASSERT_TRUE(c.send(post_request("/big", std::string(1024, 'x'))));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "ok 1024");  // exactly at the limit is fine
  }
  {
    Client c(s.port);
    c.send(post_request("/big", std::string(4096, 'x')));
    expect_error(c, 413);
  }
  {
    // A chunked body has no declared size: the limit trips while reading it.
    Client c(s.port);
    std::string req = "POST /big HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 8; ++i) req += "200\r\n" + std::string(512, 'y') + "\r\n";
    c.send(req + "0\r\n\r\n");
    expect_error(c, 413);
  }
  {
    // A huge declared length is refused before any body byte is read.
    Client c(s.port);
    c.send("POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999\r\n\r\n");
    expect_error(c, 413);
  }
  expect_served(s.port);
}

// Bodies being received share one budget: a declared length takes its bytes before any is read,
// a request past the budget gets 503 at once, and the bytes come back when the body is handled.
TEST(HttpLimits, BodiesInFlightPastTheirBudgetGet503) {
  HttpServerOptions o;
  o.max_body_bytes = 4096;
  o.max_body_bytes_in_flight = 6000;
  TestServer s(o, ok_handler);
  // The server answers 100 Continue once a body's bytes are taken, so the steps below are ordered.
  Client a(s.port);
  ASSERT_TRUE(a.send("POST /a HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4000\r\n\r\n"));
  auto cont = a.read_head();
  ASSERT_TRUE(cont);
  ASSERT_EQ(cont->status, 100);  // 4000 of the 6000 bytes are a's
  ASSERT_TRUE(a.send(std::string(100, 'x')));
  {
    Client b(s.port);
    ASSERT_TRUE(b.send(post_request("/b", std::string(3000, 'y'))));
    auto r = b.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    auto j = nlohmann::json::parse(r->body);
    EXPECT_EQ(j["error"]["type"], "server_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("request bodies"), std::string::npos) << r->body;
  }
  {
    Client c(s.port);  // a body that fits beside a's
    ASSERT_TRUE(c.send(post_request("/c", std::string(1000, 'z'))));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "ok 1000");
  }
  ASSERT_TRUE(a.send(std::string(3900, 'x')));
  auto ra = a.read_response();
  ASSERT_TRUE(ra);
  EXPECT_EQ(ra->body, "ok 4000");
  {
    Client b(s.port);  // a's bytes are back
    ASSERT_TRUE(b.send(post_request("/b", std::string(3000, 'y'))));
    auto r = b.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "ok 3000");
  }
  {
    // A chunked body has no declared size: it takes the largest a body may be, 4096 of the 6000.
    Client d(s.port);
    ASSERT_TRUE(d.send("POST /d HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"));
    auto dc = d.read_head();
    ASSERT_TRUE(dc);
    ASSERT_EQ(dc->status, 100);
    ASSERT_TRUE(d.send("10\r\n" + std::string(16, 'w') + "\r\n"));
    Client e(s.port);
    ASSERT_TRUE(e.send(post_request("/e", std::string(2000, 'v'))));
    auto r = e.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
  }
  // d left mid-body: its bytes come back once the server sees its connection close.
  std::optional<Response> r;
  for (int i = 0; i < 50; ++i) {
    Client f(s.port);
    ASSERT_TRUE(f.send(post_request("/f", std::string(4000, 'u'))));
    r = f.read_response();
    ASSERT_TRUE(r);
    if (r->status != 503) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(r->body, "ok 4000");
}

TEST(HttpLimits, OversizedHeaderGets431) {
  HttpServerOptions o;
  o.max_header_bytes = 2048;
  TestServer s(o, ok_handler);
  {
    Client c(s.port);
    c.send(get_request("/", "X-Big: " + std::string(4096, 'a') + "\r\n"));
    expect_error(c, 431);
  }
  {
    // A long request target counts toward the same limit.
    Client c(s.port);
    c.send(get_request("/" + std::string(4096, 'p')));
    expect_error(c, 431);
  }
  expect_served(s.port);
}

TEST(HttpLimits, TooManyHeadersGets431) {
  HttpServerOptions o;
  o.max_headers = 20;
  TestServer s(o, ok_handler);
  std::string extra;
  for (int i = 0; i < 18; ++i) extra += "X-H" + std::to_string(i) + ": v\r\n";
  {
    Client c(s.port);  // Host + 18 = 19 fields: allowed
    ASSERT_TRUE(c.send(get_request("/", extra)));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  {
    Client c(s.port);
    c.send(get_request("/", extra + "X-A: 1\r\nX-B: 2\r\n"));
    expect_error(c, 431);
  }
  expect_served(s.port);
}

TEST(HttpLimits, SlowHeaderClientTimesOutWhileOthersAreServed) {
  HttpServerOptions o;
  o.header_read_timeout = 300ms;
  TestServer s(o, ok_handler);
  auto t0 = std::chrono::steady_clock::now();
  Client slow(s.port);
  ASSERT_TRUE(slow.send("GET / HTTP/1.1\r\nHost: loc"));
  std::this_thread::sleep_for(50ms);
  expect_served(s.port);
  EXPECT_LT(ms_since(t0), 250);
  auto r = slow.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_TRUE(slow.wait_closed(1000));
  double took = ms_since(t0);
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 1500);
}

TEST(HttpLimits, SilentClientIsClosedWithoutReply) {
  HttpServerOptions o;
  o.header_read_timeout = 200ms;
  TestServer s(o, ok_handler);
  Client idle(s.port);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(idle.read_head());  // nothing sent, nothing answered
  EXPECT_LT(ms_since(t0), 1500);
  EXPECT_TRUE(idle.wait_closed(500));
}

TEST(HttpLimits, TricklingBodyIsCutOffAfterTheBodyTimeout) {
  HttpServerOptions o;
  o.body_read_timeout = 300ms;
  TestServer s(o, ok_handler);
  Client c(s.port, 2000);
  ASSERT_TRUE(c.send("POST /t HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n"));
  auto t0 = std::chrono::steady_clock::now();
  // One byte every 50 ms would never trip a per-read timeout of 300 ms.
  std::atomic<bool> answered{false};
  std::thread trickle([&] {
    for (int i = 0; i < 30 && !answered; ++i) {
      std::this_thread::sleep_for(50ms);
      if (!c.send("x")) break;
    }
  });
  auto r = c.read_response();
  double took = ms_since(t0);
  answered = true;
  trickle.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 1200);
  expect_served(s.port);
}

}  // namespace
}  // namespace tf
