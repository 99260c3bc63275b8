// HostCluster: a Kiln cluster spread over the hosts of a NetnsBed — Redis on
// "redis", brokers on "b1" and "b2", workers on "w1".."w3" — with CURVE on
// the worker links, and "x", an outside host for the test's HTTP client and
// for rogue peers. With `redis_ha`, Redis replicas on "r2" and "r3" and a
// Sentinel on each of the three Redis hosts; the brokers find the master
// through the sentinels and wait for one replica's acknowledgement of every
// write (min_replicas=1). With `web`, a fake "internet" on host "web"
// (fake_internet.py: HTTP on 80, HTTPS on 443 with a test CA) for jobs that
// reach outside destinations; never a real outside address.
//
//   auto c = HostCluster::Start({});
//   HttpReply r = c->Submit({{"language", "shell"}, {"code", "echo hi"}}, /*broker=*/0);
//
// Every address is the host's own on the bed's /24; ports are fixed (each
// host has its own network stack). The destructor heals every link, stops
// every process it started (by pid), then removes the namespaces and the
// temp dir. One thread, except Request and what calls it, which any thread
// may call.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/multihost/netns_bed.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/process.hpp"

namespace kiln::testing {

struct HostClusterOptions {
  int slots = 2;  // worker.slots of each worker
  // heartbeat_interval_ms and heartbeat_liveness of every broker and worker.
  int heartbeat_interval_ms = 200;
  int heartbeat_liveness = 5;
  int slot_lease_ms = 2000;  // scheduling.slot_lease_ms: a dead broker's slots come back
  bool redis_ha = false;     // replicas and sentinels, as above
  int workers = 3;           // how many of w1..w3 start (the others' hosts stay idle)
  // Host "web" runs fake_internet.py (see web_dir()); its certificate covers
  // api.example.test, other.example.test and big.example.test. Not with
  // redis_ha: the bed has at most 9 hosts.
  bool web = false;
  std::vector<std::string> runtimes = {"shell"};  // worker.runtimes of each worker
  // More broker `tenants:` entries, each line "  - {name: ..., tokens: [...]}\n".
  std::string tenants_yaml;
  // Top-level sections appended to each worker's config, e.g. "network:\n  ...";
  // "{ip:<host>}" in it becomes that bed host's address (e.g. {ip:web}).
  std::string worker_yaml;
};

class HostCluster {
 public:
  static constexpr int kBrokers = 2;
  static constexpr int kWorkers = 3;
  static constexpr int kHttpPort = 8080;
  static constexpr int kWorkerPort = 5555;
  static constexpr int kRedisPort = 6379;
  static constexpr int kSentinelPort = 26379;
  static constexpr const char* kRedisMaster = "kiln";  // the sentinels' name for it
  static constexpr const char* kToken = "tenant-a-token";
  static constexpr const char* kAdminToken = "admin-token-x";
  static constexpr uint32_t kUidBase = 410000;  // workers use [kUidBase, kUidBase + 30000)
  static constexpr const char* kWebNames = "api.example.test,other.example.test,big.example.test";

  static std::unique_ptr<HostCluster> Start(const HostClusterOptions& options);
  ~HostCluster();

  NetnsBed& bed() { return *bed_; }
  const std::string& dir() const { return dir_; }
  // Hosts: "b1", "b2" (broker 0, 1), "w1".."w3" (worker 0..2).
  static std::string broker_host(int b) { return "b" + std::to_string(b + 1); }
  static std::string worker_host(int w) { return "w" + std::to_string(w + 1); }
  // The id worker w registers with (its key's name): its host's name.
  static std::string worker_id(int w) { return worker_host(w); }
  std::string worker_endpoint(int b) const;  // tcp://10.213.0.x:5555
  std::string keys_dir() const { return dir_ + "/keys"; }
  // With `web`: host "web"'s address; its directory (ca.pem, the CA to trust;
  // requests.log, "<scheme> <client ip> <method> <path> <Host>" per request);
  // requests.log's text ("" before the first request).
  std::string web_ip() const;
  std::string web_dir() const { return dir_ + "/web"; }
  std::string WebLog() const;

  // HTTP to broker b from host "x", through the bed's network.
  HttpReply Request(const std::string& method, const std::string& path,
                    const std::string& body = "", const std::string& token = kToken,
                    int broker = 0) const;
  // POST /v1/executions (the request's own `wait`).
  HttpReply Submit(const nlohmann::json& request, int broker = 0) const;
  nlohmann::json Record(const std::string& id, int broker = 0) const;
  // Polls the record until `done(record)` or `timeout`; returns the last one.
  template <typename Pred>
  nlohmann::json WaitRecord(const std::string& id, Pred done, std::chrono::milliseconds timeout,
                            int broker = 0) const {
    nlohmann::json last;
    WaitFor(
        [&] {
          last = Record(id, broker);
          return done(last);
        },
        timeout);
    return last;
  }
  nlohmann::json WaitTerminal(const std::string& id, std::chrono::milliseconds timeout,
                              int broker = 0) const;
  // Any redis-cli command against host:port, run on "x"; its output.
  std::string RedisCli(const std::string& host, int port, const std::string& args) const;
  // With redis_ha: the Redis host the sentinels still reachable name as
  // master ("redis", "r2" or "r3"); "" while they disagree or do not answer.
  std::string RedisMasterHost() const;
  // With redis_ha: the master's host dies: its link is cut, then its
  // redis-server and sentinel are killed.
  void LoseRedisMasterHost();

  // The ids in broker b's GET /v1/workers (empty when it does not answer).
  std::vector<std::string> WorkerIds(int broker) const;
  // Until every live broker in `brokers` lists exactly `n` workers.
  bool WaitForWorkers(size_t n, std::chrono::milliseconds timeout,
                      const std::vector<int>& brokers = {0, 1}) const;
  // A series of broker b's /metrics; -1 when absent.
  double Metric(int broker, const std::string& series) const;

  ChildProcess& broker(int b) { return brokers_.at(b); }
  ChildProcess& worker(int w) { return workers_.at(w); }
  std::string DumpLogs() const;

 private:
  HostCluster() = default;
  void MakeKeys();
  void StartRedis();
  void StartRedisReplicasAndSentinels();
  std::string RedisUrl() const;  // what the brokers' broker.redis.url says
  void StartBroker(int b);
  void StartWorker(int w);
  void StartWeb();
  std::string WithHostIps(std::string text) const;
  void WaitForWeb();

  // Declared first: destroyed last, after every process in it has stopped.
  std::unique_ptr<NetnsBed> bed_;
  HostClusterOptions options_;
  std::string dir_;
  std::string suffix_;  // unique per run: cgroup prefixes
  ChildProcess redis_;
  std::vector<ChildProcess> replicas_;   // on r2, r3
  std::vector<ChildProcess> sentinels_;  // on redis, r2, r3
  std::string lost_redis_host_;          // LoseRedisMasterHost's
  std::vector<ChildProcess> brokers_;
  std::vector<ChildProcess> workers_;
  ChildProcess web_;  // fake_internet.py, with `web`
};

bool IsTerminalStatus(const nlohmann::json& record);

}  // namespace kiln::testing
