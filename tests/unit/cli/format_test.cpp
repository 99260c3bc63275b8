#include "cli/format.hpp"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

using nlohmann::json;

TEST(FormatTest, Durations) {
  EXPECT_EQ(FormatDurationMs(json(3.14)), "3.1 ms");
  EXPECT_EQ(FormatDurationMs(json(2500)), "2.50 s");
  EXPECT_EQ(FormatDurationMs(json()), "-");
}

TEST(FormatTest, Ages) {
  EXPECT_EQ(FormatAge(0, 5000), "never");
  EXPECT_EQ(FormatAge(1000, 1400), "0.4s ago");
  EXPECT_EQ(FormatAge(1000, 13'000), "12s ago");
  EXPECT_EQ(FormatAge(1000, 301'000), "5m ago");
  EXPECT_EQ(FormatAge(1000, 7'201'000), "2h ago");
  EXPECT_EQ(FormatAge(2000, 1000), "0.0s ago");  // clock skew
}

TEST(FormatTest, RecordSummary) {
  json r = {{"id", "ex_1"},
            {"status", "timed_out"},
            {"exit_code", nullptr},
            {"signal", nullptr},
            {"duration_ms", 12.25},
            {"worker", "w1"},
            {"session_id", nullptr},
            {"queue_position", nullptr},
            {"error", {{"code", "TIMEOUT"}, {"message", "too slow"}}}};
  std::string s = FormatRecordSummary(r);
  EXPECT_NE(s.find("id:         ex_1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("status:     timed_out\n"), std::string::npos) << s;
  EXPECT_NE(s.find("exit code:  -\n"), std::string::npos) << s;
  EXPECT_NE(s.find("duration:   12.2 ms\n"), std::string::npos) << s;
  EXPECT_NE(s.find("worker:     w1\n"), std::string::npos) << s;
  EXPECT_NE(s.find("error:      TIMEOUT: too slow\n"), std::string::npos) << s;
  EXPECT_EQ(s.find("session"), std::string::npos) << s;

  r["signal"] = 9;
  r["queue_position"] = 4;
  s = FormatRecordSummary(r);
  EXPECT_NE(s.find("signal:     9\n"), std::string::npos) << s;
  EXPECT_NE(s.find("queue pos:  4\n"), std::string::npos) << s;
}

TEST(FormatTest, WorkersTable) {
  json workers = json::array({{{"id", "worker-a"},
                               {"runtimes", {"python", "shell"}},
                               {"sandbox_layers", {"seccomp", "landlock"}},
                               {"slots", 4},
                               {"running", 1},
                               {"draining", false},
                               {"last_heartbeat_ms", 10'000}},
                              {{"id", "b"},
                               {"runtimes", json::array()},
                               {"sandbox_layers", json::array()},
                               {"slots", 2},
                               {"running", 0},
                               {"draining", true},
                               {"last_heartbeat_ms", 0}}});
  std::string t = FormatWorkersTable(workers, 12'000);
  EXPECT_EQ(t,
            "ID            RUNTIMES      SLOTS  RUNNING  LAYERS  HEARTBEAT\n"
            "worker-a      python,shell  4      1        2       2.0s ago\n"
            "b (draining)  -             2      0        0       never\n");
  EXPECT_NE(FormatWorkersTable(workers, 12'000, true).find("seccomp,landlock"), std::string::npos);
  EXPECT_EQ(FormatWorkersTable(json::array(), 0), "no workers connected\n");
}

TEST(FormatTest, SessionsTable) {
  json sessions = json::array({{{"id", "s1"},
                                {"language", "python"},
                                {"worker", "w1"},
                                {"state", "idle"},
                                {"created_at", 1'000},
                                {"last_used_at", 10'000},
                                {"execution_count", 3},
                                {"epoch", 1},
                                {"conversation_id", "chat-7"}},
                               {{"id", "s2"}, {"language", "shell"}, {"state", "busy"}}});
  EXPECT_EQ(FormatSessionsTable(sessions, 12'000),
            "ID  LANGUAGE  STATE  WORKER  RUNS  EPOCH  LAST USED  CONVERSATION\n"
            "s1  python    idle   w1      3     1      2.0s ago   chat-7\n"
            "s2  shell     busy   -       -     -      never      -\n");
  EXPECT_EQ(FormatSessionsTable(json::array(), 0), "no sessions\n");
}

TEST(FormatTest, ApprovalsShowTheCodeWithNothingHidden) {
  json approvals = json::array({{{"id", "ex_1"},
                                 {"tenant", "acme"},
                                 {"language", "python"},
                                 {"session_id", "s1"},
                                 {"code", "import os\nos.remove('x')\x1b[2K\rprint('hi')\n"},
                                 {"created_at", 10'000},
                                 {"expires_at", 70'000}},
                                {{"id", "ex_2"},
                                 {"tenant", "acme"},
                                 {"language", "shell"},
                                 {"session_id", nullptr},
                                 // U+202E RIGHT-TO-LEFT OVERRIDE, then U+00E9 (kept).
                                 {"code", "echo \xe2\x80\xae caf\xc3\xa9"},
                                 {"created_at", 10'000},
                                 {"expires_at", 5'000}}});
  EXPECT_EQ(FormatApprovals(approvals, 12'000),
            "ex_1  tenant acme  python  session s1  created 2.0s ago  expires in 58s\n"
            "    | import os\n"
            "    | os.remove('x')\\x1b[2K\\x0dprint('hi')\n"
            "\n"
            "ex_2  tenant acme  shell  created 2.0s ago  expired\n"
            "    | echo \\u202e caf\xc3\xa9\n"
            "\n");
  EXPECT_EQ(FormatApprovals(json::array(), 0), "no executions awaiting approval\n");
}

TEST(FormatTest, Health) {
  EXPECT_EQ(FormatHealth({{"status", "ok"}, {"redis", "ok"}, {"workers", 2}, {"queued", 0}}),
            "ok: redis ok, 2 workers, 0 queued\n");
}

}  // namespace
}  // namespace kiln::cli
