#include "cli/exit_codes.hpp"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

using common::Code;
using common::Status;
using nlohmann::json;

json Record(const std::string& status) {
  return {{"id", "ex_1"},
          {"status", status},
          {"exit_code", nullptr},
          {"signal", nullptr},
          {"error", nullptr}};
}

TEST(ExitCodesTest, SucceededIsZero) {
  json r = Record("succeeded");
  r["exit_code"] = 0;
  EXPECT_EQ(ExitCodeForRecord(r), 0);
}

TEST(ExitCodesTest, FailedUsesTheJobsExitCode) {
  json r = Record("failed");
  r["exit_code"] = 3;
  EXPECT_EQ(ExitCodeForRecord(r), 3);
  r["exit_code"] = 255;
  EXPECT_EQ(ExitCodeForRecord(r), 255);
}

TEST(ExitCodesTest, FailedBySignalIs128PlusSignal) {
  json r = Record("failed");
  r["signal"] = 9;
  EXPECT_EQ(ExitCodeForRecord(r), 137);
  r["exit_code"] = 0;  // an exit code of 0 does not hide the signal
  EXPECT_EQ(ExitCodeForRecord(r), 137);
}

TEST(ExitCodesTest, FailedWithoutCodeOrSignalIsOne) {
  EXPECT_EQ(ExitCodeForRecord(Record("failed")), 1);
  json r = Record("failed");
  r["exit_code"] = 0;
  EXPECT_EQ(ExitCodeForRecord(r), 1);
  r["exit_code"] = 300;  // out of range for a process status
  EXPECT_EQ(ExitCodeForRecord(r), 1);
}

TEST(ExitCodesTest, TerminalStatuses) {
  EXPECT_EQ(ExitCodeForRecord(Record("timed_out")), 124);
  EXPECT_EQ(ExitCodeForRecord(Record("memory_exceeded")), 125);
  EXPECT_EQ(ExitCodeForRecord(Record("cancelled")), 130);
  EXPECT_EQ(ExitCodeForRecord(Record("error")), 69);
}

TEST(ExitCodesTest, RejectedByPolicyIs77ByInfrastructureIs69) {
  json r = Record("rejected");
  r["error"] = {{"code", "SECURITY_BLOCKED"}, {"message", "no"}, {"retryable", false}};
  EXPECT_EQ(ExitCodeForRecord(r), 77);
  r["error"]["code"] = "APPROVAL_DENIED";
  EXPECT_EQ(ExitCodeForRecord(r), 77);
  r["error"]["code"] = "QUEUE_FULL";
  EXPECT_EQ(ExitCodeForRecord(r), 69);
  r["error"] = nullptr;
  EXPECT_EQ(ExitCodeForRecord(r), 77);
}

TEST(ExitCodesTest, PendingIs75) {
  EXPECT_EQ(ExitCodeForRecord(Record("queued")), 75);
  EXPECT_EQ(ExitCodeForRecord(Record("running")), 75);
  EXPECT_EQ(ExitCodeForRecord(Record("awaiting_approval")), 75);
}

TEST(ExitCodesTest, UnknownStatusOrGarbageIsInfrastructure) {
  EXPECT_EQ(ExitCodeForRecord(Record("exploded")), 69);
  EXPECT_EQ(ExitCodeForRecord(json::object()), 69);
  EXPECT_EQ(ExitCodeForRecord(json{{"status", 3}}), 69);
}

TEST(ExitCodesTest, RequestErrors) {
  EXPECT_EQ(ExitCodeForStatus(Status::Ok()), 0);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kInvalidRequest, "")), 64);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kUnauthorized, "")), 64);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kForbidden, "")), 64);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kNotFound, "")), 64);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kLimitExceeded, "")), 64);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kSessionNotFound, "")), 64);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kSecurityBlocked, "")), 77);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kApprovalDenied, "")), 77);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kUnavailable, "")), 69);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kQueueFull, "")), 69);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kWorkerLost, "")), 69);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kInternal, "")), 69);
  EXPECT_EQ(ExitCodeForStatus(Status(Code::kTimeout, "")), 124);
}

}  // namespace
}  // namespace kiln::cli
