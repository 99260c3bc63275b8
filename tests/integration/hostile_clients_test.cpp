// Hostile clients through a real cluster (real redis-server, kiln-broker,
// kiln-worker): requests a worker would refuse after dispatch are 400s naming
// the field; `collect` says when it left files out; policy-blocked submits
// are kept as bounded excerpts (Redis grows by kilobytes, not megabytes,
// and the audit chain still attests the whole code); a tenant over its
// submit rate gets 429 RATE_LIMITED.
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/audit/sha256.hpp"
#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using namespace std::string_literals;

constexpr const char* kRateToken = "tenant-rate-token";

class HostileClientsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.brokers = 1;
    o.workers = 1;
    o.slots = 3;
    o.max_code_bytes = 1u << 20;
    // One submit per 5 s after a burst of 2: a slow machine cannot refill it mid-test.
    o.extra_tenants_yaml = std::string("  - {name: tenant-rate, tokens: [\"") + kRateToken +
                           "\"], enabled: true, auto_approve: true, submit_rate: 0.2, "
                           "submit_burst: 2}\n";
    cluster_ = TestCluster::Start(o).release();
    ASSERT_TRUE(cluster_->WaitForWorkers(1, seconds(20))) << cluster_->DumpLogs();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }

  // Output of redis-cli against the cluster's Redis.
  static std::string RedisCli(const std::string& args) { return cluster_->RedisCli(args); }
  static uint64_t UsedMemory() {
    const std::string info = RedisCli("INFO memory");
    const std::string key = "used_memory:";
    size_t at = info.find(key);
    return at == std::string::npos ? 0 : std::stoull(info.substr(at + key.size()));
  }

  static TestCluster* cluster_;
};

TestCluster* HostileClientsTest::cluster_ = nullptr;

json Files(std::initializer_list<std::string> paths) {
  json files = json::array();
  for (const auto& p : paths) files.push_back({{"path", p}, {"content_base64", "eA=="}});
  return files;
}

// Each of these passed validation before and ended `error` (INTERNAL) on
// the worker; now the submit is refused with the field named.
TEST_F(HostileClientsTest, WhatAWorkerWouldRefuseIsA400NamingTheField) {
  struct Case {
    std::string name;
    json body;
    std::string field;  // the message starts with it
  };
  const std::string nul = "a\0b"s;
  const std::vector<Case> cases = {
      {"300-byte file name",
       {{"language", "python"},
        {"code", "print(1)"},
        {"files", Files({"ok.txt", std::string(300, 'f')})}},
       "files[1].path: "},
      {"a file that is another file's directory",
       {{"language", "python"}, {"code", "print(1)"}, {"files", Files({"a", "a/b"})}},
       "files[1].path: "},
      {"NUL in shell code", {{"language", "shell"}, {"code", "echo " + nul}}, "code: "},
      {"read-only bash variable in env",
       {{"language", "shell"}, {"code", "echo"}, {"env", {{"UID", "0"}}}},
       "env.UID: "},
      {"shell name reserved by the session driver",
       {{"language", "shell"}, {"code", "echo"}, {"input", {{"__kiln_in", 1}}}},
       "input.__kiln_in: "},
      {"shell input key also in env",
       {{"language", "shell"}, {"code", "echo"}, {"input", {{"K", 1}}}, {"env", {{"K", "v"}}}},
       "input.K: "},
      {"NUL in a shell input string",
       {{"language", "shell"}, {"code", "echo"}, {"input", {{"K", nul}}}},
       "input.K: "},
      {"read-only javascript global as input key",
       {{"language", "javascript"}, {"code", "1"}, {"input", {{"NaN", 1}}}},
       "input.NaN: "},
      {"NUL in an env value",
       {{"language", "python"}, {"code", "1"}, {"env", {{"K", nul}}}},
       "env.K: "},
      {"collect pattern with a 300-byte part",
       {{"language", "python"}, {"code", "1"}, {"collect", {"out/*", std::string(300, 'p')}}},
       "collect[1]: "},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    json body = c.body;
    body["wait"] = false;
    auto r = cluster_->Submit(body);
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_EQ(r.body["error"]["code"], "INVALID_REQUEST") << r.raw;
    EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind(c.field, 0), 0u) << r.raw;
    EXPECT_EQ(r.body["error"]["retryable"], false);
  }
}

// Python and JavaScript take NUL bytes in code: an ordinary outcome of the
// interpreter, never `error`.
TEST_F(HostileClientsTest, NulInPythonOrJavaScriptCodeIsTheInterpretersBusiness) {
  auto py = cluster_->Submit({{"language", "python"}, {"code", "x = 1\0"s}});
  ASSERT_EQ(py.status, 200) << py.raw;
  EXPECT_EQ(py.body["status"], "failed") << py.raw;
  // ValueError before Python 3.12, SyntaxError since: the interpreter's word either way.
  const std::string type = py.body["error"].value("type", "");
  EXPECT_TRUE(type == "ValueError" || type == "SyntaxError") << py.raw;
  EXPECT_EQ(py.body["error"]["code"], "EXECUTION_FAILED") << py.raw;
  EXPECT_NE(py.body["error"]["message"].get<std::string>().find("null bytes"), std::string::npos);
  auto js = cluster_->Submit({{"language", "javascript"}, {"code", "console.log('a\0b'.length)"s}});
  ASSERT_EQ(js.status, 200) << js.raw;
  EXPECT_EQ(js.body["status"], "succeeded") << js.raw;
  EXPECT_EQ(js.body["stdout"], "3\n");
  auto bad = cluster_->Submit({{"language", "javascript"}, {"code", "1;\0"s}});
  ASSERT_EQ(bad.status, 200) << bad.raw;
  EXPECT_EQ(bad.body["status"], "failed") << bad.raw;
  EXPECT_EQ(bad.body["error"]["type"], "SyntaxError") << bad.raw;
}

TEST_F(HostileClientsTest, CollectSaysWhenItLeftFilesOut) {
  const std::string code =
      "import os\n"
      "os.makedirs('out')\n"
      "for i in range(300):\n"
      "    open('out/f%03d' % i, 'w').write(str(i))\n";
  auto r = cluster_->Submit({{"language", "python"}, {"code", code}, {"collect", {"*"}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
  EXPECT_EQ(r.body["files"].size(), 256u);
  EXPECT_EQ(r.body["files_truncated"], true);
  EXPECT_EQ(r.body["files_omitted"], 44);
  EXPECT_EQ(r.body["files"][0]["path"], "out/f000");
  // The stored record says the same.
  auto rec = cluster_->Request("GET", "/v1/executions/" + r.body["id"].get<std::string>());
  EXPECT_EQ(rec.body["files_truncated"], true) << rec.raw;
  EXPECT_EQ(rec.body["files_omitted"], 44);

  auto whole =
      cluster_->Submit({{"language", "python"}, {"code", code}, {"collect", {"out/f29?"}}});
  ASSERT_EQ(whole.status, 200) << whole.raw;
  EXPECT_EQ(whole.body["files"].size(), 10u);
  EXPECT_EQ(whole.body["files_truncated"], false);
  EXPECT_EQ(whole.body["files_omitted"], 0);
}

TEST_F(HostileClientsTest, BlockedSubmitsAreKeptAsExcerpts) {
  // 1 MiB of code the default policy blocks (python-ctypes), with input,
  // env and a file that must not be kept either.
  const std::string code = "import ctypes\n" + std::string((1u << 20) - 14, '#');
  const json body = {{"language", "python"},
                     {"code", code},
                     {"input", {{"note", "input-marker-123"}}},
                     {"env", {{"TOKEN", "env-secret-456"}}},
                     {"files", Files({"data.txt"})},
                     {"wait", false}};
  // One first, so lazily created structures (audit stream, pending set) are
  // in the baseline.
  auto first = cluster_->Submit(body);
  ASSERT_EQ(first.status, 400) << first.raw;
  ASSERT_TRUE(WaitFor([&] { return RedisCli("XLEN '{kiln}:audit'") != "0\n"; }, seconds(20)));
  const uint64_t before = UsedMemory();
  ASSERT_GT(before, 0u);
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) {
    auto r = cluster_->Submit(body);
    ASSERT_EQ(r.status, 400) << r.raw;
    ASSERT_EQ(r.body["error"]["code"], "SECURITY_BLOCKED") << r.raw;
    ids.push_back(r.body["id"]);
  }
  // Their audit entries are written asynchronously: wait for all of them.
  std::map<std::string, json> entries;
  bool all = WaitFor(
      [&] {
        auto page = cluster_->Request("GET", "/v1/audit?count=10000", "", TestCluster::kAdminToken);
        entries.clear();
        for (const auto& e : page.body["entries"]) entries[e["entry"]["job_id"]] = e["entry"];
        for (const auto& id : ids) {
          if (!entries.count(id)) return false;
        }
        return true;
      },
      seconds(30));
  ASSERT_TRUE(all) << "not every blocked submit has its audit entry";
  const uint64_t after = UsedMemory();
  const int64_t grown = static_cast<int64_t>(after) - static_cast<int64_t>(before);
  std::cout << "redis used_memory grew by " << grown << " bytes for 30 blocked 1 MiB submits\n";
  EXPECT_LT(grown, 3 << 20) << "before " << before << ", after " << after;

  const std::string sha = common::Sha256Hex(code);
  for (const auto& id : ids) {
    SCOPED_TRACE(id);
    const json& e = entries[id];
    EXPECT_EQ(e["status"], "rejected");
    EXPECT_EQ(e["code_sha256"], sha) << "the chain attests the whole code";
    EXPECT_EQ(e["code_bytes"], code.size());
    const std::string kept = e["code"];
    EXPECT_EQ(kept.rfind("import ctypes\n####", 0), 0u);
    EXPECT_NE(kept.find("[kiln: excerpt: the first 4096 of 1048576 bytes"), std::string::npos);
    EXPECT_LT(kept.size(), 4200u);
    // The job hash in Redis holds the excerpt, nothing of input, env or files.
    const std::string spec = RedisCli("HGET '{kiln}:job:" + id + "' spec");
    EXPECT_LT(spec.size(), 6000u);
    EXPECT_NE(spec.find("\"excerpt_of\""), std::string::npos) << spec.substr(0, 300);
    EXPECT_NE(spec.find(sha), std::string::npos);
    EXPECT_EQ(spec.find("input-marker-123"), std::string::npos);
    EXPECT_EQ(spec.find("env-secret-456"), std::string::npos);
    EXPECT_EQ(spec.find("data.txt"), std::string::npos);
    auto rec = cluster_->Request("GET", "/v1/executions/" + id);
    EXPECT_EQ(rec.body["status"], "rejected") << rec.raw;
  }
  auto verify = cluster_->Request("GET", "/v1/audit/verify", "", TestCluster::kAdminToken);
  EXPECT_EQ(verify.body["ok"], true) << verify.raw;
}

TEST_F(HostileClientsTest, TenantOverItsSubmitRateGets429) {
  const json body = {{"language", "shell"}, {"code", "echo hi"}, {"wait", false}};
  for (int i = 0; i < 2; ++i) {
    auto ok = cluster_->Submit(body, kRateToken);
    EXPECT_EQ(ok.status, 202) << i << ": " << ok.raw;
  }
  auto limited = cluster_->Submit(body, kRateToken);
  EXPECT_EQ(limited.status, 429) << limited.raw;
  EXPECT_EQ(limited.body["error"]["code"], "RATE_LIMITED") << limited.raw;
  EXPECT_EQ(limited.body["error"]["retryable"], true);
  EXPECT_NE(limited.raw.find("0.2 jobs per second"), std::string::npos) << limited.raw;
  // Even an invalid body counts, and is refused before it is read.
  auto invalid = cluster_->Request("POST", "/v1/executions", "{not json", kRateToken);
  EXPECT_EQ(invalid.status, 429) << invalid.raw;
  // Other tenants are not affected.
  EXPECT_EQ(cluster_->Submit(body).status, 202);
}

}  // namespace
}  // namespace kiln::testing
