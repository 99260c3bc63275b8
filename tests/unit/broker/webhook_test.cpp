// The pure parts of webhooks: the callback_url parse, the signature (one
// fixed vector the SDKs' verify_webhook tests also use), the retry schedule.
#include <gtest/gtest.h>

#include "broker/webhook/callback_url.hpp"
#include "broker/webhook/webhook_sender.hpp"
#include "broker/webhook/webhook_signature.hpp"

namespace kiln::broker {
namespace {

TEST(Webhooks, TheSignatureIsHmacSha256OfTimestampDotBody) {
  EXPECT_EQ(
      SignWebhook("whsec_test_0123456789", 1700000000, R"({"id":"ex_1","status":"succeeded"})"),
      "t=1700000000,v1=58cd265606efcc8d917df28b4b7a761d6a54f97c21bf1a87712e177333d22244");
  // Another key, another time or another body: another signature.
  const std::string base = SignWebhook("k", 1, "b");
  EXPECT_NE(SignWebhook("K", 1, "b"), base);
  EXPECT_NE(SignWebhook("k", 2, "b").substr(4), base.substr(4));
  EXPECT_NE(SignWebhook("k", 1, "c"), base);
}

TEST(Webhooks, CallbackUrlsAreParsedStrictly) {
  auto u = ParseCallbackUrl("https://Hooks.Example.com/kiln/done?x=1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->host, "hooks.example.com");
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->target, "/kiln/done?x=1");
  EXPECT_EQ(u->Origin(), "https://hooks.example.com:443");
  u = ParseCallbackUrl("http://127.0.0.1:8081");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 8081);
  EXPECT_EQ(u->target, "/");
  u = ParseCallbackUrl("http://h.example?q");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->target, "/?q");
  for (const std::string& bad : std::vector<std::string>{
           "", "ftp://h/x", "h.example/x", "http://", "http:///x", "http://user@h/x", "http://h:0/",
           "http://h:65536/", "http://h:x/", "http://h/x#frag", "http://h /x", "http://[::1]/x",
           "http://*.h/x", "http://h/\x01", "http://h_h!/x",
           "http://h/" + std::string(kMaxCallbackUrlBytes, 'a')}) {
    auto r = ParseCallbackUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().message().rfind("callback_url: ", 0), 0u) << bad;
    }
  }
}

TEST(Webhooks, TriesBackOffExponentiallyToACap) {
  EXPECT_EQ(WebhookSender::Backoff(1), std::chrono::seconds(1));
  EXPECT_EQ(WebhookSender::Backoff(2), std::chrono::seconds(2));
  EXPECT_EQ(WebhookSender::Backoff(5), std::chrono::seconds(16));
  EXPECT_EQ(WebhookSender::Backoff(14), WebhookSender::kMaxBackoff);
  EXPECT_EQ(WebhookSender::Backoff(1000), WebhookSender::kMaxBackoff);
}

}  // namespace
}  // namespace kiln::broker
