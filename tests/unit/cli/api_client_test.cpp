#include "cli/api_client.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "cli/execution_follower.hpp"

namespace kiln::cli {
namespace {

using common::Code;
using nlohmann::json;

TEST(ApiClientTest, ParseBaseUrl) {
  auto b = ParseBaseUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->scheme_host_port, "http://127.0.0.1:8080");
  EXPECT_EQ(b->path_prefix, "");
  b = ParseBaseUrl("https://proxy.example/kiln/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->scheme_host_port, "https://proxy.example");
  EXPECT_EQ(b->path_prefix, "/kiln");
  EXPECT_FALSE(ParseBaseUrl("127.0.0.1:8080").ok());
  EXPECT_FALSE(ParseBaseUrl("ftp://host").ok());
  EXPECT_FALSE(ParseBaseUrl("http://").ok());
}

TEST(ApiClientTest, StatusFromHttp) {
  EXPECT_TRUE(StatusFromHttp(200, "{}").ok());
  EXPECT_TRUE(StatusFromHttp(202, "{}").ok());
  auto st = StatusFromHttp(400, R"({"error":{"code":"LIMIT_EXCEEDED","message":"too big"}})");
  EXPECT_EQ(st.code(), Code::kLimitExceeded);
  EXPECT_EQ(st.message(), "too big");
  st = StatusFromHttp(409, R"({"error":{"code":"SOMETHING_NEW","message":"m"}})");
  EXPECT_EQ(st.code(), Code::kInvalidRequest);
  EXPECT_EQ(st.message(), "SOMETHING_NEW: m");
  EXPECT_EQ(StatusFromHttp(502, "<html>bad gateway</html>").code(), Code::kUnavailable);
  EXPECT_EQ(StatusFromHttp(429, "").code(), Code::kQueueFull);
  EXPECT_EQ(StatusFromHttp(401, "").code(), Code::kUnauthorized);
  EXPECT_EQ(StatusFromHttp(404, "nope").code(), Code::kNotFound);
  EXPECT_EQ(StatusFromHttp(418, "").code(), Code::kInvalidRequest);
}

TEST(ApiClientTest, CodeFromName) {
  EXPECT_EQ(CodeFromName("QUEUE_FULL"), Code::kQueueFull);
  EXPECT_EQ(CodeFromName("CODE_EXECUTION_DISABLED"), Code::kCodeExecutionDisabled);
  EXPECT_EQ(CodeFromName("INTERNAL"), Code::kInternal);
  EXPECT_EQ(CodeFromName("nope"), std::nullopt);
}

TEST(ApiClientTest, IsSessionIdAndQueryEscape) {
  EXPECT_TRUE(IsSessionId("chat:7.a-b_c"));
  EXPECT_FALSE(IsSessionId(""));
  EXPECT_FALSE(IsSessionId("a/b"));
  EXPECT_FALSE(IsSessionId("a b"));
  EXPECT_FALSE(IsSessionId(std::string(129, 'a')));
  EXPECT_EQ(QueryEscape("a:b c/&=~"), "a%3Ab%20c%2F%26%3D~");
}

TEST(ApiClientTest, IsPlainId) {
  EXPECT_TRUE(IsPlainId("ex_abc123"));
  EXPECT_FALSE(IsPlainId(""));
  EXPECT_FALSE(IsPlainId("a/b"));
  EXPECT_FALSE(IsPlainId("a?b"));
  EXPECT_FALSE(IsPlainId(std::string(129, 'a')));
}

// A real HTTP server in the test process standing in for the broker.
class FakeBroker {
 public:
  FakeBroker() {
    server_.set_tcp_nodelay(true);  // as the broker's one write per answer: no delayed ACK
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeBroker() {
    server_.stop();
    thread_.join();
  }
  httplib::Server& server() { return server_; }
  std::string url(const std::string& prefix = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + prefix;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(ApiClientTest, SubmitSendsTokenKeyAndBody) {
  FakeBroker broker;
  json seen_body;
  std::string seen_auth, seen_key;
  broker.server().Post("/pre/v1/executions", [&](const httplib::Request& q, httplib::Response& r) {
    seen_body = json::parse(q.body);
    seen_auth = q.get_header_value("Authorization");
    seen_key = q.get_header_value("Idempotency-Key");
    r.status = 202;
    r.set_content(R"({"id":"ex_1","status":"queued"})", "application/json");
  });
  auto client = ApiClient::Create({broker.url("/pre/"), "tok", "--token"});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  ApiClient::SubmitOptions options;
  options.idempotency_key = "k1";
  auto answer = (*client)->Submit({{"language", "python"}, {"code", "1"}}, options);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  EXPECT_EQ((*answer)["id"], "ex_1");
  EXPECT_EQ(seen_auth, "Bearer tok");
  EXPECT_EQ(seen_key, "k1");
  EXPECT_EQ(seen_body["language"], "python");
}

// httplib writes a POST's headers and body in two sends: without
// TCP_NODELAY, Nagle holds the body until the broker ACKs the headers, which
// a kept-alive connection's peer delays by up to 40 ms: every call after
// the first would wait that long (`kiln mcp` makes many on one connection).
TEST(ApiClientTest, CallsOnAKeptAliveConnectionDoNotWaitForDelayedAcks) {
  FakeBroker broker;
  broker.server().Post("/v1/executions", [&](const httplib::Request&, httplib::Response& r) {
    r.status = 202;
    r.set_content(R"({"id":"ex_1","status":"queued"})", "application/json");
  });
  auto client = ApiClient::Create({broker.url(), "tok", "--token"});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  constexpr int kCalls = 20;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    auto answer = (*client)->Submit({{"language", "shell"}, {"code", ":"}}, {});
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  // With the stall: ~kCalls x 40 ms = 800 ms; without it, a few ms.
  EXPECT_LT(elapsed, std::chrono::milliseconds(400))
      << kCalls << " calls took "
      << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms";
}

TEST(ApiClientTest, ApiErrorsBecomeTheirCodes) {
  FakeBroker broker;
  broker.server().Get(R"(/v1/executions/([^/]+))",
                      [](const httplib::Request& q, httplib::Response& r) {
                        r.status = 404;
                        r.set_content(R"({"error":{"code":"NOT_FOUND","message":"no execution )" +
                                          std::string(q.matches[1]) + R"(","retryable":false}})",
                                      "application/json");
                      });
  broker.server().Get("/v1/workers", [](const httplib::Request&, httplib::Response& r) {
    r.status = 200;
    r.set_content("not json", "application/json");
  });
  auto client = ApiClient::Create({broker.url(), "", ""});
  ASSERT_TRUE(client.ok());
  auto record = (*client)->GetExecution("ex_9");
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), Code::kNotFound);
  EXPECT_EQ(record.status().message(), "no execution ex_9");
  auto workers = (*client)->ListWorkers();
  ASSERT_FALSE(workers.ok());
  EXPECT_EQ(workers.status().code(), Code::kUnavailable);
}

TEST(ApiClientTest, UnhealthyBrokerStillReturnsItsBody) {
  FakeBroker broker;
  broker.server().Get("/v1/health", [](const httplib::Request&, httplib::Response& r) {
    r.status = 503;
    r.set_content(R"({"status":"unavailable","redis":"down"})", "application/json");
  });
  auto client = ApiClient::Create({broker.url(), "", ""});
  ASSERT_TRUE(client.ok());
  bool healthy = true;
  auto body = (*client)->Health(&healthy);
  ASSERT_TRUE(body.ok());
  EXPECT_FALSE(healthy);
  EXPECT_EQ((*body)["redis"], "down");
}

TEST(ApiClientTest, NoBrokerIsUnavailable) {
  int port = 0;
  {
    FakeBroker closed;  // a port that was just free and is now closed again
    port = std::stoi(closed.url().substr(closed.url().rfind(':') + 1));
  }
  auto client = ApiClient::Create({"http://127.0.0.1:" + std::to_string(port), "", ""});
  ASSERT_TRUE(client.ok());
  bool healthy = true;
  auto body = (*client)->Health(&healthy);
  ASSERT_FALSE(body.ok());
  EXPECT_EQ(body.status().code(), Code::kUnavailable);
}

TEST(ApiClientTest, ControlAndSessionEndpoints) {
  FakeBroker broker;
  std::vector<std::string> seen;  // "METHOD path body"
  auto record = [&](const httplib::Request& q, httplib::Response& r, const std::string& answer) {
    std::string line = q.method + " " + q.path;
    if (q.has_param("conversation_id"))
      line += "?conversation_id=" + q.get_param_value("conversation_id");
    if (!q.body.empty()) line += " " + q.body;
    seen.push_back(line);
    r.set_content(answer, "application/json");
  };
  auto& s = broker.server();
  s.Post(R"(/v1/executions/([^/]+)/(cancel|approve|deny))",
         [&](const httplib::Request& q, httplib::Response& r) {
           record(q, r, R"({"id":"ex_1","status":"cancelled"})");
         });
  s.Get("/v1/sessions", [&](const httplib::Request& q, httplib::Response& r) {
    record(q, r, R"({"sessions":[]})");
  });
  s.Delete(R"(/v1/sessions/([^/]+))", [&](const httplib::Request& q, httplib::Response& r) {
    if (std::string(q.matches[1]) == "gone") {
      r.status = 404;
      return record(q, r, R"({"error":{"code":"SESSION_NOT_FOUND","message":"no session gone"}})");
    }
    record(q, r, R"({"id":"s:1","state":"deleted"})");
  });
  s.Get("/v1/approvals", [&](const httplib::Request& q, httplib::Response& r) {
    record(q, r, R"({"approvals":[]})");
  });
  s.Get("/v1/capabilities", [&](const httplib::Request& q, httplib::Response& r) {
    record(q, r, R"({"code_execution":false,"runtimes":["python"]})");
  });
  auto client = ApiClient::Create({broker.url(), "tok", ""});
  ASSERT_TRUE(client.ok());
  auto& c = **client;
  EXPECT_EQ((*c.Cancel("ex_1"))["status"], "cancelled");
  EXPECT_TRUE(c.Approve("ex_1", true).ok());
  EXPECT_TRUE(c.Approve("ex_1", false).ok());
  EXPECT_TRUE(c.Deny("ex_1").ok());
  EXPECT_TRUE(c.ListSessions("").ok());
  EXPECT_TRUE(c.ListSessions("chat:7 x").ok());
  EXPECT_EQ((*c.DeleteSession("s:1"))["state"], "deleted");
  auto gone = c.DeleteSession("gone");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), Code::kSessionNotFound);
  EXPECT_EQ(c.DeleteSession("a/b").status().code(), Code::kInvalidRequest);  // never sent
  EXPECT_EQ(c.Cancel("../x").status().code(), Code::kInvalidRequest);        // never sent
  EXPECT_TRUE(c.ListApprovals().ok());
  EXPECT_EQ((*c.Capabilities())["code_execution"], false);
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "POST /v1/executions/ex_1/cancel {}",
                      "POST /v1/executions/ex_1/approve {\"trust_session\":true}",
                      "POST /v1/executions/ex_1/approve {\"trust_session\":false}",
                      "POST /v1/executions/ex_1/deny {}",
                      "GET /v1/sessions",
                      "GET /v1/sessions?conversation_id=chat:7 x",
                      "DELETE /v1/sessions/s:1",
                      "DELETE /v1/sessions/gone",
                      "GET /v1/approvals",
                      "GET /v1/capabilities",
                  }));
}

std::string Sse(const std::string& event, const std::string& id, const std::string& data) {
  return "event: " + event + "\nid: " + id + "\ndata: " + data + "\n\n";
}

TEST(ApiClientTest, StreamEventsDeliversEventsAsTheyArrive) {
  FakeBroker broker;
  std::string seen_last_id;
  broker.server().Get(R"(/v1/executions/([^/]+)/events)", [&](const httplib::Request& q,
                                                              httplib::Response& r) {
    seen_last_id = q.get_header_value("Last-Event-ID");
    auto step = std::make_shared<int>(0);
    r.set_chunked_content_provider("text/event-stream", [step](size_t, httplib::DataSink& sink) {
      std::string out;
      switch ((*step)++) {
        case 0:
          out = Sse("execution_start", "start", "{}");
          break;
        case 1:
          out = ": waiting\n\nevent: output_chunk\nid: 1-0\nda";
          break;
        case 2:
          out = "ta: {\"stream\":\"stdout\",\"data\":\"a\"}\n\n";
          break;
        case 3:
          out = Sse("execution_end", "end", R"({"status":"succeeded"})");
          break;
        default:
          sink.done();
          return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return sink.write(out.data(), out.size());
    });
  });
  auto client = ApiClient::Create({broker.url(), "tok", ""});
  ASSERT_TRUE(client.ok());
  std::vector<std::string> events;
  auto st = (*client)->StreamEvents("ex_1", "1-0", [&](const SseEvent& e) {
    events.push_back(e.event + "#" + e.id);
    return true;
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(seen_last_id, "1-0");
  EXPECT_EQ(events, (std::vector<std::string>{"execution_start#start", "output_chunk#1-0",
                                              "execution_end#end"}));
  // Stopping early is fine too.
  events.clear();
  st = (*client)->StreamEvents("ex_1", "", [&](const SseEvent& e) {
    events.push_back(e.event);
    return false;
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(events.size(), 1u);
}

TEST(ApiClientTest, StreamEventsRefusedIsTheApiError) {
  FakeBroker broker;
  broker.server().Get(R"(/v1/executions/([^/]+)/events)", [](const httplib::Request&,
                                                             httplib::Response& r) {
    r.status = 404;
    r.set_content(R"({"error":{"code":"NOT_FOUND","message":"no such job"}})", "application/json");
  });
  auto client = ApiClient::Create({broker.url(), "tok", ""});
  ASSERT_TRUE(client.ok());
  auto st = (*client)->StreamEvents("ex_1", "", [](const SseEvent&) { return true; });
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_EQ(st.message(), "no such job");
}

TEST(ApiClientTest, FollowerResumesAfterABrokenStream) {
  FakeBroker broker;
  std::vector<std::string> last_ids;
  std::atomic<int> connections{0};
  broker.server().Get(
      R"(/v1/executions/([^/]+)/events)", [&](const httplib::Request& q, httplib::Response& r) {
        last_ids.push_back(q.get_header_value("Last-Event-ID"));
        // The first connection breaks after one chunk; the
        // second resumes after it.
        std::string body =
            connections++ == 0
                ? Sse("execution_start", "start", "{}") +
                      Sse("output_chunk", "1-0", R"({"stream":"stdout","data":"a"})")
                : Sse("output_chunk", "2-0", R"({"stream":"stderr","data":"b"})") +
                      Sse("execution_end", "end", R"({"status":"failed","exit_code":2})");
        r.set_content(body, "text/event-stream");
      });
  auto client = ApiClient::Create({broker.url(), "tok", ""});
  ASSERT_TRUE(client.ok());
  std::string printed;
  ExecutionFollower follower("ex_1", [&](const FollowedEvent& e) {
    if (e.event == "output_chunk") printed += e.data["data"].get<std::string>();
  });
  auto record = follower.Follow(**client, std::chrono::milliseconds(1));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ((*record)["exit_code"], 2);
  EXPECT_EQ(printed, "ab");
  EXPECT_EQ(last_ids, (std::vector<std::string>{"", "1-0"}));
}

TEST(ApiClientTest, FollowerGivesUpAfterSomeReconnects) {
  FakeBroker broker;
  std::atomic<int> connections{0};
  broker.server().Get(R"(/v1/executions/([^/]+)/events)",
                      [&](const httplib::Request&, httplib::Response& r) {
                        ++connections;
                        r.set_content(Sse("execution_start", "start", "{}"), "text/event-stream");
                      });
  auto client = ApiClient::Create({broker.url(), "tok", ""});
  ASSERT_TRUE(client.ok());
  ExecutionFollower follower("ex_1", [](const FollowedEvent&) {});
  auto record = follower.Follow(**client, std::chrono::milliseconds(1));
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), Code::kUnavailable);
  EXPECT_EQ(connections.load(), ExecutionFollower::kMaxReconnects + 1);
}

}  // namespace
}  // namespace kiln::cli
