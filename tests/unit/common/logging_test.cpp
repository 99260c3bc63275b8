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

namespace kiln::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Made before any InitLogging, like a file-scope logger in a .cpp.
const SubsystemLog kEarly("scheduler");

// Runs `body` with fd 2 going to a temporary file; returns what was written.
template <typename F>
std::vector<std::string> CaptureStderr(F body) {
  char path[] = "/tmp/kiln-log-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  std::fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  unlink(path);
  return lines;
}

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
