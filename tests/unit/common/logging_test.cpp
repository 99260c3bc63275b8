// Logging: JSON and text lines with structured ids, per-subsystem levels,
// loggers made before InitLogging, and the checks config loaders rely on.
// The lines are read back from the process's real stderr (fd 2 redirected
// into a file for the duration of each capture).
#include "common/log/logging.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/unit/common/capture_stderr.hpp"

namespace kiln::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Made before any InitLogging, like a file-scope logger in a .cpp.
const SubsystemLog kEarly("scheduler");

using testing::CaptureStderr;

LogOptions Options(std::string format, std::string level = "info",
                   std::map<std::string, std::string> levels = {}) {
  LogOptions o;
  o.component = "broker";
  o.instance = "b-1";
  o.format = std::move(format);
  o.level = std::move(level);
  o.levels = std::move(levels);
  o.subsystems = {"scheduler", "http", "jobs"};
  return o;
}

TEST(Logging, JsonLinesCarryComponentInstanceAndIds) {
  ASSERT_TRUE(InitLogging(Options("json")).ok());
  const SubsystemLog jobs("jobs");
  auto lines = CaptureStderr([&] {
    jobs.Info({.job = "j-1", .tenant = "acme", .worker = "w-7"}, "job ended: {} \"{}\"", "failed",
              "quote\nnewline\xff");
    jobs.Info({}, "no ids");
  });
  ASSERT_EQ(lines.size(), 2u);
  auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["component"], "broker.jobs");
  EXPECT_EQ(j["instance"], "b-1");
  EXPECT_EQ(j["msg"], "job ended: failed \"quote\nnewline\xEF\xBF\xBD\"");
  EXPECT_EQ(j["job"], "j-1");
  EXPECT_EQ(j["tenant"], "acme");
  EXPECT_EQ(j["worker"], "w-7");
  EXPECT_FALSE(j.contains("session")) << lines[0];
  EXPECT_THAT(std::string(j["ts"]),
              ::testing::MatchesRegex(R"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]+Z)"));
  auto k = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(k["msg"], "no ids");
  EXPECT_FALSE(k.contains("job"));
  // Ids never leak into the next line, even on the same thread.
  EXPECT_FALSE(k.contains("tenant"));
}

TEST(Logging, TextLinesAppendIdsAsKeyValue) {
  ASSERT_TRUE(InitLogging(Options("text")).ok());
  const SubsystemLog http("http");
  auto lines = CaptureStderr([&] { http.Warn({.job = "j-2", .session = "s-1"}, "slow {}", 3); });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("warning [broker.http] slow 3 job=j-2 session=s-1"));
  EXPECT_THAT(lines[0], Not(HasSubstr("tenant=")));
}

// A job id or a message holding a newline cannot forge a second line: text
// lines escape controls, backslashes and invalid UTF-8 in the message and in
// every field.
TEST(Logging, TextLinesEscapeWhatCouldForgeOrHideALine) {
  ASSERT_TRUE(InitLogging(Options("text")).ok());
  const SubsystemLog jobs("jobs");
  const std::string forged = "2026-01-01T00:00:00.000Z critical [broker.jobs] forged";
  auto lines = CaptureStderr([&] {
    jobs.Warn({.job = "j-1\n" + forged, .tenant = "t\r\tx", .worker = "w\\1\x1b[31m"},
              "bad frame {}", "a\n" + forged + "\xff\xfe end");
  });
  ASSERT_EQ(lines.size(), 1u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], HasSubstr("[broker.jobs] bad frame a\\n" + forged + "\\xff\\xfe end"));
  EXPECT_THAT(lines[0], HasSubstr(" job=j-1\\n" + forged));
  EXPECT_THAT(lines[0], HasSubstr(" tenant=t\\r\\tx"));
  EXPECT_THAT(lines[0], HasSubstr(" worker=w\\\\1\\x1b[31m"));
  EXPECT_THAT(lines[0], Not(HasSubstr("\x1b")));

  // The plain case is written as it is.
  auto plain = CaptureStderr([&] { jobs.Info({.job = "ex_abc"}, "caf\xc3\xa9 \xe6\x97\xa5 ok"); });
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_THAT(plain[0], HasSubstr("] caf\xc3\xa9 \xe6\x97\xa5 ok job=ex_abc"));
}

TEST(Logging, EscapeLogTextKeepsValidUtf8AndEscapesTheRest) {
  auto escape = [](std::string_view s) {
    std::string out;
    EscapeLogText(s, &out);
    return out;
  };
  EXPECT_EQ(escape("plain text 123 {}"), "plain text 123 {}");
  EXPECT_EQ(escape("a\\b"), "a\\\\b");
  EXPECT_EQ(escape("\n\r\t"), "\\n\\r\\t");
  EXPECT_EQ(escape(std::string("\0\x01\x1f\x7f", 4)), "\\x00\\x01\\x1f\\x7f");
  // Valid UTF-8 of every length stays.
  EXPECT_EQ(escape("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  // Invalid: a lone continuation byte, overlong forms, a surrogate, above
  // U+10FFFF, a sequence cut short (then plain ASCII resumes).
  EXPECT_EQ(escape("\x80"), "\\x80");
  EXPECT_EQ(escape("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(escape("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");
  EXPECT_EQ(escape("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(escape("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(escape("\xe6\x97x"), "\\xe6\\x97x");
  EXPECT_EQ(escape("\xe6\x97"), "\\xe6\\x97");
  // Valid but moving or hiding text: C1 controls, line separators, bidi.
  EXPECT_EQ(escape("\xc2\x85"), "\\xc2\\x85");
  EXPECT_EQ(escape("\xc2\xa0"), "\xc2\xa0");  // no-break space is text
  EXPECT_EQ(escape("\xe2\x80\xa8"), "\\xe2\\x80\\xa8");
  EXPECT_EQ(escape("\xe2\x80\xae"), "\\xe2\\x80\\xae");
  EXPECT_EQ(escape("\xe2\x81\xa6"), "\\xe2\\x81\\xa6");
  EXPECT_EQ(escape("\xe2\x80\x94"), "\xe2\x80\x94");  // an em dash is text
}

// JSON lines stay one valid JSON object per line whatever the ids and the
// message hold (invalid UTF-8 becomes U+FFFD).
TEST(Logging, JsonLinesStayValidForControlsAndInvalidUtf8) {
  ASSERT_TRUE(InitLogging(Options("json")).ok());
  const SubsystemLog jobs("jobs");
  auto lines = CaptureStderr([&] {
    jobs.Warn({.job = "j\n\"}{\xff", .session = "\xc0\xaf", .worker = "w\x01"}, "m\r\n{}",
              "\xed\xa0\x80");
  });
  ASSERT_EQ(lines.size(), 1u) << ::testing::PrintToString(lines);
  auto j = nlohmann::json::parse(lines[0], nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << lines[0];
  EXPECT_EQ(j["job"], "j\n\"}{\xEF\xBF\xBD");
  EXPECT_EQ(j["worker"], "w\x01");
  EXPECT_EQ(j["msg"].get<std::string>().substr(0, 3), "m\r\n");
}

TEST(Logging, EachSubsystemHasItsOwnLevel) {
  ASSERT_TRUE(InitLogging(Options("text", "warn", {{"scheduler", "debug"}})).ok());
  const SubsystemLog http("http");
  auto lines = CaptureStderr([&] {
    kEarly.Debug({}, "scheduler debug");  // made before InitLogging: reconfigured by it
    http.Info({}, "http info");           // below the process-wide warn
    http.Error({}, "http error");
  });
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], HasSubstr("[broker.scheduler] scheduler debug"));
  EXPECT_THAT(lines[1], HasSubstr("[broker.http] http error"));
  EXPECT_TRUE(kEarly.enabled(spdlog::level::debug));
  EXPECT_FALSE(http.enabled(spdlog::level::info));

  // Plain spdlog calls go to the process's own logger at the global level.
  auto plain = CaptureStderr([] {
    spdlog::info("hidden");
    spdlog::warn("shown");
  });
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_THAT(plain[0], HasSubstr("[broker] shown"));
}

TEST(Logging, BadOptionsAreRefusedWithTheKey) {
  auto bad_level = ValidateLogOptions(Options("text", "loud"));
  EXPECT_THAT(bad_level.message(), HasSubstr("log.level: unknown level 'loud'"));
  auto bad_format = ValidateLogOptions(Options("xml"));
  EXPECT_THAT(bad_format.message(), HasSubstr("log.format"));
  auto typo = ValidateLogOptions(Options("text", "info", {{"schedular", "debug"}}));
  EXPECT_THAT(typo.message(), HasSubstr("log.levels: unknown subsystem 'schedular'"));
  EXPECT_THAT(typo.message(), HasSubstr("scheduler"));
  auto sub_level = ValidateLogOptions(Options("text", "info", {{"http", "chatty"}}));
  EXPECT_THAT(sub_level.message(), HasSubstr("log.levels.http: unknown level 'chatty'"));
  EXPECT_TRUE(ValidateLogOptions(Options("json", "off", {{"jobs", "trace"}})).ok());
  // InitLogging refuses the same and leaves the previous setup in place.
  EXPECT_FALSE(InitLogging(Options("text", "loud")).ok());
}

}  // namespace
}  // namespace kiln::common
