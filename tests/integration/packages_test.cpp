// The package sets through a real cluster (redis-server, a broker, a worker
// and its sandboxes): python jobs import the Debian-packaged data stack that
// deploy/install-deps.sh installs, javascript jobs `require` and `import()`
// the pinned tree the sandbox shows at /node_modules, both read-only; the
// python zygote has imported packages.preload.python before it forks, and a
// worker configured without preloads has not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/support/cluster.hpp"

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
  EXPECT_THAT(r["result"]["where"].get<std::string>(), ::testing::HasSubstr("/lodash/"));
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

// A worker told to preload nothing: the zygote's children import pandas
// themselves (the control for the preload test above), and a worker whose
// javascript tree is "" offers none.
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
  HttpReply js = c->Submit({{"language", "javascript"},
                            {"code",
                             "let e = null; try { require('lodash'); } catch (x) { e = x.code; }\n"
                             "result = [e, require('fs').existsSync('/node_modules')];"}});
  ASSERT_EQ(js.status, 200) << js.raw;
  EXPECT_EQ(js.body["result"], json::parse(R"(["MODULE_NOT_FOUND", false])")) << js.raw;
}

}  // namespace
}  // namespace kiln::testing
