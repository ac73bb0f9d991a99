#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "test_http_client.h"

namespace tf {
namespace {

using namespace testing_http;
using namespace std::chrono_literals;

// Echoes what the layer parsed, so tests see exactly what a route would see.
void echo(const HttpRequest& req, std::shared_ptr<HttpResponder> r) {
  nlohmann::json j = {{"method", req.method}, {"path", req.path},     {"query", req.query},
                      {"body", req.body},     {"x_test", req.header("x-TEST")},
                      {"remote", req.remote}, {"n_headers", req.headers.size()}};
  r->send(200, "application/json", j.dump(), {{"X-Echo", "yes"}});
}

nlohmann::json error_of(const Response& r) {
  auto j = nlohmann::json::parse(r.body);
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_TRUE(j["error"]["message"].is_string());
  return j["error"];
}

TEST(HttpServer, GetAndPostRoundTrip) {
  TestServer s({}, echo);
  Client c(s.port);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(get_request("/v1/models?a=1&b=2", "X-Test: hello\r\n")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->header("X-Echo"), "yes");
  auto j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["method"], "GET");
  EXPECT_EQ(j["path"], "/v1/models");
  EXPECT_EQ(j["query"], "a=1&b=2");
  EXPECT_EQ(j["x_test"], "hello");
  EXPECT_EQ(j["body"], "");
  EXPECT_EQ(j["remote"].get<std::string>().rfind("127.0.0.1:", 0), 0u);

  Client c2(s.port);
  std::string body = R"({"model":"m","prompt":"hi\r\n"})";
  ASSERT_TRUE(c2.send(post_request("/v1/completions", body)));
  r = c2.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  j = nlohmann::json::parse(r->body);
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/v1/completions");
  EXPECT_EQ(j["query"], "");
  EXPECT_EQ(j["body"], body);
}

TEST(HttpServer, ChunkedRequestBodyIsDecoded) {
  TestServer s({}, echo);
  Client c(s.port);
  ASSERT_TRUE(c.send("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(nlohmann::json::parse(r->body)["body"], "hello world");
}

TEST(HttpServer, KeepAliveServesTwoRequestsOnOneConnection) {
  TestServer s({}, echo);
  Client c(s.port);
  ASSERT_TRUE(c.send(get_request("/first")));
  auto r1 = c.read_response();
  ASSERT_TRUE(r1);
  EXPECT_EQ(nlohmann::json::parse(r1->body)["path"], "/first");
  EXPECT_TRUE(r1->header("Connection").empty());
  ASSERT_TRUE(c.send(post_request("/second", "abc")));
  auto r2 = c.read_response();
  ASSERT_TRUE(r2);
  EXPECT_EQ(nlohmann::json::parse(r2->body)["path"], "/second");
  EXPECT_EQ(nlohmann::json::parse(r2->body)["body"], "abc");
  // Pipelined: both requests in one send, answered in order.
  ASSERT_TRUE(c.send(get_request("/p1") + get_request("/p2")));
  auto p1 = c.read_response();
  auto p2 = c.read_response();
  ASSERT_TRUE(p1 && p2);
  EXPECT_EQ(nlohmann::json::parse(p1->body)["path"], "/p1");
  EXPECT_EQ(nlohmann::json::parse(p2->body)["path"], "/p2");
  EXPECT_EQ(s.server.connection_count(), 1u);
}

TEST(HttpServer, ConnectionCloseIsHonored) {
  TestServer s({}, echo);
  Client c(s.port);
  ASSERT_TRUE(c.send(get_request("/", "Connection: close\r\n")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(iequals_ascii(r->header("Connection"), "close"));
  EXPECT_TRUE(c.wait_closed(1000));
}

TEST(HttpServer, Http10WithoutKeepAliveIsClosed) {
  TestServer s({}, echo);
  Client c(s.port);
  ASSERT_TRUE(c.send("GET /old HTTP/1.0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(c.wait_closed(1000));
}

TEST(HttpServer, MalformedRequestLineGets400) {
  TestServer s({}, echo);
  for (std::string bad : {"GARBAGE\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/9.x\r\n\r\n", "G@T / HTTP/1.1\r\n\r\n"}) {
    Client c(s.port);
    ASSERT_TRUE(c.send(bad));
    auto r = c.read_response();
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_EQ(error_of(*r)["type"], "invalid_request_error");
    EXPECT_TRUE(c.wait_closed(1000));
  }
  Client ok(s.port);
  ASSERT_TRUE(ok.send(get_request("/")));
  auto r = ok.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServer, HandlerExceptionBecomes500AndServerKeepsServing) {
  TestServer s({}, [](const HttpRequest& req, std::shared_ptr<HttpResponder> r) {
    if (req.path == "/boom") fail("route exploded on purpose");
    r->send(200, "text/plain", "fine");
  });
  Client c(s.port);
  ASSERT_TRUE(c.send(get_request("/boom")));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  auto e = error_of(*r);
  EXPECT_NE(e["message"].get<std::string>().find("route exploded"), std::string::npos);
  // The same connection and a fresh one both still work.
  ASSERT_TRUE(c.send(get_request("/ok")));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "fine");
  Client c2(s.port);
  ASSERT_TRUE(c2.send(get_request("/ok")));
  r = c2.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "fine");
}

TEST(HttpServer, ResponderWorksAfterHandlerReturned) {
  std::promise<std::shared_ptr<HttpResponder>> handed;
  TestServer s({}, [&](const HttpRequest&, std::shared_ptr<HttpResponder> r) { handed.set_value(r); });
  Client c(s.port);
  ASSERT_TRUE(c.send(get_request("/later")));
  auto responder = handed.get_future().get();
  std::this_thread::sleep_for(50ms);
  std::thread other([responder] { responder->send(201, "text/plain", "done later"); });
  other.join();
  // A second send is ignored: one request, one response.
  responder->send(500, "text/plain", "must not appear");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, "done later");
  EXPECT_FALSE(c.wait_closed(100));  // keep-alive: the connection stays open
}

TEST(HttpServer, ExpectContinueGetsInterimResponse) {
  TestServer s({}, echo);
  Client c(s.port);
  ASSERT_TRUE(c.send("POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  auto interim = c.read_head();
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send("data"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(nlohmann::json::parse(r->body)["body"], "data");
}

TEST(HttpServer, ListenFailureNamesHostAndPort) {
  TestServer s({}, echo);
  HttpServer other;
  try {
    other.listen("127.0.0.1", s.port);
    FAIL() << "second bind to the same port succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(s.port)), std::string::npos)
        << e.what();
  }
}

TEST(HttpServer, ConnectionsBeyondTheLimitAreRefused) {
  HttpServerOptions o;
  o.max_connections = 1;
  TestServer s(o, echo);
  Client first(s.port);
  ASSERT_TRUE(first.send(get_request("/")));
  ASSERT_TRUE(first.read_response());
  Client second(s.port);
  auto r = second.read_response();
  if (r) {
    EXPECT_EQ(r->status, 503);
  }
  EXPECT_TRUE(second.wait_closed(1000));
  // The first keeps working, and a slot frees once it leaves.
  ASSERT_TRUE(first.send(get_request("/")));
  ASSERT_TRUE(first.read_response());
  first.close();
  for (int i = 0; i < 100 && s.server.connection_count() > 0; ++i) std::this_thread::sleep_for(5ms);
  Client third(s.port);
  ASSERT_TRUE(third.send(get_request("/")));
  r = third.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServer, IdleKeepAliveConnectionIsClosed) {
  HttpServerOptions o;
  o.keep_alive_idle_timeout = 200ms;
  TestServer s(o, echo);
  Client c(s.port);
  ASSERT_TRUE(c.send(get_request("/")));
  ASSERT_TRUE(c.read_response());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.wait_closed(2000));
  EXPECT_GE(ms_since(t0), 150);
}

}  // namespace
}  // namespace tf
