// Network on request end to end (docs/api.md, "Network"): a cluster on the
// multihost bed plus "web", a fake internet host serving HTTP and HTTPS for
// api/other/big.example.test (tests/multihost/fake_internet.py). Jobs of
// tenant net-a may reach what its allowlist names, through their worker's
// egress gateway; everything else — off-list names, direct addresses, the
// worker host's loopback, the brokers, DNS — is refused, and tenant-a (no
// allowlist) has no network at all. Root needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/base64.hpp"
#include "tests/multihost/host_cluster.hpp"

namespace kiln::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kNetToken = "net-a-token-1";

std::string ErrorCode(const json& record) {
  if (!record.is_object() || !record.contains("error") || !record["error"].is_object()) return "";
  return record["error"].value("code", "");
}

class EgressTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    HostClusterOptions o;
    o.web = true;
    o.workers = 1;
    o.runtimes = {"python", "javascript", "shell"};
    // tenant net-a: the web host's names, plus names that lead where no job
    // may go (the worker host's loopback, a broker) to show the address check.
    o.tenants_yaml =
        "  - {name: net-a, tokens: [\"" + std::string(kNetToken) +
        "\"], enabled: true, auto_approve: true, network: {allow: [\"api.example.test:80\", "
        "\"api.example.test:443\", \"big.example.test:80\", \"loop.example.test:*\", "
        "\"broker.example.test:8080\"], max_bytes: 262144, max_connections: 12}}\n"
        "  - {name: net-b, tokens: [\"net-b-token-1\"], enabled: true, auto_approve: true, "
        "network: {allow: [\"*.example.test:*\"]}}\n";
    // The gateway resolves the test names itself (no DNS server on the bed);
    // only the web host is an allowed private address.
    o.worker_yaml =
        "network:\n"
        "  egress:\n"
        "    hosts: {api.example.test: \"{ip:web}\", other.example.test: \"{ip:web}\", "
        "big.example.test: \"{ip:web}\", loop.example.test: 127.0.0.1, "
        "broker.example.test: \"{ip:b1}\"}\n"
        "    allow_private: [\"{ip:web}/32\"]\n";
    cluster_ = HostCluster::Start(o).release();
    std::ifstream ca(cluster_->web_dir() + "/ca.pem");
    std::stringstream text;
    text << ca.rdbuf();
    ca_pem_ = new std::string(text.str());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete ca_pem_;
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }

  // Submits (wait: true) as `token`; the answer's body, or the record.
  static HttpReply Run(json request, const std::string& token = kNetToken) {
    request["wait"] = true;
    return cluster_->Request("POST", "/v1/executions", request.dump(), token);
  }
  static json WithCa(json request) {
    request["files"] =
        json::array({{{"path", "ca.pem"}, {"content_base64", common::Base64Encode(*ca_pem_)}}});
    return request;
  }

  static HostCluster* cluster_;
  static std::string* ca_pem_;
};

HostCluster* EgressTest::cluster_ = nullptr;
std::string* EgressTest::ca_pem_ = nullptr;

TEST_F(EgressTest, PythonRequestsReachesAnAllowedNameOverHttpAndHttps) {
  HttpReply r = Run(WithCa({{"language", "python"},
                            {"network", true},
                            {"code",
                             "import requests\n"
                             "a = requests.get('http://api.example.test/hello', timeout=10)\n"
                             "b = requests.get('https://api.example.test/hello', timeout=10,"
                             " verify='ca.pem')\n"
                             "print(a.status_code, a.text.strip())\n"
                             "print(b.status_code, b.text.strip())\n"}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
  EXPECT_EQ(r.body["stdout"],
            "200 hello api.example.test http\n200 hello api.example.test https\n");
  const json& n = r.body["network"];
  ASSERT_TRUE(n.is_object()) << r.raw;
  EXPECT_EQ(n["connections"], 2);
  EXPECT_EQ(n["refused"], 0);
  EXPECT_GT(n["bytes_in"].get<uint64_t>(), 100u);
  EXPECT_GT(n["bytes_out"].get<uint64_t>(), 50u);
  ASSERT_EQ(n["destinations"].size(), 2u) << n.dump();
  for (const auto& d : n["destinations"]) {
    EXPECT_EQ(d["host"], "api.example.test");
    EXPECT_TRUE(d["allowed"].get<bool>());
  }
  // The web host saw the worker host, not a job's address.
  const std::string log = cluster_->WebLog();
  EXPECT_NE(log.find("http " + cluster_->bed().ip("w1") + " GET /hello"), std::string::npos) << log;
  EXPECT_NE(log.find("https " + cluster_->bed().ip("w1") + " GET /hello"), std::string::npos)
      << log;
}

TEST_F(EgressTest, CurlAndNodeFetchWorkWithoutKnowingTheProxy) {
  HttpReply sh = Run(WithCa({{"language", "shell"},
                             {"network", true},
                             {"code",
                              "curl -sS http://api.example.test/hello && "
                              "curl -sS --cacert ca.pem https://api.example.test/hello"}}));
  ASSERT_EQ(sh.status, 200) << sh.raw;
  EXPECT_EQ(sh.body["stdout"], "hello api.example.test http\nhello api.example.test https\n")
      << sh.raw;
  HttpReply js = Run({{"language", "javascript"},
                      {"network", true},
                      {"code",
                       "const r = await fetch('http://api.example.test/hello');\n"
                       "console.log(r.status, (await r.text()).trim());"}});
  ASSERT_EQ(js.status, 200) << js.raw;
  EXPECT_EQ(js.body["stdout"], "200 hello api.example.test http\n") << js.raw;
  EXPECT_EQ(js.body["network"]["connections"], 1) << js.raw;
}

// Each probe prints one line: what the job tried, and what happened.
constexpr const char* kProbes = R"PY(
import requests, socket
def probe(name, fn):
    try:
        fn()
        print(name, "reached")
    except Exception as e:
        print(name, "refused", type(e).__name__, str(e)[:200].replace("\n", " "))
def get(url):
    r = requests.get(url, timeout=10)
    if r.status_code != 200:
        raise RuntimeError("status %d" % r.status_code)
probe("off-list", lambda: get("http://other.example.test/hello"))
probe("by-address", lambda: get("http://WEB_IP/hello"))
probe("loopback-by-name", lambda: get("http://loop.example.test:6379/"))
probe("broker-by-name", lambda: get("http://broker.example.test:8080/v1/health"))
probe("socket", lambda: socket.create_connection(("WEB_IP", 80), timeout=5))
probe("dns", lambda: socket.getaddrinfo("api.example.test", 80))
probe("host-loopback", lambda: socket.create_connection(("127.0.0.1", 6379), timeout=5))
)PY";

// The probes, aimed at the web host's address.
std::string Probes(const std::string& web_ip) {
  std::string code = kProbes;
  for (size_t at; (at = code.find("WEB_IP")) != std::string::npos;) code.replace(at, 6, web_ip);
  return code;
}

TEST_F(EgressTest, WhatTheListDoesNotNameIsRefusedAndAudited) {
  const std::string code = Probes(cluster_->web_ip());
  HttpReply r = Run({{"language", "python"}, {"network", true}, {"code", code}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string out = r.body["stdout"].get<std::string>();
  for (const char* probe : {"off-list", "by-address", "loopback-by-name", "broker-by-name",
                            "socket", "dns", "host-loopback"}) {
    EXPECT_NE(out.find(std::string(probe) + " refused"), std::string::npos)
        << probe << " was not refused:\n"
        << out;
  }
  EXPECT_NE(out.find("off-list refused RuntimeError status 403"), std::string::npos) << out;
  const json& n = r.body["network"];
  EXPECT_EQ(n["connections"], 0) << n.dump();
  EXPECT_EQ(n["refused"], 4) << n.dump();
  std::map<std::string, std::string> why;
  for (const auto& d : n["destinations"]) {
    EXPECT_FALSE(d["allowed"].get<bool>()) << d.dump();
    why[d["host"].get<std::string>()] = d.value("reason", "");
  }
  EXPECT_EQ(why["other.example.test"], "not_allowed");
  EXPECT_EQ(why[cluster_->web_ip()], "not_allowed");
  EXPECT_EQ(why["loop.example.test"], "address_refused");
  EXPECT_EQ(why["broker.example.test"], "address_refused");
  EXPECT_EQ(cluster_->WebLog().find("other.example.test"), std::string::npos)
      << "an off-list name reached the web host";
  // The audit trail has the job's destinations, refusals included. Entries
  // are written after the answer (docs/audit.md): wait for it.
  json entry;
  WaitFor(
      [&] {
        HttpReply audit =
            cluster_->Request("GET", "/v1/audit?count=10000", "", HostCluster::kAdminToken);
        for (const auto& e : audit.body["entries"]) {
          if (e["entry"]["job_id"] == r.body["id"]) entry = e["entry"];
        }
        return !entry.is_null();
      },
      10s);
  ASSERT_FALSE(entry.is_null()) << "no audit entry for " << r.body["id"];
  ASSERT_TRUE(entry.contains("network")) << entry.dump();
  EXPECT_EQ(entry["network"]["destinations"], n["destinations"]);
}

TEST_F(EgressTest, ATenantWithoutAnAllowlistHasNoNetworkAtAll) {
  HttpReply caps = cluster_->Request("GET", "/v1/capabilities", "", HostCluster::kToken);
  ASSERT_EQ(caps.status, 200) << caps.raw;
  EXPECT_TRUE(caps.body["network"].is_null()) << caps.raw;
  HttpReply net_caps = cluster_->Request("GET", "/v1/capabilities", "", kNetToken);
  EXPECT_EQ(net_caps.body["network"]["allow"].size(), 5u) << net_caps.raw;
  HttpReply asked =
      Run({{"language", "python"}, {"network", true}, {"code", "print(1)"}}, HostCluster::kToken);
  EXPECT_EQ(asked.status, 403) << asked.raw;
  EXPECT_EQ(asked.body["error"]["code"], "NETWORK_NOT_ALLOWED") << asked.raw;
  // A job of net-a may narrow its list, never widen it.
  HttpReply wider = Run({{"language", "python"},
                         {"network", json::array({"other.example.test:80"})},
                         {"code", "print(1)"}});
  EXPECT_EQ(wider.status, 403) << wider.raw;
  EXPECT_NE(wider.raw.find("network[0]"), std::string::npos) << wider.raw;
  // Without `network`, even net-a's jobs reach nothing, gateway port included.
  std::string code = Probes(cluster_->web_ip());
  code +=
      "probe('gateway-port', lambda: socket.create_connection(('127.0.0.1', 3128), timeout=5))\n";
  code +=
      "probe('api', lambda: requests.get('http://api.example.test/hello', timeout=5,"
      " proxies={'http': 'http://127.0.0.1:3128'}))\n";
  HttpReply none = Run({{"language", "python"}, {"code", code}});
  ASSERT_EQ(none.status, 200) << none.raw;
  const std::string out = none.body["stdout"].get<std::string>();
  EXPECT_EQ(out.find(" reached"), std::string::npos) << out;
  EXPECT_NE(out.find("gateway-port refused"), std::string::npos) << out;
  EXPECT_FALSE(none.body.contains("network")) << none.raw;
}

TEST_F(EgressTest, AJobOverItsByteCapIsStopped) {
  HttpReply r = Run({{"language", "python"},
                     {"network", true},
                     {"code",
                      "import requests\n"
                      "r = requests.get('http://big.example.test/bytes?n=4000000', timeout=20)\n"
                      "print(len(r.content))\n"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "failed") << r.raw;
  EXPECT_EQ(ErrorCode(r.body), "NETWORK_LIMIT") << r.raw;
  EXPECT_EQ(r.body["end_reason"], "network_limit") << r.raw;
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("bytes: "), std::string::npos)
      << r.raw;
  EXPECT_EQ(r.body["network"]["limit"], "bytes") << r.raw;
  EXPECT_LE(r.body["network"]["bytes_in"].get<uint64_t>(), 262144u + 65536u) << r.raw;
}

TEST_F(EgressTest, ASessionHasNetworkOnlyInTheExecutionsThatAskForIt) {
  const std::string session = "egress-session";
  HttpReply first = Run({{"language", "python"},
                         {"session_id", session},
                         {"network", true},
                         {"code",
                          "import requests\n"
                          "print(requests.get('http://api.example.test/hello', timeout=10).text"
                          ".strip())\n"}});
  ASSERT_EQ(first.status, 200) << first.raw;
  EXPECT_EQ(first.body["stdout"], "hello api.example.test http\n") << first.raw;
  EXPECT_EQ(first.body["network"]["connections"], 1) << first.raw;
  HttpReply second = Run({{"language", "python"},
                          {"session_id", session},
                          {"code",
                           "try:\n"
                           "    requests.get('http://api.example.test/hello', timeout=5)\n"
                           "    print('reached')\n"
                           "except Exception as e:\n"
                           "    print('refused', type(e).__name__)\n"}});
  ASSERT_EQ(second.status, 200) << second.raw;
  EXPECT_EQ(second.body["stdout"].get<std::string>().rfind("refused", 0), 0u) << second.raw;
  cluster_->Request("DELETE", "/v1/sessions/" + session, "", kNetToken);
}

TEST_F(EgressTest, TenantsNetworkTrafficIsInTheBrokersMetrics) {
  HttpReply r = Run({{"language", "shell"},
                     {"network", true},
                     {"code", "curl -sS http://api.example.test/hello >/dev/null"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  double in = 0;
  for (int b = 0; b < HostCluster::kBrokers; ++b) {
    in += std::max(
        0.0, cluster_->Metric(b, "kiln_network_bytes_total{direction=\"in\",tenant=\"net-a\"}"));
  }
  EXPECT_GE(in, r.body["network"]["bytes_in"].get<double>()) << r.raw;
}

// Figures for docs/performance.md, run by hand:
//   build/tests/multihost/multihost_egress_test --gtest_filter='*Figures*'
//     --gtest_also_run_disabled_tests
// End-to-end times (and the worker's duration_ms) of paced one-shot shell jobs: without
// network, with network and no request, with one HTTP request through the
// gateway (curl), and with a 4 MiB download through it.
TEST_F(EgressTest, DISABLED_Figures) {
  auto p50 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  struct Case {
    const char* name;
    json request;
  };
  const std::vector<Case> cases = {
      {"no network, true", {{"language", "shell"}, {"code", "true"}}},
      {"network, no request", {{"language", "shell"}, {"network", true}, {"code", "true"}}},
      {"network, one curl GET",
       {{"language", "shell"},
        {"network", true},
        {"code", "curl -sS -o /dev/null http://api.example.test/hello"}}},
      {"no network, curl fails at once",
       {{"language", "shell"},
        {"code", "curl -sS -o /dev/null http://api.example.test/hello; true"}}},
      {"network, 4 MiB GET",
       {{"language", "shell"},
        {"network", true},
        {"code", "curl -sS -o /dev/null http://big.example.test/bytes?n=4194304"}}},
  };
  const char* token = "net-b-token-1";  // a tenant with room for the 4 MiB
  // Rounds of one job per case, so drift and warm-up hit every case alike.
  std::vector<std::vector<double>> e2e(cases.size()), worker(cases.size());
  for (int round = 0; round < 31; ++round) {
    for (size_t k = 0; k < cases.size(); ++k) {
      // Paced: the worker's one warm sandbox per runtime is back before each job.
      std::this_thread::sleep_for(100ms);
      const auto t0 = std::chrono::steady_clock::now();
      HttpReply r = Run(cases[k].request, token);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_EQ(r.status, 200) << r.raw;
      ASSERT_EQ(r.body["status"], "succeeded") << r.raw;
      if (round == 0) continue;  // warm-up
      e2e[k].push_back(ms);
      worker[k].push_back(r.body["duration_ms"].get<double>());
    }
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    std::cout << cases[k].name << ": e2e p50 " << p50(e2e[k]) << " ms, worker p50 "
              << p50(worker[k]) << " ms\n";
  }
}

}  // namespace
}  // namespace kiln::testing
