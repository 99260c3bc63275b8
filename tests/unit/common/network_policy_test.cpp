// Network on request's destinations (common/network_policy.hpp): what parses,
// what a job's list may ask of its tenant's, and the usage a worker reports.
#include "common/network_policy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kiln::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<Destination> List(const std::vector<std::string>& texts) {
  auto l = ParseDestinations(texts, "allow");
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : std::vector<Destination>{};
}

TEST(NetworkPolicyTest, DestinationsParseAndNormalize) {
  auto d = ParseDestination("API.GitHub.com.:443");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->host, "api.github.com");
  EXPECT_EQ(d->port, 443);
  EXPECT_EQ(ParseDestination("*.wikipedia.org:*")->ToString(), "*.wikipedia.org:*");
  EXPECT_EQ(ParseDestination("*:443")->host, "*");
  EXPECT_EQ(ParseDestination("10.0.0.5:8080")->host, "10.0.0.5");
  for (const char* bad : {"",          "api.github.com",  "a.com:0",       "a.com:65536",
                          "a.com:x",   "a.com:-1",        ":443",          "*.*.com:443",
                          "a..com:1",  "-a.com:1",        "a-.com:1",      "a b.com:1",
                          "[::1]:443", "::1:443",         "*.10.0.0.1:80", "a.com:443/x",
                          "u@a.com:1", "http://a.com:80", "a.com:1:2",     "*a.com:1"}) {
    auto r = ParseDestination(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' passed as " << (r.ok() ? r->ToString() : "");
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidRequest) << bad;
    }
  }
  EXPECT_FALSE(ParseDestination(std::string(300, 'a') + ":1").ok());
}

TEST(NetworkPolicyTest, ListsAreBoundedAndHaveNoTwins) {
  auto twice = ParseDestinations({"a.com:1", "A.com:1"}, "network");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), StartsWith("network[1]: "));
  std::vector<std::string> many;
  for (int i = 0; i < 65; ++i) many.push_back("h" + std::to_string(i) + ".com:1");
  auto over = ParseDestinations(many, "network");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kLimitExceeded);
  auto bad = ParseDestinations({"a.com:1", "nope"}, "network");
  EXPECT_THAT(bad.status().message(), StartsWith("network[1]: "));
}

TEST(NetworkPolicyTest, MatchesHostsAndPorts) {
  const auto l = List({"api.github.com:443", "*.wikipedia.org:443", "10.0.0.5:80", "any.io:*"});
  EXPECT_TRUE(Matches(l, "api.github.com", 443));
  EXPECT_FALSE(Matches(l, "api.github.com", 80));
  EXPECT_FALSE(Matches(l, "github.com", 443));
  EXPECT_FALSE(Matches(l, "xapi.github.com", 443));
  EXPECT_TRUE(Matches(l, "en.wikipedia.org", 443));
  EXPECT_TRUE(Matches(l, "a.b.wikipedia.org", 443));
  EXPECT_FALSE(Matches(l, "wikipedia.org", 443));      // *. is below the name only
  EXPECT_FALSE(Matches(l, "evilwikipedia.org", 443));  // label boundary
  EXPECT_FALSE(Matches(l, "en.wikipedia.org.evil.io", 443));
  EXPECT_TRUE(Matches(l, "10.0.0.5", 80));
  EXPECT_FALSE(Matches(l, "10.0.0.6", 80));
  EXPECT_TRUE(Matches(l, "any.io", 1));
  EXPECT_TRUE(Matches(l, "any.io", 65535));
  EXPECT_TRUE(Matches(List({"*:443"}), "1.2.3.4", 443));
  EXPECT_FALSE(Matches(List({"*.com:443"}), "1.2.3.4", 443));
  EXPECT_FALSE(Matches({}, "api.github.com", 443));
}

TEST(NetworkPolicyTest, AJobMayNarrowItsTenantsListNeverWiden) {
  const auto tenant = List({"api.github.com:443", "*.wikipedia.org:443", "docs.io:*"});
  auto covered = [&](const char* text) { return Covers(tenant, *ParseDestination(text)); };
  EXPECT_TRUE(covered("api.github.com:443"));
  EXPECT_TRUE(covered("en.wikipedia.org:443"));
  EXPECT_TRUE(covered("*.wikipedia.org:443"));
  EXPECT_TRUE(covered("*.en.wikipedia.org:443"));
  EXPECT_TRUE(covered("docs.io:8443"));
  EXPECT_TRUE(covered("docs.io:*"));
  EXPECT_FALSE(covered("api.github.com:80"));
  EXPECT_FALSE(covered("wikipedia.org:443"));
  EXPECT_FALSE(covered("*.org:443"));
  EXPECT_FALSE(covered("*:443"));
  EXPECT_FALSE(covered("github.com:443"));
  EXPECT_FALSE(covered("api.github.com:*"));
  EXPECT_TRUE(Covers(List({"*:*"}), *ParseDestination("*:443")));
}

TEST(NetworkPolicyTest, UsageRoundTripsAndRefusesWhatAWorkerMayNotSay) {
  NetworkUsage u;
  u.connections = 2;
  u.refused = 1;
  u.bytes_in = 1000;
  u.bytes_out = 200;
  u.destinations = {{"api.github.com", 443, true, 2, ""}, {"evil.io", 80, false, 1, "not_allowed"}};
  u.limit = "bytes";
  auto back = NetworkUsage::FromJson(u.ToJson().dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, u);
  for (const char* bad :
       {"[]", "{}", R"({"destinations": [], "bytes_in": -1})",
        R"({"destinations": [{"host": "a b", "port": 1, "allowed": true}]})",
        R"({"destinations": [{"host": "a.io", "port": 0, "allowed": true}]})",
        R"({"destinations": [{"host": "a.io", "port": 1, "allowed": false, "reason": "x"}]})",
        R"({"destinations": [], "limit": "cpu"})", "not json"}) {
    EXPECT_FALSE(NetworkUsage::FromJson(bad).ok()) << bad;
  }
  std::string many = R"({"destinations": [)";
  for (int i = 0; i < 65; ++i) {
    many += std::string(i ? "," : "") + R"({"host": "a.io", "port": 1, "allowed": true})";
  }
  EXPECT_FALSE(NetworkUsage::FromJson(many + "]}").ok());
}

}  // namespace
}  // namespace kiln::common
