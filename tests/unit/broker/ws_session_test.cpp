// WsSession's message handling, without a socket: a recording channel and
// a pool that runs tasks only when the test says so. What it proves: no
// message is parsed or answered on the connection's thread (the I/O
// thread in the broker), messages are handled one at a time and in order,
// reads pause while the inbox is full and resume as it empties, the rate
// limit and the tenant's share of requests refuse with the message's ref.
// The Redis-backed paths (follow, tool answers) are tested end to end in
// tests/integration/websocket_test.cpp.
#include "broker/api/ws_session.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <nlohmann/json.hpp>

namespace kiln::broker {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class RecordingChannel : public WebSocketChannel {
 public:
  void Send(std::string text, std::shared_ptr<const void>) override {
    sent.push_back(json::parse(text));
  }
  size_t Pending() const override { return 0; }
  void Close() override {}
  void ResumeReads() override { ++resumed; }

  std::vector<json> sent;
  int resumed = 0;
};

class WsSessionTest : public ::testing::Test {
 protected:
  std::shared_ptr<WsSession> Open(WsSession::Limits limits) {
    WsSession::Deps deps;
    deps.streams = &streams_;
    deps.requests = &requests_;
    deps.post = [this](std::function<void()> fn) {
      pool_.push_back(std::move(fn));
      return true;
    };
    limits.who = "acme";
    auto s = std::make_shared<WsSession>(Caller{.tenant = "acme"}, QuotaCounter::Hold(),
                                         std::move(deps), std::move(limits));
    s->OnOpen(channel_);
    return s;
  }
  // Runs the pool's tasks (and those they post) until none is left.
  void RunPool() {
    while (!pool_.empty()) {
      auto fn = std::move(pool_.front());
      pool_.pop_front();
      fn();
    }
  }

  QuotaCounter streams_, requests_;
  std::deque<std::function<void()>> pool_;
  std::shared_ptr<RecordingChannel> channel_ = std::make_shared<RecordingChannel>();
};

TEST_F(WsSessionTest, NothingIsParsedOrAnsweredOnTheConnectionsThread) {
  auto s = Open({});
  EXPECT_TRUE(s->OnMessage("not json", false));
  EXPECT_TRUE(s->OnMessage(R"({"type":"nope","ref":7})", false));
  EXPECT_TRUE(channel_->sent.empty());
  // One task for the connection, however many messages wait.
  EXPECT_EQ(pool_.size(), 1u);
  RunPool();
  ASSERT_EQ(channel_->sent.size(), 2u);
  EXPECT_EQ(channel_->sent[0]["error"]["code"], "INVALID_REQUEST");
  EXPECT_FALSE(channel_->sent[0].contains("ref"));
  EXPECT_EQ(channel_->sent[1]["error"]["code"], "INVALID_REQUEST");
  EXPECT_THAT(channel_->sent[1]["error"]["message"].get<std::string>(), HasSubstr("nope"));
  EXPECT_EQ(channel_->sent[1]["ref"], 7);
}

TEST_F(WsSessionTest, MessagesAreHandledInOrderOnePoolTaskEach) {
  auto s = Open({});
  for (int i = 0; i < 5; ++i) {
    s->OnMessage(json{{"type", "tool_result"}, {"execution_id", "e"}, {"ref", i}}.dump(), false);
  }
  EXPECT_EQ(pool_.size(), 1u);
  // Each task handles one message and posts the next: other work takes turns.
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(pool_.size(), 1u) << i;
    auto fn = std::move(pool_.front());
    pool_.pop_front();
    fn();
    ASSERT_EQ(channel_->sent.size(), static_cast<size_t>(i + 1));
    EXPECT_EQ(channel_->sent[i]["ref"], i);
    // This test's session has no ToolRelay: past every limit, the answer
    // is that this broker relays no calls.
    EXPECT_EQ(channel_->sent[i]["error"]["code"], "UNAVAILABLE");
  }
  EXPECT_TRUE(pool_.empty());
}

TEST_F(WsSessionTest, ReadsPauseWhileTheInboxIsFullAndResumeAsItEmpties) {
  auto s = Open({.rate = 1e6, .burst = 1000});
  for (size_t i = 0; i + 1 < WsSession::kMaxQueued; ++i) {
    EXPECT_TRUE(s->OnMessage(R"({"type":"unfollow"})", false)) << i;
  }
  EXPECT_FALSE(s->OnMessage(R"({"type":"unfollow"})", false)) << "the inbox is full";
  EXPECT_EQ(channel_->resumed, 0);
  RunPool();
  EXPECT_EQ(channel_->resumed, 1) << "resumed once, as the first message left the inbox";
  EXPECT_EQ(channel_->sent.size(), WsSession::kMaxQueued);

  // One large message fills it by bytes.
  EXPECT_FALSE(s->OnMessage(std::string(WsSession::kMaxQueuedBytes, ' '), false));
  RunPool();
  EXPECT_EQ(channel_->resumed, 2);
  EXPECT_EQ(channel_->sent.back()["error"]["code"], "INVALID_REQUEST");
}

TEST_F(WsSessionTest, MessagesOverTheRateAreRefusedWithTheirRef) {
  auto s = Open({.rate = 0.001, .burst = 2});
  for (int i = 0; i < 4; ++i) {
    s->OnMessage(json{{"type", "unfollow"}, {"execution_id", "e"}, {"ref", i}}.dump(), false);
  }
  RunPool();
  ASSERT_EQ(channel_->sent.size(), 4u);
  EXPECT_EQ(channel_->sent[0]["type"], "unfollowed");
  EXPECT_EQ(channel_->sent[1]["type"], "unfollowed");
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(channel_->sent[i]["error"]["code"], "RATE_LIMITED") << i;
    EXPECT_EQ(channel_->sent[i]["ref"], i);
    EXPECT_EQ(channel_->sent[i]["execution_id"], "e");
  }
}

TEST_F(WsSessionTest, AMessageIsOneOfTheTenantsRequestsInProgress) {
  auto s = Open({.max_requests = 2});
  // The tenant's two HTTP requests in progress.
  auto a = requests_.TryAcquire("acme", 2);
  auto b = requests_.TryAcquire("acme", 2);
  s->OnMessage(R"({"type":"unfollow","execution_id":"e","ref":"x"})", false);
  RunPool();
  ASSERT_EQ(channel_->sent.size(), 1u);
  EXPECT_EQ(channel_->sent[0]["error"]["code"], "RATE_LIMITED");
  EXPECT_THAT(channel_->sent[0]["error"]["message"].get<std::string>(),
              HasSubstr("requests in progress"));
  EXPECT_EQ(channel_->sent[0]["ref"], "x");
  b.Release();
  s->OnMessage(R"({"type":"unfollow","execution_id":"e","ref":"y"})", false);
  RunPool();
  ASSERT_EQ(channel_->sent.size(), 2u);
  EXPECT_EQ(channel_->sent[1]["type"], "unfollowed");
  EXPECT_EQ(requests_.count("acme"), 1u) << "the message's hold is given back";
}

TEST_F(WsSessionTest, NothingWaitingIsHandledOnceTheConnectionIsGone) {
  auto s = Open({});
  s->OnMessage(R"({"type":"unfollow","execution_id":"e"})", false);
  s->OnClosed();
  RunPool();
  EXPECT_TRUE(channel_->sent.empty());
  EXPECT_FALSE(s->OnMessage(R"({"type":"unfollow","execution_id":"e"})", false));
}

}  // namespace
}  // namespace kiln::broker
