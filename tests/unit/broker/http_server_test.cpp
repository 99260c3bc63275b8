// HttpServer over real loopback sockets, driven by a raw TCP client so that
// each test can send exactly the bytes a hostile or broken client would:
// deadlines, size limits (chunked too), malformed heads, connection limits,
// 100-continue, keep-alive, late answers and streams.
#include "broker/http/http_server.hpp"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace kiln::broker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A blocking TCP client with timeouts.
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Raw() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  bool Send(std::string_view s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Reads until `until` is in what was read, the peer closes, or the timeout.
  std::string Read(std::chrono::milliseconds timeout, std::string_view until = "") {
    const auto end = Clock::now() + timeout;
    while (Clock::now() < end) {
      if (!until.empty() && got_.find(until) != std::string::npos) break;
      pollfd p{fd_, POLLIN, 0};
      int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
      if (::poll(&p, 1, std::max(ms, 1)) <= 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  bool closed() const { return closed_; }
  void Clear() { got_.clear(); }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string got_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions o) {
    o.listen = "127.0.0.1:0";
    auto s = HttpServer::Create(
        o, [this](std::shared_ptr<HttpExchange> ex) { Handle(std::move(ex)); },
        [](const common::Status& st) {
          return HttpResponse{common::HttpStatusFor(st.code()),
                              std::string(common::CodeName(st.code())) + ": " + st.message(),
                              "text/plain",
                              {}};
        });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    server_->Start();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    for (auto& t : threads_) t.join();
  }

  void Handle(std::shared_ptr<HttpExchange> ex) {
    const HttpRequest& r = ex->request();
    ++requests_;
    if (r.path == "/echo") {
      return ex->Reply({200,
                        r.method + " " + std::to_string(r.body.size()) + " q=" + r.Param("q") +
                            " h=" + std::string(r.Header("x-test")),
                        "text/plain"});
    }
    if (r.path == "/lane") return ex->Reply({200, r.reserve_lane ? "reserve" : "normal"});
    if (r.path == "/later") {
      threads_.emplace_back([ex] {
        std::this_thread::sleep_for(100ms);
        ex->Reply({200, "later"});
      });
      return;
    }
    if (r.path == "/stream") {
      ex->OnStreamEvents([this] { ++drained_; }, [this] { ++closed_; });
      ex->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      ex->Send("one\n");
      ex->Send("two\n");
      if (r.Param("end") == "1") ex->End();
      stream_ = ex;
      return;
    }
    ex->Reply({404, "no"});
  }

  std::unique_ptr<HttpServer> server_;
  std::vector<std::thread> threads_;
  std::atomic<int> requests_{0};
  std::atomic<int> drained_{0};
  std::atomic<int> closed_{0};
  std::shared_ptr<HttpExchange> stream_;
};

TEST_F(HttpServerTest, AnswersAndKeepsTheConnectionAlive) {
  StartServer({});
  Raw c(server_->port());
  ASSERT_TRUE(c.connected());
  c.Send("GET /echo?q=a%20b+c HTTP/1.1\r\nHost: x\r\nX-Test: yes\r\n\r\n");
  EXPECT_THAT(c.Read(2s, "q=a b c h=yes"), HasSubstr("GET 0 q=a b c h=yes"));
  c.Clear();
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_THAT(c.Read(2s, "POST 5"), HasSubstr("POST 5"));
  EXPECT_FALSE(c.closed());
}

TEST_F(HttpServerTest, PostWithoutBodyIsServedAtOnce) {
  StartServer({});
  Raw c(server_->port());
  const auto t0 = Clock::now();
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(c.Read(2s, "POST 0"), HasSubstr("POST 0"));
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST_F(HttpServerTest, BadContentLengthIs400AtOnceAndCloses) {
  StartServer({});
  for (const char* cl : {"-5", "abc", "1, 2"}) {
    Raw c(server_->port());
    const auto t0 = Clock::now();
    c.Send(std::string("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: ") + cl + "\r\n\r\n");
    std::string got = c.Read(3s);
    EXPECT_THAT(got, StartsWith("HTTP/1.1 400")) << cl;
    EXPECT_THAT(got, HasSubstr("INVALID_REQUEST")) << cl;
    EXPECT_TRUE(c.closed()) << cl;
    EXPECT_LT(Clock::now() - t0, 2s) << cl;
  }
  EXPECT_EQ(requests_, 0);
}

TEST_F(HttpServerTest, ChunkedBodyOverTheLimitIs413BeforeItIsAllSent) {
  HttpServerOptions o;
  o.max_body_bytes = 64 * 1024;
  StartServer(o);
  Raw c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "4000\r\n" + std::string(0x4000, 'x') + "\r\n";  // 16 KiB
  // 5 chunks exceed the limit; the server answers without waiting for the rest.
  for (int i = 0; i < 5; ++i) c.Send(chunk);
  std::string got = c.Read(3s);
  EXPECT_THAT(got, StartsWith("HTTP/1.1 413"));
  EXPECT_THAT(got, HasSubstr("PAYLOAD_TOO_LARGE"));
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(requests_, 0);
  // The same with Content-Length: refused from the head alone.
  Raw d(server_->port());
  d.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
  EXPECT_THAT(d.Read(3s), StartsWith("HTTP/1.1 413"));
}

TEST_F(HttpServerTest, BodiesInFlightStayWithinTheBudget) {
  HttpServerOptions o;
  o.max_body_bytes = 64 * 1024;
  o.max_body_buffer_bytes = 100 * 1024;
  StartServer(o);
  // A holds 60,000 bytes of budget while it sends its body slowly.
  Raw a(server_->port());
  a.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n" +
         std::string(1000, 'a'));
  for (int i = 0; i < 200 && server_->body_bytes() == 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server_->body_bytes(), 60000u);
  // B does not fit: refused before its body is read.
  Raw b(server_->port());
  b.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n");
  std::string got = b.Read(2s);
  EXPECT_THAT(got, StartsWith("HTTP/1.1 503"));
  EXPECT_THAT(got, HasSubstr("Retry-After: 1"));
  // A finishes; its share comes back once its handler is done with it.
  a.Send(std::string(59000, 'a'));
  EXPECT_THAT(a.Read(2s, "POST 60000"), HasSubstr("POST 60000"));
  for (int i = 0; i < 200 && server_->body_bytes() != 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server_->body_bytes(), 0u);
  Raw c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n" +
         std::string(60000, 'c'));
  EXPECT_THAT(c.Read(2s, "POST 60000"), HasSubstr("POST 60000"));
}

TEST_F(HttpServerTest, OversizedHeadIs431) {
  HttpServerOptions o;
  o.max_header_bytes = 2048;
  StartServer(o);
  Raw c(server_->port());
  c.Send("GET /echo HTTP/1.1\r\nX-Big: " + std::string(4096, 'a') + "\r\n\r\n");
  EXPECT_THAT(c.Read(3s), StartsWith("HTTP/1.1 431"));
}

TEST_F(HttpServerTest, TrickledHeadIsCutOffWhileOthersAreServed) {
  HttpServerOptions o;
  o.header_timeout = 400ms;
  StartServer(o);
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<Raw>(server_->port()));
    slow.back()->Send("GET /echo HTTP/1.1\r\n");
  }
  const auto t0 = Clock::now();
  // One byte every 100 ms: the head never completes in time.
  for (int step = 0; step < 6; ++step) {
    for (auto& s : slow) s->Send("X");
    // Meanwhile an ordinary client is served at once.
    Raw ok(server_->port());
    ok.Send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(ok.Read(1s, "GET 0"), HasSubstr("200 OK"));
    std::this_thread::sleep_for(100ms);
  }
  for (auto& s : slow) {
    std::string got = s->Read(2s);
    EXPECT_THAT(got, StartsWith("HTTP/1.1 408"));
    EXPECT_THAT(got, HasSubstr("REQUEST_TIMEOUT"));
    EXPECT_TRUE(s->closed());
  }
  EXPECT_LT(Clock::now() - t0, 4s);
}

TEST_F(HttpServerTest, IdleConnectionIsClosedSilently) {
  HttpServerOptions o;
  o.idle_timeout = 300ms;
  StartServer(o);
  Raw c(server_->port());
  c.Send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_THAT(c.Read(2s, "GET 0"), HasSubstr("200 OK"));
  c.Clear();
  EXPECT_EQ(c.Read(2s), "");  // closed after idle_timeout, without an answer
  EXPECT_TRUE(c.closed());
}

TEST_F(HttpServerTest, ExpectContinueIsHonoured) {
  StartServer({});
  Raw c(server_->port());
  c.Send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_THAT(c.Read(2s, "100 Continue"), HasSubstr("HTTP/1.1 100 Continue"));
  c.Send("abc");
  EXPECT_THAT(c.Read(2s, "POST 3"), HasSubstr("POST 3"));
}

TEST_F(HttpServerTest, ConnectionsOverTheLimitGetTheReserveLaneThenARefusal) {
  HttpServerOptions o;
  o.connections = {
      .max_total = 100, .max_per_address = 2, .reserve_total = 8, .reserve_per_address = 1};
  StartServer(o);
  Raw a(server_->port()), b(server_->port());
  a.Send("GET /lane HTTP/1.1\r\nHost: x\r\n\r\n");
  b.Send("GET /lane HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(a.Read(2s, "normal"), HasSubstr("normal"));
  EXPECT_THAT(b.Read(2s, "normal"), HasSubstr("normal"));
  Raw reserve(server_->port());  // holds the address's one reserve place
  Raw refused(server_->port());
  std::string got = refused.Read(2s);
  EXPECT_THAT(got, StartsWith("HTTP/1.1 429"));
  EXPECT_THAT(got, HasSubstr("Retry-After: 1"));
  EXPECT_TRUE(refused.closed());
  reserve.Send("GET /lane HTTP/1.1\r\nHost: x\r\n\r\n");
  got = reserve.Read(2s, "reserve");
  EXPECT_THAT(got, HasSubstr("reserve"));
  EXPECT_THAT(got, HasSubstr("Connection: close"));
  // Closing one frees its place.
  a.Close();
  // Only b is left: the reserve connection was closed after its answer.
  for (int i = 0; i < 300 && server_->connections() > 1; ++i) std::this_thread::sleep_for(10ms);
  Raw again(server_->port());
  again.Send("GET /lane HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(again.Read(2s, "normal"), HasSubstr("normal"));
}

TEST_F(HttpServerTest, AnswerFromAnotherThreadLater) {
  StartServer({});
  Raw c(server_->port());
  c.Send("GET /later HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(c.Read(2s, "later"), HasSubstr("later"));
}

TEST_F(HttpServerTest, StreamIsChunkedAndEnds) {
  StartServer({});
  Raw c(server_->port());
  c.Send("GET /stream?end=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got = c.Read(2s, "0\r\n\r\n");
  EXPECT_THAT(got, HasSubstr("Transfer-Encoding: chunked"));
  EXPECT_THAT(got, HasSubstr("4\r\none\n\r\n"));
  EXPECT_THAT(got, HasSubstr("4\r\ntwo\n\r\n0\r\n\r\n"));
  // The connection is kept for the next request.
  c.Clear();
  c.Send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(c.Read(2s, "GET 0"), HasSubstr("GET 0"));
}

TEST_F(HttpServerTest, StreamLearnsThatItsClientLeft) {
  StartServer({});
  Raw c(server_->port());
  c.Send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(c.Read(2s, "two"), HasSubstr("two"));
  for (int i = 0; i < 200 && drained_ == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_GE(drained_, 1);
  EXPECT_EQ(stream_->Pending(), 0u);
  c.Close();
  for (int i = 0; i < 200 && closed_ == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(closed_, 1);
  stream_->Send("after");  // ignored, no crash
}

}  // namespace
}  // namespace kiln::broker
