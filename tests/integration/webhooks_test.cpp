// Webhooks through a real cluster: a job submitted with callback_url has its
// record POSTed there when it ends, signed (Kiln-Signature), tried again with
// backoff while the receiver fails, delivered after a broker restart (the
// outbox is in Redis), and refused at submit when the URL is malformed or
// outside the tenant's webhooks.allow. The receiver is a real HTTP server in
// this process (cpp-httplib).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "broker/webhook/webhook_signature.hpp"
#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kSecret = "whsec_test_0123456789";

struct Delivery {
  std::string id, attempt, signature, body, target;
  Clock::time_point at;
};

// Answers 500 to the first `fail_first` deliveries, then 200.
class Receiver {
 public:
  Receiver() {
    server_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      got_.push_back({req.get_header_value("Kiln-Webhook-Id"),
                      req.get_header_value("Kiln-Webhook-Attempt"),
                      req.get_header_value("Kiln-Signature"), req.body, req.target, Clock::now()});
      res.status = static_cast<int>(got_.size()) <= fail_first.load() ? 500 : 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& query = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/hook" + query;
  }
  std::vector<Delivery> got() const {
    std::lock_guard lock(mu_);
    return got_;
  }
  bool WaitForCount(size_t n, milliseconds timeout) const {
    return WaitFor([&] { return got().size() >= n; }, timeout);
  }
  std::atomic<int> fail_first{0};

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::vector<Delivery> got_;
};

ClusterOptions Options() {
  ClusterOptions o{.brokers = 1, .workers = 1};
  o.tenant_a_fields =
      std::string(", webhooks: {allow: [\"127.0.0.1:*\"], secret: \"") + kSecret + "\"}";
  return o;
}

// The signature a delivery carries, checked as a receiver would: the HMAC of
// "<t>.<body>" under the tenant's secret.
void ExpectSigned(const Delivery& d) {
  const size_t comma = d.signature.find(',');
  ASSERT_EQ(d.signature.rfind("t=", 0), 0u) << d.signature;
  ASSERT_NE(comma, std::string::npos) << d.signature;
  const int64_t t = std::stoll(d.signature.substr(2, comma - 2));
  EXPECT_EQ(d.signature, broker::SignWebhook(kSecret, t, d.body));
  EXPECT_NE(d.signature, broker::SignWebhook("another-secret-of-16", t, d.body));
  EXPECT_LE(std::abs(t - static_cast<int64_t>(time(nullptr))), 60);
}

TEST(WebhooksTest, TheRecordIsPostedSignedAndTriedAgainUntilAccepted) {
  auto cluster = TestCluster::Start(Options());
  Receiver receiver;
  receiver.fail_first = 2;
  auto r = cluster->Submit(
      {{"language", "python"}, {"code", "print('hi')"}, {"callback_url", receiver.url("?job=1")}});
  ASSERT_EQ(r.body["status"], "succeeded") << r.raw;
  const std::string id = r.body["id"];
  ASSERT_TRUE(receiver.WaitForCount(3, seconds(30))) << cluster->DumpLogs();
  std::this_thread::sleep_for(seconds(2));  // nothing after the accepted one
  const auto got = receiver.got();
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, id);
    EXPECT_EQ(got[i].attempt, std::to_string(i + 1));
    EXPECT_EQ(got[i].target, "/hook?job=1");
    ExpectSigned(got[i]);
  }
  // The body is the record, as GET shows it.
  const json body = json::parse(got[2].body);
  EXPECT_EQ(body, cluster->Request("GET", "/v1/executions/" + id).body);
  EXPECT_EQ(body["stdout"], "hi\n");
  // 1 s, then 2 s between tries (a little slack for the poll).
  EXPECT_GE(got[1].at - got[0].at, milliseconds(900));
  EXPECT_GE(got[2].at - got[1].at, milliseconds(1900));
  const std::string metrics = cluster->Request("GET", "/metrics", "", "").raw;
  EXPECT_NE(
      metrics.find(R"(kiln_webhook_deliveries_total{outcome="delivered",tenant="tenant-a"} 1)"),
      std::string::npos);
  EXPECT_NE(metrics.find(R"(kiln_webhook_deliveries_total{outcome="failed",tenant="tenant-a"} 2)"),
            std::string::npos);
}

TEST(WebhooksTest, ADeliveryOutlivesABrokerKilledWhileItWasDue) {
  auto cluster = TestCluster::Start(Options());
  Receiver receiver;
  receiver.fail_first = 1000;
  auto r = cluster->Submit(
      {{"language", "shell"}, {"code", "echo ok"}, {"callback_url", receiver.url()}});
  ASSERT_EQ(r.body["status"], "succeeded") << r.raw;
  ASSERT_TRUE(receiver.WaitForCount(1, seconds(30))) << cluster->DumpLogs();
  cluster->broker(0).Kill();
  receiver.fail_first = 0;
  const size_t before = receiver.got().size();
  std::this_thread::sleep_for(seconds(2));
  EXPECT_EQ(receiver.got().size(), before) << "a dead broker delivered";
  receiver.fail_first = static_cast<int>(before);  // the next one is accepted
  cluster->RestartBroker(0);
  ASSERT_TRUE(receiver.WaitForCount(before + 1, seconds(60))) << cluster->DumpLogs();
  const auto got = receiver.got();
  EXPECT_EQ(got.back().id, r.body["id"]);
  EXPECT_EQ(got.back().attempt, std::to_string(before + 1));
  ExpectSigned(got.back());
}

TEST(WebhooksTest, CallbackUrlsAreCheckedAtSubmitAndBlockedJobsAreDeliveredToo) {
  auto cluster = TestCluster::Start(Options());
  Receiver receiver;
  struct Case {
    json url;
    int status;
    std::string code;
    std::string token;
  };
  for (const Case& c : std::vector<Case>{
           {"http://10.0.0.1:8080/hook", 403, "FORBIDDEN", TestCluster::kToken},
           {"http://localhost:8080/hook", 403, "FORBIDDEN", TestCluster::kToken},
           {receiver.url(), 403, "FORBIDDEN", TestCluster::kOtherToken},  // no webhooks
           {"ftp://127.0.0.1/hook", 400, "INVALID_REQUEST", TestCluster::kToken},
           {"http://user@127.0.0.1/hook", 400, "INVALID_REQUEST", TestCluster::kToken},
           {"http://127.0.0.1/hook#x", 400, "INVALID_REQUEST", TestCluster::kToken},
           {std::string(3000, 'h'), 400, "INVALID_REQUEST", TestCluster::kToken},
           {7, 400, "INVALID_REQUEST", TestCluster::kToken}}) {
    auto r = cluster->Submit(
        {{"language", "python"}, {"code", "print(1)"}, {"callback_url", c.url}}, c.token);
    EXPECT_EQ(r.status, c.status) << c.url.dump() << " -> " << r.raw;
    EXPECT_EQ(r.body["error"]["code"], c.code) << r.raw;
    EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind("callback_url: ", 0), 0u)
        << r.raw;
  }
  EXPECT_TRUE(receiver.got().empty());
  // A job a policy rule refuses still ends, and its end is delivered.
  auto blocked = cluster->Submit(
      {{"language", "shell"}, {"code", "mkfs /dev/null"}, {"callback_url", receiver.url()}});
  ASSERT_EQ(blocked.body["error"]["code"], "SECURITY_BLOCKED") << blocked.raw;
  ASSERT_TRUE(receiver.WaitForCount(1, seconds(30))) << cluster->DumpLogs();
  const auto got = receiver.got();
  EXPECT_EQ(got[0].id, blocked.body["id"]);
  EXPECT_EQ(json::parse(got[0].body)["status"], "rejected");
  ExpectSigned(got[0]);
}

}  // namespace
}  // namespace kiln::testing
