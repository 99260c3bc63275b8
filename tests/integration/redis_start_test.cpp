// Start and restart while Redis loads its dataset or is not there yet (issue
// 12, "Start and restart"), with real redis-server, kiln-broker and
// kiln-worker processes on loopback:
//  - a broker started while Redis loads waits (and says so), answers
//    /v1/health 503 meanwhile, and serves a job once loading ends; Redis then
//    restarted under it and loading again: calls answer 503 UNAVAILABLE, the
//    broker lives on and, once Redis serves, no call fails on a connection
//    the restart closed;
//  - a worker and a broker started before Redis exists serve once it starts;
//  - SIGTERM ends a broker that waits for Redis at once;
//  - what waiting cannot fix (here a password Redis asks for) stops the
//    broker at once, saying why.
// A slow load: an RDB of kKeys keys read back with `key-load-delay` (a sleep
// per key) and events processed every 1 KiB, so Redis answers LOADING for
// ~3 s (more under CPU load, never less).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/cluster.hpp"
#include "tests/support/process.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kBin = std::string(KILN_BINARY_DIR) + "/bin/";
constexpr const char* kToken = "redis-start-token";
constexpr const char* kAdminToken = "redis-start-admin";
constexpr int kKeys = 3000;
constexpr int kKeyLoadDelayUs = 1000;
constexpr uint32_t kUidBase = 340000;  // the worker's sandbox uids: [340000, 350000)

class RedisStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("kiln-redis-start");
    redis_port_ = FreePort();
    http_port_ = FreePort();
    zmq_port_ = FreePort();
  }

  void TearDown() override {
    if (HasFailure()) {
      for (const char* log : {"redis.log", "broker.log", "worker.log"}) {
        std::string text = ReadFile(dir_ + "/" + log);
        if (text.size() > 8000) text = "..." + text.substr(text.size() - 8000);
        std::cerr << "==== " << log << " ====\n" << text << "\n";
      }
    }
    worker_.Stop();
    broker_.Stop();
    redis_.Stop();
    if (getenv("KILN_KEEP_TEST_DIR") == nullptr) RemoveTree(dir_);
  }

  std::string RedisCli(const std::string& args) const {
    const std::string cmd = "redis-cli -p " + std::to_string(redis_port_) + " " + args + " 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return out;
    char buf[4096];
    size_t n;
    while ((n = ::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
    return out;
  }
  bool Loading() const { return RedisCli("PING").find("LOADING") != std::string::npos; }

  void StartRedis(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {"/usr/bin/redis-server",
                                     "--port",
                                     std::to_string(redis_port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir_,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    redis_ = ChildProcess::Start(argv, dir_ + "/redis.log");
    ASSERT_TRUE(WaitFor([&] { return CanConnect(redis_port_); }, 10s))
        << "redis-server did not start";
  }
  // A Redis that answers LOADING for a few seconds, from dump.rdb in dir_.
  void StartLoadingRedis() {
    ASSERT_NO_FATAL_FAILURE(StartRedis({"--key-load-delay", std::to_string(kKeyLoadDelayUs),
                                        "--loading-process-events-interval-bytes", "1024"}));
    ASSERT_TRUE(Loading()) << "redis loaded its dataset too fast for the test: "
                           << RedisCli("PING");
  }
  // dump.rdb in dir_ with kKeys keys of 64 bytes.
  void WriteDataset() {
    ASSERT_NO_FATAL_FAILURE(StartRedis({"--enable-debug-command", "local"}));
    ASSERT_TRUE(WaitFor([&] { return RedisCli("PING") == "PONG\n"; }, 10s));
    ASSERT_EQ(RedisCli("DEBUG POPULATE " + std::to_string(kKeys) + " filler 64"), "OK\n");
    ASSERT_EQ(RedisCli("SAVE"), "OK\n");
    redis_.Stop();  // `--save ""`: the dump stays as SAVE wrote it
  }

  void StartBroker() {
    std::ostringstream y;
    y << "broker:\n"
      << "  id: broker-rs\n"
      << "  http: {listen: \"127.0.0.1:" << http_port_ << "\"}\n"
      << "  workers: {endpoint: \"tcp://127.0.0.1:" << zmq_port_
      << "\", heartbeat_interval_ms: 200, heartbeat_liveness: 5}\n"
      << "  redis: {url: \"redis://127.0.0.1:" << redis_port_ << "\"}\n"
      << "tenants:\n"
      << "  - {name: tenant-a, tokens: [\"" << kToken << "\"], enabled: true, auto_approve: true}\n"
      << "admin_tokens: [\"" << kAdminToken << "\"]\n";
    WriteFile(dir_ + "/broker.yaml", y.str());
    broker_started_ = std::chrono::steady_clock::now();
    broker_ = ChildProcess::Start(
        {kBin + "kiln-broker", "--config", dir_ + "/broker.yaml", "--clients", "off"},
        dir_ + "/broker.log");
  }

  void StartWorker() {
    std::ostringstream y;
    y << "worker:\n"
      << "  id: worker-rs\n"
      << "  slots: 2\n"
      << "  warm_per_runtime: 1\n"
      << "  heartbeat_interval_ms: 200\n"
      << "  heartbeat_liveness: 5\n"
      << "  brokers: [\"tcp://127.0.0.1:" << zmq_port_ << "\"]\n"
      << "sandbox:\n"
      << "  state_dir: " << dir_ << "/w\n"
      << "  cgroup_prefix: kiln-rs-" << dir_.substr(dir_.rfind('-') + 1) << "\n"
      << "  uid_base: " << kUidBase << "\n"
      << "  uid_count: 10000\n";
    WriteFile(dir_ + "/worker.yaml", y.str());
    worker_ = ChildProcess::Start({kBin + "kiln-worker", "--config", dir_ + "/worker.yaml"},
                                  dir_ + "/worker.log");
  }

  HttpReply Request(const std::string& method, const std::string& path,
                    const std::string& body = "", const std::string& token = kToken) const {
    httplib::Client cli("127.0.0.1", http_port_);
    cli.set_connection_timeout(2, 0);
    cli.set_read_timeout(30, 0);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    auto r = method == "GET" ? cli.Get(path.c_str(), headers)
                             : cli.Post(path.c_str(), headers, body, "application/json");
    HttpReply reply;
    if (!r) return reply;
    reply.status = r->status;
    reply.raw = r->body;
    reply.body = json::parse(r->body, nullptr, false);
    return reply;
  }
  HttpReply Health() const { return Request("GET", "/v1/health", "", ""); }
  HttpReply Run(const std::string& code) const {
    return Request("POST", "/v1/executions",
                   json{{"language", "python"}, {"code", code}, {"wait", true}}.dump());
  }
  bool WorkerRegistered() const {
    auto r = Request("GET", "/v1/workers", "", kAdminToken);
    return r.status == 200 && r.body["workers"].size() == 1;
  }
  std::string BrokerLog() const { return ReadFile(dir_ + "/broker.log"); }
  bool BrokerLogHas(const std::string& s) const { return BrokerLog().find(s) != std::string::npos; }
  // The job runs and says so, once the broker serves and the worker registered.
  void ExpectServes(const std::string& word, std::string* id = nullptr) {
    ASSERT_TRUE(WaitFor([&] { return Health().status == 200; }, 20s)) << Health().raw;
    ASSERT_TRUE(WaitFor([&] { return WorkerRegistered(); }, 20s)) << "the worker did not register";
    auto r = Run("print('" + word + "')");
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
    EXPECT_EQ(r.body["stdout"], word + "\n") << r.raw;
    if (id != nullptr) *id = r.body["id"].get<std::string>();
  }
  // The statuses of `n` reads of the job at once: they take n of the
  // broker's Redis connections (8 by default), most of them idle since before.
  std::vector<int> ReadAtOnce(const std::string& id, int n) const {
    std::vector<int> statuses(n);
    std::vector<std::thread> readers;
    for (int i = 0; i < n; ++i) {
      readers.emplace_back([&, i] { statuses[i] = Request("GET", "/v1/executions/" + id).status; });
    }
    for (auto& t : readers) t.join();
    return statuses;
  }

  std::string dir_;
  int redis_port_ = 0;
  int http_port_ = 0;
  int zmq_port_ = 0;
  std::chrono::steady_clock::time_point broker_started_;
  ChildProcess redis_;
  ChildProcess broker_;
  ChildProcess worker_;
};

TEST_F(RedisStartTest, BrokerStartedWhileRedisLoadsWaitsAndServes) {
  ASSERT_NO_FATAL_FAILURE(WriteDataset());
  ASSERT_NO_FATAL_FAILURE(StartLoadingRedis());
  StartBroker();
  // It waits, says for what, and its health says why it is not ready.
  ASSERT_TRUE(WaitFor([&] { return BrokerLogHas("waiting for redis"); }, 5s)) << BrokerLog();
  EXPECT_THAT(BrokerLog(), HasSubstr("to answer PING: redis: LOADING"));
  HttpReply health = Health();
  EXPECT_TRUE(Loading()) << "redis finished loading before the broker's health was read";
  EXPECT_EQ(health.status, 503) << health.raw;
  EXPECT_THAT(health.raw, HasSubstr("LOADING")) << health.raw;
  // A worker started while the broker waits registers once it serves.
  StartWorker();
  EXPECT_TRUE(broker_.running());
  std::string id;
  ASSERT_NO_FATAL_FAILURE(ExpectServes("after loading", &id));
  EXPECT_TRUE(BrokerLogHas("serves after")) << BrokerLog();
  EXPECT_THAT(ReadAtOnce(id, 16), ::testing::Each(200));  // all its Redis connections in use

  // Redis restarts under the running broker and loads again (the broker's
  // records with it): calls fail as retryable, nothing crashes.
  ASSERT_EQ(RedisCli("SHUTDOWN SAVE"), "");
  ASSERT_GE(redis_.Wait(10s), 0) << "redis-server did not stop";
  ASSERT_NO_FATAL_FAILURE(StartLoadingRedis());
  HttpReply submit = Run("print('during loading')");
  HttpReply health_during = Health();
  ASSERT_TRUE(Loading()) << "redis finished loading before the calls were made";
  EXPECT_EQ(submit.status, 503) << submit.raw;
  EXPECT_EQ(submit.body["error"]["code"], "UNAVAILABLE") << submit.raw;
  EXPECT_EQ(submit.body["error"]["retryable"], true) << submit.raw;
  EXPECT_EQ(health_during.status, 503) << health_during.raw;
  EXPECT_TRUE(broker_.running());
  // Once Redis serves again, no call fails on a connection the restart
  // closed: such connections are replaced before they are used.
  ASSERT_TRUE(WaitFor([&] { return Health().status == 200; }, 20s)) << Health().raw;
  EXPECT_THAT(ReadAtOnce(id, 16), ::testing::Each(200));
  ASSERT_NO_FATAL_FAILURE(ExpectServes("after the restart"));
  EXPECT_TRUE(broker_.running());
}

TEST_F(RedisStartTest, WorkerAndBrokerStartedBeforeRedisServeOnceItStarts) {
  StartWorker();  // before any broker
  StartBroker();
  ASSERT_TRUE(WaitFor([&] { return BrokerLogHas("waiting for redis"); }, 5s)) << BrokerLog();
  EXPECT_THAT(BrokerLog(), HasSubstr("to answer INFO: redis unreachable: Connection refused"));
  EXPECT_EQ(Health().status, 503);
  std::this_thread::sleep_until(broker_started_ + 3s);
  ASSERT_TRUE(broker_.running()) << BrokerLog();
  ASSERT_NO_FATAL_FAILURE(StartRedis());
  ASSERT_NO_FATAL_FAILURE(ExpectServes("redis came"));
  EXPECT_TRUE(BrokerLogHas("serves after")) << BrokerLog();
}

TEST_F(RedisStartTest, StopSignalEndsTheWaitAtOnce) {
  StartBroker();
  ASSERT_TRUE(WaitFor([&] { return BrokerLogHas("waiting for redis"); }, 5s)) << BrokerLog();
  std::this_thread::sleep_for(1s);  // into the backoff's longer pauses
  ASSERT_TRUE(broker_.running()) << BrokerLog();
  const auto t0 = std::chrono::steady_clock::now();
  broker_.Signal(SIGTERM);
  const int status = broker_.Wait(5s);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_NE(status, -1) << "the broker did not stop within 5 s";
  EXPECT_LT(took, 2s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_THAT(BrokerLog(), HasSubstr("stopping (signal 15) before it served"));
}

TEST_F(RedisStartTest, WhatWaitingCannotFixStopsTheBrokerAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartRedis({"--requirepass", "a-password-kiln-does-not-send"}));
  StartBroker();
  const int status = broker_.Wait(5s);
  ASSERT_NE(status, -1) << "the broker still runs: " << BrokerLog();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << "wait status " << status;
  EXPECT_THAT(BrokerLog(), HasSubstr("NOAUTH"));
  EXPECT_THAT(BrokerLog(), HasSubstr("the broker does not send AUTH"));
  EXPECT_THAT(BrokerLog(), ::testing::Not(HasSubstr("waiting for redis")));
}

}  // namespace
}  // namespace kiln::testing
