// The package sets through a real cluster (redis-server, a broker, a worker
// and its sandboxes): python jobs import the Debian-packaged data stack that
// deploy/install-deps.sh installs, javascript jobs `require` and `import()`
// the pinned tree the sandbox shows at /node_modules, both read-only; the
// python zygote has imported packages.preload.python before it forks for a
// job that may import beyond the standard library (not for one that does
// not), and a worker configured without preloads has not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/cluster.hpp"
#include "tests/support/rogue_worker.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

constexpr int kEROFS = 30;

class PackagesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.workers = 1;
    o.slots = 2;
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

  static json Run(TestCluster& c, const std::string& language, const std::string& code,
                  json extra = json::object()) {
    json body = {{"language", language}, {"code", code}, {"limits", {{"timeout_ms", 60000}}}};
    body.update(extra);
    HttpReply r = c.Submit(body);
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body;
  }

  static TestCluster* cluster_;
};
TestCluster* PackagesTest::cluster_ = nullptr;

TEST_F(PackagesTest, APandasJobSumsADataFrame) {
  json r = Run(*cluster_, "python", R"PY(
import sys
preloaded = 'pandas' in sys.modules
import pandas as pd
df = pd.DataFrame({'a': [1, 2, 3], 'b': [0.5, 1.5, 2.0]})
result = {'sum': int(df['a'].sum()), 'mean_b': float(df['b'].mean()), 'preloaded': preloaded}
)PY");
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"]["sum"], 6) << r.dump();
  EXPECT_DOUBLE_EQ(r["result"]["mean_b"].get<double>(), 4.0 / 3.0);
  // packages.preload.python defaults to numpy and pandas: the zygote that
  // forked this sandbox had imported them.
  EXPECT_EQ(r["result"]["preloaded"], true) << r.dump();
}

// Two zygotes: a job that imports nothing beyond the standard library is
// forked from the lean one (a smaller fork; docs/performance.md, "Two python
// zygotes"), one that may import more, statically or not, from the one with
// the preloads.
TEST_F(PackagesTest, JobsThatNeedNoPreloadRunWithoutThem) {
  json lean = Run(*cluster_, "python",
                  "import sys, json\nresult = sorted(m for m in ('numpy', 'pandas') "
                  "if m in sys.modules)");
  ASSERT_EQ(lean.value("status", ""), "succeeded") << lean.dump();
  EXPECT_EQ(lean["result"], json::array()) << lean.dump();
  json dynamic = Run(*cluster_, "python",
                     "import sys, importlib\nresult = 'pandas' in sys.modules\n"
                     "importlib.import_module('numpy')");
  ASSERT_EQ(dynamic.value("status", ""), "succeeded") << dynamic.dump();
  EXPECT_EQ(dynamic["result"], true) << dynamic.dump();
  // The lean sandbox can still import a preloaded module itself.
  json late = Run(*cluster_, "python",
                  "import sys\nm = 'num' + 'py'\nbefore = m in sys.modules\n"
                  "exec('imp' + 'ort ' + m)\nresult = [before, numpy.int64(2).item()]");
  ASSERT_EQ(late.value("status", ""), "succeeded") << late.dump();
  EXPECT_EQ(late["result"], json::array({false, 2})) << late.dump();
}

TEST_F(PackagesTest, ThePythonSetImportsAndIsReadOnly) {
  // docs/runtimes.md, "Package sets": every module of the python set.
  json r = Run(*cluster_, "python", R"PY(
import importlib, os
names = ['numpy', 'pandas', 'scipy', 'sympy', 'requests', 'httpx', 'aiohttp', 'bs4', 'lxml',
         'html5lib', 'openpyxl', 'xlrd', 'docx', 'pypdf', 'dateutil', 'pendulum', 'arrow',
         'pydantic', 'PIL', 'yaml', 'markdown', 'regex', 'matplotlib', 'tabulate', 'networkx',
         'csvkit']
failed = {}
for n in names:
    try:
        importlib.import_module(n)
    except Exception as e:
        failed[n] = repr(e)
import numpy
try:
    open(os.path.join(os.path.dirname(numpy.__file__), 'kiln-was-here'), 'w')
    write = 0
except OSError as e:
    write = e.errno
result = {'failed': failed, 'write': write}
)PY");
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"]["failed"], json::object()) << r.dump();
  EXPECT_EQ(r["result"]["write"], kEROFS) << r.dump();
}

TEST_F(PackagesTest, JavascriptRequiresAndImportsTheTree) {
  json r = Run(*cluster_, "javascript", R"JS(
const _ = require('lodash');
const { z } = await import('zod');
const dayjs = (await import('dayjs')).default;
const Papa = require('papaparse');
const math = require('mathjs');
result = {
  chunk: _.chunk([1, 2, 3, 4], 2),
  zod: z.object({ n: z.number() }).parse({ n: 3 }).n,
  year: dayjs('2024-02-29').year(),
  rows: Papa.parse('a,b\n1,2').data.length,
  det: math.det([[1, 2], [3, 4]]),
  where: require.resolve('lodash'),
};
)JS");
  ASSERT_EQ(r.value("status", ""), "succeeded") << r.dump();
  EXPECT_EQ(r["result"]["chunk"], json::parse("[[1,2],[3,4]]")) << r.dump();
  EXPECT_EQ(r["result"]["zod"], 3);
  EXPECT_EQ(r["result"]["year"], 2024);
  EXPECT_EQ(r["result"]["rows"], 2);
  EXPECT_NEAR(r["result"]["det"].get<double>(), -2.0, 1e-9);
  // From the set's tree (through /node_modules), before any copy the host's
  // node finds elsewhere (Debian's npm brings its own lodash).
  EXPECT_THAT(r["result"]["where"].get<std::string>(),
              ::testing::HasSubstr("/kiln/javascript/node_modules/lodash/"));
}

TEST_F(PackagesTest, JavascriptSessionsSeeTheTreeAndCannotWriteIt) {
  json body = {{"language", "javascript"}, {"session_id", "pk"}};
  // With a top-level await the execution is an async function's body, so
  // what it keeps for later goes on globalThis (docs/runtimes.md).
  body["code"] = "globalThis.v4 = require('uuid').v4; globalThis.yaml = await import('yaml');";
  HttpReply a = cluster_->Submit(body);
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(a.body.value("status", ""), "succeeded") << a.raw;
  body["code"] = R"JS(
const fs = require('fs');
let write = 'ok';
try { fs.writeFileSync('/node_modules/lodash/kiln-was-here', 'x'); } catch (e) { write = e.code; }
result = { uuid: v4().length, doc: yaml.parse('a: [1, 2]'), write };
)JS";
  HttpReply b = cluster_->Submit(body);
  ASSERT_EQ(b.status, 200) << b.raw;
  ASSERT_EQ(b.body.value("status", ""), "succeeded") << b.raw;
  EXPECT_EQ(b.body["result"]["uuid"], 36) << b.raw;
  EXPECT_EQ(b.body["result"]["doc"], json::parse(R"({"a": [1, 2]})"));
  EXPECT_EQ(b.body["result"]["write"], "EROFS") << b.raw;
}

// The broker lists what the worker registered, and what it lists is what
// jobs find: numpy's version as numpy reports it in a job, lodash's as its
// package.json says in a javascript job.
TEST_F(PackagesTest, RuntimesListsVersionsAndPackagesJobsSee) {
  json py = Run(*cluster_, "python",
                "import numpy, platform\nresult = [platform.python_version(), numpy.__version__]");
  ASSERT_EQ(py.value("status", ""), "succeeded") << py.dump();
  json js = Run(*cluster_, "javascript",
                "result = [process.versions.node, require('lodash/package.json').version]");
  ASSERT_EQ(js.value("status", ""), "succeeded") << js.dump();

  HttpReply r = cluster_->Request("GET", "/v1/runtimes");
  ASSERT_EQ(r.status, 200) << r.raw;
  std::map<std::string, json> by_language;
  for (const auto& e : r.body["runtimes"]) by_language[e["language"]] = e;
  ASSERT_EQ(by_language.size(), 3u) << r.raw;
  auto version_of = [](const json& entry, const std::string& name) {
    for (const auto& p : entry["packages"]) {
      if (p["name"] == name) return p["version"].get<std::string>();
    }
    return std::string("(absent)");
  };
  EXPECT_EQ(by_language["python"]["versions"], json::array({py["result"][0]})) << r.raw;
  EXPECT_EQ(version_of(by_language["python"], "numpy"), py["result"][1]) << r.raw;
  EXPECT_NE(version_of(by_language["python"], "pandas"), "(absent)");
  EXPECT_EQ(by_language["javascript"]["versions"], json::array({js["result"][0]})) << r.raw;
  EXPECT_EQ(version_of(by_language["javascript"], "lodash"), js["result"][1]) << r.raw;
  EXPECT_EQ(by_language["javascript"]["packages"].size(), 25u) << r.raw;  // package.json's list
  EXPECT_EQ(by_language["shell"]["workers"], 1);
  EXPECT_EQ(by_language["shell"]["versions"].size(), 1u) << r.raw;

  // /v1/capabilities names them for clients such as the MCP server.
  HttpReply caps = cluster_->Request("GET", "/v1/capabilities");
  ASSERT_EQ(caps.status, 200) << caps.raw;
  EXPECT_THAT(caps.body["packages"]["python"], ::testing::Contains("pandas")) << caps.raw;
  EXPECT_THAT(caps.body["packages"]["javascript"], ::testing::Contains("zod")) << caps.raw;
}

// A worker told to preload nothing: the zygote's children import pandas
// themselves (the control for the preload test above), and a worker whose
// javascript tree is "" shows none (no /node_modules; a lodash the host's
// node has elsewhere, as Debian's npm brings, may still resolve, but not
// from the set's tree).
TEST(PackagesConfigTest, NoPreloadAndNoJavascriptTree) {
  ClusterOptions o;
  o.workers = 1;
  o.extra_worker_top_yaml = "packages:\n  javascript: \"\"\n  preload: {python: []}\n";
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(1, seconds(20))) << c->DumpLogs();
  json body = {{"language", "python"},
               {"code", "import sys\nresult = 'pandas' in sys.modules or 'numpy' in sys.modules"}};
  HttpReply r = c->Submit(body);
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["result"], false) << r.raw;
  HttpReply js =
      c->Submit({{"language", "javascript"},
                 {"code",
                  "let e; try { e = require.resolve('lodash'); } catch (x) { e = x.code; }\n"
                  "result = [e, require('fs').existsSync('/node_modules')];"}});
  ASSERT_EQ(js.status, 200) << js.raw;
  ASSERT_TRUE(js.body["result"].is_array()) << js.raw;
  EXPECT_EQ(js.body["result"][1], false) << js.raw;
  EXPECT_THAT(js.body["result"][0].get<std::string>(),
              ::testing::Not(::testing::HasSubstr("/kiln/javascript/")))
      << js.raw;
}

// A peer on the worker endpoint registering a hostile catalog: bad
// versions and names, a language it does not offer, the most entries the
// protocol allows. The broker keeps only well-formed entries of what the
// peer offers, and the real worker's figures stand.
TEST(PackagesConfigTest, AWorkersHostileCatalogIsFiltered) {
  ClusterOptions o;
  o.workers = 1;
  auto c = TestCluster::Start(o);
  ASSERT_TRUE(c->WaitForWorkers(1, seconds(20))) << c->DumpLogs();
  auto reg = RogueRegistration("rogue-catalog", {"cobol"});
  reg.runtime_versions = {{"cobol", "<img src=x>"}, {"python", "3.99"}};
  for (size_t i = 0; i < common::protocol::kMaxPackages; ++i) {
    reg.packages.push_back("cobol pkg" + std::to_string(i) + " 1." + std::to_string(i));
  }
  reg.packages[5] = "cobol bad\x01name 1";
  reg.packages[6] = "python numpy 0.0.1-evil";
  reg.packages[7] = "cobol " + std::string(200, 'x') + " 1";
  reg.packages[8] = "cobol pkg9 2.0";  // a second pkg9
  RogueWorker rogue(c->worker_endpoint());
  rogue.Send(reg);
  ASSERT_TRUE(HasMessage(rogue.Drain(std::chrono::milliseconds(1000)),
                         common::protocol::MessageType::kRegisterAck));
  HttpReply r = c->Request("GET", "/v1/runtimes", "", TestCluster::kAdminToken);
  ASSERT_EQ(r.status, 200) << r.raw;
  std::map<std::string, json> by_language;
  for (const auto& e : r.body["runtimes"]) by_language[e["language"]] = e;
  ASSERT_TRUE(by_language.count("cobol")) << r.raw;
  EXPECT_EQ(by_language["cobol"]["versions"], json::array()) << "the bad version was dropped";
  EXPECT_EQ(by_language["cobol"]["packages"].size(), common::protocol::kMaxPackages - 4);
  for (const auto& p : by_language["python"]["packages"]) {
    EXPECT_NE(p["version"], "0.0.1-evil") << r.raw;
  }
  EXPECT_EQ(by_language["python"]["workers"], 1) << "the rogue does not offer python";
  EXPECT_NE(by_language["python"]["versions"], json::array({"3.99"}));
  HttpReply job = c->Submit({{"language", "python"}, {"code", "result = 7"}});
  ASSERT_EQ(job.status, 200) << job.raw;
  EXPECT_EQ(job.body["result"], 7) << job.raw;
}

}  // namespace
}  // namespace kiln::testing
