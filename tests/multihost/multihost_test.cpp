// Kiln across hosts: Redis, two brokers, three workers and an outside host
// (MultiHostRedisTest adds two Redis replicas and three sentinels), each in
// its own network namespace on one bridge (tests/multihost, see
// docs/testing-multihost.md). Worker links use CURVE; hosts are partitioned
// by cutting their link and lost by killing their processes as well.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "common/curve/curve_keys.hpp"
#include "common/protocol/codec.hpp"
#include "common/protocol/messages.hpp"
#include "tests/multihost/host_cluster.hpp"
#include "tests/support/rogue_worker.hpp"

namespace kiln::testing {
namespace {

namespace protocol = common::protocol;
using namespace std::chrono_literals;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string WorkerOf(const json& record) {
  return record.is_object() && record.contains("worker") && record["worker"].is_string()
             ? record["worker"].get<std::string>()
             : "";
}

std::string ErrorCode(const json& record) {
  if (!record.is_object() || !record.contains("error") || !record["error"].is_object()) return "";
  return record["error"].value("code", "");
}

json Shell(const std::string& code, bool wait) {
  return {{"language", "shell"}, {"code", code}, {"wait", wait}};
}

const std::vector<std::string> kAllRuntimes = {"python", "javascript", "shell"};

class MultiHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto started = Clock::now();
    cluster_ = HostCluster::Start(Options());
    std::cerr << "bed and cluster up in " << Seconds(Clock::now() - started) << " s\n";
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->DumpLogs();
    const auto stopping = Clock::now();
    cluster_.reset();
    std::cerr << "cluster and bed removed in " << Seconds(Clock::now() - stopping) << " s\n";
  }

  virtual HostClusterOptions Options() const { return {}; }

  // POST with wait:false; the job's id, or "" (after a failed expectation).
  std::string SubmitAsync(const std::string& code, int broker) {
    HttpReply r = cluster_->Submit(Shell(code, false), broker);
    EXPECT_EQ(r.status, 202) << r.raw;
    if (r.status != 202 || !r.body.is_object() || !r.body["id"].is_string()) return "";
    return r.body["id"].get<std::string>();
  }

  std::unique_ptr<HostCluster> cluster_;
};

std::set<std::string> AllWorkers() {
  std::set<std::string> ids;
  for (int w = 0; w < HostCluster::kWorkers; ++w) ids.insert(HostCluster::worker_id(w));
  return ids;
}

std::set<std::string> AsSet(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

TEST_F(MultiHostTest, WorkersOnThreeHostsServeBothBrokersWithKeys) {
  for (int b = 0; b < HostCluster::kBrokers; ++b) {
    EXPECT_EQ(AsSet(cluster_->WorkerIds(b)), AllWorkers()) << "broker " << b;
  }
  // Twelve jobs at once, six through each broker, waiting for their ends.
  std::vector<std::future<HttpReply>> replies;
  for (int i = 0; i < 12; ++i) {
    replies.push_back(std::async(std::launch::async, [&, i] {
      return cluster_->Submit(Shell("echo hi", true), i % HostCluster::kBrokers);
    }));
  }
  std::map<std::string, int> per_worker;
  for (auto& f : replies) {
    HttpReply r = f.get();
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body.value("status", ""), "succeeded") << r.raw;
    EXPECT_EQ(r.body.value("stdout", ""), "hi\n") << r.raw;
    ++per_worker[WorkerOf(r.body)];
  }
  for (const auto& [worker, n] : per_worker) {
    EXPECT_EQ(AllWorkers().count(worker), 1u) << "a job ran on '" << worker << "'";
    std::cerr << worker << ": " << n << " jobs\n";
  }
  EXPECT_GE(per_worker.size(), 2u) << "all twelve jobs ran on one worker";
}

TEST_F(MultiHostTest, ARogueHostWithoutAnAcceptedKeyGetsNothing) {
  auto broker_public = common::ReadCurvePublicKeyFile(cluster_->keys_dir() + "/broker.pub");
  ASSERT_TRUE(broker_public.ok()) << broker_public.status().ToString();
  auto unknown = common::GenerateCurveKeyPair();
  ASSERT_TRUE(unknown.ok());

  // On host "x", against each broker: a plain-text peer and one with a key
  // no broker accepts (under a real worker's id), each offering 64 slots.
  std::vector<std::unique_ptr<RogueWorker>> rogues;
  cluster_->bed().RunIn("x", [&] {
    for (int b = 0; b < HostCluster::kBrokers; ++b) {
      rogues.push_back(std::make_unique<RogueWorker>(cluster_->worker_endpoint(b)));
      rogues.back()->Send(RogueRegistration("rogue-plain", kAllRuntimes));
      rogues.push_back(
          std::make_unique<RogueWorker>(cluster_->worker_endpoint(b), *unknown, *broker_public));
      rogues.back()->Send(RogueRegistration(HostCluster::worker_id(0), kAllRuntimes));
    }
  });

  // Jobs carrying a secret, through both brokers, all run on real workers.
  for (int i = 0; i < 6; ++i) {
    json request = Shell("echo $TOKEN", true);
    request["env"] = {{"TOKEN", "s3cr3t-" + std::to_string(i)}};
    HttpReply r = cluster_->Submit(request, i % HostCluster::kBrokers);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body.value("status", ""), "succeeded") << r.raw;
    EXPECT_EQ(r.body.value("stdout", ""), "s3cr3t-" + std::to_string(i) + "\n") << r.raw;
    EXPECT_EQ(AllWorkers().count(WorkerOf(r.body)), 1u) << r.raw;
  }
  for (size_t i = 0; i < rogues.size(); ++i) {
    EXPECT_TRUE(rogues[i]->Drain(300ms).empty())
        << (i % 2 == 0 ? "a plain-text" : "an unknown-key") << " peer got an answer";
  }
  for (int b = 0; b < HostCluster::kBrokers; ++b) {
    EXPECT_EQ(AsSet(cluster_->WorkerIds(b)), AllWorkers()) << "broker " << b;
    EXPECT_GE(cluster_->Metric(b, "kiln_worker_refused_total{reason=\"unknown_key\"}"), 1.0)
        << "broker " << b;
  }
  rogues.clear();  // their contexts end here, on this thread: no socket is in use
}

TEST_F(MultiHostTest, APartitionedWorkerHostIsLostThenServesAgain) {
  // One long job; find the worker (and so the host) it runs on.
  const std::string id = SubmitAsync("sleep 15; echo done", 0);
  ASSERT_FALSE(id.empty());
  json rec = cluster_->WaitRecord(
      id, [](const json& r) { return IsTerminalStatus(r) || !WorkerOf(r).empty(); }, 10s);
  ASSERT_EQ(rec.value("status", ""), "running") << rec.dump();
  const std::string victim = WorkerOf(rec);
  ASSERT_EQ(AllWorkers().count(victim), 1u) << rec.dump();
  std::this_thread::sleep_for(300ms);  // its sandbox runs the code

  const auto cut_at = Clock::now();
  cluster_->bed().Partition(victim);  // a worker's host is named as its id
  json lost = cluster_->WaitTerminal(id, 6s, 1);
  const double lost_after = Seconds(Clock::now() - cut_at);
  EXPECT_EQ(lost.value("status", ""), "error") << lost.dump();
  EXPECT_EQ(ErrorCode(lost), "WORKER_LOST") << lost.dump();
  EXPECT_LT(lost_after, 4.0) << "declared lost too late (window 1 s)";
  std::set<std::string> others = AllWorkers();
  others.erase(victim);
  EXPECT_TRUE(WaitFor(
      [&] {
        return AsSet(cluster_->WorkerIds(0)) == others && AsSet(cluster_->WorkerIds(1)) == others;
      },
      3s))
      << "the brokers still list " << victim;
  // The others serve meanwhile, through both brokers.
  for (int b = 0; b < HostCluster::kBrokers; ++b) {
    HttpReply r = cluster_->Submit(Shell("echo meanwhile", true), b);
    EXPECT_EQ(r.body.value("status", ""), "succeeded") << r.raw;
    EXPECT_EQ(others.count(WorkerOf(r.body)), 1u) << r.raw;
  }

  std::this_thread::sleep_for(2s);  // a partition of ~3 s in all
  cluster_->bed().Heal(victim);
  const auto healed_at = Clock::now();
  ASSERT_TRUE(cluster_->WaitForWorkers(HostCluster::kWorkers, 15s))
      << "worker " << victim << " did not register again after the heal";
  std::cerr << victim << " partitioned " << Seconds(healed_at - cut_at) << " s, lost after "
            << lost_after << " s, registered with both brokers "
            << Seconds(Clock::now() - healed_at) << " s after the heal\n";

  // New jobs: one per slot (3 workers x 2), so the healed worker gets some.
  std::vector<std::string> more;
  for (int i = 0; i < 6; ++i) more.push_back(SubmitAsync("sleep 1; echo again", i % 2));
  std::set<std::string> ran_on;
  for (const auto& job : more) {
    ASSERT_FALSE(job.empty());
    json done = cluster_->WaitTerminal(job, 20s);
    EXPECT_EQ(done.value("status", ""), "succeeded") << done.dump();
    ran_on.insert(WorkerOf(done));
  }
  EXPECT_EQ(ran_on.count(victim), 1u) << "the healed worker took no job";
  // The lost job stays lost (one terminal state), whatever its worker sent later.
  json after = cluster_->Record(id, 0);
  EXPECT_EQ(ErrorCode(after), "WORKER_LOST") << after.dump();
}

TEST_F(MultiHostTest, ABrokerHostVanishesAndTheOtherTakesOver) {
  // Jobs accepted by b1: two running (on whatever workers) and, with every
  // slot then taken by more jobs, some queued.
  std::vector<std::string> via_b1;
  for (int i = 0; i < 8; ++i) via_b1.push_back(SubmitAsync("sleep 3; echo survived", 0));
  for (const auto& id : via_b1) ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor(
      [&] {
        int running = 0;
        for (const auto& id : via_b1)
          running += cluster_->Record(id, 1).value("status", "") == "running";
        return running >= 2;
      },
      10s));
  std::this_thread::sleep_for(300ms);

  // b1's host vanishes: its process is killed and its link cut.
  const auto lost_at = Clock::now();
  cluster_->broker(0).Kill();
  cluster_->bed().Partition("b1");

  // b2 keeps serving new jobs.
  for (int i = 0; i < 3; ++i) {
    HttpReply r = cluster_->Submit(Shell("echo via-b2", true), 1);
    EXPECT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body.value("status", ""), "succeeded") << r.raw;
  }
  // Every job b1 accepted ends, seen through b2, with its real result: the
  // workers send results to b2, b2 takes over b1's leases, and the queued
  // ones start on the slots that come back.
  for (const auto& id : via_b1) {
    json rec = cluster_->WaitTerminal(id, 30s, 1);
    EXPECT_EQ(rec.value("status", ""), "succeeded") << rec.dump();
    EXPECT_EQ(rec.value("stdout", ""), "survived\n") << rec.dump();
  }
  std::cerr << "all " << via_b1.size() << " jobs of the lost broker ended "
            << Seconds(Clock::now() - lost_at) << " s after it vanished\n";
  EXPECT_EQ(AsSet(cluster_->WorkerIds(1)), AllWorkers());
}

// Redis on three hosts (master, two replicas, a sentinel on each); brokers
// reach it through the sentinels and wait for a replica's acknowledgement.
class MultiHostRedisTest : public MultiHostTest {
 protected:
  HostClusterOptions Options() const override {
    HostClusterOptions o;
    o.redis_ha = true;
    return o;
  }
};

TEST_F(MultiHostRedisTest, TheRedisMasterHostDiesUnderLoad) {
  ASSERT_EQ(cluster_->RedisMasterHost(), "redis");
  // Four clients, two per broker, submit short jobs without pause until told
  // to stop; each keeps the ids it was answered 2xx for, and its refusals.
  struct Accepted {
    std::string id, stdout_text;
    int broker;
  };
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<Accepted> accepted;
  std::map<int, int> refused;  // HTTP status -> count
  std::map<std::string, int> refusal_codes;
  std::atomic<int> accepted_after_failover{0};
  std::atomic<bool> failed_over{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      const int broker = c % HostCluster::kBrokers;
      for (int n = 0; !stop; ++n) {
        const std::string text = "c" + std::to_string(c) + "-" + std::to_string(n);
        HttpReply r = cluster_->Submit(Shell("sleep 0.2; echo " + text, false), broker);
        std::lock_guard lock(mu);
        if (r.status == 202 && r.body.is_object() && r.body["id"].is_string()) {
          accepted.push_back({r.body["id"].get<std::string>(), text + "\n", broker});
          if (failed_over) ++accepted_after_failover;
        } else {
          ++refused[r.status];
          if (r.body.is_object() && r.body["error"].is_object()) {
            ++refusal_codes[r.body["error"].value("code", "")];
          }
        }
        // Paced: 4 clients x ~6/s stay near the workers' 6 slots / 0.2 s.
        std::this_thread::sleep_for(150ms);
      }
    });
  }
  std::this_thread::sleep_for(2s);
  size_t before_loss = 0;
  {
    std::lock_guard lock(mu);
    before_loss = accepted.size();
  }
  const auto lost_at = Clock::now();
  cluster_->LoseRedisMasterHost();
  std::string master;
  ASSERT_TRUE(WaitFor(
      [&] {
        master = cluster_->RedisMasterHost();
        return master == "r2" || master == "r3";
      },
      20s))
      << "no replica was promoted";
  const double promoted_after = Seconds(Clock::now() - lost_at);
  failed_over = true;
  // Load goes on until jobs are accepted again, and a little longer.
  const bool accepting = WaitFor([&] { return accepted_after_failover >= 8; }, 20s);
  std::this_thread::sleep_for(1s);
  stop = true;
  for (auto& t : clients) t.join();
  const double accepting_after = Seconds(Clock::now() - lost_at);
  ASSERT_TRUE(accepting) << "no job was accepted after the failover";
  EXPECT_GE(before_loss, 8u);

  // Every job answered 2xx, before, during or after the failover, reaches a
  // terminal state, through either broker, and it is the real one.
  std::map<std::string, int> outcomes;
  for (size_t i = 0; i < accepted.size(); ++i) {
    const Accepted& a = accepted[i];
    json rec = cluster_->WaitTerminal(a.id, 60s, static_cast<int>(i % HostCluster::kBrokers));
    ASSERT_TRUE(IsTerminalStatus(rec))
        << "job " << a.id << " (accepted by broker " << a.broker << ") did not end: " << rec.dump();
    ++outcomes[rec.value("status", "") + (ErrorCode(rec).empty() ? "" : " " + ErrorCode(rec))];
    EXPECT_EQ(rec.value("status", ""), "succeeded") << rec.dump();
    EXPECT_EQ(rec.value("stdout", ""), a.stdout_text) << rec.dump();
  }
  // ... and stays in it: one terminal state, whatever arrives later.
  std::this_thread::sleep_for(1s);
  for (const Accepted& a : accepted) {
    json rec = cluster_->Record(a.id, a.broker);
    EXPECT_EQ(rec.value("status", ""), "succeeded") << rec.dump();
  }
  // Refusals while Redis had no master are retryable 503s, nothing else.
  for (const auto& [status, n] : refused) EXPECT_EQ(status, 503) << n << " answers";
  for (const auto& [code, n] : refusal_codes) EXPECT_EQ(code, "UNAVAILABLE") << n << " answers";

  std::cerr << accepted.size() << " jobs accepted (" << before_loss
            << " before the master's host died); refused:";
  for (const auto& [status, n] : refused) std::cerr << " " << n << "x" << status;
  std::cerr << "; promoted " << master << " after " << promoted_after
            << " s; accepting again after <= " << accepting_after << " s; outcomes:";
  for (const auto& [o, n] : outcomes) std::cerr << " " << n << "x " << o;
  std::cerr << "\n";
}

}  // namespace
}  // namespace kiln::testing
