#include "cli/api_client.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

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

}  // namespace
}  // namespace kiln::cli
