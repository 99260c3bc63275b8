// stdin and rich outputs through a real cluster (redis-server, a broker, real
// workers and sandboxes): a job's stdin on fd 0 in every language, one-shot
// and in a session; matplotlib figures as image/png outputs (decoded for real
// with PIL); a session's final expression echoed as result and text/plain;
// and the hostile cases: oversized stdin refused, a flood of figures bounded
// while the cluster keeps serving.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/base64.hpp"
#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// What `cmd` prints on stdout.
std::string Capture(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// Decodes a base64 PNG with PIL, every pixel (zlib stream and CRCs checked):
// "<format> <width> <height>", or PIL's complaint.
std::string DecodePng(const std::string& dir, const std::string& base64) {
  const std::string path = dir + "/figure.b64";
  std::ofstream(path) << base64;
  return Capture(
      "/usr/bin/python3 -c 'import base64, io, sys\n"
      "from PIL import Image\n"
      "im = Image.open(io.BytesIO(base64.b64decode(open(sys.argv[1]).read(), validate=True)))\n"
      "im.load()\n"
      "print(im.format, im.size[0], im.size[1])' " +
      path + " 2>&1");
}

// The final event (execution_end) of the job's SSE stream, read with curl.
json EndEvent(TestCluster& c, const std::string& id) {
  std::string raw = Capture("curl -sN --max-time 60 -H 'Authorization: Bearer " +
                            std::string(TestCluster::kToken) + "' " + c.url() + "/v1/executions/" +
                            id + "/events");
  const std::string marker = "event: execution_end\nid: end\ndata: ";
  size_t at = raw.find(marker);
  if (at == std::string::npos) return json();
  at += marker.size();
  return json::parse(raw.substr(at, raw.find('\n', at) - at), nullptr, false);
}

class RichResultsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions o;
    o.brokers = 1;
    o.workers = 1;
    o.slots = 4;
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

  static json Run(json body) {
    body["limits"] = {{"timeout_ms", 60000}, {"memory_mb", 512}, {"cpu_ms", 60000}};
    HttpReply r = cluster_->Submit(body);
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body;
  }
  static json Job(const std::string& language, const std::string& code, json extra = {}) {
    json body = {{"language", language}, {"code", code}};
    if (extra.is_object()) body.update(extra);
    return Run(body);
  }
  static json InSession(const std::string& session, const std::string& language,
                        const std::string& code, json extra = {}) {
    json body = {{"language", language}, {"code", code}, {"session_id", session}};
    if (extra.is_object()) body.update(extra);
    return Run(body);
  }

  static TestCluster* cluster_;
};

TestCluster* RichResultsTest::cluster_ = nullptr;

// ---------------------------------------------------------------- figures

TEST_F(RichResultsTest, OneShotFigureComesBackAsADecodablePng) {
  json r =
      Job("python",
          "import os\n"
          "import matplotlib.pyplot as plt\n"
          "fig = plt.figure(figsize=(4, 3), dpi=50)\n"
          "plt.plot([1, 3, 2])\n"
          "plt.show()\n"
          "print(len(plt.get_fignums()), os.environ['MPLBACKEND'], sorted(os.listdir('.')))\n");
  ASSERT_EQ(r["status"], "succeeded") << r.dump();
  // show() handed the figure over and closed it; matplotlib wrote nothing
  // into the workspace (its config dir is in /tmp).
  EXPECT_EQ(r["stdout"], "0 Agg []\n") << r.dump();
  ASSERT_EQ(r["outputs"].size(), 1u) << r.dump();
  const json& png = r["outputs"][0];
  EXPECT_EQ(png["mime"], "image/png");
  EXPECT_EQ(DecodePng(cluster_->dir(), png["content_base64"]), "PNG 200 150\n");
  EXPECT_EQ(r["outputs_truncated"], false);
  EXPECT_TRUE(r["result"].is_null());

  // The stored record and the stream's end event carry the same outputs.
  HttpReply got = cluster_->Request("GET", "/v1/executions/" + r["id"].get<std::string>());
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body["outputs"], r["outputs"]);
  json end = EndEvent(*cluster_, r["id"]);
  EXPECT_EQ(end["outputs"], r["outputs"]) << end.dump().substr(0, 300);
}

TEST_F(RichResultsTest, JobsWithoutFiguresHaveNoOutputs) {
  json r = Job("python", "import sys\nresult = 'matplotlib' in sys.modules\nresult");
  ASSERT_EQ(r["status"], "succeeded") << r.dump();
  EXPECT_EQ(r["result"], false);           // nothing imported matplotlib for it
  EXPECT_EQ(r["outputs"], json::array());  // one-shot jobs do not echo
  json js = Job("javascript", "result = 1");
  EXPECT_EQ(js["outputs"], json::array()) << js.dump();
}

// ---------------------------------------------------------------- session echo

TEST_F(RichResultsTest, SessionEchoesTheFinalExpression) {
  json a = InSession("echo-1", "python", "x = 5\nx");
  ASSERT_EQ(a["status"], "succeeded") << a.dump();
  EXPECT_EQ(a["result"], 5);
  EXPECT_EQ(a["outputs"], json::parse(R"([{"mime": "text/plain", "text": "5", "size": 1}])"));
  json b = InSession("echo-1", "python", "x");
  EXPECT_EQ(b["result"], 5) << b.dump();
  EXPECT_EQ(b["outputs"][0]["text"], "5");
  json c = InSession("echo-1", "python", "result = 1\nx");
  EXPECT_EQ(c["result"], 1) << c.dump();  // an explicit result wins
  EXPECT_EQ(c["outputs"][0]["text"], "5");
  json d = InSession("echo-1", "python", "object()");
  EXPECT_EQ(d["status"], "succeeded") << d.dump();  // no JSON form: output only, no error
  EXPECT_TRUE(d["result"].is_null());
  EXPECT_EQ(d["outputs"].size(), 1u);
}

// A figure left open is returned once, then closed: the next execution does
// not return it again. A Figure as the final expression is shown as a png.
TEST_F(RichResultsTest, SessionFiguresAreReturnedOnce) {
  json a = InSession("fig-1", "python",
                     "import matplotlib.pyplot as plt\n"
                     "plt.figure(figsize=(2, 1), dpi=50)\n"
                     "plt.plot([1, 2])\n"
                     "y = 1");
  ASSERT_EQ(a["status"], "succeeded") << a.dump();
  ASSERT_EQ(a["outputs"].size(), 1u) << a.dump();
  EXPECT_EQ(DecodePng(cluster_->dir(), a["outputs"][0]["content_base64"]), "PNG 100 50\n");
  json b = InSession("fig-1", "python", "len(plt.get_fignums())");
  EXPECT_EQ(b["result"], 0) << b.dump();
  EXPECT_EQ(b["outputs"].size(), 1u) << b.dump();  // its text/plain only
  json c = InSession("fig-1", "python", "f = plt.figure(figsize=(1, 1), dpi=40)\nf");
  ASSERT_EQ(c["outputs"].size(), 2u) << c.dump();
  EXPECT_EQ(c["outputs"][0]["mime"], "text/plain");
  EXPECT_EQ(c["outputs"][1]["mime"], "image/png");
  EXPECT_EQ(DecodePng(cluster_->dir(), c["outputs"][1]["content_base64"]), "PNG 40 40\n");
  json d = InSession("fig-1", "python", "y");
  EXPECT_EQ(d["outputs"].size(), 1u) << d.dump();
}

// ---------------------------------------------------------------- stdin

TEST_F(RichResultsTest, StdinIsReadOnFdZeroInEveryLanguage) {
  // Python: the code reads 4 bytes of fd 0, a child `cat` the rest (one
  // file offset: fd 0's own), sys.stdin.read() what is left (nothing).
  const std::string py =
      "import os, subprocess, sys\n"
      "head = os.read(0, 4).decode()\n"
      "child = subprocess.run(['cat'], capture_output=True, text=True).stdout\n"
      "result = [head, child, sys.stdin.read()]";
  const json py_expected = json::array({"one\n", "two\nthree\n", ""});
  const std::string js = "result = require('fs').readFileSync(0).toString()";
  const std::string sh = "read line\necho \"got:$line\"\ncat";
  const json in = {{"stdin", "one\ntwo\nthree\n"}};

  json p = Job("python", py, in);
  EXPECT_EQ(p["result"], py_expected) << p.dump();
  json whole = Job("python", "import sys\nresult = sys.stdin.read()", in);
  EXPECT_EQ(whole["result"], "one\ntwo\nthree\n") << whole.dump();
  json j = Job("javascript", js, in);
  EXPECT_EQ(j["result"], "one\ntwo\nthree\n") << j.dump();
  json s = Job("shell", sh, in);
  EXPECT_EQ(s["stdout"], "got:one\ntwo\nthree\n") << s.dump();

  for (const char* lang : {"python", "javascript", "shell"}) {
    const std::string session = std::string("stdin-") + lang;
    const std::string& code = lang == std::string("python")       ? py
                              : lang == std::string("javascript") ? js
                                                                  : sh;
    json first = InSession(session, lang, code, in);
    ASSERT_EQ(first["status"], "succeeded") << first.dump();
    json second = InSession(session, lang, code);  // no stdin: fd 0 is empty again
    json third = InSession(session, lang, code, {{"stdin", "x\n"}});
    if (lang == std::string("python")) {
      EXPECT_EQ(first["result"], py_expected) << first.dump();
      EXPECT_EQ(second["result"], json::array({"", "", ""})) << second.dump();
      EXPECT_EQ(third["result"], json::array({"x\n", "", ""})) << third.dump();
    } else if (lang == std::string("javascript")) {
      EXPECT_EQ(first["result"], "one\ntwo\nthree\n") << first.dump();
      EXPECT_EQ(second["result"], "") << second.dump();
      EXPECT_EQ(third["result"], "x\n") << third.dump();
    } else {
      EXPECT_EQ(first["stdout"], "got:one\ntwo\nthree\n") << first.dump();
      EXPECT_EQ(second["stdout"], "got:\n") << second.dump();
      EXPECT_EQ(third["stdout"], "got:x\n") << third.dump();
    }
  }
}

// ---------------------------------------------------------------- hostile

TEST_F(RichResultsTest, OversizedStdinIsRefusedAtSubmit) {
  json body = {
      {"language", "python"}, {"code", "print(1)"}, {"stdin", std::string((1 << 20) + 1, 'x')}};
  HttpReply r = cluster_->Submit(body);
  EXPECT_EQ(r.status, 400) << r.raw.substr(0, 300);
  EXPECT_EQ(r.body["error"]["code"], "INVALID_REQUEST") << r.raw.substr(0, 300);
  EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind("stdin: ", 0), 0u) << r.raw;
  body["stdin"] = std::string(1 << 20, 'x');
  body["code"] = "import sys\nprint(len(sys.stdin.read()))";
  json ok = Run(body);
  EXPECT_EQ(ok["stdout"], "1048576\n") << ok.dump().substr(0, 300);
}

TEST_F(RichResultsTest, AFloodOfFiguresIsBoundedAndTheClusterServesOn) {
  json r = Job("python",
               "import matplotlib.pyplot as plt\n"
               "for i in range(100):\n"
               "    plt.figure(figsize=(1, 1), dpi=20)\n"
               "    plt.plot([i, 0])\n");
  ASSERT_EQ(r["status"], "succeeded") << r.dump().substr(0, 500);
  EXPECT_EQ(r["outputs"].size(), 16u);
  EXPECT_EQ(r["outputs_truncated"], true);
  for (const json& o : r["outputs"]) EXPECT_EQ(o["mime"], "image/png");
  // The same in a session; and both the worker and the cluster still serve.
  json s = InSession("flood-1", "python",
                     "import matplotlib.pyplot as plt\n"
                     "for i in range(100):\n"
                     "    plt.figure(figsize=(1, 1), dpi=20)\n"
                     "x = 3\nx");
  ASSERT_EQ(s["status"], "succeeded") << s.dump().substr(0, 500);
  EXPECT_EQ(s["outputs"].size(), 16u);
  EXPECT_EQ(s["outputs"][0]["text"], "3");  // the echo first, then the figures that fit
  EXPECT_EQ(s["outputs_truncated"], true);
  EXPECT_EQ(InSession("flood-1", "python", "x + 1")["result"], 4);
  EXPECT_EQ(Job("python", "print('still here')")["stdout"], "still here\n");
  EXPECT_EQ(cluster_->Request("GET", "/v1/health", "", "").status, 200);
}

// The tenant's registered secret is masked in outputs as everywhere else:
// text outputs like `result`, binary ones like collected files.
TEST(RichResultsSecretsTest, OutputsAreMasked) {
  const std::string secret = "hunter2-Zq9xK7";
  auto cluster = TestCluster::Start({.brokers = 1, .workers = 1, .tenant_a_secrets = {secret}});
  ASSERT_TRUE(cluster->WaitForWorkers(1, seconds(20))) << cluster->DumpLogs();
  HttpReply r = cluster->Submit({{"language", "python"},
                                 {"session_id", "leaky"},
                                 {"code",
                                  "s = 'hunter2-' + 'Zq9xK7'\n"
                                  "class Leak:\n"
                                  "    def __repr__(self):\n"
                                  "        return 'repr ' + s\n"
                                  "    def _repr_png_(self):\n"
                                  "        return b'PNG ' + s.encode()\n"
                                  "    def _repr_html_(self):\n"
                                  "        return '<b>' + s + '</b>'\n"
                                  "Leak()"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.raw.find(secret), std::string::npos) << r.raw;
  const json& out = r.body["outputs"];
  ASSERT_EQ(out.size(), 3u) << r.raw;
  EXPECT_EQ(out[0], json::parse(R"({"mime": "text/plain", "text": "repr ***", "size": 8})"));
  EXPECT_EQ(out[1]["mime"], "image/png");
  auto png = common::Base64Decode(out[1]["content_base64"].get<std::string>());
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(*png, "PNG ***");
  EXPECT_EQ(out[2]["text"], "<b>***</b>");
  EXPECT_GE(r.body["redactions"].get<int>(), 3) << r.raw;
  if (::testing::Test::HasFailure()) std::cerr << cluster->DumpLogs();
}

}  // namespace
}  // namespace kiln::testing
