// Prometheus metrics through a real cluster: the broker's GET /metrics and
// each worker's metrics_listen endpoint count what the jobs did.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr const char* kSecret = "kiln-metrics-secret-42";

// The sum of the samples of `name` whose labels include every `k="v"` in
// `labels`; -1 when no sample matches.
double Sample(const std::string& text, const std::string& name,
              const std::vector<std::string>& labels = {}) {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    const auto space = line.rfind(' ');
    const std::string head = line.substr(0, space);
    bool all = true;
    for (const auto& l : labels) all = all && head.find(l) != std::string::npos;
    if (!all) continue;
    sum += std::stod(line.substr(space + 1));
    found = true;
  }
  return found ? sum : -1;
}

// promtool, when installed, must accept the exposition.
void CheckWithPromtool(const std::string& text, const std::string& dir, const std::string& what) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    std::cerr << "promtool not on PATH: skipping its check of " << what << "\n";
    return;
  }
  const std::string file = dir + "/" + what + ".prom";
  std::ofstream(file) << text;
  const std::string cmd = "promtool check metrics < " + file + " > " + file + ".out 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream out(file + ".out");
  std::string report((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << what << ": promtool check metrics says:\n" << report;
}

class MetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Port 0: each worker picks a free port and reports it as metrics_endpoint.
    cluster_ = TestCluster::Start({.brokers = 1,
                                   .workers = 2,
                                   .slots = 2,
                                   .extra_worker_yaml = "  metrics_listen: \"127.0.0.1:0\"\n",
                                   .tenant_a_secrets = {kSecret}});
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }

  static HttpReply Scrape() { return cluster_->Request("GET", "/metrics", "", ""); }

  static std::unique_ptr<TestCluster> cluster_;
};
std::unique_ptr<TestCluster> MetricsTest::cluster_;

TEST_F(MetricsTest, BrokerAndWorkersCountWhatJobsDid) {
  ASSERT_TRUE(cluster_->WaitForWorkers(2, std::chrono::seconds(30)));

  std::vector<std::string> ids;
  auto run = [&](const std::string& code, int timeout_ms, const std::string& status) {
    auto r = cluster_->Submit(
        {{"language", "python"}, {"code", code}, {"limits", {{"timeout_ms", timeout_ms}}}});
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["status"], status) << r.raw;
    ids.push_back(r.body.value("id", ""));
  };
  run("print('hello')", 20000, "succeeded");
  run("print('" + std::string(kSecret) + "')", 20000, "succeeded");
  run("raise ValueError('boom')", 20000, "failed");
  run("import time\ntime.sleep(30)", 1000, "timed_out");

  // --- broker ---
  // Redis publishes a job's end (waking the waiting HTTP request, possibly on
  // the event-bus thread) a moment before the dispatcher counts it, so wait
  // for the count rather than read it once.
  HttpReply scrape;
  EXPECT_TRUE(WaitFor(
      [&] {
        scrape = Scrape();
        return Sample(scrape.raw, "kiln_executions_finished_total") == 4;
      },
      std::chrono::seconds(5)))
      << scrape.raw;
  ASSERT_EQ(scrape.status, 200) << scrape.raw;
  auto ct = scrape.headers.find("Content-Type");
  ASSERT_NE(ct, scrape.headers.end());
  EXPECT_THAT(ct->second, StartsWith("text/plain; version=0.0.4"));
  const std::string& b = scrape.raw;
  const std::string tenant = "tenant=\"tenant-a\"";
  const std::string python = "language=\"python\"";
  EXPECT_EQ(Sample(b, "kiln_executions_submitted_total", {tenant, python}), 4) << b;
  EXPECT_EQ(Sample(b, "kiln_executions_started_total", {tenant, python}), 4) << b;
  EXPECT_GE(Sample(b, "kiln_heartbeats_missed_total"), 0) << b;
  EXPECT_EQ(Sample(b, "kiln_executions_finished_total", {tenant, python, "status=\"succeeded\""}),
            2)
      << b;
  EXPECT_EQ(Sample(b, "kiln_executions_finished_total", {"status=\"failed\""}), 1) << b;
  EXPECT_EQ(Sample(b, "kiln_executions_finished_total", {"status=\"timed_out\""}), 1) << b;
  EXPECT_EQ(Sample(b, "kiln_executions_finished_total"), 4) << b;
  EXPECT_EQ(Sample(b, "kiln_execution_duration_seconds_count", {python}), 4) << b;
  // The timed-out job ran about its 1 s limit.
  EXPECT_EQ(Sample(b, "kiln_execution_duration_seconds_bucket", {python, "le=\"0.5\""}), 3) << b;
  EXPECT_GE(Sample(b, "kiln_execution_duration_seconds_sum", {python}), 1.0) << b;
  EXPECT_EQ(Sample(b, "kiln_execution_duration_seconds_bucket", {python, "le=\"+Inf\""}), 4) << b;
  EXPECT_EQ(Sample(b, "kiln_queue_wait_seconds_count", {tenant}), 4) << b;
  EXPECT_EQ(Sample(b, "kiln_redactions_total", {tenant}), 1) << b;
  // "hello\n" plus the redacted line plus the traceback on stderr.
  EXPECT_GT(Sample(b, "kiln_output_bytes_total", {tenant}), 6 + 1) << b;
  EXPECT_EQ(Sample(b, "kiln_jobs_worker_lost_total"), 0) << b;
  EXPECT_EQ(Sample(b, "kiln_workers_lost_total"), 0) << b;
  EXPECT_EQ(Sample(b, "kiln_redis_errors_total"), 0) << b;
  EXPECT_EQ(Sample(b, "kiln_build_info", {"version=\"" KILN_VERSION "\""}), 1) << b;
  // Gauges are refreshed every dispatcher tick.
  EXPECT_TRUE(WaitFor(
      [&] {
        std::string t = Scrape().raw;
        return Sample(t, "kiln_workers_live") == 2 && Sample(t, "kiln_worker_slots") == 4 &&
               Sample(t, "kiln_worker_slots_busy") == 0 && Sample(t, "kiln_queue_length") == 0;
      },
      std::chrono::seconds(10)))
      << Scrape().raw;
  // Requests are counted by route name, never by path (which holds job ids).
  auto get = cluster_->Request("GET", "/v1/executions/" + ids[0]);
  ASSERT_EQ(get.status, 200);
  EXPECT_TRUE(WaitFor(
      [&] {
        std::string t = Scrape().raw;
        return Sample(t, "kiln_http_requests_total", {"route=\"submit\"", "code=\"200\""}) == 4 &&
               Sample(t, "kiln_http_requests_total", {"route=\"get\"", "code=\"200\""}) == 1 &&
               Sample(t, "kiln_http_requests_total", {"route=\"metrics\"", "code=\"200\""}) >= 1;
      },
      std::chrono::seconds(5)))
      << Scrape().raw;
  const std::string last = Scrape().raw;
  for (const auto& id : ids) EXPECT_THAT(last, ::testing::Not(HasSubstr(id)));
  CheckWithPromtool(last, cluster_->dir(), "broker");

  // --- workers: their metrics_endpoint, as GET /v1/workers reports it ---
  auto workers = cluster_->Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
  ASSERT_EQ(workers.status, 200) << workers.raw;
  ASSERT_EQ(workers.body["workers"].size(), 2u) << workers.raw;
  double exits = 0, timeouts = 0, starts = 0, zygote_born = 0;
  for (const auto& w : workers.body["workers"]) {
    const std::string endpoint = w.value("metrics_endpoint", "");
    ASSERT_THAT(endpoint, StartsWith("127.0.0.1:")) << workers.raw;
    ASSERT_NE(endpoint, "127.0.0.1:0");
    httplib::Client client("http://" + endpoint);
    std::string text;
    // The refill loop puts the taken sandboxes back in stock: one per
    // kind, python's two (the lean and the preloaded zygote's) added up.
    EXPECT_TRUE(WaitFor(
        [&] {
          auto res = client.Get("/metrics");
          if (!res || res->status != 200) return false;
          text = res->body;
          return Sample(text, "kiln_worker_warm_sandboxes", {python}) == 2;
        },
        std::chrono::seconds(20)))
        << endpoint << ":\n"
        << text;
    // Its sandboxes' cgroup, read every second: the warm one's memory now, and
    // the CPU of every sandbox so far (the jobs' included).
    EXPECT_TRUE(WaitFor(
        [&] {
          auto res = client.Get("/metrics");
          if (!res || res->status != 200) return false;
          text = res->body;
          return Sample(text, "kiln_worker_sandbox_memory_bytes") > 0 &&
                 Sample(text, "kiln_worker_sandbox_cpu_seconds_total") > 0;
        },
        std::chrono::seconds(5)))
        << endpoint << ":\n"
        << text;
    EXPECT_EQ(Sample(text, "kiln_worker_jobs_running"), 0) << text;
    EXPECT_EQ(Sample(text, "kiln_worker_slots"), 2) << text;
    EXPECT_EQ(Sample(text, "kiln_build_info", {"version=\"" KILN_VERSION "\""}), 1) << text;
    exits +=
        std::max(0.0, Sample(text, "kiln_worker_jobs_finished_total", {python, "reason=\"exit\""}));
    timeouts += std::max(
        0.0, Sample(text, "kiln_worker_jobs_finished_total", {python, "reason=\"timeout\""}));
    // Every job used one sandbox, and each worker keeps one more warm.
    double s = Sample(text, "kiln_worker_sandbox_start_seconds_count", {python});
    EXPECT_GE(s, 1) << text;
    starts += s;
    // Python one-shot sandboxes are forked from the worker's zygote.
    zygote_born += std::max(
        0.0, Sample(text, "kiln_worker_sandbox_start_seconds_count", {python, "birth=\"zygote\""}));
    CheckWithPromtool(text, cluster_->dir(), "worker-" + w.value("id", ""));
  }
  EXPECT_EQ(exits, 3);
  EXPECT_EQ(timeouts, 1);
  EXPECT_GE(starts, 4 + 2);
  EXPECT_GE(zygote_born, 4 + 2);
}

TEST_F(MetricsTest, MetricsNeedNoTokenAndAreReadOnly) {
  auto with_token = cluster_->Request("GET", "/metrics");
  EXPECT_EQ(with_token.status, 200);
  auto post = cluster_->Request("POST", "/metrics", "{}", "");
  EXPECT_EQ(post.status, 405) << post.raw;
  EXPECT_EQ(post.body["error"]["code"], "METHOD_NOT_ALLOWED");
  EXPECT_EQ(post.headers.find("Allow")->second, "GET");
  EXPECT_TRUE(WaitFor(
      [&] {
        return Sample(Scrape().raw, "kiln_http_requests_total",
                      {"route=\"metrics\"", "code=\"405\""}) == 1;
      },
      std::chrono::seconds(5)));
}

}  // namespace
}  // namespace kiln::testing
