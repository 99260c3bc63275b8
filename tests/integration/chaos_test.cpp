// Chaos tests against a real cluster (redis-server, brokers and workers as
// processes on loopback, sandboxes included): workers killed (SIGKILL),
// frozen (SIGSTOP), drained (SIGTERM); Redis and the broker restarted under
// load. After each scenario the stored records are checked against the
// invariants of docs/architecture.md: every job id a client got reaches
// exactly one terminal state that is stored and readable, and the cluster
// serves new jobs.
//
// TestCluster runs heartbeats every 200 ms with liveness 5: a silent peer is
// dead after ~1 s. Each test starts its own cluster and only ever signals
// processes it started.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool IsTerminal(const json& record) {
  static const std::set<std::string> kTerminal = {
      "succeeded", "failed", "timed_out", "memory_exceeded", "cancelled", "rejected", "error"};
  return record.is_object() && record.contains("status") && record["status"].is_string() &&
         kTerminal.count(record["status"].get<std::string>()) != 0;
}

std::string ErrorCode(const json& record) {
  if (!record.is_object() || !record.contains("error") || !record["error"].is_object()) return "";
  return record["error"].value("code", "");
}

std::string WorkerOf(const json& record) {
  if (!record.is_object() || !record.contains("worker") || !record["worker"].is_string()) {
    return "";
  }
  return record["worker"].get<std::string>();
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One HTTP call on a fresh connection; safe from any thread (TestCluster's
// own client is documented as one-thread).
HttpReply Call(int port, const std::string& method, const std::string& path,
               const std::string& body = "", const std::string& token = TestCluster::kToken) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(30, 0);
  cli.set_connection_timeout(2, 0);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result r = method == "GET" ? cli.Get(path.c_str(), headers)
                                      : cli.Post(path.c_str(), headers, body, "application/json");
  HttpReply reply;
  if (!r) return reply;
  reply.status = r->status;
  reply.raw = r->body;
  reply.headers = r->headers;
  reply.body = json::parse(r->body, nullptr, false);
  return reply;
}

// The id TestCluster gave worker i (the `id:` line of its config).
std::string WorkerIdOf(const TestCluster& c, int i) {
  std::string cfg = ReadFile(c.worker_config(i));
  const std::string key = "\n  id: ";
  auto at = cfg.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  return cfg.substr(at, cfg.find('\n', at) - at);
}

// /proc/<pid>/stat field 4 (ppid); -1 if unreadable.
pid_t ParentOf(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 4 > stat.size()) return -1;
  // ") S PPID ..."
  return static_cast<pid_t>(strtol(stat.c_str() + close + 4, nullptr, 10));
}

// The redis-server this test process started for the cluster on `port`: a
// direct child of ours named redis-server whose command line names the port
// (redis rewrites its title to "/usr/bin/redis-server 127.0.0.1:PORT").
pid_t FindOurRedis(int port) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return -1;
  pid_t found = -1;
  const std::string port_text = std::to_string(port);
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    if (ParentOf(static_cast<pid_t>(pid)) != ::getpid()) continue;
    std::string comm = ReadFile("/proc/" + std::string(e->d_name) + "/comm");
    if (comm.rfind("redis-server", 0) != 0) continue;
    std::string cmdline = ReadFile("/proc/" + std::string(e->d_name) + "/cmdline");
    for (char& ch : cmdline) {
      if (ch == '\0') ch = ' ';
    }
    if (cmdline.find(":" + port_text) != std::string::npos ||
        cmdline.find("--port " + port_text + " ") != std::string::npos) {
      found = static_cast<pid_t>(pid);
      break;
    }
  }
  closedir(d);
  return found;
}

// Whether our child `pid` has exited, without reaping it (its ChildProcess
// owner reaps it later, so the pid cannot be reused meanwhile).
bool ChildExited(pid_t pid) {
  siginfo_t info{};
  if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return true;
  return info.si_pid == pid;
}

// Live processes of a sandbox uid range whose command line contains `marker`.
std::vector<pid_t> SandboxProcessesWith(uid_t lo, uid_t hi, const std::string& marker) {
  std::vector<pid_t> out;
  for (pid_t pid : ProcessesWithUidIn(lo, hi)) {
    std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    for (char& ch : cmdline) {
      if (ch == '\0') ch = ' ';
    }
    if (cmdline.find(marker) != std::string::npos) out.push_back(pid);
  }
  return out;
}

json SleepJob(double seconds, const std::string& tag, int timeout_ms = 10000) {
  return {
      {"language", "python"},
      {"code", "import time\ntime.sleep(" + std::to_string(seconds) + ")\nprint('" + tag + "')"},
      {"limits", {{"timeout_ms", timeout_ms}}},
      {"wait", false}};
}

class ChaosTest : public ::testing::Test {
 protected:
  void StartCluster(ClusterOptions options = {}) {
    cluster_ = TestCluster::Start(options);
    for (int i = 0; i < options.workers; ++i) worker_ids_.push_back(WorkerIdOf(*cluster_, i));
  }

  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->DumpLogs();
    cluster_.reset();
    restarted_redis_.Stop();
  }

  int port() const { return cluster_->http_port(0); }

  // POST with wait:false; returns the id, or "" (with a failure) if refused.
  std::string SubmitAsync(json request) {
    request["wait"] = false;
    HttpReply r = Call(port(), "POST", "/v1/executions", request.dump());
    EXPECT_EQ(r.status, 202) << r.raw;
    if (r.status != 202 || !r.body.is_object() || !r.body["id"].is_string()) return "";
    ids_.insert(r.body["id"].get<std::string>());
    return r.body["id"].get<std::string>();
  }

  // POST with wait:true; remembers the id of any accepted job.
  HttpReply SubmitWait(json request) {
    request["wait"] = true;
    HttpReply r = Call(port(), "POST", "/v1/executions", request.dump());
    if (r.body.is_object() && r.body.contains("id") && r.body["id"].is_string()) {
      ids_.insert(r.body["id"].get<std::string>());
    }
    return r;
  }

  // The stored record; a refused read is an object without a status that
  // says what the broker answered (so a failure message shows it).
  json Record(const std::string& id) {
    HttpReply r = Call(port(), "GET", "/v1/executions/" + id);
    if (r.status == 200 && r.body.is_object()) return r.body;
    return {{"http_status", r.status}, {"answer", r.raw}};
  }

  // Polls the stored record until `done` holds; returns the last record read.
  json WaitRecord(const std::string& id, const std::function<bool(const json&)>& done,
                  std::chrono::milliseconds timeout) {
    json rec;
    WaitFor(
        [&] {
          rec = Record(id);
          return done(rec);
        },
        timeout);
    return rec;
  }
  json WaitTerminal(const std::string& id, std::chrono::milliseconds timeout) {
    return WaitRecord(id, IsTerminal, timeout);
  }
  // Waits until the job is dispatched (`running` with a worker) or ended.
  json WaitDispatched(const std::string& id, std::chrono::milliseconds timeout) {
    return WaitRecord(
        id, [](const json& r) { return IsTerminal(r) || !WorkerOf(r).empty(); }, timeout);
  }

  json Workers() {
    HttpReply r = Call(port(), "GET", "/v1/workers", "", TestCluster::kAdminToken);
    return r.status == 200 ? r.body["workers"] : json::array();
  }
  std::set<std::string> WorkerIds() {
    std::set<std::string> ids;
    for (const auto& w : Workers()) ids.insert(w["id"].get<std::string>());
    return ids;
  }

  // `n` small jobs in a row each succeed with the right output; returns the
  // workers that ran them.
  std::multiset<std::string> ExpectServesNewJobs(int n, const std::string& tag) {
    std::multiset<std::string> ran_on;
    for (int i = 0; i < n; ++i) {
      int a = 1000 + i;
      HttpReply r = SubmitWait({{"language", i % 2 ? "shell" : "python"},
                                {"code", i % 2 ? "echo $((" + std::to_string(a) + " * 3))"
                                               : "print(" + std::to_string(a) + " * 3)"},
                                {"limits", {{"timeout_ms", 10000}}}});
      EXPECT_EQ(r.status, 200) << tag << ": " << r.raw;
      EXPECT_EQ(r.body.value("status", ""), "succeeded") << tag << ": " << r.raw;
      EXPECT_EQ(r.body.value("stdout", ""), std::to_string(a * 3) + "\n") << tag << ": " << r.raw;
      ran_on.insert(WorkerOf(r.body));
    }
    return ran_on;
  }

  // Invariant 1 on every id this test got: each is readable and terminal,
  // and its terminal record does not change any more (exactly one terminal
  // state: a late result must not overwrite it).
  void ExpectEveryJobSettled(std::chrono::milliseconds timeout = 15s) {
    std::map<std::string, json> first;
    for (const auto& id : ids_) {
      json rec = WaitTerminal(id, timeout);
      EXPECT_TRUE(IsTerminal(rec))
          << "job " << id << " never reached a terminal state: " << rec.dump();
      first[id] = rec;
    }
    std::this_thread::sleep_for(1500ms);  // > liveness: late results have arrived by now
    for (const auto& [id, rec] : first) {
      json again = Record(id);
      for (const char* field : {"status", "error", "worker", "stdout", "finished_at_ms"}) {
        EXPECT_EQ(again.value(field, json()), rec.value(field, json()))
            << "the terminal record of " << id << " changed (" << field << "): " << rec.dump()
            << " then " << again.dump();
      }
    }
  }

  ChildProcess restarted_redis_;  // declared before cluster_: outlives it
  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::string> worker_ids_;
  std::set<std::string> ids_;  // every job id a client got
};

// Scenario 1: SIGKILL of a worker running jobs.
TEST_F(ChaosTest, KilledWorkerJobsEndWorkerLostAndTheWorkerRejoins) {
  StartCluster({.brokers = 1, .workers = 2, .slots = 2});
  const std::string w0 = worker_ids_[0], w1 = worker_ids_[1];

  // Four 3 s jobs fill both workers' two slots (least-loaded spreads them).
  std::vector<std::string> jobs;
  for (int i = 0; i < 4; ++i)
    jobs.push_back(SubmitAsync(SleepJob(3, "slept-" + std::to_string(i))));
  std::vector<std::string> on0, on1;
  for (const auto& id : jobs) {
    ASSERT_FALSE(id.empty());
    json rec = WaitDispatched(id, 10s);
    ASSERT_EQ(rec.value("status", ""), "running") << rec.dump();
    (WorkerOf(rec) == w0 ? on0 : on1).push_back(id);
  }
  ASSERT_FALSE(on0.empty()) << "no job went to worker 0";
  ASSERT_FALSE(on1.empty()) << "no job went to worker 1";
  std::this_thread::sleep_for(300ms);  // the sandboxes are running the code

  auto killed_at = Clock::now();
  cluster_->worker(0).Signal(SIGKILL);
  ASSERT_NE(cluster_->worker(0).Wait(5s), -1);

  for (const auto& id : on0) {
    json rec = WaitTerminal(id, 6s);
    EXPECT_EQ(rec.value("status", ""), "error") << rec.dump();
    EXPECT_EQ(ErrorCode(rec), "WORKER_LOST") << rec.dump();
    EXPECT_EQ(WorkerOf(rec), w0) << rec.dump();
  }
  double lost_after = Seconds(Clock::now() - killed_at);
  EXPECT_LT(lost_after, 5.0) << "WORKER_LOST took too long";
  for (const auto& id : on1) {
    json rec = WaitTerminal(id, 10s);
    EXPECT_EQ(rec.value("status", ""), "succeeded") << rec.dump();
    EXPECT_THAT(rec.value("stdout", ""), ::testing::StartsWith("slept-")) << rec.dump();
    EXPECT_EQ(WorkerOf(rec), w1) << rec.dump();
  }

  // The broker no longer lists the dead worker and runs everything on worker 1.
  EXPECT_TRUE(WaitFor([&] { return WorkerIds() == std::set<std::string>{w1}; }, 3s))
      << Workers().dump();
  for (const auto& w : ExpectServesNewJobs(3, "after kill")) EXPECT_EQ(w, w1);

  // Restarted with the same config, worker 0 registers again and takes jobs.
  cluster_->StartWorker(0);
  ASSERT_TRUE(cluster_->WaitForWorkers(2, 20s)) << Workers().dump();
  EXPECT_EQ(WorkerIds(), (std::set<std::string>{w0, w1}));
  std::vector<std::string> after;
  for (int i = 0; i < 4; ++i)
    after.push_back(SubmitAsync(SleepJob(1, "again-" + std::to_string(i))));
  std::set<std::string> ran_on;
  for (const auto& id : after) {
    json rec = WaitTerminal(id, 15s);
    EXPECT_EQ(rec.value("status", ""), "succeeded") << rec.dump();
    ran_on.insert(WorkerOf(rec));
  }
  EXPECT_EQ(ran_on.count(w0), 1u) << "the restarted worker took no job";

  ExpectEveryJobSettled();
}

// Invariant 5 under chaos: a job whose worker is SIGKILLed must not keep
// running unsupervised past its own wall-clock timeout (nothing enforces it
// any more, and the restarted worker reuses the same uid range).
TEST_F(ChaosTest, KilledWorkerLeavesNoSandboxProcessRunning) {
  StartCluster({.brokers = 1, .workers = 2, .slots = 2});
  const std::string marker = "7.31";  // a distinctive argument to find the process by
  std::string id = SubmitAsync({{"language", "shell"},
                                {"code", "sleep " + marker + "; echo done"},
                                {"limits", {{"timeout_ms", 2000}}}});
  ASSERT_FALSE(id.empty());
  json rec = WaitDispatched(id, 10s);
  int victim = WorkerOf(rec) == worker_ids_[0] ? 0 : 1;
  uid_t lo = TestCluster::kUidBase + 10000 * victim, hi = lo + 9999;
  ASSERT_TRUE(WaitFor([&] { return !SandboxProcessesWith(lo, hi, marker).empty(); }, 5s))
      << "the job's sleep never started";

  const pid_t victim_pid = cluster_->worker(victim).pid();
  cluster_->worker(victim).Signal(SIGKILL);
  ASSERT_NE(cluster_->worker(victim).Wait(5s), -1);
  rec = WaitTerminal(id, 6s);
  EXPECT_EQ(ErrorCode(rec), "WORKER_LOST") << rec.dump();

  // 3.5 s after the kill the job is well past its 2 s timeout.
  std::this_thread::sleep_for(3500ms);
  std::vector<pid_t> left = SandboxProcessesWith(lo, hi, marker);
  EXPECT_TRUE(left.empty()) << left.size()
                            << " process(es) of the lost job still run after their worker died "
                               "and past the job's timeout, e.g. pid "
                            << (left.empty() ? 0 : left[0]);

  // The killed worker's workspaces (named <pid>-<n>) stay mounted until a
  // worker with the same state dir starts again and cleans them up.
  const std::string old_ws =
      cluster_->dir() + "/w" + std::to_string(victim) + "/ws/" + std::to_string(victim_pid) + "-";
  auto old_mounts = [&] {
    int n = 0;
    std::string mounts = ReadFile("/proc/self/mounts");
    for (size_t at = mounts.find(" " + old_ws); at != std::string::npos;
         at = mounts.find(" " + old_ws, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_GT(old_mounts(), 0) << "expected the killed worker's workspaces under " << old_ws;
  cluster_->StartWorker(victim);
  ASSERT_TRUE(cluster_->WaitForWorkers(2, 20s)) << Workers().dump();
  EXPECT_TRUE(WaitFor([&] { return old_mounts() == 0; }, 5s))
      << old_mounts() << " workspace mount(s) of the killed worker survive its restart";
  ExpectServesNewJobs(2, "after the restart");
}

// Scenario 2: a worker frozen by SIGSTOP is declared dead, and rejoins after
// SIGCONT; the result it then sends for the lost job (whose code kept running
// in its sandbox) does not change that job's terminal record, and the
// rejoined worker serves new jobs while it finishes that code.
TEST_F(ChaosTest, FrozenWorkerIsDeclaredDeadAndRejoinsAfterThaw) {
  StartCluster({.brokers = 1, .workers = 2, .slots = 2});
  const std::string w0 = worker_ids_[0], w1 = worker_ids_[1];

  // Two 6 s jobs: one on each worker.
  std::string a = SubmitAsync(SleepJob(6, "frozen-a"));
  std::string b = SubmitAsync(SleepJob(6, "frozen-b"));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  json ra = WaitDispatched(a, 10s), rb = WaitDispatched(b, 10s);
  ASSERT_EQ(ra.value("status", ""), "running") << ra.dump();
  ASSERT_EQ(rb.value("status", ""), "running") << rb.dump();
  ASSERT_NE(WorkerOf(ra), WorkerOf(rb)) << "both jobs went to one worker";
  const std::string on0 = WorkerOf(ra) == w0 ? a : b;
  const std::string on1 = on0 == a ? b : a;
  std::this_thread::sleep_for(300ms);  // the sandboxes are running the code

  auto frozen_at = Clock::now();
  cluster_->worker(0).Signal(SIGSTOP);
  struct Thaw {
    ChildProcess& p;
    ~Thaw() { p.Signal(SIGCONT); }
  } thaw_on_exit{cluster_->worker(0)};

  json lost = WaitTerminal(on0, 5s);
  EXPECT_EQ(lost.value("status", ""), "error") << lost.dump();
  EXPECT_EQ(ErrorCode(lost), "WORKER_LOST") << lost.dump();
  EXPECT_LT(Seconds(Clock::now() - frozen_at), 4.0) << "declared dead too late";
  // Liveness 5: the broker counted the intervals the frozen worker missed.
  {
    const std::string m = cluster_->Request("GET", "/metrics").raw;
    auto at = m.find("\nkiln_heartbeats_missed_total ");
    ASSERT_NE(at, std::string::npos) << m;
    EXPECT_GE(std::stod(m.substr(at + 30)), 3) << m;
  }
  EXPECT_TRUE(WaitFor([&] { return WorkerIds() == std::set<std::string>{w1}; }, 3s))
      << Workers().dump();
  // The other worker keeps going (its free slot takes new jobs).
  for (const auto& w : ExpectServesNewJobs(2, "while frozen")) EXPECT_EQ(w, w1);

  // Thaw while the lost job's code still runs in its sandbox (~3.5 s left).
  std::this_thread::sleep_until(frozen_at + 2s);
  cluster_->worker(0).Signal(SIGCONT);
  auto thawed_at = Clock::now();
  ASSERT_LT(Seconds(thawed_at - frozen_at), 4.0) << "too slow: the lost job's code has ended";
  ASSERT_TRUE(cluster_->WaitForWorkers(2, 10s)) << Workers().dump();
  EXPECT_EQ(WorkerIds(), (std::set<std::string>{w0, w1}));
  std::cerr << "worker 0 registered again " << Seconds(Clock::now() - thawed_at)
            << " s after SIGCONT\n";

  // New jobs at once: every one succeeds, and the rejoined worker takes some.
  std::vector<std::string> more;
  for (int i = 0; i < 4; ++i)
    more.push_back(SubmitAsync(SleepJob(1, "thawed-" + std::to_string(i))));
  std::set<std::string> ran_on;
  for (const auto& id : more) {
    json rec = WaitTerminal(id, 15s);
    EXPECT_EQ(rec.value("status", ""), "succeeded")
        << "a job sent to the thawed worker while it still ran the lost job's code: " << rec.dump();
    ran_on.insert(WorkerOf(rec));
  }
  EXPECT_EQ(ran_on.count(w0), 1u) << "the thawed worker took no job";

  // The thawed worker's result for the lost job reaches the broker (which
  // finds it already ended and ignores it) and leaves the stored record alone.
  const std::string broker_log = cluster_->dir() + "/broker0.log";
  EXPECT_TRUE(WaitFor(
      [&] {
        // The broker's "jobs" log line for it: "result ignored: ... job=<id>".
        std::string log = ReadFile(broker_log);
        auto at = log.find("result ignored: it has already ended job=" + on0);
        return at != std::string::npos;
      },
      6s))
      << "the thawed worker never sent its result for " << on0;
  json after = Record(on0);
  EXPECT_EQ(after.value("status", ""), "error") << after.dump();
  EXPECT_EQ(ErrorCode(after), "WORKER_LOST") << after.dump();
  EXPECT_EQ(after.value("finished_at_ms", json()), lost.value("finished_at_ms", json()));
  EXPECT_EQ(after.value("stdout", ""), "") << after.dump();

  json other = WaitTerminal(on1, 10s);
  EXPECT_EQ(other.value("status", ""), "succeeded") << other.dump();
  EXPECT_EQ(other.value("stdout", ""), on1 == a ? "frozen-a\n" : "frozen-b\n");

  ExpectEveryJobSettled();
}

// Scenario 3: Redis stopped (SIGTERM, AOF written) and started again while
// clients submit jobs continuously.
TEST_F(ChaosTest, RedisRestartUnderLoadGivesClearErrorsAndLosesNothing) {
  StartCluster({.brokers = 1, .workers = 2, .slots = 2});
  const int http = port();

  struct Outcome {
    int status;
    std::string id;
    std::string expected_stdout;
    std::string raw;
    json body;
    bool retry_after;
    bool unknown = false;  // 503 with "outcome": "unknown": the job may exist
  };
  std::mutex mu;
  std::vector<Outcome> outcomes;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      for (int n = 0; !stop; ++n) {
        long long x = 1000003LL * (t + 1) + n;
        std::string expected = std::to_string(x * 7919) + "\n";
        bool py = (n + t) % 2 == 0;
        json req = {{"language", py ? "python" : "shell"},
                    {"code", py ? "print(" + std::to_string(x) + " * 7919)"
                                : "echo $((" + std::to_string(x) + " * 7919))"},
                    {"limits", {{"timeout_ms", 10000}}},
                    {"wait", true}};
        HttpReply r = Call(http, "POST", "/v1/executions", req.dump());
        Outcome o{r.status, "", expected, r.raw, r.body, r.headers.count("Retry-After") != 0};
        if (r.body.is_object() && r.body.contains("id") && r.body["id"].is_string()) {
          o.id = r.body["id"].get<std::string>();
          o.unknown = r.body.value("outcome", "") == "unknown";
        }
        {
          std::lock_guard lock(mu);
          outcomes.push_back(std::move(o));
        }
        if (r.status != 200) std::this_thread::sleep_for(50ms);
      }
    });
  }
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (auto& th : threads) {
        if (th.joinable()) th.join();
      }
    }
  } joiner{stop, clients};

  std::this_thread::sleep_for(1500ms);
  size_t before_outage;
  {
    std::lock_guard lock(mu);
    before_outage = outcomes.size();
  }
  ASSERT_GT(before_outage, 0u) << "no job finished before the outage";

  pid_t redis = FindOurRedis(cluster_->redis_port());
  ASSERT_GT(redis, 0) << "cannot find the cluster's redis-server among our children";
  ::kill(redis, SIGTERM);
  ASSERT_TRUE(WaitFor([&] { return ChildExited(redis); }, 10s)) << "redis did not stop";
  auto down_at = Clock::now();

  // During the outage: health and reads answer 503, not a wrong answer.
  HttpReply health_down = Call(http, "GET", "/v1/health", "", "");
  EXPECT_EQ(health_down.status, 503) << health_down.raw;
  std::string some_id;
  {
    std::lock_guard lock(mu);
    for (const auto& o : outcomes) {
      if (!o.id.empty()) some_id = o.id;
    }
  }
  if (!some_id.empty()) {
    HttpReply read_down = Call(http, "GET", "/v1/executions/" + some_id);
    EXPECT_EQ(read_down.status, 503) << read_down.raw;
    EXPECT_EQ(ErrorCode(read_down.body), "UNAVAILABLE") << read_down.raw;
  }
  std::this_thread::sleep_until(down_at + 1500ms);

  restarted_redis_ = ChildProcess::Start(
      {"/usr/bin/redis-server", "--port", std::to_string(cluster_->redis_port()), "--bind",
       "127.0.0.1", "--dir", cluster_->dir(), "--save", "", "--appendonly", "yes", "--daemonize",
       "no"},
      cluster_->dir() + "/redis.log");
  auto started_at = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return CanConnect(cluster_->redis_port()); }, 10s))
      << "redis did not come back";
  EXPECT_TRUE(WaitFor([&] { return Call(http, "GET", "/v1/health", "", "").status == 200; }, 5s))
      << "the broker did not notice redis is back";
  std::cerr << "health 200 again " << Seconds(Clock::now() - started_at)
            << " s after redis was restarted\n";

  std::this_thread::sleep_for(1500ms);  // load keeps running on the restored redis
  stop = true;
  for (auto& th : clients) th.join();

  int ok = 0, unavailable = 0;
  for (const auto& o : outcomes) {
    if (!o.id.empty() && !o.unknown) ids_.insert(o.id);
    if (o.status == 200) {
      ++ok;
      // A 200 is a finished job with the right output, never a wrong answer.
      EXPECT_EQ(o.body.value("status", ""), "succeeded") << o.raw;
      EXPECT_EQ(o.body.value("stdout", ""), o.expected_stdout) << o.raw;
    } else {
      ++unavailable;
      EXPECT_EQ(o.status, 503) << o.raw;
      EXPECT_TRUE(o.body.is_object() && o.body["error"].is_object()) << o.raw;
      if (o.body.is_object() && o.body["error"].is_object()) {
        EXPECT_EQ(o.body["error"].value("code", ""), "UNAVAILABLE") << o.raw;
        EXPECT_EQ(o.body["error"].value("retryable", false), true) << o.raw;
      }
      EXPECT_TRUE(o.retry_after) << "a 503 without Retry-After: " << o.raw;
    }
  }
  std::cerr << outcomes.size() << " requests: " << ok << " answered 200, " << unavailable
            << " answered 503\n";
  EXPECT_GT(unavailable, 0) << "no request saw the outage: the test did not test it";

  // Every id a client got is still readable (AOF) with its stored terminal
  // state and the output its client was told. A submit whose answer was lost
  // ("outcome": "unknown", docs/api.md) either stored nothing (404) or runs
  // to the same end as any other.
  int unknown_stored = 0, unknown_absent = 0;
  for (const auto& o : outcomes) {
    if (o.id.empty()) continue;
    if (o.unknown) {
      json probe = Record(o.id);
      if (probe.value("http_status", 0) == 404) {
        EXPECT_EQ(ErrorCode(json::parse(probe.value("answer", ""), nullptr, false)), "NOT_FOUND")
            << o.id << ": " << probe.dump();
        ++unknown_absent;
        continue;
      }
      ++unknown_stored;
      ids_.insert(o.id);
    }
    json rec = WaitTerminal(o.id, 10s);
    EXPECT_EQ(rec.value("status", ""), "succeeded") << o.id << ": " << rec.dump();
    EXPECT_EQ(rec.value("stdout", ""), o.expected_stdout) << o.id << ": " << rec.dump();
  }
  std::cerr << "submits with an unknown outcome: " << unknown_stored << " stored, "
            << unknown_absent << " not\n";
  ExpectServesNewJobs(4, "after the redis restart");
  ExpectEveryJobSettled();
}

// Scenario 4: SIGTERM drains a worker: it finishes its jobs, gets no new
// ones, and exits with status 0 by itself.
TEST_F(ChaosTest, DrainingWorkerFinishesItsJobsGetsNoNewOnesAndExits) {
  StartCluster(
      {.brokers = 1, .workers = 2, .slots = 2, .extra_worker_yaml = "  drain_timeout_ms: 10000\n"});
  const std::string w0 = worker_ids_[0], w1 = worker_ids_[1];

  // One 2 s job per worker: each keeps a free slot, so only draining keeps
  // new jobs off worker 0.
  std::string a = SubmitAsync(SleepJob(2, "drain-a"));
  std::string b = SubmitAsync(SleepJob(2, "drain-b"));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  json ra = WaitDispatched(a, 10s), rb = WaitDispatched(b, 10s);
  ASSERT_NE(WorkerOf(ra), WorkerOf(rb)) << ra.dump() << rb.dump();
  const std::string on0 = WorkerOf(ra) == w0 ? a : b;
  std::this_thread::sleep_for(300ms);  // the Execute has reached the worker

  auto term_at = Clock::now();
  cluster_->worker(0).Signal(SIGTERM);
  // "After" from the broker's view: the signal is handled asynchronously, and
  // a job dispatched before the worker said it drains may rightly run there.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& w : Workers())
          if (w.value("id", "") == w0) return w.value("draining", false);
        return false;
      },
      3s))
      << Workers().dump();
  std::vector<std::string> later;
  for (int i = 0; i < 4; ++i) {
    later.push_back(SubmitAsync({{"language", "python"},
                                 {"code", "print('late-" + std::to_string(i) + "')"},
                                 {"limits", {{"timeout_ms", 10000}}}}));
  }

  json done0 = WaitTerminal(on0, 10s);
  EXPECT_EQ(done0.value("status", ""), "succeeded") << done0.dump();
  EXPECT_EQ(WorkerOf(done0), w0) << done0.dump();
  EXPECT_EQ(done0.value("stdout", ""), on0 == a ? "drain-a\n" : "drain-b\n") << done0.dump();
  for (size_t i = 0; i < later.size(); ++i) {
    json rec = WaitTerminal(later[i], 10s);
    EXPECT_EQ(rec.value("status", ""), "succeeded") << rec.dump();
    EXPECT_EQ(WorkerOf(rec), w1) << "a job submitted after SIGTERM went to the draining worker: "
                                 << rec.dump();
    EXPECT_EQ(rec.value("stdout", ""), "late-" + std::to_string(i) + "\n") << rec.dump();
  }

  int status = cluster_->worker(0).Wait(10s);
  ASSERT_NE(status, -1) << "the draining worker did not exit within the drain window";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  std::cerr << "worker 0 exited " << Seconds(Clock::now() - term_at) << " s after SIGTERM\n";
  EXPECT_TRUE(WaitFor([&] { return WorkerIds() == std::set<std::string>{w1}; }, 3s))
      << Workers().dump();

  ExpectServesNewJobs(2, "after the drain");
  ExpectEveryJobSettled();
}

// Scenario 5a: a broker stopped (SIGTERM) and started again with the same
// config: records stay readable, workers register again, new jobs run.
TEST_F(ChaosTest, BrokerRestartKeepsRecordsAndWorkersRejoin) {
  StartCluster({.brokers = 1, .workers = 2, .slots = 2});
  ExpectServesNewJobs(2, "before the restart");

  int status = cluster_->broker(0).Stop(10s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_EQ(Call(port(), "GET", "/v1/health", "", "").status, 0) << "the broker still answers";
  cluster_->broker(0) = ChildProcess::Start({std::string(KILN_BINARY_DIR) + "/bin/kiln-broker",
                                             "--config", cluster_->dir() + "/broker0.yaml"},
                                            cluster_->dir() + "/broker0.log");
  auto started_at = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return Call(port(), "GET", "/v1/health", "", "").status == 200; }, 10s))
      << "the broker did not come back";
  ASSERT_TRUE(cluster_->WaitForWorkers(2, 10s)) << Workers().dump();
  std::cerr << "both workers registered again " << Seconds(Clock::now() - started_at)
            << " s after the broker restart\n";
  EXPECT_EQ(WorkerIds(), (std::set<std::string>(worker_ids_.begin(), worker_ids_.end())));

  std::multiset<std::string> ran_on = ExpectServesNewJobs(4, "after the restart");
  std::vector<std::string> spread;
  for (int i = 0; i < 4; ++i) spread.push_back(SubmitAsync(SleepJob(1, "spread")));
  std::set<std::string> used;
  for (const auto& id : spread) used.insert(WorkerOf(WaitTerminal(id, 15s)));
  EXPECT_EQ(used.size(), 2u) << "not both workers took jobs after the broker restart";
  ExpectEveryJobSettled();
}

// Scenario 5b: jobs running while their broker restarts still reach a
// terminal state (invariant 1: "even if the accepting broker ... dies").
TEST_F(ChaosTest, BrokerRestartEndsTheJobsItWasRunning) {
  StartCluster({.brokers = 1, .workers = 2, .slots = 2});
  std::vector<std::string> running;
  for (int i = 0; i < 2; ++i) running.push_back(SubmitAsync(SleepJob(2, "across-restart")));
  for (const auto& id : running) {
    ASSERT_FALSE(id.empty());
    json rec = WaitDispatched(id, 10s);
    ASSERT_EQ(rec.value("status", ""), "running") << rec.dump();
  }
  std::this_thread::sleep_for(300ms);

  cluster_->broker(0).Stop(10s);
  cluster_->broker(0) = ChildProcess::Start({std::string(KILN_BINARY_DIR) + "/bin/kiln-broker",
                                             "--config", cluster_->dir() + "/broker0.yaml"},
                                            cluster_->dir() + "/broker0.log");
  ASSERT_TRUE(
      WaitFor([&] { return Call(port(), "GET", "/v1/health", "", "").status == 200; }, 10s));
  ASSERT_TRUE(cluster_->WaitForWorkers(2, 10s)) << Workers().dump();

  // The jobs' code ends ~2 s after it started; allow generous slack.
  auto deadline = Clock::now() + 10s;
  for (const auto& id : running) {
    json rec = WaitTerminal(id, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::max<Clock::duration>(deadline - Clock::now(), 0s)));
    EXPECT_TRUE(IsTerminal(rec)) << "job " << id
                                 << " was running when its broker restarted and never ended: "
                                 << rec.dump();
  }
  ExpectServesNewJobs(2, "after the restart");
  ExpectEveryJobSettled(1s);
}

}  // namespace
}  // namespace kiln::testing
