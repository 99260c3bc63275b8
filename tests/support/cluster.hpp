// TestCluster: a real Kiln cluster for integration tests — its own
// redis-server on a free port, brokers and workers as real processes on
// loopback — plus a small HTTP client for the API.
//
//   TestCluster c = TestCluster::Start({.brokers = 1, .workers = 2});
//   nlohmann::json rec = c.Run({{"language", "python"}, {"code", "print(1)"}});
//
// Everything lives in a fresh temp dir; the destructor stops every process it
// started (by pid) and removes the dir. Logs stay in the dir while it runs
// and are printed by DumpLogs() when a test fails. One thread, except the
// const Redis helpers (RedisCommand, OutputChunks), which any thread may call.
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/process.hpp"

namespace kiln::testing {

struct ClusterOptions {
  int brokers = 1;
  int workers = 2;
  int slots = 2;
  int warm_per_runtime = 1;
  std::string extra_broker_yaml;      // appended to every broker config
  uint64_t max_code_bytes = 65536;    // limits.max_code_bytes of every broker
  std::string extra_worker_yaml;      // appended under `worker:` (indented by the caller)
  std::string cgroup_mode = "auto";   // sandbox.cgroup_mode of every worker
  std::string extra_sandbox_yaml;     // appended under `sandbox:` (indented by the caller)
  std::string extra_worker_top_yaml;  // top-level sections of every worker config, e.g. packages:
  // Appended under `sandbox:` of worker i only (after extra_sandbox_yaml).
  std::vector<std::string> worker_sandbox_yaml;
  std::vector<std::string> worker_env;        // extra "K=V" in the workers' environment
  std::vector<std::string> tenant_a_secrets;  // registered secrets of tenant-a (kToken)
  std::string tenant_a_fields;                // e.g. ", slots: 2, weight: 1" inside tenant-a's map
  std::string tenant_b_fields;
  std::string broker_clients_fields;    // e.g. ", auth_timeout_ms: 500" inside broker.clients
  std::string broker_http_fields;       // e.g. ", header_timeout_ms: 1000" inside broker.http
  uint64_t max_output_bytes = 1048576;  // limits.max.max_output_bytes of every broker
  // More "  - {name: ..., tokens: [...]}" lines. tenant-a and tenant-b have
  // code execution enabled and auto-approved; others get what they say.
  std::string extra_tenants_yaml;
  // The top-level `log:` section of brokers (broker_log_yaml) and workers,
  // e.g. "log: {format: json}\n"; their logs are <dir>/broker<i>.log, worker<i>.log.
  std::string broker_log_yaml;
  std::string worker_log_yaml;
  // Redis's appendfsync ("" keeps its default, everysec). "always": every
  // write is on disk before Redis answers, so a kill -9 loses nothing acknowledged.
  std::string redis_appendfsync;
  // heartbeat_interval_ms and heartbeat_liveness of every broker and worker:
  // a silent peer is dead after about interval x liveness.
  int heartbeat_interval_ms = 200;
  int heartbeat_liveness = 5;
  // CURVE on the worker links: a broker key pair and one per worker (named
  // after its id) in keys_dir(), every worker's .pub in accepted_keys_dir().
  bool curve = false;
  // CURVE (encryption) on the native client endpoints, with the broker key.
  bool curve_clients = false;
};

// A Redis reply, as RedisCommand parses it.
struct RedisValue {
  enum class Type { kNil, kStatus, kError, kInteger, kString, kArray };
  Type type = Type::kNil;
  std::string str;  // status, error (also "connection: ..." when Redis did not answer) or string
  long long integer = 0;
  std::vector<RedisValue> elements;
  bool is_error() const { return type == Type::kError; }
};

// One entry of a job's stored output stream ({kiln}:out:<id>).
struct StoredChunk {
  std::string entry_id;   // "<ms>-<n>", Redis's clock when the entry was added
  std::string stream;     // "stdout" / "stderr" (the field as stored)
  long long seq = -1;     // -1: no seq field
  long long offset = -1;  // -1: no offset field
  std::string data;
};

struct HttpReply {
  int status = 0;
  nlohmann::json body;
  std::string raw;
  httplib::Headers headers;
};

// Thaws every v1 freezer cgroup under /sys/fs/cgroup/freezer/<prefix>*/: a
// worker killed while it froze a session's sandbox leaves it frozen, and a
// frozen process cannot die. For test teardown (TestCluster, the multi-host bed).
void ThawLeftoverSandboxes(const std::string& prefix);

class TestCluster {
 public:
  static std::unique_ptr<TestCluster> Start(const ClusterOptions& options);
  ~TestCluster();

  static constexpr const char* kToken = "tenant-a-token";
  static constexpr const char* kOtherToken = "tenant-b-token";
  static constexpr const char* kAdminToken = "admin-token-x";
  static constexpr uint32_t kUidBase = 310000;  // workers use [kUidBase, kUidBase + 20000)

  const std::string& dir() const { return dir_; }
  std::string url(int broker = 0) const;
  int http_port(int broker = 0) const { return http_ports_.at(broker); }
  int redis_port() const { return redis_port_; }
  // What `redis-cli -p <redis port> <args>` prints (args as a shell would split them).
  std::string RedisCli(const std::string& args) const;
  // The broker's native client endpoint (broker.clients.endpoint), tcp://127.0.0.1:PORT.
  std::string client_endpoint(int broker = 0) const {
    return "tcp://127.0.0.1:" + std::to_string(client_ports_.at(broker));
  }
  std::string worker_config(int i) const;
  // The broker's worker endpoint (broker.workers.endpoint), tcp://127.0.0.1:PORT.
  std::string worker_endpoint(int broker = 0) const {
    return "tcp://127.0.0.1:" + std::to_string(zmq_ports_.at(broker));
  }
  // With `curve`: <dir>/keys holds broker.key/.pub and <worker id>.key/.pub;
  // brokers accept the .pub files in <dir>/keys/accepted.
  std::string keys_dir() const { return dir_ + "/keys"; }
  std::string accepted_keys_dir() const { return dir_ + "/keys/accepted"; }
  ChildProcess& worker(int i) { return workers_.at(i); }
  ChildProcess& broker(int i) { return brokers_.at(i); }
  ChildProcess& redis() { return redis_; }
  int brokers() const { return static_cast<int>(brokers_.size()); }
  int workers() const { return static_cast<int>(workers_.size()); }

  HttpReply Request(const std::string& method, const std::string& path,
                    const std::string& body = "", const std::string& token = kToken, int broker = 0,
                    const httplib::Headers& headers = {});
  // POST /v1/executions with wait:true; returns the record (or error body).
  HttpReply Submit(const nlohmann::json& request, const std::string& token = kToken,
                   int broker = 0);
  // Waits until `n` workers are registered with every broker.
  bool WaitForWorkers(int n, std::chrono::milliseconds timeout);
  // Restarts worker i (same config).
  void StartWorker(int i);
  // Starts broker i again with its config (the caller stopped or killed it).
  void RestartBroker(int i) { StartBroker(i); }
  // Starts redis-server again on the same port and dir (so with the AOF it
  // wrote; the caller stopped or killed it) and waits until it answers PING
  // with PONG (its data loaded); false if not within `timeout`.
  bool RestartRedis(std::chrono::milliseconds timeout);
  // The id worker i registers with (its `worker.id`).
  std::string worker_id(int i) const;
  // heartbeat_interval_ms x heartbeat_liveness: how long a peer may be silent.
  int liveness_window_ms() const {
    return options_.heartbeat_interval_ms * options_.heartbeat_liveness;
  }
  // One command on a connection of its own; waits at most `timeout` for the
  // reply. Safe from any thread.
  RedisValue RedisCommand(
      const std::vector<std::string>& argv,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) const;
  // The job's stored output chunks in stream order (XRANGE); empty when
  // there are none or Redis did not answer. Safe from any thread.
  std::vector<StoredChunk> OutputChunks(const std::string& job_id) const;
  std::string DumpLogs() const;

 private:
  TestCluster() = default;
  void StartBroker(int i);
  void StartRedis();
  void MakeKeys();

  ClusterOptions options_;
  std::string dir_;
  int redis_port_ = 0;
  std::vector<int> http_ports_;
  std::vector<int> zmq_ports_;
  std::vector<int> client_ports_;
  ChildProcess redis_;
  std::vector<ChildProcess> brokers_;
  std::vector<ChildProcess> workers_;
};

}  // namespace kiln::testing
