// RedisEndpoint::Parse and Redacted: the URL forms of docs/operations.md
// ("Redis: authentication, Sentinel and failover"), credentials and their
// percent-decoding, sentinel lists, options, and clear errors that never
// quote a password. Pure parsing: no Redis.
#include "broker/store/redis_endpoint.hpp"

#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

RedisEndpoint Ok(std::string_view url) {
  auto ep = RedisEndpoint::Parse(url);
  EXPECT_TRUE(ep.ok()) << url << ": " << ep.status().ToString();
  return ep.ok() ? *ep : RedisEndpoint{};
}

// The error's message; fails the test when the URL parses.
std::string Bad(std::string_view url) {
  auto ep = RedisEndpoint::Parse(url);
  EXPECT_FALSE(ep.ok()) << url << " parsed";
  if (ep.ok()) return "";
  EXPECT_EQ(ep.status().code(), common::Code::kInvalidRequest) << url;
  return ep.status().message();
}

TEST(RedisEndpointTest, PlainFormsAreAsBefore) {
  RedisEndpoint ep = Ok("redis://10.0.0.5:6380/2");
  EXPECT_EQ(ep.host, "10.0.0.5");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 2);
  EXPECT_TRUE(ep.user.empty());
  EXPECT_TRUE(ep.password.empty());
  EXPECT_FALSE(ep.uses_sentinel());
  EXPECT_EQ(ep.min_replicas, 0);

  ep = Ok("redis://redis");
  EXPECT_EQ(ep.host, "redis");
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(Ok("redis://").host, "127.0.0.1");
  EXPECT_EQ(Ok("redis://:6390").port, 6390);
  EXPECT_EQ(Ok("redis://[::1]:7000").host, "::1");
  EXPECT_EQ(Ok("redis://[::1]:7000").port, 7000);

  ep = Ok("unix:///run/redis/redis.sock");
  EXPECT_EQ(ep.unix_path, "/run/redis/redis.sock");
  EXPECT_TRUE(ep.host.empty());
  EXPECT_EQ(Ok("unix:///tmp/a@b.sock").unix_path, "/tmp/a@b.sock");
}

TEST(RedisEndpointTest, CredentialsArePercentDecoded) {
  RedisEndpoint ep = Ok("redis://:s3cret@redis:6379");
  EXPECT_TRUE(ep.user.empty());
  EXPECT_EQ(ep.password, "s3cret");

  ep = Ok("redis://kiln:p%40ss%3Aw%2Frd%25@redis/1");
  EXPECT_EQ(ep.user, "kiln");
  EXPECT_EQ(ep.password, "p@ss:w/rd%");
  EXPECT_EQ(ep.host, "redis");
  EXPECT_EQ(ep.db, 1);

  // A password written raw still parses: the credentials end at the last '@'.
  ep = Ok("redis://kiln:a/b?c:d@e@redis:7000/3");
  EXPECT_EQ(ep.user, "kiln");
  EXPECT_EQ(ep.password, "a/b?c:d@e");
  EXPECT_EQ(ep.host, "redis");
  EXPECT_EQ(ep.port, 7000);
  EXPECT_EQ(ep.db, 3);

  ep = Ok("unix://kiln:pw%2F1@/run/redis.sock?db=4");
  EXPECT_EQ(ep.user, "kiln");
  EXPECT_EQ(ep.password, "pw/1");
  EXPECT_EQ(ep.unix_path, "/run/redis.sock");
  EXPECT_EQ(ep.db, 4);
  EXPECT_EQ(Ok("unix://:pw@/run/redis.sock").password, "pw");
}

TEST(RedisEndpointTest, SentinelListsAndOptions) {
  RedisEndpoint ep =
      Ok("redis+sentinel://app:pw@10.0.0.1:26380,10.0.0.2,[::1]:5000/kiln-main/2"
         "?sentinel_password=s%26p&min_replicas=1&replica_timeout_ms=250");
  ASSERT_EQ(ep.sentinels.size(), 3u);
  EXPECT_EQ(ep.sentinels[0].host, "10.0.0.1");
  EXPECT_EQ(ep.sentinels[0].port, 26380);
  EXPECT_EQ(ep.sentinels[1].host, "10.0.0.2");
  EXPECT_EQ(ep.sentinels[1].port, kDefaultSentinelPort);
  EXPECT_EQ(ep.sentinels[2].host, "::1");
  EXPECT_EQ(ep.sentinels[2].port, 5000);
  EXPECT_EQ(ep.master_name, "kiln-main");
  EXPECT_EQ(ep.db, 2);
  EXPECT_EQ(ep.user, "app");
  EXPECT_EQ(ep.password, "pw");
  EXPECT_EQ(ep.sentinel_password, "s&p");
  EXPECT_TRUE(ep.sentinel_user.empty());
  EXPECT_EQ(ep.min_replicas, 1);
  EXPECT_EQ(ep.replica_timeout_ms, 250);
  EXPECT_TRUE(ep.uses_sentinel());

  ep = Ok("redis+sentinel://s1/m");
  EXPECT_EQ(ep.master_name, "m");
  EXPECT_EQ(ep.db, 0);
  EXPECT_TRUE(ep.password.empty());

  // min_replicas without a timeout gets a bounded one: WAIT 0 would wait forever.
  ep = Ok("redis://r?min_replicas=2");
  EXPECT_EQ(ep.min_replicas, 2);
  EXPECT_EQ(ep.replica_timeout_ms, kDefaultReplicaTimeoutMs);
}

TEST(RedisEndpointTest, BadInputGetsAClearError) {
  EXPECT_NE(Bad("http://redis:6379").find("must start with redis://"), std::string::npos);
  EXPECT_NE(Bad("rediss://redis:6379").find("TLS"), std::string::npos);
  EXPECT_NE(Bad("redis://redis:0").find("bad port '0'"), std::string::npos);
  EXPECT_NE(Bad("redis://redis:65536").find("bad port"), std::string::npos);
  EXPECT_NE(Bad("redis://redis:").find("empty port"), std::string::npos);
  EXPECT_NE(Bad("redis://redis/x").find("bad database number 'x'"), std::string::npos);
  EXPECT_NE(Bad("redis://redis?min_replica=1").find("unknown option 'min_replica'"),
            std::string::npos);
  EXPECT_NE(Bad("redis://redis?replica_timeout_ms=0").find("1 to 1500"), std::string::npos);
  EXPECT_NE(Bad("redis://redis?replica_timeout_ms=5000").find("1 to 1500"), std::string::npos);
  EXPECT_NE(Bad("redis://redis?min_replicas=-1").find("min_replicas"), std::string::npos);
  EXPECT_NE(Bad("redis://redis?sentinel_password=x").find("unknown option"), std::string::npos);
  EXPECT_NE(Bad("redis://redis?db=1").find("unknown option 'db'"), std::string::npos);
  EXPECT_NE(Bad("unix://").find("empty unix socket path"), std::string::npos);
  EXPECT_NE(Bad("redis+sentinel://s1:26379").find("needs the master's name"), std::string::npos);
  EXPECT_NE(Bad("redis+sentinel://s1,,s2/m").find("empty host"), std::string::npos);
  EXPECT_NE(Bad("redis+sentinel://s1:x/m").find("bad port 'x'"), std::string::npos);
  EXPECT_NE(Bad("redis+sentinel://s1/m/2/3").find("bad database number"), std::string::npos);
  EXPECT_NE(Bad("redis+sentinel://s1/m?sentinel_user=u").find("needs a sentinel_password"),
            std::string::npos);
  EXPECT_NE(Bad("redis://[::1:6379").find("unclosed"), std::string::npos);
}

TEST(RedisEndpointTest, ErrorsNeverQuoteThePassword) {
  // A bad escape, a user given with an empty password, and a password
  // written without its ':' (so parsed as the user).
  for (const char* url : {"redis://kiln:Hunter2%zz@redis", "redis://Hunter2@redis",
                          "redis://kiln:@redis:Hunter2", "redis://:Hunter2@redis:bad"}) {
    const std::string error = Bad(url);
    EXPECT_EQ(error.find("Hunter2"), std::string::npos) << error;
  }
  EXPECT_NE(Bad("redis://kiln:Hunter2%zz@redis").find("the password"), std::string::npos);
}

TEST(RedisEndpointTest, RedactedHidesEveryPassword) {
  EXPECT_EQ(Ok("redis://kiln:Hunter2@redis:6380/2").Redacted(), "redis://kiln:***@redis:6380/2");
  EXPECT_EQ(Ok("redis://:Hunter2@redis").Redacted(), "redis://:***@redis:6379");
  EXPECT_EQ(Ok("redis://redis").Redacted(), "redis://redis:6379");
  EXPECT_EQ(Ok("unix://:Hunter2@/run/r.sock?db=3").Redacted(), "unix://:***@/run/r.sock?db=3");
  EXPECT_EQ(Ok("redis+sentinel://u:Hunter2@a:1,b/m/1?sentinel_user=su&sentinel_password=Hunter2"
               "&min_replicas=1")
                .Redacted(),
            "redis+sentinel://u:***@a:1,b:26379/m/1?sentinel_user=su&sentinel_password=***"
            "&min_replicas=1&replica_timeout_ms=500");
  // What Redacted() prints parses back to the same place.
  RedisEndpoint back = Ok(Ok("redis://k%40x:pw@[::1]:7000/5").Redacted());
  EXPECT_EQ(back.user, "k@x");
  EXPECT_EQ(back.host, "::1");
  EXPECT_EQ(back.port, 7000);
  EXPECT_EQ(back.db, 5);
}

}  // namespace
}  // namespace kiln::broker
