#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <future>
#include <thread>

#include "base/error.h"
#include "server/api_job.h"
#include "server/sse.h"
#include "test_http_client.h"

namespace tf {
namespace {

using namespace testing_http;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(Sse, FormatsEvents) {
  EXPECT_EQ(sse_event("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_event(""), "data: \n\n");
  EXPECT_EQ(sse_event("one\ntwo"), "data: one\ndata: two\n\n");
  EXPECT_EQ(sse_event("a\r\nb\rc"), "data: a\ndata: b\ndata: c\n\n");
  EXPECT_EQ(sse_event("end\n"), "data: end\ndata: \n\n");
  EXPECT_EQ(sse_event("error", "x"), "event: error\ndata: x\n\n");
  EXPECT_THROW(sse_event("bad\nname", "x"), Error);
  EXPECT_EQ(sse_comment("ping"), ": ping\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

// The written-out token chunk must equal the JSON tree's dump, whatever bytes the delta holds.
TEST(Sse, TokenChunkEqualsTreeDump) {
  using ojson = nlohmann::ordered_json;
  const auto replace = ojson::error_handler_t::replace;
  const std::vector<std::string> deltas = {"", "hello", " a\"b\\c\n\t\r\b\f", std::string("\x01\x1f\x7f", 3),
                                           std::string(1, '\0') + "z", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
                                           "\xff\xfe", "ok\xc3", "\xe2\x82", "</script>"};
  for (const std::string model : {"default", "we\"ird\\name\xff"})
    for (bool chat : {false, true})
      for (int32_t token : {-1, 0, 128255})
        for (const auto& d : deltas) {
          const std::string object = chat ? "chat.completion.chunk" : "text_completion";
          ojson ch = {{"index", 3}};
          if (chat) ch["delta"] = {{"content", d}}, ch["logprobs"] = nullptr;
          else ch["text"] = d, ch["logprobs"] = nullptr;
          ch["finish_reason"] = nullptr;
          if (token >= 0) ch["token_ids"] = {token};
          ojson tree = {{"id", "cmpl-0123456789abcdef"}, {"object", object}, {"created", int64_t{1764523000}},
                        {"model", model}, {"choices", ojson::array({ch})}};
          const std::string head = chunk_head("cmpl-0123456789abcdef", object, 1764523000, model);
          EXPECT_EQ(token_chunk_json(head, chat, 3, d, token), tree.dump(-1, ' ', false, replace))
              << "chat " << chat << " token " << token << " delta of " << d.size() << " bytes";
        }
}

// Splits a stream body into the data of each event, joining multi-line data with '\n'.
std::vector<std::string> parse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0, end;
  while ((end = body.find("\n\n", pos)) != std::string::npos) {
    std::string block = body.substr(pos, end - pos + 1), data;
    bool any = false;
    size_t p = 0, e;
    while ((e = block.find('\n', p)) != std::string::npos) {
      std::string line = block.substr(p, e - p);
      if (line.rfind("data: ", 0) == 0) {
        if (any) data += '\n';
        data += line.substr(6);
        any = true;
      }
      p = e + 1;
    }
    out.push_back(data);
    pos = end + 2;
  }
  return out;
}

TEST(HttpStream, ChunkedSseFromAnotherThread) {
  std::thread worker;
  TestServer s({}, [&](const HttpRequest&, std::shared_ptr<HttpResponder> r) {
    r->start_stream(200, "text/event-stream", {{"X-Request-Id", "abc"}});
    worker = std::thread([r] {
      for (int i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(5ms);
        EXPECT_TRUE(r->write(sse_event("token " + std::to_string(i) + (i == 2 ? "\nsecond line" : ""))));
        EXPECT_TRUE(r->write(""));  // an empty write must not end the stream
      }
      EXPECT_TRUE(r->write(sse_done()));
      r->end();
      EXPECT_FALSE(r->write(sse_event("after end")));
    });
  });
  Client c(s.port);
  ASSERT_TRUE(c.send(post_request("/v1/chat/completions", "{}")));
  auto r = c.read_response();
  worker.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("Content-Type"), "text/event-stream");
  EXPECT_EQ(r->header("Transfer-Encoding"), "chunked");
  EXPECT_EQ(r->header("X-Request-Id"), "abc");
  EXPECT_EQ(r->chunks.size(), 6u);
  auto events = parse_events(r->body);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0], "token 0");
  EXPECT_EQ(events[2], "token 2\nsecond line");
  EXPECT_EQ(events[4], "token 4");
  EXPECT_EQ(events[5], "[DONE]");
  // The connection is reusable after a finished stream.
  ASSERT_TRUE(c.send(post_request("/again", "{}")));
  auto again = c.read_head();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  worker.join();
}

// Holds a stream open without writing, as an engine thread waiting on a slow step would.
struct HeldStream {
  std::promise<std::shared_ptr<HttpResponder>> handed;
  std::promise<Clock::time_point> closed_at;
  std::atomic<int> fired{0};

  HttpHandler handler(bool stream) {
    return [this, stream](const HttpRequest&, std::shared_ptr<HttpResponder> r) {
      r->on_close([this] {
        if (fired.fetch_add(1) == 0) closed_at.set_value(Clock::now());
      });
      if (stream) {
        r->start_stream(200);
        r->write(sse_event("first"));
      }
      handed.set_value(r);
    };
  }
};

TEST(HttpStream, ClientDisconnectMidStreamFiresOnClose) {
  for (bool hard_reset : {false, true}) {
    HeldStream held;
    TestServer s({}, held.handler(true));
    Client c(s.port);
    ASSERT_TRUE(c.send(post_request("/v1/completions", "{}")));
    ASSERT_TRUE(c.read_head());
    auto first = c.read_chunk();
    ASSERT_TRUE(first);
    EXPECT_EQ(*first, sse_event("first"));
    auto r = held.handed.get_future().get();
    EXPECT_FALSE(r->closed());
    auto t0 = Clock::now();
    if (hard_reset)
      c.reset();
    else
      c.close();
    auto fut = held.closed_at.get_future();
    ASSERT_EQ(fut.wait_for(1s), std::future_status::ready) << "on_close did not fire";
    EXPECT_LT(std::chrono::duration<double>(fut.get() - t0).count(), 1.0);
    EXPECT_TRUE(r->closed());
    EXPECT_TRUE(r->cancelled());
    EXPECT_FALSE(r->write(sse_event("lost")));
    r->end();
    // Registered late, a callback runs at once; it never fires twice.
    bool late = false;
    r->on_close([&] { late = true; });
    EXPECT_TRUE(late);
    EXPECT_EQ(held.fired.load(), 1);
  }
}

// Writes 16 KiB chunks to r, one a millisecond, until a write fails, `chunks` were written, or
// 20 s passed; then ends the stream. Returns the chunks written.
int feed(const std::shared_ptr<HttpResponder>& r, int chunks) {
  const auto until = Clock::now() + 20s;
  int n = 0;
  while (n < chunks && Clock::now() < until && r->write(std::string(16 << 10, 'x'))) {
    ++n;
    std::this_thread::sleep_for(1ms);
  }
  r->end();
  return n;
}

// A stream on a server whose writes time out after 500 ms, to a client with a 4 KiB receive
// buffer (so the server's writes stall soon once it stops reading), read past its first event.
struct SmallBufferStream {
  static HttpServerOptions options() {
    HttpServerOptions o;
    o.write_timeout = 500ms;
    return o;
  }
  HeldStream held;
  TestServer s{options(), held.handler(true)};
  Client c{s.port, 3000, 4096};
  std::shared_ptr<HttpResponder> r;

  void open() {
    ASSERT_TRUE(c.send(post_request("/v1/completions", "{}")));
    ASSERT_TRUE(c.read_head());
    ASSERT_TRUE(c.read_chunk());
    r = held.handed.get_future().get();
  }
};

TEST(HttpStream, ClientThatStopsReadingIsClosedAfterTheWriteTimeout) {
  SmallBufferStream st;
  ASSERT_NO_FATAL_FAILURE(st.open());
  // The client reads nothing more: the socket buffers fill, a write stalls, and the deadline
  // ends the connection, which cancels the request and frees what was queued.
  auto t0 = Clock::now();
  std::thread writer([&] { feed(st.r, 1 << 20); });
  auto fut = st.held.closed_at.get_future();
  const bool fired = fut.wait_for(10s) == std::future_status::ready;
  writer.join();
  ASSERT_TRUE(fired) << "on_close did not fire for a client that stopped reading";
  EXPECT_GE(std::chrono::duration<double>(fut.get() - t0).count(), 0.5);
  EXPECT_TRUE(st.r->closed());
  for (int i = 0; i < 200 && st.s.server.connection_count() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(st.s.server.connection_count(), 0u);
}

TEST(HttpStream, SlowReaderKeepsItsStream) {
  SmallBufferStream st;
  ASSERT_NO_FATAL_FAILURE(st.open());
  constexpr int kChunks = 64;  // 1 MiB, far more than the socket buffers hold
  int written = 0;
  std::thread writer([&] { written = feed(st.r, kChunks); });
  // Reads in pauses shorter than the deadline: every write completes within it.
  size_t got = 0;
  for (;;) {
    auto chunk = st.c.read_chunk();
    if (!chunk) break;
    if (chunk->empty()) break;
    got += chunk->size();
    std::this_thread::sleep_for(2ms);
  }
  writer.join();
  EXPECT_EQ(written, kChunks);
  EXPECT_EQ(got, static_cast<size_t>(kChunks) * (16 << 10)) << "the stream broke";
  EXPECT_EQ(st.held.fired.load(), 0);
}

TEST(HttpStream, ClientLeavingBeforeAnyReplyFiresOnClose) {
  HeldStream held;
  TestServer s({}, held.handler(false));
  Client c(s.port);
  ASSERT_TRUE(c.send(post_request("/v1/completions", "{}")));
  auto r = held.handed.get_future().get();
  c.close();
  auto fut = held.closed_at.get_future();
  ASSERT_EQ(fut.wait_for(1s), std::future_status::ready);
  EXPECT_TRUE(r->closed());
  r->send(200, "text/plain", "nobody listens");  // harmless
  for (int i = 0; i < 100 && s.server.connection_count() > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(s.server.connection_count(), 0u);
}

TEST(HttpStream, ShutdownLetsACooperativeStreamFinish) {
  std::thread finisher;
  std::promise<void> started;
  TestServer s({}, [&](const HttpRequest&, std::shared_ptr<HttpResponder> r) {
    r->start_stream(200);
    r->write(sse_event("working"));
    // The engine's cancel path: on shutdown it writes its last event and ends.
    r->on_close([&finisher, r] {
      finisher = std::thread([r] {
        EXPECT_FALSE(r->closed());
        r->write(sse_event("{\"finish_reason\":\"cancelled\"}"));
        r->write(sse_done());
        r->end();
      });
    });
    started.set_value();
  });
  Client c(s.port);
  ASSERT_TRUE(c.send(post_request("/v1/completions", "{}")));
  started.get_future().wait();
  auto t0 = Clock::now();
  s.server.shutdown(3s);
  EXPECT_LT(ms_since(t0), 500);  // ends when the stream does, not when the grace does
  if (finisher.joinable()) finisher.join();
  auto r = c.read_response();
  ASSERT_TRUE(r);
  auto events = parse_events(r->body);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2], "[DONE]");
  EXPECT_TRUE(c.wait_closed(1000));
  Client late(s.port);
  EXPECT_FALSE(late.connected() && late.send(get_request("/")) && late.read_response());
}

TEST(HttpStream, ShutdownClosesAStuckStreamAfterTheGrace) {
  HeldStream held;
  TestServer s({}, held.handler(true));
  Client idle(s.port);  // an idle keep-alive client is simply closed
  Client c(s.port);
  ASSERT_TRUE(c.send(post_request("/v1/completions", "{}")));
  auto r = held.handed.get_future().get();
  auto t0 = Clock::now();
  s.server.shutdown(300ms);
  double took = ms_since(t0);
  EXPECT_GE(took, 250);
  EXPECT_LT(took, 1300);
  EXPECT_EQ(held.fired.load(), 1);
  EXPECT_TRUE(r->closed());
  EXPECT_FALSE(r->write(sse_event("too late")));
  EXPECT_TRUE(c.wait_closed(1000));
  EXPECT_TRUE(idle.wait_closed(1000));
  s.server.shutdown(300ms);  // a second call is harmless
}

TEST(HttpStream, SignalBeginsShutdownAndRunReturns) {
  HeldStream held;
  HttpServerOptions o;
  o.signal_grace = 200ms;
  HttpServer server(o);
  server.set_handler(held.handler(true));
  uint16_t port = server.listen("127.0.0.1", 0);
  server.stop_on_signals();
  auto ran = std::async(std::launch::async, [&] { server.run(2); });
  Client c(port);
  ASSERT_TRUE(c.send(post_request("/v1/completions", "{}")));
  auto r = held.handed.get_future().get();
  ASSERT_EQ(::raise(SIGTERM), 0);
  ASSERT_EQ(ran.wait_for(2s), std::future_status::ready) << "run() did not return after SIGTERM";
  EXPECT_EQ(held.fired.load(), 1);
  EXPECT_TRUE(c.wait_closed(1000));
}

}  // namespace
}  // namespace tf
