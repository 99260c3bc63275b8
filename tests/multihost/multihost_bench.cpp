// multihost_bench: Kiln's scaling figures on the multi-host test bed
// (tests/multihost, docs/testing-multihost.md), printed, not asserted.
//
//   build/tests/multihost/multihost_bench                  # both parts, 10 s windows
//   build/tests/multihost/multihost_bench --seconds 20 --only workers
//
// workers: closed-loop clients on host "x" run sleep-bound jobs (`sleep 1`,
//   4 slots per worker, twice as many clients as slots, through both
//   brokers) against 1, 2 and 3 worker hosts; throughput against linear
//   (n x the one-host figure) and against the slots' ceiling (n x 4 / 1 s).
// brokers: clients run trivial executions in live shell sessions (one each,
//   spread over the three workers), first all through broker b1, then
//   spread over b1 and b2; executions per second.
// Every "host" shares this machine's cores: the broker figure shows what a
// second broker adds when the brokers are the bottleneck on one machine,
// not what a second machine would. Needs root (network namespaces).
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/multihost/host_cluster.hpp"

namespace kiln::testing {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr int kSlots = 4;
constexpr double kJobSeconds = 1.0;
constexpr auto kWarmUp = std::chrono::seconds(3);

struct Load {
  int clients = 0;
  std::vector<int> brokers;         // client c talks to brokers[c % size]
  std::vector<json> requests;       // client c sends requests[c % size] again and again
  std::chrono::seconds window{10};  // measured after kWarmUp
};

// Runs the closed loop; completions (200 and "succeeded") per second within
// the window, and how many answers were anything else.
double RunLoad(HostCluster& c, const Load& load, int* failures) {
  const auto start = Clock::now();
  const auto from = start + kWarmUp;
  const auto until = from + load.window;
  std::atomic<long> done{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < load.clients; ++i) {
    clients.emplace_back([&, i] {
      const std::string host =
          c.bed().ip(HostCluster::broker_host(load.brokers[i % load.brokers.size()]));
      const std::string body = load.requests[i % load.requests.size()].dump();
      c.bed().RunIn("x", [&] {
        httplib::Client cli(host, HostCluster::kHttpPort);
        cli.set_keep_alive(true);
        cli.set_tcp_nodelay(true);  // else headers and body wait on a delayed ACK
        cli.set_read_timeout(60, 0);
        const httplib::Headers headers = {
            {"Authorization", std::string("Bearer ") + HostCluster::kToken}};
        while (Clock::now() < until) {
          auto r = cli.Post("/v1/executions", headers, body, "application/json");
          const auto now = Clock::now();
          const bool ok = r && r->status == 200 &&
                          json::parse(r->body, nullptr, false).value("status", "") == "succeeded";
          if (!ok) {
            ++failed;
            if (failed <= 3) {
              std::fprintf(stderr, "  answer: %d %s\n", r ? r->status : -1,
                           r ? r->body.substr(0, 300).c_str() : "(no answer)");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
          } else if (now >= from && now < until) {
            ++done;
          }
        }
      });
    });
  }
  for (auto& t : clients) t.join();
  *failures = failed;
  return static_cast<double>(done) / std::chrono::duration<double>(load.window).count();
}

json ShellJob(const std::string& code) {
  return {{"language", "shell"}, {"code", code}, {"wait", true}};
}

void WorkerScaling(std::chrono::seconds window) {
  std::printf("## Worker hosts: sleep-bound jobs (`sleep 1`, %d slots per worker host)\n", kSlots);
  std::printf("| worker hosts | clients | jobs/s | ceiling (slots/s) | vs linear | failures |\n");
  std::printf("|---|---|---|---|---|---|\n");
  double one = 0;
  for (int n = 1; n <= HostCluster::kWorkers; ++n) {
    HostClusterOptions o;
    o.slots = kSlots;
    o.workers = n;
    auto c = HostCluster::Start(o);
    Load load;
    load.clients = 2 * kSlots * n;
    load.brokers = {0, 1};
    load.requests = {ShellJob("sleep 1")};
    load.window = window;
    int failures = 0;
    const double rate = RunLoad(*c, load, &failures);
    if (n == 1) one = rate;
    std::printf("| %d | %d | %.2f | %.2f | %.2f | %d |\n", n, load.clients, rate,
                n * kSlots / kJobSeconds, one > 0 ? rate / (n * one) : 0.0, failures);
    std::fflush(stdout);
  }
}

void BrokerScaling(std::chrono::seconds window) {
  constexpr int kClients = 8;
  std::printf(
      "\n## Broker hosts: trivial executions (`:`) in %d live shell sessions, 3 worker hosts\n",
      kClients);
  std::printf("| broker hosts used | executions/s | vs one | failures |\n|---|---|---|---|\n");
  HostClusterOptions o;
  o.slots = kSlots;
  auto c = HostCluster::Start(o);
  Load load;
  load.clients = kClients;
  for (int i = 0; i < kClients; ++i) {
    json r = ShellJob(":");
    r["session_id"] = "bench-" + std::to_string(i);
    load.requests.push_back(r);
  }
  load.window = window;
  double one = 0;
  for (const std::vector<int>& brokers : {std::vector<int>{0}, std::vector<int>{0, 1}}) {
    load.brokers = brokers;
    int failures = 0;
    const double rate = RunLoad(*c, load, &failures);
    if (brokers.size() == 1) one = rate;
    std::printf("| %zu | %.0f | %.2f | %d |\n", brokers.size(), rate, one > 0 ? rate / one : 0.0,
                failures);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace kiln::testing

int main(int argc, char** argv) {
  int seconds = 10;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--seconds N] [--only workers|brokers]\n", argv[0]);
      return 2;
    }
  }
  if (::geteuid() != 0) {
    std::fprintf(stderr, "needs root: the bed is made of network namespaces\n");
    return 2;
  }
  try {
    if (only.empty() || only == "workers")
      kiln::testing::WorkerScaling(std::chrono::seconds(seconds));
    if (only.empty() || only == "brokers")
      kiln::testing::BrokerScaling(std::chrono::seconds(seconds));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multihost_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
