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

TEST(BrokerConfig, HttpAndClientConnectionKeys) {
  auto d = LoadBrokerConfig(Write(kMinimal));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->http.threads, 16u);
  EXPECT_EQ(d->http.io_threads, 2u);
  EXPECT_EQ(d->http.max_body_bytes, 16u << 20);
  EXPECT_EQ(d->http.max_header_bytes, 16u << 10);
  EXPECT_EQ(d->http.max_connections, 10000u);
  EXPECT_EQ(d->http.max_connections_per_address, 1024u);
  EXPECT_EQ(d->http.header_timeout_ms, 10000u);
  EXPECT_EQ(d->http.body_timeout_ms, 60000u);
  EXPECT_EQ(d->http.idle_timeout_ms, 60000u);
  EXPECT_EQ(d->http.max_queued_requests, 1024u);
  EXPECT_EQ(d->native.max_connections, 4096u);
  EXPECT_EQ(d->native.max_connections_per_address, 1024u);
  EXPECT_EQ(d->native.auth_timeout_ms, 10000u);
  EXPECT_EQ(d->native.threads, 8u);

  auto c = LoadBrokerConfig(Write(
      std::string(kMinimal) +
      "broker:\n"
      "  http: {threads: 4, io_threads: 3, max_body_bytes: 2048, max_header_bytes: 4096,\n"
      "         max_connections: 50, max_connections_per_address: 5, header_timeout_ms: 200,\n"
      "         body_timeout_ms: 300, idle_timeout_ms: 400, max_queued_requests: 7}\n"
      "  clients: {max_connections: 60, max_connections_per_address: 6, auth_timeout_ms: 500,\n"
      "            threads: 3}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->http.threads, 4u);
  EXPECT_EQ(c->http.io_threads, 3u);
  EXPECT_EQ(c->http.max_body_bytes, 2048u);
  EXPECT_EQ(c->http.max_header_bytes, 4096u);
  EXPECT_EQ(c->http.max_connections, 50u);
  EXPECT_EQ(c->http.max_connections_per_address, 5u);
  EXPECT_EQ(c->http.header_timeout_ms, 200u);
  EXPECT_EQ(c->http.body_timeout_ms, 300u);
  EXPECT_EQ(c->http.idle_timeout_ms, 400u);
  EXPECT_EQ(c->http.max_queued_requests, 7u);
  EXPECT_EQ(c->native.max_connections, 60u);
  EXPECT_EQ(c->native.max_connections_per_address, 6u);
  EXPECT_EQ(c->native.auth_timeout_ms, 500u);
  EXPECT_EQ(c->native.threads, 3u);

  for (const char* bad :
       {"broker: {http: {max_body_bytes: 1000}}",  // below 1 KiB
        "broker: {http: {io_threads: 0}}", "broker: {http: {header_timeout_ms: 99}}",
        "broker: {clients: {auth_timeout_ms: 50}}", "broker: {clients: {max_connections: 0}}",
        "broker: {clients: {threads: 0}}", "broker: {clients: {threads: 257}}"}) {
    auto r = LoadBrokerConfig(Write(std::string(kMinimal) + bad + "\n"));
    EXPECT_FALSE(r.ok()) << bad;
  }
  auto named = LoadBrokerConfig(Write(std::string(kMinimal) + "broker: {http: {io_threads: 0}}\n"));
  ASSERT_FALSE(named.ok());
  EXPECT_THAT(named.status().message(), HasSubstr("broker.http.io_threads"));
}

TEST(BrokerConfig, QuotasAndTheirPerTenantOverrides) {
  auto d = LoadBrokerConfig(Write(kMinimal));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const TenantConfig& plain = d->tenants.at(0);
  EXPECT_EQ(TenantMaxRequests(*d, plain), 32u);
  EXPECT_EQ(TenantMaxWaits(*d, plain), 1000u);
  EXPECT_EQ(TenantMaxStreams(*d, plain), 256u);
  EXPECT_EQ(TenantMaxSubscriptions(*d, plain), 1024u);
  EXPECT_EQ(TenantSubmitRate(*d, plain), 0.0) << "no rate limit by default";

  auto c = LoadBrokerConfig(Write(
      "quotas: {tenant_max_requests: 3, tenant_max_waits: 4, tenant_max_streams: 5,\n"
      "         tenant_max_subscriptions: 6, tenant_submit_rate: 2.5, tenant_submit_burst: 7}\n"
      "tenants:\n"
      "  - {name: a, tokens: [\"aaaaaaaa\"]}\n"
      "  - {name: b, tokens: [\"bbbbbbbb\"], max_requests: 30, max_waits: 40, max_streams: 50,\n"
      "     max_subscriptions: 60, submit_rate: 0.5, submit_burst: 9}\n"
      "  - {name: c, tokens: [\"cccccccc\"], submit_rate: 10}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->quotas.tenant_submit_rate, 2.5);
  EXPECT_EQ(c->quotas.tenant_submit_burst, 7u);
  const TenantConfig& a = c->tenants.at(0);
  const TenantConfig& b = c->tenants.at(1);
  const TenantConfig& t = c->tenants.at(2);
  EXPECT_EQ(TenantMaxRequests(*c, a), 3u);
  EXPECT_EQ(TenantMaxWaits(*c, a), 4u);
  EXPECT_EQ(TenantMaxStreams(*c, a), 5u);
  EXPECT_EQ(TenantMaxSubscriptions(*c, a), 6u);
  EXPECT_EQ(TenantSubmitRate(*c, a), 2.5);
  EXPECT_EQ(TenantSubmitBurst(*c, a), 7u);
  EXPECT_EQ(TenantMaxRequests(*c, b), 30u);
  EXPECT_EQ(TenantMaxWaits(*c, b), 40u);
  EXPECT_EQ(TenantMaxStreams(*c, b), 50u);
  EXPECT_EQ(TenantMaxSubscriptions(*c, b), 60u);
  EXPECT_EQ(TenantSubmitRate(*c, b), 0.5);
  EXPECT_EQ(TenantSubmitBurst(*c, b), 9u);
  EXPECT_EQ(TenantSubmitRate(*c, t), 10.0);
  EXPECT_EQ(TenantSubmitBurst(*c, t), 7u) << "the quotas burst, when set";

  // Without any burst: twice the rate, at least 1.
  auto r =
      LoadBrokerConfig(Write("quotas: {tenant_submit_rate: 0.2}\n"
                             "tenants:\n"
                             "  - {name: a, tokens: [\"aaaaaaaa\"]}\n"
                             "  - {name: b, tokens: [\"bbbbbbbb\"], submit_rate: 20}\n"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(TenantSubmitBurst(*r, r->tenants.at(0)), 1u);
  EXPECT_EQ(TenantSubmitBurst(*r, r->tenants.at(1)), 40u);

  for (const char* bad : {"quotas: {tenant_submit_rate: -1}", "quotas: {tenant_max_requests: 0}",
                          "quotas: {tenant_submit_rate: fast}", "quotas: {submit_rate: 1}"}) {
    auto e = LoadBrokerConfig(Write(std::string(kMinimal) + bad + "\n"));
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("quotas.")) << bad;
  }
  auto tenant_bad =
      LoadBrokerConfig(Write("tenants:\n  - {name: a, tokens: [\"aaaaaaaa\"], submit_rate: -2}\n"));
  ASSERT_FALSE(tenant_bad.ok());
  EXPECT_THAT(tenant_bad.status().message(), HasSubstr("tenants[0].submit_rate"));
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

TEST(BrokerConfig, TenantNetworkAllowlist) {
  auto d = LoadBrokerConfig(Write(kMinimal));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->tenants.at(0).network.allow.empty());
  EXPECT_EQ(d->tenants.at(0).network.max_bytes, 64u << 20);
  auto c =
      LoadBrokerConfig(Write("tenants:\n  - {name: a, tokens: [\"aaaaaaaa\"], network: {allow: "
                             "[\"api.github.com:443\", \"*.wikipedia.org:*\"], max_bytes: 1000, "
                             "max_connections: 5}}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tenants.at(0).network.allow.size(), 2u);
  EXPECT_EQ(c->tenants.at(0).network.max_bytes, 1000u);
  EXPECT_EQ(c->tenants.at(0).network.max_connections, 5u);
  for (const char* bad : {"{allow: [\"no-port.example\"]}", "{allow: [\"a.io:99999\"]}",
                          "{allow: [\"a.io:1\"], max_bytes: 0}", "{allw: []}"}) {
    auto r = LoadBrokerConfig(Write(
        std::string("tenants:\n  - {name: a, tokens: [\"aaaaaaaa\"], network: ") + bad + "}\n"));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("tenants[0].network")) << r.status().ToString();
  }
}

TEST(BrokerConfig, TenantIsolationLevel) {
  auto d = LoadBrokerConfig(Write(kMinimal));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tenants.at(0).isolation, "standard");

  auto c =
      LoadBrokerConfig(Write("tenants:\n"
                             "  - {name: a, tokens: [\"aaaaaaaa\"]}\n"
                             "  - {name: b, tokens: [\"bbbbbbbb\"], isolation: gvisor}\n"
                             "  - {name: c, tokens: [\"cccccccc\"], isolation: standard}\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(FindTenant(*c, "a")->isolation, "standard");
  EXPECT_EQ(FindTenant(*c, "b")->isolation, "gvisor");
  EXPECT_EQ(FindTenant(*c, "c")->isolation, "standard");

  // Anything else stops the broker, naming the key and the tenant.
  auto bad =
      LoadBrokerConfig(Write("tenants:\n"
                             "  - {name: a, tokens: [\"aaaaaaaa\"]}\n"
                             "  - {name: strict, tokens: [\"bbbbbbbb\"], isolation: kata}\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tenants[1].isolation"));
  EXPECT_THAT(bad.status().message(), HasSubstr("tenant 'strict'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("'kata'"));
  auto empty =
      LoadBrokerConfig(Write("tenants:\n  - {name: a, tokens: [\"aaaaaaaa\"], isolation: \"\"}\n"));
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("tenants[0].isolation"));
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
