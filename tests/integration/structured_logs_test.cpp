// Structured logs of a real cluster: brokers and workers configured with
// `log: {format: json, levels: {...}}` write one JSON object per line, and
// the lines about a job carry its job, session, tenant and worker ids as keys,
// so one job can be followed across processes. Per-subsystem levels turn the
// HTTP access log and the worker's per-job lines on without the rest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <sstream>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;

// Every line of a log, parsed; a line that is not a JSON object fails the test.
std::vector<json> JsonLines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object()) << path << ": not a JSON line: " << line;
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

std::vector<json> Matching(const std::vector<json>& lines, const std::string& component,
                           const std::string& job) {
  std::vector<json> out;
  for (const auto& l : lines) {
    if (l.value("component", "") == component && l.value("job", "") == job) out.push_back(l);
  }
  return out;
}

TEST(StructuredLogsTest, JobLinesCarryIdsAcrossBrokerAndWorker) {
  auto cluster = TestCluster::Start(
      {.brokers = 1,
       .workers = 1,
       .broker_log_yaml = "log: {format: json, levels: {http: debug}}\n",
       .worker_log_yaml = "log: {format: json, level: warn, levels: {jobs: debug, sessions: "
                          "debug}}\n"});
  auto workers = cluster->Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
  ASSERT_EQ(workers.status, 200) << workers.raw;
  const std::string worker_id = workers.body["workers"][0]["id"];

  auto oneshot = cluster->Submit({{"language", "python"}, {"code", "raise ValueError('x')"}});
  ASSERT_EQ(oneshot.status, 200) << oneshot.raw;
  const std::string job = oneshot.body["id"];
  auto in_session =
      cluster->Submit({{"language", "shell"}, {"code", "echo hi"}, {"session_id", "logs-session"}});
  ASSERT_EQ(in_session.status, 200) << in_session.raw;
  const std::string session_job = in_session.body["id"];

  const std::string broker_log = cluster->dir() + "/broker0.log";
  const std::string worker_log = cluster->dir() + "/worker0.log";
  // The broker logs a job's end just after answering the request.
  ASSERT_TRUE(
      WaitFor([&] { return !Matching(JsonLines(broker_log), "broker.jobs", session_job).empty(); },
              std::chrono::seconds(5)))
      << ReadFile(broker_log);

  auto broker_lines = JsonLines(broker_log);
  for (const auto& l : broker_lines) {
    EXPECT_EQ(l.value("instance", ""), "broker-0") << l.dump();
    EXPECT_TRUE(l.contains("ts") && l.contains("level") && l.contains("msg")) << l.dump();
  }
  auto ended = Matching(broker_lines, "broker.jobs", job);
  ASSERT_EQ(ended.size(), 1u) << ReadFile(broker_log);
  EXPECT_EQ(ended[0]["level"], "info");
  EXPECT_EQ(ended[0]["tenant"], "tenant-a");
  EXPECT_EQ(ended[0]["worker"], worker_id);
  EXPECT_FALSE(ended[0].contains("session"));
  EXPECT_THAT(ended[0]["msg"].get<std::string>(), ::testing::HasSubstr("python failed"));
  auto session_ended = Matching(broker_lines, "broker.jobs", session_job);
  ASSERT_EQ(session_ended.size(), 1u);
  EXPECT_EQ(session_ended[0]["session"], "logs-session");
  EXPECT_THAT(session_ended[0]["msg"].get<std::string>(), ::testing::HasSubstr("shell succeeded"));
  // The HTTP access log is on (debug) for this broker's `http` subsystem only.
  bool saw_access = false;
  for (const auto& l : broker_lines) {
    saw_access = saw_access || (l["component"] == "broker.http" &&
                                l["msg"].get<std::string>().find("POST /v1/executions -> 200") !=
                                    std::string::npos);
    if (l["level"] == "debug") {
      EXPECT_EQ(l["component"], "broker.http") << "only http is at debug: " << l.dump();
    }
  }
  EXPECT_TRUE(saw_access) << ReadFile(broker_log);

  // The worker: the process-wide level is warn, but jobs and sessions are at
  // debug, so each job left one line with its ids, and nothing else at info.
  ASSERT_TRUE(WaitFor(
      [&] { return !Matching(JsonLines(worker_log), "worker.sessions", session_job).empty(); },
      std::chrono::seconds(5)))
      << ReadFile(worker_log);
  auto worker_lines = JsonLines(worker_log);
  auto ran = Matching(worker_lines, "worker.jobs", job);
  ASSERT_EQ(ran.size(), 1u) << ReadFile(worker_log);
  EXPECT_EQ(ran[0]["tenant"], "tenant-a");
  EXPECT_EQ(ran[0]["instance"], worker_id);
  auto session_ran = Matching(worker_lines, "worker.sessions", session_job);
  ASSERT_EQ(session_ran.size(), 1u);
  EXPECT_EQ(session_ran[0]["session"], "logs-session");
  for (const auto& l : worker_lines) {
    const std::string component = l.value("component", "");
    if (component == "worker.jobs" || component == "worker.sessions") continue;
    EXPECT_THAT(l.value("level", ""), ::testing::AnyOf("warning", "error", "critical"))
        << "below the worker's warn level: " << l.dump();
  }
}

TEST(StructuredLogsTest, UnknownSubsystemStopsTheBrokerNamingIt) {
  const std::string dir = ::testing::TempDir() + "/kiln-logs-cfg";
  ::mkdir(dir.c_str(), 0755);
  const std::string cfg = dir + "/broker.yaml";
  WriteFile(cfg,
            "tenants:\n  - {name: a, tokens: [\"aaaaaaaaaaaa\"]}\n"
            "log: {levels: {schedular: debug}}\n");
  auto broker = ChildProcess::Start({std::string(KILN_BINARY_DIR) + "/bin/kiln-broker", "--config",
                                     cfg, "--http", "127.0.0.1:" + std::to_string(FreePort())},
                                    dir + "/broker.log");
  int status = broker.Wait(std::chrono::seconds(10));
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_THAT(ReadFile(dir + "/broker.log"),
              ::testing::HasSubstr("log.levels: unknown subsystem 'schedular'"));
}

}  // namespace
}  // namespace kiln::testing
