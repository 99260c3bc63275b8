// RedisConnection and RedisPool through Redis Sentinel, against real
// processes: a master, a replica and three sentinels; the master is killed,
// the sentinels fail over, and the pool's connections follow the new master
// on their next use. Also: a replica named as master is never used, and
// sentinels that cannot answer give a clear error in bounded time. Each test
// starts its own servers on free loopback ports in its own temp dir.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "broker/store/redis_connection.hpp"
#include "tests/unit/broker/redis_servers.hpp"

namespace kiln::broker {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

class RedisSentinelTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("kiln-sentinel"); }
  void TearDown() override { testing::RemoveTree(dir_); }  // servers are the tests' locals

  // The master's port according to the sentinel on `port`; 0 when unknown.
  static int MasterPort(int port, const std::string& name = "m") {
    auto s = Admin(port);
    if (s == nullptr) return 0;
    auto r = s->Command({"SENTINEL", "get-master-addr-by-name", name});
    if (!r.ok() || r->elements.size() != 2) return 0;
    return std::stoi(r->elements[1].str);
  }
  // Whether the sentinel on `port` knows `sentinels` others and `replicas` replicas of "m".
  static bool Knows(int port, size_t sentinels, size_t replicas) {
    auto s = Admin(port);
    if (s == nullptr) return false;
    auto others = s->Command({"SENTINEL", "sentinels", "m"});
    auto reps = s->Command({"SENTINEL", "replicas", "m"});
    return others.ok() && reps.ok() && others->elements.size() == sentinels &&
           reps->elements.size() == replicas;
  }
  static bool Synced(int port) {
    return testing::WaitFor(
        [&] {
          auto admin = Admin(port);
          auto info = admin ? admin->Command({"INFO", "replication"})
                            : common::StatusOr<RedisReply>(common::Unavailable("down"));
          return info.ok() && InfoField(info->str, "master_link_status") == "up";
        },
        seconds(10));
  }
  // Writes `key` and says which server took it (its port).
  static common::StatusOr<int> Write(RedisConnection* conn, const std::string& key) {
    ASSIGN_OR_RETURN(auto replies, conn->Pipeline({{"SET", key, "1"}, {"INFO", "server"}}));
    return std::stoi(InfoField(replies[1].str, "tcp_port"));
  }

  std::string dir_;
};

TEST_F(RedisSentinelTest, PoolFollowsTheNewMasterAfterTheMasterDies) {
  RedisServer master = RedisServer::Start(dir_, "master");
  RedisServer replica = RedisServer::Start(
      dir_, "replica", {"--replicaof", "127.0.0.1", std::to_string(master.port)});
  ASSERT_TRUE(Synced(replica.port));
  std::vector<RedisServer> sentinels;
  std::string url = "redis+sentinel://";
  for (int i = 0; i < 3; ++i) {
    sentinels.push_back(
        RedisServer::StartSentinel(dir_, "sentinel" + std::to_string(i), master.port));
    url += (i > 0 ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(sentinels.back().port);
  }
  url += "/m";
  // Sentinels find each other through the master's hello channel (every 2 s).
  for (const RedisServer& s : sentinels) {
    ASSERT_TRUE(testing::WaitFor([&] { return Knows(s.port, 2, 1); }, seconds(15))) << s.name;
  }
  auto pool = RedisPool::Create(url, 2);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  {
    auto a = (*pool)->Acquire();
    auto b = (*pool)->Acquire();
    for (auto* lease : {&a, &b}) {
      auto port = Write(lease->operator->(), "before");
      ASSERT_TRUE(port.ok()) << port.status().ToString();
      EXPECT_EQ(*port, master.port);
    }
  }

  const auto killed = Clock::now();
  master.process.Kill();
  // Until the sentinels agree on a new master, writes fail as retryable.
  int failures = 0;
  while (MasterPort(sentinels[0].port) != replica.port && Clock::now() - killed < seconds(20)) {
    auto conn = (*pool)->Acquire();
    auto port = Write(conn.operator->(), "during");
    if (!port.ok()) {
      ++failures;
      EXPECT_EQ(port.status().code(), common::Code::kUnavailable) << port.status().ToString();
    } else {
      EXPECT_NE(*port, master.port);
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  ASSERT_EQ(MasterPort(sentinels[0].port), replica.port) << "no failover within 20 s";
  std::printf("failover after %.1f s, %d failed writes meanwhile\n",
              std::chrono::duration<double>(Clock::now() - killed).count(), failures);
  EXPECT_GT(failures, 0);

  // Once the sentinels name the new master, both pooled connections write
  // there within a couple of tries (the promoted replica may still refuse
  // writes for a moment while it turns into a master).
  auto a = (*pool)->Acquire();
  auto b = (*pool)->Acquire();
  for (auto* lease : {&a, &b}) {
    common::StatusOr<int> port = common::Unavailable("not tried");
    for (int attempt = 0; attempt < 3 && !port.ok(); ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(milliseconds(200));
      port = Write(lease->operator->(), "after");
    }
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    EXPECT_EQ(*port, replica.port);
  }
  auto on_new = Admin(replica.port)->Command({"EXISTS", "before", "after"});
  ASSERT_TRUE(on_new.ok());
  EXPECT_EQ(on_new->integer, 2);
}

TEST_F(RedisSentinelTest, AReplicaNamedAsMasterIsNeverUsed) {
  RedisServer master = RedisServer::Start(dir_, "master");
  RedisServer replica = RedisServer::Start(
      dir_, "replica", {"--replicaof", "127.0.0.1", std::to_string(master.port)});
  ASSERT_TRUE(Synced(replica.port));
  // A sentinel told the replica is master "stale" (as one is for a moment
  // after a failover), slow to notice.
  RedisServer sentinel =
      RedisServer::StartSentinel(dir_, "sentinel", replica.port, "stale", 1, 60000);
  auto ep = RedisEndpoint::Parse("redis+sentinel://127.0.0.1:" + std::to_string(sentinel.port) +
                                 "/stale");
  ASSERT_TRUE(ep.ok());
  auto conn = RedisConnection::Lazy(*ep);
  const auto start = Clock::now();
  auto r = conn->Command({"PING"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), common::Code::kUnavailable);
  EXPECT_NE(r.status().message().find("but it is a replica"), std::string::npos)
      << r.status().message();
  EXPECT_LT(Clock::now() - start, seconds(2));
  EXPECT_EQ(conn->connects(), 0u);
}

TEST_F(RedisSentinelTest, SentinelsThatCannotAnswerGiveAClearError) {
  RedisServer master = RedisServer::Start(dir_, "master");
  RedisServer sentinel = RedisServer::StartSentinel(dir_, "sentinel", master.port, "m", 1, 60000);
  const std::string nobody = "127.0.0.1:" + std::to_string(testing::FreePort());
  const std::string s = "127.0.0.1:" + std::to_string(sentinel.port);

  // A master name no sentinel knows: a configuration error, not retried.
  auto ep = RedisEndpoint::Parse("redis+sentinel://" + s + "/other");
  ASSERT_TRUE(ep.ok());
  auto unknown = RedisConnection::Lazy(*ep)->Command({"PING"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), common::Code::kInternal);
  EXPECT_NE(unknown.status().message().find("does not know a master of that name"),
            std::string::npos)
      << unknown.status().message();

  // No sentinel reachable: retryable, in bounded time.
  ep = RedisEndpoint::Parse("redis+sentinel://" + nobody + "/m");
  ASSERT_TRUE(ep.ok());
  const auto start = Clock::now();
  auto unreachable = RedisConnection::Lazy(*ep)->Command({"PING"});
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().code(), common::Code::kUnavailable);
  EXPECT_NE(unreachable.status().message().find("no sentinel gave the address of master 'm'"),
            std::string::npos);
  EXPECT_LT(Clock::now() - start, seconds(2));

  // The first sentinel down, the second answers: the master is found.
  ep = RedisEndpoint::Parse("redis+sentinel://" + nobody + "," + s + "/m");
  ASSERT_TRUE(ep.ok());
  auto conn = RedisConnection::Lazy(*ep);
  auto port = Write(conn.get(), "k");
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EXPECT_EQ(*port, master.port);

  // A sentinel password where the sentinel has none: refused, and not quoted.
  ep = RedisEndpoint::Parse("redis+sentinel://" + s + "/m?sentinel_password=Hunter2");
  ASSERT_TRUE(ep.ok());
  auto refused = RedisConnection::Lazy(*ep)->Command({"PING"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().find("Hunter2"), std::string::npos);
  EXPECT_NE(refused.status().message().find("logging in"), std::string::npos);
}

}  // namespace
}  // namespace kiln::broker
