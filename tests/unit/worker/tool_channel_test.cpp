// ToolChannel over a real socket pair: what a sandbox's code writes on its
// fd 6 becomes ToolCalls (declared tools only, within the limits, secrets
// masked), and each call gets exactly one reply line — the broker's answer,
// a refusal, or a timeout — in the wire shape the runtimes' helpers parse.
#include "worker/executor/tool_channel.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/unique_fd.hpp"

namespace kiln::worker {
namespace {

namespace protocol = common::protocol;
using nlohmann::json;
using std::chrono::milliseconds;

class ToolChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    sandbox_.Reset(fds[0]);
    worker_.Reset(fds[1]);
    job_.job_id = "ex_1";
    job_.tools = {"search", "add"};
    job_.tool_timeout_ms = 1000;
    auto policy =
        common::SecretsPolicy::Create({"hunter2-secret"}, common::SecretsPolicy::Patterns::kNone);
    ASSERT_TRUE(policy.ok());
    policy_ = *policy;
    channel_.emplace(job_, *policy_, [this](protocol::ToolCall c) { sent_.push_back(c); });
  }

  // The sandbox writes `text`; the channel reads it.
  void Write(const std::string& text) {
    ASSERT_EQ(::write(sandbox_.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ASSERT_TRUE(channel_->Read(worker_.get(), now_));
  }
  // The reply lines the channel has written so far.
  std::vector<json> Replies() {
    channel_->Write(worker_.get());
    std::string got;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(sandbox_.get(), buf, sizeof buf)) > 0) got.append(buf, n);
    std::vector<json> out;
    size_t start = 0;
    for (size_t nl; (nl = got.find('\n', start)) != std::string::npos; start = nl + 1) {
      out.push_back(json::parse(got.substr(start, nl - start)));
    }
    EXPECT_EQ(start, got.size()) << "a reply without its line break";
    return out;
  }

  protocol::Execute job_;
  std::shared_ptr<const common::SecretsPolicy> policy_;
  common::UniqueFd sandbox_, worker_;
  std::optional<ToolChannel> channel_;
  std::vector<protocol::ToolCall> sent_;
  ToolChannel::TimePoint now_ = common::SteadyClock::now();
};

TEST_F(ToolChannelTest, ADeclaredCallIsSentMaskedAndItsAnswerWrittenBack) {
  Write(R"({"id": 7, "name": "search", "arguments": {"q": "hunter2-secret kiln"}})"
        "\n");
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].job_id, "ex_1");
  EXPECT_EQ(sent_[0].call, 1u);
  EXPECT_EQ(sent_[0].name, "search");
  EXPECT_THAT(sent_[0].arguments_json, ::testing::Not(::testing::HasSubstr("hunter2")));
  EXPECT_TRUE(Replies().empty());
  channel_->OnResult({.job_id = "ex_1", .call = 1, .ok = true, .result_json = R"(["a","b"])"});
  auto r = Replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], json::parse(R"({"id": 7, "result": ["a", "b"]})"));
  // A second answer to the same call, or one to a call never made, is ignored.
  channel_->OnResult({.job_id = "ex_1", .call = 1, .ok = true, .result_json = "1"});
  channel_->OnResult({.job_id = "ex_1", .call = 9, .ok = true, .result_json = "1"});
  EXPECT_TRUE(Replies().empty());
}

TEST_F(ToolChannelTest, TheWireShapeIsExact) {
  // The shell helper cuts these lines by position: no spaces, this key order.
  Write(R"({"id":1,"name":"add","arguments":{}})"
        "\n"
        R"({"id":2,"name":"add"})"
        "\n");
  channel_->OnResult({.job_id = "ex_1", .call = 1, .ok = true, .result_json = "3"});
  channel_->OnResult({.job_id = "ex_1",
                      .call = 2,
                      .error_type = "ToolError",
                      .error_message = "no \"such\" thing\n"});
  channel_->Write(worker_.get());
  char buf[512];
  ssize_t n = ::read(sandbox_.get(), buf, sizeof buf);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, n),
            "{\"id\":1,\"result\":3}\n"
            "{\"id\":2,\"error\":{\"type\":\"ToolError\",\"message\":\"no \\\"such\\\" "
            "thing\\n\"}}\n");
}

TEST_F(ToolChannelTest, WhatMayNotBeCalledIsRefusedWithoutLeaving) {
  Write(R"({"id": 1, "name": "rm_rf", "arguments": {}})"
        "\n"
        R"({"id": 2, "name": "add", "arguments": [1, 2]})"
        "\n"
        R"({"name": "add"})"
        "\n"
        R"({"id": -1, "name": "add"})"
        "\n"
        "not json\n"
        R"({"id": 3, "name": "add", "arguments": {"x": ")" +
        std::string(common::protocol::kMaxToolArgumentBytes, 'x') + "\"}}\n");
  EXPECT_TRUE(sent_.empty());
  auto r = Replies();
  ASSERT_EQ(r.size(), 6u);
  for (const auto& reply : r) EXPECT_EQ(reply["error"]["type"], "ToolRefused") << reply;
  EXPECT_EQ(r[0]["id"], 1);
  EXPECT_EQ(r[0]["error"]["message"], "undeclared tool \"rm_rf\"");
  EXPECT_EQ(r[1]["error"]["message"], "arguments must be a JSON object");
  EXPECT_TRUE(r[2]["id"].is_null());
  EXPECT_TRUE(r[3]["id"].is_null());
  EXPECT_TRUE(r[4]["id"].is_null());
  EXPECT_EQ(r[5]["id"], 3);
  EXPECT_THAT(r[5]["error"]["message"].get<std::string>(), ::testing::HasSubstr("above"));
}

TEST_F(ToolChannelTest, ALineTooLongIsDroppedAndTheNextOneStillWorks) {
  std::string huge(ToolChannel::kMaxLine + 10, 'x');
  // Arrives in pieces, as a socket delivers it.
  for (size_t at = 0; at < huge.size(); at += 60000) {
    Write(huge.substr(at, 60000));
  }
  Write(
      "\n"
      R"({"id": 5, "name": "add", "arguments": {}})"
      "\n");
  auto r = Replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0]["id"].is_null());
  EXPECT_EQ(sent_.size(), 1u);
}

TEST_F(ToolChannelTest, CallsAreBoundedInFlightAndPerExecution) {
  std::string lines;
  for (int i = 0; i < 10; ++i) {
    lines += R"({"id": )" + std::to_string(i) +
             R"(, "name": "add", "arguments": {}})"
             "\n";
  }
  Write(lines);
  EXPECT_EQ(sent_.size(), ToolChannel::kMaxInFlight);
  auto r = Replies();
  ASSERT_EQ(r.size(), 10u - ToolChannel::kMaxInFlight);
  EXPECT_THAT(r[0]["error"]["message"].get<std::string>(), ::testing::HasSubstr("at most 8"));
  // A duplicate id among the waiting ones would make replies ambiguous.
  Write(R"({"id": 0, "name": "add", "arguments": {}})"
        "\n");
  r = Replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_THAT(r[0]["error"]["message"].get<std::string>(), ::testing::HasSubstr("already"));
  // Answered one at a time, up to kMaxCalls in all.
  for (uint64_t call = 1; call <= ToolChannel::kMaxInFlight; ++call) {
    channel_->OnResult({.job_id = "ex_1", .call = call, .ok = true, .result_json = "0"});
  }
  Replies();
  for (size_t i = ToolChannel::kMaxInFlight; i < ToolChannel::kMaxCalls; ++i) {
    Write(R"({"id": 1, "name": "add", "arguments": {}})"
          "\n");
    channel_->OnResult({.job_id = "ex_1", .call = i + 1, .ok = true, .result_json = "0"});
  }
  EXPECT_EQ(sent_.size(), ToolChannel::kMaxCalls);
  Replies();
  Write(R"({"id": 1, "name": "add", "arguments": {}})"
        "\n");
  r = Replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["error"]["message"], "at most 256 calls per execution");
}

TEST_F(ToolChannelTest, AnUnansweredCallTimesOutAndALateAnswerIsIgnored) {
  Write(R"({"id": 4, "name": "add", "arguments": {}})"
        "\n");
  ASSERT_TRUE(channel_->NextDeadline().has_value());
  EXPECT_EQ(*channel_->NextDeadline(), now_ + milliseconds(1000));
  channel_->Tick(now_ + milliseconds(999));
  EXPECT_TRUE(Replies().empty());
  channel_->Tick(now_ + milliseconds(1000));
  auto r = Replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["id"], 4);
  EXPECT_EQ(r[0]["error"]["type"], "ToolTimeout");
  EXPECT_FALSE(channel_->NextDeadline().has_value());
  channel_->OnResult({.job_id = "ex_1", .call = 1, .ok = true, .result_json = "1"});
  EXPECT_TRUE(Replies().empty());
}

TEST_F(ToolChannelTest, ABrokersAnswerIsNotTrustedBlindly) {
  Write(R"({"id": 1, "name": "add"})"
        "\n"
        R"({"id": 2, "name": "add"})"
        "\n"
        R"({"id": 3, "name": "add"})"
        "\n");
  // A line break would split the sandbox's framing; an unknown error type
  // becomes the client's error.
  channel_->OnResult({.job_id = "ex_1", .call = 1, .ok = true, .result_json = "[1,\n2]"});
  channel_->OnResult({.job_id = "ex_1", .call = 2, .error_type = "Weird", .error_message = "m"});
  channel_->OnResult({.job_id = "ex_1", .call = 3, .ok = true, .result_json = ""});
  auto r = Replies();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["error"]["type"], "ToolError");
  EXPECT_EQ(r[1]["error"]["type"], "ToolError");
  EXPECT_EQ(r[1]["error"]["message"], "m");
  EXPECT_EQ(r[2]["error"]["type"], "ToolError");
}

TEST_F(ToolChannelTest, ClosingAnswersEveryWaitingCall) {
  Write(R"({"id": 1, "name": "add"})"
        "\n"
        R"({"id": 2, "name": "add"})"
        "\n");
  channel_->Close();
  auto r = Replies();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["error"]["type"], "ToolUnavailable");
  EXPECT_EQ(r[1]["error"]["type"], "ToolUnavailable");
}

TEST_F(ToolChannelTest, AJobWithoutToolsRefusesEveryCall) {
  job_.tools.clear();
  Write(R"({"id": 1, "name": "add"})"
        "\n");
  EXPECT_TRUE(sent_.empty());
  auto r = Replies();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["error"]["message"], "this execution declares no tools");
}

TEST(ToolMailboxTest, PostedAnswersWakeItsDescriptor) {
  ToolMailbox box;
  pollfd p{box.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  box.Post({.job_id = "a", .call = 1});
  box.Post({.job_id = "a", .call = 2});
  EXPECT_EQ(::poll(&p, 1, 0), 1);
  auto got = box.Take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].call, 2u);
  EXPECT_EQ(::poll(&p, 1, 0), 0);
}

}  // namespace
}  // namespace kiln::worker
