// Scheduling across many brokers, through real processes: a redis-server,
// three brokers and three workers on loopback. The load test submits a few
// thousand jobs from several tenants against tight limits and then checks,
// from the stored records alone, that no limit was ever exceeded, that every
// job ended exactly once, that session executions ran one at a time in
// order on one worker, and that a low-volume tenant was not starved by a
// flooding one. Smaller tests cover queue positions, QUEUE_FULL, sessions
// over HTTP, and a broker dying with jobs in flight.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kLowToken = "tenant-c-token";

struct Submitted {
  std::string id;
  std::string tenant;
  std::string session;
  int order = 0;  // submission order within its session
};

// Max number of [start, end) intervals open at once; ends before starts at
// equal times (a slot released at t may be taken at t).
size_t MaxOverlap(std::vector<std::pair<int64_t, int64_t>> spans) {
  std::vector<std::pair<int64_t, int>> ev;
  for (auto [s, e] : spans) {
    ev.emplace_back(s, +1);
    ev.emplace_back(e, -1);
  }
  std::sort(ev.begin(), ev.end());
  int open = 0, peak = 0;
  for (auto [t, d] : ev) peak = std::max(peak, open += d);
  return static_cast<size_t>(peak);
}

std::string Token(const std::string& tenant) {
  if (tenant == "tenant-a") return TestCluster::kToken;
  if (tenant == "tenant-b") return TestCluster::kOtherToken;
  return kLowToken;
}

// Polls until every job has a terminal record; returns them by id.
std::map<std::string, json> AwaitAll(TestCluster& c, const std::vector<Submitted>& jobs,
                                     std::chrono::seconds timeout) {
  std::map<std::string, json> done;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  static const std::set<std::string> kTerminal = {
      "succeeded", "failed", "timed_out", "memory_exceeded", "cancelled", "rejected", "error"};
  while (done.size() < jobs.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      const auto& j = jobs[i];
      if (done.count(j.id)) continue;
      auto r =
          c.Request("GET", "/v1/executions/" + j.id, "", Token(j.tenant), static_cast<int>(i % 3));
      if (r.status == 200 && kTerminal.count(r.body.value("status", ""))) done[j.id] = r.body;
    }
    if (done.size() < jobs.size()) std::this_thread::sleep_for(milliseconds(200));
  }
  return done;
}

TEST(Scheduling, ThreeBrokersThreeWorkersKeepEveryLimit) {
  ClusterOptions o;
  o.brokers = 3;
  o.workers = 3;
  o.slots = 3;
  o.warm_per_runtime = 2;
  o.tenant_a_fields = ", slots: 4";  // the flooder
  o.tenant_b_fields = ", slots: 3";  // sessions
  o.extra_tenants_yaml =
      std::string("  - {name: tenant-c, tokens: [\"") + kLowToken +
      "\"], slots: 2, enabled: true, auto_approve: true}\n";  // the low-volume tenant
  o.extra_broker_yaml = "scheduling: {global_slots: 6, pump_interval_ms: 20}\n";
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(3, seconds(20))) << c->DumpLogs();

  std::mutex mu;
  std::vector<Submitted> jobs;
  std::atomic<int> refused{0};
  auto submit = [&](int broker, const std::string& tenant, const json& body,
                    const std::string& session, int order) {
    httplib::Client cli(c->url(broker));
    cli.set_read_timeout(30, 0);
    auto r = cli.Post("/v1/executions", {{"Authorization", "Bearer " + Token(tenant)}}, body.dump(),
                      "application/json");
    if (!r || r->status != 202) {
      ++refused;
      return;
    }
    std::lock_guard lock(mu);
    jobs.push_back({json::parse(r->body).at("id").get<std::string>(), tenant, session, order});
  };
  const json quick = {{"language", "shell"}, {"code", "sleep 0.01; echo ok"}, {"wait", false}};

  // The flood: tenant-a from three threads, one per broker.
  std::vector<std::thread> threads;
  for (int b = 0; b < 3; ++b) {
    threads.emplace_back([&, b] {
      for (int i = 0; i < 600; ++i) submit(b, "tenant-a", quick, "", 0);
    });
  }
  // Sessions: tenant-b, 6 sessions x 12 executions, each session's in order
  // (one thread submits them one after another, to rotating brokers).
  threads.emplace_back([&] {
    for (int i = 0; i < 12; ++i) {
      for (int s = 0; s < 6; ++s) {
        json body = {{"language", "shell"},
                     {"code", "sleep 0.01; echo " + std::to_string(i)},
                     {"session_id", "sess-" + std::to_string(s)},
                     {"wait", false}};
        submit((i + s) % 3, "tenant-b", body, "sess-" + std::to_string(s), i);
      }
    }
    for (int i = 0; i < 250; ++i) submit(i % 3, "tenant-b", quick, "", 0);
  });
  // The low-volume tenant: one job every 100 ms while the flood runs.
  threads.emplace_back([&] {
    for (int i = 0; i < 30; ++i) {
      std::this_thread::sleep_for(milliseconds(100));
      submit(i % 3, "tenant-c", quick, "", 0);
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(refused.load(), 0);
  ASSERT_GT(jobs.size(), 2000u);

  auto done = AwaitAll(*c, jobs, seconds(240));
  ASSERT_EQ(done.size(), jobs.size()) << "some jobs never ended\n" << c->DumpLogs();

  // Every accepted job ended exactly once, and succeeded.
  std::map<std::string, int> statuses;
  for (const auto& [id, rec] : done) ++statuses[rec.at("status").get<std::string>()];
  EXPECT_EQ(statuses["succeeded"], static_cast<int>(jobs.size())) << json(statuses).dump();

  // No limit was exceeded, judged from the stored start/end stamps.
  std::vector<std::pair<int64_t, int64_t>> all;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> by_tenant, by_worker;
  for (const auto& j : jobs) {
    const json& r = done.at(j.id);
    std::pair<int64_t, int64_t> span{r.at("started_at_ms").get<int64_t>(),
                                     r.at("finished_at_ms").get<int64_t>()};
    ASSERT_LE(span.first, span.second);
    all.push_back(span);
    by_tenant[j.tenant].push_back(span);
    by_worker[r.at("worker").get<std::string>()].push_back(span);
  }
  EXPECT_LE(MaxOverlap(all), 6u);
  EXPECT_GE(MaxOverlap(all), 3u);  // the load did run in parallel
  EXPECT_LE(MaxOverlap(by_tenant["tenant-a"]), 4u);
  EXPECT_LE(MaxOverlap(by_tenant["tenant-b"]), 3u);
  EXPECT_LE(MaxOverlap(by_tenant["tenant-c"]), 2u);
  EXPECT_EQ(by_worker.size(), 3u);
  for (const auto& [w, spans] : by_worker) EXPECT_LE(MaxOverlap(spans), 3u) << w;

  // Sessions: one worker each, never overlapping, in submission order.
  std::map<std::string, std::vector<const Submitted*>> sessions;
  for (const auto& j : jobs) {
    if (!j.session.empty()) sessions[j.session].push_back(&j);
  }
  ASSERT_EQ(sessions.size(), 6u);
  for (auto& [sid, list] : sessions) {
    std::sort(list.begin(), list.end(),
              [](const Submitted* a, const Submitted* b) { return a->order < b->order; });
    std::set<std::string> workers;
    std::set<int64_t> epochs;
    int64_t prev_end = 0;
    for (const Submitted* j : list) {
      const json& r = done.at(j->id);
      workers.insert(r.at("worker").get<std::string>());
      EXPECT_GE(r.at("started_at_ms").get<int64_t>(), prev_end) << sid << " overlapped";
      prev_end = r.at("finished_at_ms").get<int64_t>();
      EXPECT_EQ(r.at("stdout").get<std::string>(), std::to_string(j->order) + "\n");
      epochs.insert(r.at("session_epoch").get<int64_t>());
    }
    EXPECT_EQ(workers.size(), 1u) << sid << " moved between workers";
    EXPECT_EQ(epochs.size(), 1u) << sid << " changed epoch";
  }

  // The audit trail has one entry per job, and the chain verifies.
  std::set<std::string> audited;
  bool audit_complete = WaitFor(
      [&] {
        audited.clear();
        std::string after;
        while (true) {
          auto page = c->Request("GET", "/v1/audit?count=10000&after=" + after, "",
                                 TestCluster::kAdminToken);
          if (page.status != 200 || page.body["entries"].empty()) break;
          for (const auto& e : page.body["entries"])
            audited.insert(e["entry"]["job_id"].get<std::string>());
          after = page.body["next"].get<std::string>();
        }
        for (const auto& j : jobs) {
          if (!audited.count(j.id)) return false;
        }
        return true;
      },
      seconds(30));
  EXPECT_TRUE(audit_complete) << audited.size() << " of " << jobs.size() << " jobs audited";
  auto verify = c->Request("GET", "/v1/audit/verify", "", TestCluster::kAdminToken);
  EXPECT_EQ(verify.body["ok"], true) << verify.raw;

  // Not starved: the low-volume tenant waited less than most flood jobs did.
  auto waits = [&](const std::string& tenant) {
    std::vector<double> w;
    for (const auto& j : jobs) {
      if (j.tenant == tenant && j.session.empty()) w.push_back(done.at(j.id).at("queued_ms"));
    }
    std::sort(w.begin(), w.end());
    return w;
  };
  auto a = waits("tenant-a");
  auto low = waits("tenant-c");
  ASSERT_EQ(low.size(), 30u);
  const double a_median = a[a.size() / 2];
  const double low_max = low.back();
  RecordProperty("tenant_a_median_queued_ms", std::to_string(a_median));
  RecordProperty("tenant_c_max_queued_ms", std::to_string(low_max));
  EXPECT_LT(low_max, a_median) << "tenant-c max wait " << low_max << " ms vs tenant-a median "
                               << a_median << " ms";
  EXPECT_GT(a_median, 500.0) << "the flood never queued: the test proves nothing";
}

TEST(Scheduling, QueuedJobsShowTheirPlaceAndFullQueuesAnswer429) {
  ClusterOptions o;
  o.brokers = 1;
  o.workers = 1;
  o.slots = 1;
  o.tenant_a_fields = ", max_queue: 2";
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(1, seconds(20))) << c->DumpLogs();
  const json slow = {{"language", "shell"}, {"code", "sleep 3"}, {"wait", false}};
  auto running = c->Request("POST", "/v1/executions", slow.dump());
  ASSERT_EQ(running.status, 202) << running.raw;
  auto second = c->Request("POST", "/v1/executions", slow.dump());
  auto third = c->Request("POST", "/v1/executions", slow.dump());
  ASSERT_EQ(third.status, 202) << third.raw;
  auto rec = c->Request("GET", "/v1/executions/" + third.body["id"].get<std::string>());
  EXPECT_EQ(rec.body["status"], "queued");
  EXPECT_EQ(rec.body["queue_position"], 2);
  EXPECT_EQ(rec.body["wait_reason"], "fifo");
  auto full = c->Request("POST", "/v1/executions", slow.dump());
  EXPECT_EQ(full.status, 429) << full.raw;
  EXPECT_EQ(full.body["error"]["code"], "QUEUE_FULL");
  EXPECT_TRUE(full.headers.count("Retry-After"));
  // Another tenant's queue is its own.
  auto other = c->Request("POST", "/v1/executions", slow.dump(), TestCluster::kOtherToken);
  EXPECT_EQ(other.status, 202) << other.raw;
  // Cancelling the second moves the third up.
  auto cancel =
      c->Request("POST", "/v1/executions/" + second.body["id"].get<std::string>() + "/cancel");
  EXPECT_EQ(cancel.status, 200) << cancel.raw;
  EXPECT_EQ(cancel.body["status"], "cancelled");
  rec = c->Request("GET", "/v1/executions/" + third.body["id"].get<std::string>());
  EXPECT_EQ(rec.body["queue_position"], 1);
}

TEST(Scheduling, AGvisorTenantsJobsNeverRunOnAStandardWorker) {
  constexpr const char* kGvisorToken = "tenant-g-token";
  ClusterOptions o;
  o.brokers = 1;
  o.workers = 1;
  o.extra_tenants_yaml = std::string("  - {name: tenant-g, tokens: [\"") + kGvisorToken +
                         "\"], enabled: true, auto_approve: true, isolation: gvisor}\n";
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(1, seconds(20))) << c->DumpLogs();
  // The worker sends no level: it is a standard one, and says so everywhere.
  auto workers = c->Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
  ASSERT_EQ(workers.status, 200) << workers.raw;
  EXPECT_EQ(workers.body["workers"][0]["isolation"], "standard") << workers.raw;
  auto caps = c->Request("GET", "/v1/capabilities", "", kGvisorToken);
  EXPECT_EQ(caps.body["isolation"], "gvisor") << caps.raw;
  EXPECT_EQ(caps.body["runtimes"], json::array()) << caps.raw;
  EXPECT_EQ(caps.body["isolation_levels"], json::array({"standard"})) << caps.raw;
  caps = c->Request("GET", "/v1/capabilities");
  EXPECT_EQ(caps.body["isolation"], "standard") << caps.raw;
  EXPECT_NE(caps.body["runtimes"], json::array()) << caps.raw;

  const json quick = {{"language", "shell"}, {"code", "echo ok"}, {"wait", false}};
  // Within the broker's start-up grace a job is accepted and waits; past
  // it the submit is refused. Either way it never reaches the worker.
  std::vector<std::string> waiting;
  HttpReply refused;
  const auto deadline = std::chrono::steady_clock::now() + seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = c->Request("POST", "/v1/executions", quick.dump(), kGvisorToken);
    if (r.status != 202) {
      refused = r;
      break;
    }
    waiting.push_back(r.body["id"].get<std::string>());
    std::this_thread::sleep_for(milliseconds(500));
  }
  EXPECT_EQ(refused.status, 503) << refused.raw;
  EXPECT_EQ(refused.body["error"]["code"], "RUNTIME_UNAVAILABLE") << refused.raw;
  EXPECT_EQ(refused.body["error"]["message"],
            "no live worker offers shell at isolation level gvisor; retry later");
  for (size_t i = 0; i < waiting.size(); ++i) {
    auto rec = c->Request("GET", "/v1/executions/" + waiting[i], "", kGvisorToken);
    EXPECT_EQ(rec.body["status"], "queued") << rec.raw;
    // The first in line waits for a worker of its level; the others are behind it.
    if (i == 0) {
      EXPECT_EQ(rec.body["wait_reason"], "runtime") << rec.raw;
    }
    EXPECT_EQ(rec.body["isolation"], "gvisor") << rec.raw;
    EXPECT_EQ(rec.body["language"], "shell") << rec.raw;
  }
  // The standard tenant's job runs on the same worker meanwhile.
  auto ran = c->Submit({{"language", "shell"}, {"code", "echo ok"}});
  EXPECT_EQ(ran.body["status"], "succeeded") << ran.raw;
  EXPECT_FALSE(ran.body.contains("isolation")) << ran.raw;
}

// A cluster with a standard and a gVisor worker: each tenant's jobs run on
// the worker of its level only, and the gVisor tenant's code really runs on
// gVisor's kernel (its uname is gVisor's, not the host's).
TEST(Scheduling, EachTenantsJobsRunOnAWorkerOfItsLevel) {
  if (std::string why; !GvisorUsable(&why)) GTEST_SKIP() << "isolation level gvisor: " << why;
  constexpr const char* kGvisorToken = "tenant-g-token";
  ClusterOptions o;
  o.workers = 2;
  o.slots = 2;
  o.worker_sandbox_yaml = {"", "  isolation: gvisor\n"};
  o.extra_tenants_yaml = std::string("  - {name: tenant-g, tokens: [\"") + kGvisorToken +
                         "\"], enabled: true, auto_approve: true, isolation: gvisor}\n";
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(2, seconds(30))) << c->DumpLogs();
  auto workers = c->Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
  std::map<std::string, std::string> level_of;
  for (const auto& w : workers.body["workers"]) level_of[w["id"]] = w["isolation"];
  EXPECT_EQ(level_of[c->worker_id(0)], "standard") << workers.raw;
  EXPECT_EQ(level_of[c->worker_id(1)], "gvisor") << workers.raw;
  auto caps = c->Request("GET", "/v1/capabilities", "", kGvisorToken);
  EXPECT_EQ(caps.body["isolation_levels"], json::array({"gvisor", "standard"})) << caps.raw;

  struct utsname host;
  ASSERT_EQ(::uname(&host), 0);
  const std::string code = "import os\nprint(os.uname().release)";
  std::vector<std::future<HttpReply>> std_jobs, gv_jobs;
  for (int i = 0; i < 6; ++i) {
    std_jobs.push_back(std::async(std::launch::async, [&] {
      return c->Submit({{"language", "python"}, {"code", code}});
    }));
    gv_jobs.push_back(std::async(std::launch::async, [&] {
      return c->Request("POST", "/v1/executions",
                        json{{"language", "python"}, {"code", code}, {"wait", true}}.dump(),
                        kGvisorToken);
    }));
  }
  for (auto& f : std_jobs) {
    HttpReply r = f.get();
    EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
    EXPECT_EQ(r.body["worker"], c->worker_id(0)) << r.raw;
    EXPECT_EQ(r.body["stdout"], std::string(host.release) + "\n") << r.raw;
  }
  for (auto& f : gv_jobs) {
    HttpReply r = f.get();
    EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
    EXPECT_EQ(r.body["worker"], c->worker_id(1)) << r.raw;
    EXPECT_EQ(r.body["isolation"], "gvisor") << r.raw;
    EXPECT_EQ(r.body["stdout"], "4.4.0\n") << "gVisor's kernel answers uname: " << r.raw;
  }
}

TEST(Scheduling, SessionsOverHttp) {
  ClusterOptions o;
  o.brokers = 2;
  o.workers = 2;
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(2, seconds(20))) << c->DumpLogs();
  json body = {{"language", "python"},
               {"code", "print('hi')"},
               {"session_id", "s-1"},
               {"conversation_id", "conv-9"}};
  auto first = c->Submit(body);
  ASSERT_EQ(first.status, 200) << first.raw;
  EXPECT_EQ(first.body["status"], "succeeded");
  ASSERT_TRUE(first.body["session_epoch"].is_number()) << first.raw;
  body.erase("conversation_id");
  auto second = c->Submit(body, TestCluster::kToken, /*broker=*/1);
  EXPECT_EQ(second.body["worker"], first.body["worker"]);
  EXPECT_EQ(second.body["session_epoch"], first.body["session_epoch"]);
  auto list = c->Request("GET", "/v1/sessions?conversation_id=conv-9", "", TestCluster::kToken, 1);
  ASSERT_EQ(list.status, 200) << list.raw;
  ASSERT_EQ(list.body["sessions"].size(), 1u);
  EXPECT_EQ(list.body["sessions"][0]["id"], "s-1");
  EXPECT_EQ(list.body["sessions"][0]["execution_count"], 2);
  EXPECT_EQ(list.body["sessions"][0]["worker"], first.body["worker"]);
  // Another tenant may neither see nor delete it, and its own "s-1" is
  // another session (ids are per tenant).
  EXPECT_EQ(c->Request("GET", "/v1/sessions", "", TestCluster::kOtherToken).body["sessions"].size(),
            0u);
  EXPECT_EQ(c->Request("DELETE", "/v1/sessions/s-1", "", TestCluster::kOtherToken).status, 404);
  auto theirs = c->Submit(body, TestCluster::kOtherToken);
  EXPECT_EQ(theirs.status, 200) << theirs.raw;
  EXPECT_EQ(theirs.body["status"], "succeeded") << theirs.raw;
  auto their_list = c->Request("GET", "/v1/sessions", "", TestCluster::kOtherToken, 1);
  ASSERT_EQ(their_list.body["sessions"].size(), 1u) << their_list.raw;
  EXPECT_EQ(their_list.body["sessions"][0]["id"], "s-1");
  EXPECT_EQ(their_list.body["sessions"][0]["execution_count"], 1);
  EXPECT_EQ(c->Request("DELETE", "/v1/sessions/s-1", "", TestCluster::kOtherToken).status, 200);
  auto ours = c->Request("GET", "/v1/sessions", "", TestCluster::kToken, 1);
  ASSERT_EQ(ours.body["sessions"].size(), 1u) << ours.raw;
  EXPECT_EQ(ours.body["sessions"][0]["execution_count"], 2);
  auto js = body;
  js["language"] = "javascript";
  auto mismatch = c->Submit(js);
  EXPECT_EQ(mismatch.body["error"]["code"], "SESSION_LANGUAGE_MISMATCH") << mismatch.raw;
  auto del = c->Request("DELETE", "/v1/sessions/s-1");
  EXPECT_EQ(del.status, 200) << del.raw;
  EXPECT_EQ(c->Request("GET", "/v1/sessions").body["sessions"].size(), 0u);
  EXPECT_EQ(c->Request("DELETE", "/v1/sessions/s-1").status, 404);
}

TEST(Scheduling, LostWorkerLosesItsSessions) {
  ClusterOptions o;
  o.brokers = 1;
  o.workers = 2;
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(2, seconds(20))) << c->DumpLogs();
  json body = {{"language", "shell"}, {"code", "echo 1"}, {"session_id", "doomed"}};
  auto first = c->Submit(body);
  ASSERT_EQ(first.status, 200) << first.raw;
  std::string worker = first.body["worker"];
  int index = worker.rfind("w0-", 0) == 0 ? 0 : 1;
  c->worker(index).Signal(SIGKILL);
  c->worker(index).Wait(milliseconds(5000));
  bool lost = WaitFor(
      [&] {
        auto l = c->Request("GET", "/v1/sessions");
        return l.body["sessions"].size() == 1 && l.body["sessions"][0]["state"] == "lost";
      },
      seconds(10));
  EXPECT_TRUE(lost) << c->DumpLogs();
  auto after = c->Submit(body);
  EXPECT_EQ(after.status, 410) << after.raw;
  EXPECT_EQ(after.body["error"]["code"], "SESSION_LOST");
}

TEST(Scheduling, ABrokerDyingWithJobsInFlightLosesNothing) {
  ClusterOptions o;
  o.brokers = 2;
  o.workers = 2;
  o.slots = 2;
  o.extra_broker_yaml = "scheduling: {global_slots: 3, slot_lease_ms: 2000}\n";
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(2, seconds(20))) << c->DumpLogs();
  const json slow = {{"language", "shell"}, {"code", "sleep 2; echo done"}, {"wait", false}};
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto r = c->Request("POST", "/v1/executions", slow.dump(), TestCluster::kToken, 0);
    ASSERT_EQ(r.status, 202) << r.raw;
    ids.push_back(r.body["id"]);
  }
  // Queued behind them, submitted to the broker that survives.
  for (int i = 0; i < 3; ++i) {
    auto r = c->Request("POST", "/v1/executions", slow.dump(), TestCluster::kToken, 1);
    ASSERT_EQ(r.status, 202) << r.raw;
    ids.push_back(r.body["id"]);
  }
  // Broker 0's jobs must have left it for their workers before it dies: one
  // it never sent would end only at the overdue check (its timeout and 30 s
  // later), not by its result. Broker 0 counts a job started as it hands it
  // to its gateway, which sends it at once.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::istringstream lines(c->Request("GET", "/metrics", "", "", 0).raw);
        for (std::string line; std::getline(lines, line);) {
          if (line.rfind("kiln_executions_started_total{", 0) == 0 &&
              line.find("tenant=\"tenant-a\"") != std::string::npos &&
              line.substr(line.rfind(' ') + 1) == "3") {
            return true;
          }
        }
        return false;
      },
      seconds(10)))
      << c->DumpLogs();
  std::this_thread::sleep_for(milliseconds(200));
  c->broker(0).Signal(SIGKILL);
  c->broker(0).Wait(milliseconds(5000));
  // Broker 1 takes over broker 0's three running jobs (and renews their
  // leases: with 2 s leases, the queued ones would otherwise start early).
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& id : ids) {
    json rec;
    bool ended = WaitFor(
        [&] {
          auto r = c->Request("GET", "/v1/executions/" + id, "", TestCluster::kToken, 1);
          rec = r.body;
          return r.status == 200 && rec["status"] != "queued" && rec["status"] != "running";
        },
        seconds(30));
    ASSERT_TRUE(ended) << id << " " << rec.dump() << c->DumpLogs();
    EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
    spans.emplace_back(rec["started_at_ms"].get<int64_t>(), rec["finished_at_ms"].get<int64_t>());
  }
  EXPECT_LE(MaxOverlap(spans), 3u);
  auto metrics = c->Request("GET", "/metrics", "", "", 1);
  EXPECT_NE(metrics.raw.find("kiln_executions_taken_over_total 3"), std::string::npos)
      << metrics.raw;
}

}  // namespace
}  // namespace kiln::testing
