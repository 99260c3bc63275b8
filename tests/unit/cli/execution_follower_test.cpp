#include "cli/execution_follower.hpp"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

using nlohmann::json;

SseEvent Event(std::string name, std::string id, std::string data) {
  SseEvent e;
  e.event = std::move(name);
  e.id = std::move(id);
  e.data = std::move(data);
  return e;
}

TEST(ExecutionFollowerTest, PassesEventsOnAndEndsWithTheRecord) {
  std::vector<FollowedEvent> seen;
  ExecutionFollower f("ex_1", [&](const FollowedEvent& e) { seen.push_back(e); });
  EXPECT_FALSE(f.OnEvent(Event("execution_start", "start", R"({"id":"ex_1"})")));
  EXPECT_FALSE(f.OnEvent(Event("output_chunk", "1-0", R"({"stream":"stdout","data":"a"})")));
  EXPECT_FALSE(f.done());
  EXPECT_FALSE(f.result().ok());
  EXPECT_TRUE(f.OnEvent(Event("execution_end", "end", R"({"status":"succeeded","exit_code":0})")));
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].data["data"], "a");
  EXPECT_EQ(f.last_event_id(), "end");
  auto record = f.result();
  ASSERT_TRUE(record.ok());
  EXPECT_EQ((*record)["status"], "succeeded");
}

TEST(ExecutionFollowerTest, ARepeatedEventIsNotPassedOnTwice) {
  int chunks = 0;
  ExecutionFollower f("ex_1", [&](const FollowedEvent& e) { chunks += e.event == "output_chunk"; });
  f.OnEvent(Event("output_chunk", "1-0", R"({"data":"a"})"));
  f.OnEvent(Event("output_chunk", "1-0", R"({"data":"a"})"));
  f.OnEvent(Event("output_chunk", "2-0", R"({"data":"b"})"));
  EXPECT_EQ(chunks, 2);
}

TEST(ExecutionFollowerTest, ExecutionErrorWithARecordIsTheRecord) {
  ExecutionFollower f("ex_1", [](const FollowedEvent&) {});
  EXPECT_TRUE(f.OnEvent(Event("execution_error", "end",
                              R"({"status":"rejected","error":{"code":"SECURITY_BLOCKED"}})")));
  auto record = f.result();
  ASSERT_TRUE(record.ok());
  EXPECT_EQ((*record)["status"], "rejected");
}

TEST(ExecutionFollowerTest, ExecutionErrorWithAnErrorObjectIsItsStatus) {
  ExecutionFollower f("ex_1", [](const FollowedEvent&) {});
  EXPECT_TRUE(f.OnEvent(
      Event("execution_error", "", R"({"error":{"code":"UNAVAILABLE","message":"redis down"}})")));
  auto record = f.result();
  ASSERT_FALSE(record.ok());
  EXPECT_EQ(record.status().code(), common::Code::kUnavailable);
  EXPECT_EQ(record.status().message(), "redis down");
}

TEST(ExecutionFollowerTest, NonJsonDataIsPassedAsAString) {
  std::string got;
  ExecutionFollower f("ex_1", [&](const FollowedEvent& e) { got = e.data.get<std::string>(); });
  f.OnEvent(Event("message", "", "plain text"));
  EXPECT_EQ(got, "plain text");
}

}  // namespace
}  // namespace kiln::cli
