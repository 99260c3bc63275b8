#include "broker/config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

namespace kiln::broker {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& text) {
  static int n = 0;
  std::string path = ::testing::TempDir() + "/broker_cfg_" + std::to_string(n++) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

const char* kMinimal = "tenants:\n  - {name: a, tokens: [\"aaaaaaaa\"]}\n";

TEST(BrokerConfig, ExampleFileLoads) {
  auto c = LoadBrokerConfig(std::string(KILN_SOURCE_DIR) + "/deploy/config/broker.example.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->http.listen, "127.0.0.1:8080");
  EXPECT_EQ(c->tenants.at(0).name, "acme");
  EXPECT_EQ(c->native.endpoint, "tcp://127.0.0.1:5556");
}

TEST(BrokerConfig, ClientEndpoint) {
  auto d = LoadBrokerConfig(Write(kMinimal));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->native.endpoint, "tcp://127.0.0.1:5556");
  auto off =
      LoadBrokerConfig(Write(std::string(kMinimal) + "broker: {clients: {endpoint: \"\"}}\n"));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->native.endpoint, "");
  auto bad = LoadBrokerConfig(Write(std::string(kMinimal) + "broker: {clients: {port: 1}}\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("broker.clients.port: unknown key"));
}

TEST(BrokerConfig, LogLevelsPerSubsystem) {
  auto c = LoadBrokerConfig(Write(std::string(kMinimal) +
                                  "log: {level: warn, format: json, levels: {jobs: info, "
                                  "scheduler: debug}}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->log.component, "broker");
  EXPECT_EQ(c->log.level, "warn");
  EXPECT_EQ(c->log.format, "json");
  EXPECT_EQ(c->log.levels.at("scheduler"), "debug");
  auto typo = LoadBrokerConfig(Write(std::string(kMinimal) + "log: {levels: {jbos: info}}\n"));
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("log.levels: unknown subsystem 'jbos'"));
  auto level = LoadBrokerConfig(Write(std::string(kMinimal) + "log: {levels: {http: loud}}\n"));
  ASSERT_FALSE(level.ok());
  EXPECT_THAT(level.status().message(), HasSubstr("log.levels.http: unknown level 'loud'"));
}

TEST(BrokerConfig, DefaultsApply) {
  auto c = LoadBrokerConfig(Write(kMinimal));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->heartbeat_interval_ms, 1000u);
  EXPECT_EQ(c->default_limits.timeout_ms, 30000u);
  EXPECT_FALSE(c->id.empty());
}

TEST(BrokerConfig, UnknownKeysAndBadValuesNameTheKey) {
  auto unknown = LoadBrokerConfig(Write(std::string(kMinimal) + "broker: {htp: {}}\n"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("broker.htp: unknown key"));

  auto nested = LoadBrokerConfig(Write(std::string(kMinimal) + "broker: {http: {thread: 3}}\n"));
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.status().message(), HasSubstr("broker.http.thread: unknown key"));

  auto bad = LoadBrokerConfig(Write(std::string(kMinimal) + "broker: {http: {threads: many}}\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("broker.http.threads"));

  auto range =
      LoadBrokerConfig(Write(std::string(kMinimal) + "limits: {default: {timeout_ms: 0}}\n"));
  ASSERT_FALSE(range.ok());
  EXPECT_THAT(range.status().message(), HasSubstr("limits.default.timeout_ms"));

  auto above = LoadBrokerConfig(Write(
      std::string(kMinimal) + "limits: {default: {memory_mb: 512}, max: {memory_mb: 256}}\n"));
  ASSERT_FALSE(above.ok());
  EXPECT_THAT(above.status().message(), HasSubstr("memory_mb"));

  auto no_tenants = LoadBrokerConfig(Write("broker: {}\n"));
  ASSERT_FALSE(no_tenants.ok());
  EXPECT_THAT(no_tenants.status().message(), HasSubstr("tenants"));

  auto short_token = LoadBrokerConfig(Write("tenants:\n  - {name: a, tokens: [\"x\"]}\n"));
  ASSERT_FALSE(short_token.ok());
  EXPECT_THAT(short_token.status().message(), HasSubstr("tenants[0].tokens"));

  auto missing = LoadBrokerConfig("/nonexistent/broker.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/broker.yaml"));

  auto syntax = LoadBrokerConfig(Write("tenants: [\n"));
  ASSERT_FALSE(syntax.ok());
}

}  // namespace
}  // namespace kiln::broker
