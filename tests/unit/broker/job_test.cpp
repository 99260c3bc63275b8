#include "broker/job/job.hpp"

#include <gtest/gtest.h>

namespace kiln::broker {
namespace {

namespace protocol = common::protocol;

JobSpec Spec() {
  JobSpec s;
  s.id = "ex_1";
  s.tenant = "acme";
  s.language = "python";
  s.code = "print(1)";
  s.input_json = R"({"a":1})";
  s.env = {{"K", "V"}};
  s.files = {{"a.txt", std::string("\0\1bin", 5)}};
  s.collect = {"*.png"};
  s.limits = {1000, 64, 900, 4096, 16};
  s.created_ms = 123;
  return s;
}

TEST(Job, SpecRoundTripsThroughJson) {
  JobSpec s = Spec();
  auto back = JobSpec::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), s.ToJson());
  EXPECT_EQ(back->files[0].content, s.files[0].content);
}

TEST(Job, ResultsMapOntoStatuses) {
  struct Case {
    protocol::EndReason reason;
    std::optional<int> exit_code;
    bool error;
    JobStatus status;
    std::string code;
  };
  std::vector<Case> cases = {
      {protocol::EndReason::kExit, 0, false, JobStatus::kSucceeded, ""},
      {protocol::EndReason::kExit, 2, false, JobStatus::kFailed, "EXECUTION_FAILED"},
      {protocol::EndReason::kExit, 1, true, JobStatus::kFailed, "EXECUTION_FAILED"},
      {protocol::EndReason::kTimeout, std::nullopt, false, JobStatus::kTimedOut, "TIMEOUT"},
      {protocol::EndReason::kMemoryExceeded, std::nullopt, false, JobStatus::kMemoryExceeded,
       "MEMORY_EXCEEDED"},
      {protocol::EndReason::kCancelled, std::nullopt, false, JobStatus::kCancelled, "CANCELLED"},
      {protocol::EndReason::kOutputLimit, std::nullopt, false, JobStatus::kFailed, "OUTPUT_LIMIT"},
      {protocol::EndReason::kError, std::nullopt, false, JobStatus::kError, "INTERNAL"},
  };
  for (const auto& c : cases) {
    JobRecord r = JobRecord::Queued(Spec());
    protocol::Result res;
    res.reason = c.reason;
    res.exit_code = c.exit_code;
    if (c.error) res.error = protocol::ErrorInfo{"ValueError", "bad", "tb"};
    r.ApplyResult(res, 5);
    EXPECT_EQ(r.status, c.status) << protocol::EndReasonName(c.reason);
    if (c.code.empty()) {
      EXPECT_FALSE(r.error.has_value());
    } else {
      ASSERT_TRUE(r.error.has_value());
      EXPECT_EQ(r.error->code, c.code);
    }
    EXPECT_TRUE(IsTerminal(r.status));
  }
}

TEST(Job, RecordRoundTripsThroughJson) {
  JobRecord r = JobRecord::Queued(Spec());
  protocol::Result res;
  res.reason = protocol::EndReason::kExit;
  res.exit_code = 1;
  res.stdout_data = "out";
  res.stderr_data = "err";
  res.result_json = R"({"x":[1,2]})";
  res.error = protocol::ErrorInfo{"ValueError", "bad", "Traceback..."};
  res.duration_ms = 3.5;
  res.cpu_ms = 2;
  res.max_rss_kb = 900;
  res.files = {{"o.txt", "data"}};
  r.worker = "w1";
  r.ApplyResult(res, 99);
  auto j = r.ToJson();
  EXPECT_EQ(j["result"]["x"][1], 2);
  EXPECT_EQ(j["error"]["type"], "ValueError");
  EXPECT_EQ(j["usage"]["max_rss_kb"], 900);
  auto back = JobRecord::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), j);
}

TEST(Job, RecordSaysWhenCollectLeftFilesOut) {
  JobRecord r = JobRecord::Queued(Spec());
  protocol::Result res;
  res.reason = protocol::EndReason::kExit;
  res.exit_code = 0;
  res.files = {{"a.txt", "a"}};
  res.files_truncated = true;
  res.files_omitted = 44;
  r.ApplyResult(res, 1);
  auto j = r.ToJson();
  EXPECT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(j["files_truncated"], true);
  EXPECT_EQ(j["files_omitted"], 44);
  auto back = JobRecord::FromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->files_truncated);
  EXPECT_EQ(back->files_omitted, 44u);
  // A complete collection says so; records stored before the fields existed read as complete.
  JobRecord whole = JobRecord::Queued(Spec());
  EXPECT_EQ(whole.ToJson()["files_truncated"], false);
  EXPECT_EQ(whole.ToJson()["files_omitted"], 0);
  auto old = whole.ToJson();
  old.erase("files_truncated");
  old.erase("files_omitted");
  auto read = JobRecord::FromJson(old);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_FALSE(read->files_truncated);
}

}  // namespace
}  // namespace kiln::broker
