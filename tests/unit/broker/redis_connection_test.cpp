// RedisConnection against real redis-server processes: AUTH with a
// password and with an ACL user on every (re)connect, a master demoted
// under an open connection (READONLY), and replica acknowledgement (WAIT)
// with the replica up and stopped. Each test starts its own servers on free
// loopback ports in its own temp dir and stops only those.
#include "broker/store/redis_connection.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/unit/broker/redis_servers.hpp"

namespace kiln::broker {
namespace {

using Clock = std::chrono::steady_clock;

class RedisConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("kiln-redisconn"); }
  void TearDown() override { testing::RemoveTree(dir_); }  // servers are the tests' locals

  static std::unique_ptr<RedisConnection> Lazy(const std::string& url) {
    auto ep = RedisEndpoint::Parse(url);
    EXPECT_TRUE(ep.ok()) << ep.status().ToString();
    return RedisConnection::Lazy(ep.ok() ? *ep : RedisEndpoint{});
  }
  static std::string Url(int port, const std::string& rest = "") {
    return "redis://127.0.0.1:" + std::to_string(port) + rest;
  }
  // Waits until the replica on `port` has synced with its master.
  static bool Synced(int port) {
    return testing::WaitFor(
        [&] {
          auto admin = Admin(port);
          auto info = admin ? admin->Command({"INFO", "replication"})
                            : common::StatusOr<RedisReply>(common::Unavailable("down"));
          return info.ok() && InfoField(info->str, "master_link_status") == "up";
        },
        std::chrono::seconds(10));
  }

  std::string dir_;
  const RedisScript set_script_{"redis.call('SET', ARGV[1], ARGV[2]) return 1"};
};

TEST_F(RedisConnectionTest, PasswordIsSentOnEveryConnect) {
  const std::string password = "p@ss:w/rd%Hunter2";
  RedisServer redis = RedisServer::Start(dir_, "auth", {"--requirepass", password});

  auto anonymous = Lazy(Url(redis.port));
  auto refused = anonymous->Command({"PING"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), common::Code::kInternal);
  EXPECT_NE(refused.status().message().find("NOAUTH"), std::string::npos);

  // Percent-encoded in the URL; database 3 selected after AUTH.
  auto conn =
      Lazy("redis://:p%40ss%3Aw%2Frd%25Hunter2@127.0.0.1:" + std::to_string(redis.port) + "/3");
  ASSERT_TRUE(conn->Command({"SET", "k", "v"}).ok());
  auto info = conn->Command({"CLIENT", "INFO"});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_NE(info->str.find(" db=3 "), std::string::npos) << info->str;
  EXPECT_EQ(conn->connects(), 1u);

  // Redis drops every client: the next use reconnects, logs in again and
  // is back on database 3.
  auto admin = Admin(redis.port, password);
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->Command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}).ok());
  auto got = conn->Command({"GET", "k"});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->str, "v");
  EXPECT_EQ(conn->connects(), 2u);

  auto wrong = Lazy("redis://:Hunter3@127.0.0.1:" + std::to_string(redis.port));
  auto denied = wrong->Command({"PING"});
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), common::Code::kInternal);  // waiting does not fix it
  EXPECT_NE(denied.status().message().find("WRONGPASS"), std::string::npos);
  EXPECT_NE(denied.status().message().find("logging in"), std::string::npos);
  EXPECT_EQ(denied.status().message().find("Hunter3"), std::string::npos)
      << denied.status().message();
  EXPECT_EQ(wrong->connects(), 0u);  // not left connected without its log-in
}

TEST_F(RedisConnectionTest, AclUserLogsInAsItself) {
  RedisServer redis = RedisServer::Start(dir_, "acl", {"--requirepass", "adminpw"});
  auto admin = Admin(redis.port, "adminpw");
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(
      admin->Command({"ACL", "SETUSER", "kiln", "on", ">k1ln:pw@x", "~*", "&*", "+@all"}).ok());

  auto conn = Lazy("redis://kiln:k1ln%3Apw%40x@127.0.0.1:" + std::to_string(redis.port));
  auto who = conn->Command({"ACL", "WHOAMI"});
  ASSERT_TRUE(who.ok()) << who.status().ToString();
  EXPECT_EQ(who->str, "kiln");

  auto wrong = Lazy("redis://kiln:Hunter9@127.0.0.1:" + std::to_string(redis.port));
  auto denied = wrong->Command({"PING"});
  ASSERT_FALSE(denied.ok());
  EXPECT_NE(denied.status().message().find("WRONGPASS"), std::string::npos);
  EXPECT_NE(denied.status().message().find("as user 'kiln'"), std::string::npos);
  EXPECT_EQ(denied.status().message().find("Hunter9"), std::string::npos);
  // A user the ACL does not allow a command: a clear NOPERM, not retryable.
  ASSERT_TRUE(admin->Command({"ACL", "SETUSER", "reader", "on", ">r", "~*", "+get"}).ok());
  auto reader = Lazy("redis://reader:r@127.0.0.1:" + std::to_string(redis.port));
  auto set = reader->Command({"SET", "k", "v"});
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), common::Code::kInternal);
  EXPECT_NE(set.status().message().find("NOPERM"), std::string::npos);
}

TEST_F(RedisConnectionTest, DemotedMasterIsLeftOnReadOnly) {
  RedisServer a = RedisServer::Start(dir_, "a");
  RedisServer b = RedisServer::Start(dir_, "b");
  auto conn = Lazy(Url(a.port));
  ASSERT_TRUE(conn->Eval(set_script_, {"k", "1"}).ok());
  ASSERT_EQ(conn->connects(), 1u);

  // `a` becomes a replica while our connection stays open.
  auto admin = Admin(a.port);
  ASSERT_TRUE(admin->Command({"REPLICAOF", "127.0.0.1", std::to_string(b.port)}).ok());
  auto write = conn->Eval(set_script_, {"k", "2"});
  ASSERT_FALSE(write.ok());
  EXPECT_EQ(write.status().code(), common::Code::kUnavailable);  // callers retry
  EXPECT_NE(write.status().message().find("READONLY"), std::string::npos);
  EXPECT_EQ(conn->connects(), 1u);  // the same connection got READONLY...

  ASSERT_TRUE(admin->Command({"REPLICAOF", "NO", "ONE"}).ok());
  auto again = conn->Eval(set_script_, {"k", "3"});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(conn->connects(), 2u);  // ...and was dropped: the next use reconnected
}

TEST_F(RedisConnectionTest, WritesWaitForTheReplica) {
  RedisServer master = RedisServer::Start(dir_, "master");
  RedisServer replica = RedisServer::Start(
      dir_, "replica", {"--replicaof", "127.0.0.1", std::to_string(master.port)});
  ASSERT_TRUE(Synced(replica.port));

  // A generous timeout while the replica is up (a loaded host may be slow
  // to acknowledge), a short one to time its absence.
  auto conn = Lazy(Url(master.port, "?min_replicas=1&replica_timeout_ms=1500"));
  auto plain = Lazy(Url(master.port));
  ASSERT_TRUE(conn->Eval(set_script_, {"k1", "v"}).ok());
  ASSERT_TRUE(conn->Pipeline({{"SET", "k2", "v"}, {"GET", "k2"}}).ok());
  auto many = conn->EvalMany(set_script_, {{"k3", "v"}, {"k4", "v"}});
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  ASSERT_TRUE(conn->Command({"SET", "k5", "v"}).ok());
  auto replicated = Admin(replica.port)->Command({"EXISTS", "k1", "k2", "k3", "k4", "k5"});
  ASSERT_TRUE(replicated.ok());
  EXPECT_EQ(replicated->integer, 5);  // acknowledged: on the replica already

  replica.process.Kill();
  conn = Lazy(Url(master.port, "?min_replicas=1&replica_timeout_ms=300"));
  const auto start = Clock::now();
  auto lost = conn->Eval(set_script_, {"k6", "v"});
  const auto waited = Clock::now() - start;
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), common::Code::kUnavailable);
  EXPECT_EQ(lost.status().message(),
            "redis: only 0 of 1 replicas acknowledged the write within 300 ms");
  EXPECT_TRUE(conn->unanswered());  // it may have run: it did
  EXPECT_GE(waited, std::chrono::milliseconds(250));
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
  EXPECT_EQ(Admin(master.port)->Command({"GET", "k6"})->str, "v");  // on the master, not durable

  EXPECT_EQ(conn->Pipeline({{"SET", "k7", "v"}}).status().code(), common::Code::kUnavailable);
  EXPECT_EQ(conn->EvalMany(set_script_, {{"k8", "v"}}).status().code(), common::Code::kUnavailable);
  EXPECT_EQ(conn->Command({"SET", "k9", "v"}).status().code(), common::Code::kUnavailable);
  // Reads through Command() do not wait; the connection was kept.
  const auto read_start = Clock::now();
  EXPECT_TRUE(conn->Command({"GET", "k1"}).ok());
  EXPECT_LT(Clock::now() - read_start, std::chrono::milliseconds(250));
  EXPECT_EQ(conn->connects(), 1u);
  // Without min_replicas the same write succeeds: the refusal was WAIT's.
  EXPECT_TRUE(plain->Eval(set_script_, {"k10", "v"}).ok());
}

// The cost of WAIT, for docs/operations.md: run with
//   build/tests/unit/broker/redis_connection_test --gtest_filter='*WaitCost*'
//       --gtest_also_run_disabled_tests
TEST_F(RedisConnectionTest, DISABLED_WaitCost) {
  RedisServer master = RedisServer::Start(dir_, "master");
  RedisServer replica = RedisServer::Start(
      dir_, "replica", {"--replicaof", "127.0.0.1", std::to_string(master.port)});
  ASSERT_TRUE(Synced(replica.port));
  constexpr int kRuns = 5000;
  for (const std::string& query :
       {std::string(), std::string("?min_replicas=1&replica_timeout_ms=1500")}) {
    auto conn = Lazy(Url(master.port, query));
    std::vector<double> us;
    for (int i = 0; i < kRuns + 200; ++i) {
      const auto start = Clock::now();
      auto r = conn->Eval(set_script_, {"k" + std::to_string(i % 100), "v"});
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (i >= 200) {  // after a warm-up
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    }
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double u : us) sum += u;
    std::printf("Eval %-16s mean %.1f us, p50 %.1f us, p99 %.1f us (%d runs)\n",
                query.empty() ? "(no WAIT)" : query.c_str(), sum / us.size(), us[us.size() / 2],
                us[us.size() * 99 / 100], kRuns);
  }
}

}  // namespace
}  // namespace kiln::broker
