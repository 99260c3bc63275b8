// Packages on request through a real cluster (redis-server, a broker, a
// worker and its sandboxes) and a package index the test serves on loopback
// (package_index.py: a PEP 503 index of wheels it builds, an npm registry of
// tarballs): a job's `packages` are installed by pip or npm as an
// unprivileged user, kept per tenant, reused from the cache and mounted
// read-only at /packages; sessions gather what their executions asked for;
// no package's own code runs at install; bad specs are refused at submit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tests/support/cluster.hpp"
#include "tests/support/process.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr int kEROFS = 30;

class PackageInstallTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The index root must be reachable by the installers' user, so that a
    // package script that did run could leave its marker in ROOT/markers.
    index_dir_ = new std::string(MakeTempDir("kiln-index"));
    ::chmod(index_dir_->c_str(), 0755);
    index_ = new ChildProcess(ChildProcess::Start(
        {"/usr/bin/python3", std::string(KILN_SOURCE_DIR) + "/tests/integration/package_index.py",
         *index_dir_ + "/root"},
        *index_dir_ + "/index.log"));
    int port = 0;
    ASSERT_TRUE(WaitFor(
        [&] {
          std::ifstream in(*index_dir_ + "/index.log");
          std::string word;
          return static_cast<bool>(in >> word >> port) && word == "port" && port > 0;
        },
        seconds(30)))
        << "the package index did not start";
    const std::string base = "http://127.0.0.1:" + std::to_string(port);
    ClusterOptions o;
    o.workers = 1;
    o.slots = 3;
    o.extra_worker_yaml = "  metrics_listen: \"127.0.0.1:0\"\n";
    o.extra_worker_top_yaml = "packages:\n  install:\n    python_index: " + base +
                              "/simple\n    npm_registry: " + base +
                              "/npm\n    cache_dir: " + *index_dir_ + "/cache\n    max_set_mb: 1\n";
    cluster_ = TestCluster::Start(o).release();
    ASSERT_TRUE(cluster_->WaitForWorkers(1, seconds(20))) << cluster_->DumpLogs();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete index_;
    RemoveTree(*index_dir_);
    delete index_dir_;
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }

  static json Run(const std::string& language, const std::string& code, json extra = json::object(),
                  const std::string& token = TestCluster::kToken) {
    json body = {{"language", language}, {"code", code}, {"limits", {{"timeout_ms", 30000}}}};
    body.update(extra);
    HttpReply r = cluster_->Submit(body, token);
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body;
  }
  // How many requests the index has served for paths containing `needle`.
  static int IndexRequests(const std::string& needle) {
    std::ifstream in(*index_dir_ + "/root/requests.log");
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
    return n;
  }
  // kiln_worker_package_sets_total{language, outcome} on the worker's /metrics.
  static double SetsCounted(const std::string& language, const std::string& outcome) {
    HttpReply w = cluster_->Request("GET", "/v1/workers", "", TestCluster::kAdminToken);
    if (w.status != 200 || w.body["workers"].empty()) return -1;
    httplib::Client client("http://" + w.body["workers"][0].value("metrics_endpoint", ""));
    auto res = client.Get("/metrics");
    if (!res || res->status != 200) return -1;
    const std::string series = "kiln_worker_package_sets_total{language=\"" + language +
                               "\",outcome=\"" + outcome + "\"} ";
    size_t at = res->body.find(series);
    return at == std::string::npos ? 0 : std::stod(res->body.substr(at + series.size()));
  }
  static bool Marker(const std::string& name) {
    return ::access((*index_dir_ + "/root/markers/" + name).c_str(), F_OK) == 0;
  }

  static std::string* index_dir_;
  static ChildProcess* index_;
  static TestCluster* cluster_;
};
std::string* PackageInstallTest::index_dir_ = nullptr;
ChildProcess* PackageInstallTest::index_ = nullptr;
TestCluster* PackageInstallTest::cluster_ = nullptr;

constexpr const char* kImportHello = R"PY(
import os
import kilntest_hello
try:
    open('/packages/kiln-was-here', 'w')
    write = 0
except OSError as e:
    write = e.errno
result = {'version': kilntest_hello.VERSION, 'file': kilntest_hello.__file__,
          'greet': kilntest_hello.greet('kiln'), 'write': write}
)PY";

TEST_F(PackageInstallTest, APythonJobInstallsFromTheIndexAndImports) {
  json r = Run("python", kImportHello, {{"packages", {"kilntest-hello==1.0.0"}}});
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"]["version"], "1.0.0") << r.dump();
  EXPECT_EQ(r["result"]["greet"], "hello kiln");
  EXPECT_THAT(r["result"]["file"].get<std::string>(), ::testing::StartsWith("/packages/"));
  EXPECT_EQ(r["result"]["write"], kEROFS) << "the set is mounted read-only";
}

TEST_F(PackageInstallTest, DependenciesResolveAndTheSetIsReusedFromTheCache) {
  const std::string code = R"PY(
import kilntest_app, kilntest_hello
result = [kilntest_app.run(), kilntest_hello.VERSION]
)PY";
  json first = Run("python", code, {{"packages", {"kilntest-app"}}});
  ASSERT_EQ(first.value("status", ""), "succeeded") << first.dump();
  // Unpinned: the newest kilntest-hello (2.0.0) comes with kilntest-app.
  EXPECT_EQ(first["result"], json::parse(R"(["hello app", "2.0.0"])")) << first.dump();
  const int fetched = IndexRequests("kilntest-app");
  EXPECT_GE(fetched, 1);
  // The same set again: mounted from the tenant's cache, no trip to the index.
  json again = Run("python", code, {{"packages", {"kilntest-app"}}});
  ASSERT_EQ(again.value("status", ""), "succeeded") << again.dump();
  EXPECT_EQ(again["result"], first["result"]);
  EXPECT_EQ(IndexRequests("kilntest-app"), fetched) << "the second job went to the index";
  // Another tenant asking for the same set gets its own install.
  json other = Run("python", code, {{"packages", {"kilntest-app"}}}, TestCluster::kOtherToken);
  ASSERT_EQ(other.value("status", ""), "succeeded") << other.dump();
  EXPECT_GT(IndexRequests("kilntest-app"), fetched) << "tenants share a cached set";
}

TEST_F(PackageInstallTest, AJobWithoutPackagesSeesAnEmptyFolderAndNoCache) {
  json r = Run("python", R"PY(
import os
try:
    import kilntest_hello
    found = True
except ImportError:
    found = False
result = {'listing': os.listdir('/packages'), 'found': found,
          'cache': os.path.exists(CACHE)}
)PY",
               {{"input", {{"CACHE", *index_dir_ + "/cache"}}}});
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"]["listing"], json::array()) << r.dump();
  EXPECT_EQ(r["result"]["found"], false);
  EXPECT_EQ(r["result"]["cache"], false) << "the host's package cache is visible in a sandbox";
}

TEST_F(PackageInstallTest, ASessionGathersItsExecutionsPackages) {
  const json session = {{"session_id", "pkg-session"}};
  auto exec = [&](const std::string& code, json packages) {
    json extra = session;
    if (!packages.is_null()) extra["packages"] = packages;
    return Run("python", code, extra);
  };
  json r = exec("import kilntest_hello", nullptr);
  ASSERT_EQ(r.value("status", ""), "failed") << r.dump();
  EXPECT_EQ(r["error"]["type"], "ModuleNotFoundError") << r.dump();

  r = exec("import kilntest_hello\nresult = kilntest_hello.VERSION", {"kilntest-hello==1.0.0"});
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"], "1.0.0");
  // A later execution adds a package; the earlier one stays (and pins the
  // dependency the new one brings).
  r = exec(
      "import os, kilntest_app, kilntest_hello\nresult = [kilntest_app.run(), "
      "kilntest_hello.VERSION, os.path.exists('/packages/kilntest_hello')]",
      {"kilntest-app"});
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"], json::parse(R"(["hello app", "1.0.0", true])")) << r.dump();
  // Without `packages`, the session keeps what it has.
  r = exec("import kilntest_app\nresult = kilntest_app.run()", nullptr);
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  // Another version of a package the session has: refused, the session lives on.
  r = exec("result = 1", {"kilntest-hello==2.0.0"});
  ASSERT_EQ(r.value("status", ""), "error") << r.dump();
  EXPECT_EQ(r["error"]["code"], "INVALID_REQUEST") << r.dump();
  EXPECT_THAT(r["error"]["message"].get<std::string>(), HasSubstr("conflicts with"));
  r = exec("result = kilntest_hello.VERSION", nullptr);
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"], "1.0.0");
  EXPECT_EQ(r.value("session_epoch", 0), 1) << "the session was recreated: " << r.dump();
}

TEST_F(PackageInstallTest, JavascriptRequiresAndImportsAndNoInstallScriptRuns) {
  json r = Run("javascript", R"JS(
const hello = require('kilntest-hello');
const { shout } = await import('kilntest-esm');
result = {
  greet: hello.greet('kiln'), version: hello.VERSION, shout: shout('hi'),
  scripted: require('kilntest-scripted'), where: require.resolve('kilntest-hello'),
  lodash: require.resolve('lodash'),
};
)JS",
               {{"packages", {"kilntest-hello@1.0.0", "kilntest-esm", "kilntest-scripted"}}});
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"]["greet"], "hello kiln") << r.dump();
  EXPECT_EQ(r["result"]["version"], "1.0.0");
  EXPECT_EQ(r["result"]["shout"], "HI!");
  EXPECT_EQ(r["result"]["scripted"], "scripted, scripts not run");
  EXPECT_EQ(r["result"]["where"], "/packages/node_modules/kilntest-hello/index.js");
  // The pre-installed set is still found next to the requested one.
  EXPECT_THAT(r["result"]["lodash"].get<std::string>(), HasSubstr("node_modules/lodash/"));
  ASSERT_GE(IndexRequests("kilntest-scripted-1.0.0.tgz"), 1) << "never fetched";
  EXPECT_FALSE(Marker("npm-script-ran")) << "a package's install script ran";
}

TEST_F(PackageInstallTest, AJavascriptSessionGathersItsExecutionsPackages) {
  const json session = {{"session_id", "pkg-js-session"}};
  auto exec = [&](const std::string& code, json packages) {
    json extra = session;
    if (!packages.is_null()) extra["packages"] = packages;
    return Run("javascript", code, extra);
  };
  json r = exec("result = require('kilntest-hello').VERSION", {"kilntest-hello@1.0.0"});
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"], "1.0.0");
  // A second set is mounted in place of the first: both packages resolve.
  r = exec(
      "const { shout } = await import('kilntest-esm');\n"
      "result = [shout('hi'), require('kilntest-hello').greet('js')];",
      {"kilntest-esm"});
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"], json::parse(R"(["HI!", "hello js"])")) << r.dump();
  EXPECT_EQ(r.value("session_epoch", 0), 1) << r.dump();
}

TEST_F(PackageInstallTest, InstallFailuresEndTheJobWithTheirOwnCode) {
  // Not in the index.
  json r = Run("python", "result = 1", {{"packages", {"kilntest-nope"}}});
  ASSERT_EQ(r.value("status", ""), "error") << r.dump();
  EXPECT_EQ(r["error"]["code"], "PACKAGE_INSTALL_FAILED") << r.dump();
  EXPECT_THAT(r["error"]["message"].get<std::string>(), HasSubstr("kilntest-nope"));
  EXPECT_THAT(r["error"]["message"].get<std::string>(), ::testing::Not(HasSubstr("127.0.0.1")))
      << "the index address leaks";
  // Only an sdist: building it would run its setup.py, so it is not installed.
  r = Run("python", "result = 1", {{"packages", {"kilntest-sdist"}}});
  ASSERT_EQ(r.value("status", ""), "error") << r.dump();
  EXPECT_EQ(r["error"]["code"], "PACKAGE_INSTALL_FAILED") << r.dump();
  EXPECT_GE(IndexRequests("/simple/kilntest-sdist"), 1);
  EXPECT_FALSE(Marker("sdist-ran")) << "a package's setup.py ran";
  // Over the worker's set cap (max_set_mb: 1).
  r = Run("python", "result = 1", {{"packages", {"kilntest-big"}}});
  ASSERT_EQ(r.value("status", ""), "error") << r.dump();
  EXPECT_EQ(r["error"]["code"], "PACKAGE_INSTALL_FAILED") << r.dump();
  EXPECT_THAT(r["error"]["message"].get<std::string>(), HasSubstr("cap"));
  // The worker is fine afterwards.
  r = Run("python", kImportHello, {{"packages", {"kilntest-hello==1.0.0"}}});
  EXPECT_EQ(r.value("status", ""), "succeeded") << r.dump();
}

TEST_F(PackageInstallTest, TheWorkerCountsWhatBecameOfEachSet) {
  const double installed = SetsCounted("javascript", "installed");
  const double cached = SetsCounted("javascript", "cached");
  const double failed = SetsCounted("javascript", "failed");
  ASSERT_GE(installed, 0) << "no worker metrics";
  const json code = {{"packages", {"kilntest-hello"}}};
  json r = Run("javascript", "result = require('kilntest-hello').VERSION", code);
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  r = Run("javascript", "result = require('kilntest-hello').VERSION", code);
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  r = Run("javascript", "result = 1", {{"packages", {"kilntest-nope"}}});
  ASSERT_EQ(r.value("status", ""), "error") << r.dump();
  EXPECT_EQ(r["error"]["code"], "PACKAGE_INSTALL_FAILED") << r.dump();
  EXPECT_EQ(SetsCounted("javascript", "installed"), installed + 1);
  EXPECT_EQ(SetsCounted("javascript", "cached"), cached + 1);
  EXPECT_EQ(SetsCounted("javascript", "failed"), failed + 1);
}

// A figure, not a benchmark: what a cached set adds to a job (mounting it
// into the warm sandbox), printed; bounded loosely so a regression shows.
TEST_F(PackageInstallTest, ACachedSetCostsAJobLittle) {
  const std::string code = "import kilntest_hello\nresult = kilntest_hello.VERSION";
  json first = Run("python", code, {{"packages", {"kilntest-hello==2.0.0"}}});
  ASSERT_EQ(first.value("status", ""), "succeeded") << first.dump();
  auto p50 = [&](const json& extra) {
    std::vector<double> ms;
    for (int i = 0; i < 15; ++i) {
      const auto start = std::chrono::steady_clock::now();
      json r = Run("python", "import os\nresult = 1", extra);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      EXPECT_EQ(r.value("status", ""), "succeeded") << r.dump();
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double plain = p50(json::object());
  const double cached = p50({{"packages", {"kilntest-hello==2.0.0"}}});
  std::printf("end to end p50: %.1f ms without packages, %.1f ms with a cached set\n", plain,
              cached);
  EXPECT_LT(cached, plain + 100) << "mounting a cached set should cost milliseconds";
}

TEST_F(PackageInstallTest, ACancelStopsAnInstall) {
  HttpReply sub = cluster_->Submit({{"language", "python"},
                                    {"code", "result = 1"},
                                    {"packages", {"kilntest-slow"}},
                                    {"wait", false}});
  ASSERT_EQ(sub.status, 202) << sub.raw;
  const std::string id = sub.body["id"];
  ASSERT_TRUE(WaitFor([&] { return IndexRequests("kilntest-slow") >= 1; }, seconds(30)))
      << "the install never asked the index";
  const auto start = std::chrono::steady_clock::now();
  HttpReply c = cluster_->Request("POST", "/v1/executions/" + id + "/cancel");
  ASSERT_EQ(c.status, 200) << c.raw;
  json rec;
  ASSERT_TRUE(WaitFor(
      [&] {
        rec = cluster_->Request("GET", "/v1/executions/" + id).body;
        return rec.value("status", "") == "cancelled";
      },
      seconds(15)))
      << rec.dump();
  // Long before the index answers (30 s).
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(15));
}

TEST_F(PackageInstallTest, BadSpecsAreRefusedAtSubmit) {
  struct Case {
    std::string language;
    json packages;
    int status;
    std::string code, message;
  };
  const std::vector<Case> cases = {
      {"python", {"requests; os_name=='posix'"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"python", {"--index-url=http://evil/"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"python", {"git+https://example.org/x.git"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"python", {"requests>=2"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"python", {"../etc"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"python", {"ok", "OK"}, 400, "INVALID_REQUEST", "packages[1]: "},
      {"python", {"ok", 7}, 400, "INVALID_REQUEST", "packages[1]: "},
      {"python", "requests", 400, "INVALID_REQUEST", "packages: "},
      {"javascript", {"lodash@^4"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"javascript", {"Lodash"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"javascript", {"file:../x"}, 400, "INVALID_REQUEST", "packages[0]: "},
      {"shell", {"jq"}, 400, "INVALID_REQUEST", "packages: "},
  };
  for (const auto& c : cases) {
    HttpReply r =
        cluster_->Submit({{"language", c.language}, {"code", "true"}, {"packages", c.packages}});
    EXPECT_EQ(r.status, c.status) << c.packages.dump() << " " << r.raw;
    EXPECT_EQ(r.body["error"]["code"], c.code) << r.raw;
    EXPECT_THAT(r.body["error"]["message"].get<std::string>(), ::testing::StartsWith(c.message))
        << r.raw;
  }
  json many = json::array();
  for (int i = 0; i < 33; ++i) many.push_back("p" + std::to_string(i));
  HttpReply r = cluster_->Submit({{"language", "python"}, {"code", "1"}, {"packages", many}});
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["code"], "LIMIT_EXCEEDED") << r.raw;
  // Nothing reached the index for any of them.
  EXPECT_EQ(IndexRequests("evil"), 0);
  EXPECT_EQ(IndexRequests("/simple/p3"), 0);
}

}  // namespace
}  // namespace kiln::testing
