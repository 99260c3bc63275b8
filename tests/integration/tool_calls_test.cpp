// Tool callbacks through a real cluster (docs/api.md, "Tool callbacks"):
// sandboxed code in each language calls a declared tool in a loop and uses
// the answers, which a client gives over HTTP after reading tool_call events
// from the SSE stream — through the broker that did not dispatch the job, so
// the call and the answer cross brokers through Redis. Undeclared tools and
// schema-invalid arguments are refused before they leave the broker, an
// unanswered call times out in the code and the job ends on its own terms,
// a flood of calls stops at the limits, hostile answers get the API's error
// codes, and the audit trail and metrics show each call.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "common/protocol/client_codec.hpp"
#include "tests/support/cluster.hpp"
#include "tests/support/rogue_worker.hpp"
#include "tests/support/sse_reader.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;

// Follows a job's events through `broker`; calls `answer` for each
// tool_call event (its return value is POSTed as the answer, through the
// same broker; nullopt: no answer) and returns every event seen.
using Answerer = std::function<std::optional<json>(const json& call)>;

std::vector<SseEvent> Follow(TestCluster& c, const std::string& id, int broker,
                             const Answerer& answer) {
  return ReadSseEvents(c.url(broker) + "/v1/executions/" + id + "/events", TestCluster::kToken, "",
                       [&](const SseEvent& e) {
                         if (e.event != "tool_call") return;
                         if (auto a = answer(e.data)) {
                           auto r = c.Request(
                               "POST", "/v1/executions/" + id + "/tool-results",
                               json{{"call_id", e.data["call_id"]}, {"result", *a}}.dump(),
                               TestCluster::kToken, broker);
                           EXPECT_EQ(r.status, 200) << r.raw;
                         }
                       });
}

size_t CountEvents(const std::vector<SseEvent>& events, const std::string& name) {
  size_t n = 0;
  for (const auto& e : events) n += e.event == name;
  return n;
}

const json kAddTool = {
    {"name", "add"},
    {"description", "a + b"},
    {"parameters",
     {{"type", "object"},
      {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "integer"}}}}},
      {"required", {"a", "b"}},
      {"additionalProperties", false}}}};

std::optional<json> Add(const json& call) {
  EXPECT_EQ(call["name"], "add");
  return call["arguments"]["a"].get<int>() + call["arguments"]["b"].get<int>();
}

class ToolCallsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = TestCluster::Start({.brokers = 2, .workers = 1}); }
  static void TearDownTestSuite() { cluster_.reset(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_->DumpLogs();
  }
  // Submits (wait:false) through broker 0, answers through broker 1, and
  // returns the events and the final record.
  static std::pair<std::vector<SseEvent>, json> Run(json request, const Answerer& answer = Add) {
    request["wait"] = false;
    auto r = cluster_->Request("POST", "/v1/executions", request.dump());
    EXPECT_EQ(r.status, 202) << r.raw;
    const std::string id = r.body.value("id", "");
    auto events = Follow(*cluster_, id, /*broker=*/1, answer);
    auto rec = cluster_->Request("GET", "/v1/executions/" + id);
    return {events, rec.body};
  }
  static std::unique_ptr<TestCluster> cluster_;
};
std::unique_ptr<TestCluster> ToolCallsTest::cluster_;

TEST_F(ToolCallsTest, PythonCallsADeclaredToolInALoop) {
  auto [events, rec] = Run({{"language", "python"},
                            {"tools", {kAddTool}},
                            {"code",
                             "total = 0\n"
                             "for i in range(5):\n"
                             "    total += kiln.tool('add', {'a': i, 'b': 1})\n"
                             "print('total', total)\n"}});
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(rec["stdout"], "total 15\n");
  EXPECT_EQ(CountEvents(events, "tool_call"), 5u);
  EXPECT_EQ(CountEvents(events, "tool_result"), 5u);
  for (const auto& e : events) {
    if (e.event != "tool_call") continue;
    EXPECT_THAT(e.data["call_id"].get<std::string>(), ::testing::MatchesRegex("c[1-5]"));
    EXPECT_EQ(e.data["arguments"]["b"], 1);
  }
  // The audit trail has each call, answered, with digests of both sides.
  json tools;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto audit =
            cluster_->Request("GET", "/v1/audit?count=10000", "", TestCluster::kAdminToken);
        for (const auto& e : audit.body["entries"]) {
          if (e["entry"]["job_id"] == rec["id"] && e["entry"].contains("tools")) {
            tools = e["entry"]["tools"];
            return true;
          }
        }
        return false;
      },
      std::chrono::seconds(20)));
  ASSERT_EQ(tools.size(), 5u) << tools.dump();
  for (size_t i = 0; i < tools.size(); ++i) {
    EXPECT_EQ(tools[i]["call_id"], "c" + std::to_string(i + 1));
    EXPECT_EQ(tools[i]["name"], "add");
    EXPECT_EQ(tools[i]["state"], "answered");
    EXPECT_EQ(tools[i]["arguments_sha256"].get<std::string>().size(), 64u);
    EXPECT_EQ(tools[i]["answer_sha256"].get<std::string>().size(), 64u);
  }
}

// Not a timed test: prints what one call's round trip costs (sandbox →
// worker → broker → Redis → the SSE client → its HTTP answer → broker →
// worker → sandbox), for docs/performance.md.
TEST_F(ToolCallsTest, RoundTripFigure) {
  auto [events, rec] = Run({{"language", "python"},
                            {"tools", {kAddTool}},
                            {"code",
                             "import time\n"
                             "kiln.tool('add', {'a': 0, 'b': 0})  # the stream is open now\n"
                             "t = time.perf_counter()\n"
                             "for i in range(50):\n"
                             "    kiln.tool('add', {'a': i, 'b': 1})\n"
                             "print(round((time.perf_counter() - t) * 1000 / 50, 2))\n"}});
  ASSERT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(CountEvents(events, "tool_call"), 51u);
  std::string ms = rec["stdout"];
  if (!ms.empty() && ms.back() == '\n') ms.pop_back();
  std::cout << "[tool calls] 50 round trips in sequence: " << ms
            << " ms each (the mean, by the sandbox's clock)\n";
}

TEST_F(ToolCallsTest, JavaScriptAndShellCallTools) {
  auto [js_events, js] = Run({{"language", "javascript"},
                              {"tools", {kAddTool}},
                              {"code",
                               "let total = 0;\n"
                               "for (let i = 0; i < 3; i++) total += await kiln.tool('add', "
                               "{a: i, b: 10});\n"
                               "console.log('total', total);\n"}});
  EXPECT_EQ(js["status"], "succeeded") << js.dump();
  EXPECT_EQ(js["stdout"], "total 33\n");
  EXPECT_EQ(CountEvents(js_events, "tool_call"), 3u);

  auto [sh_events, sh] = Run({{"language", "shell"},
                              {"tools", {kAddTool}},
                              {"code",
                               "for i in 1 2; do\n"
                               "  kiln-tool add \"{\\\"a\\\": $i, \\\"b\\\": 100}\"\n"
                               "done\n"}});
  EXPECT_EQ(sh["status"], "succeeded") << sh.dump();
  EXPECT_EQ(sh["stdout"], "101\n102\n");
  EXPECT_EQ(CountEvents(sh_events, "tool_call"), 2u);
}

TEST_F(ToolCallsTest, UndeclaredToolsAndInvalidArgumentsAreRefusedBeforeTheClient) {
  bool asked = false;
  auto [events, rec] = Run({{"language", "python"},
                            {"tools", {kAddTool}},
                            {"code",
                             "for name, args in [('nope', {}), ('add', {'a': 'x', 'b': 1}),\n"
                             "                   ('add', {'a': 1})]:\n"
                             "    try:\n"
                             "        kiln.tool(name, args)\n"
                             "    except kiln.ToolRefused as e:\n"
                             "        print('refused:', e)\n"}},
                           [&](const json&) {
                             asked = true;
                             return std::nullopt;
                           });
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  const std::string out = rec["stdout"];
  EXPECT_THAT(out, ::testing::HasSubstr("refused: undeclared tool \"nope\""));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("schema")) << out;
  EXPECT_FALSE(asked);
  EXPECT_EQ(CountEvents(events, "tool_call"), 0u);

  // A job that declares nothing may call nothing.
  auto none = cluster_->Submit(
      {{"language", "python"},
       {"code",
        "try:\n    kiln.tool('add', {'a': 1, 'b': 2})\nexcept kiln.ToolRefused as e:\n"
        "    print(e)\n"}});
  EXPECT_EQ(none.body["stdout"], "this execution declares no tools\n") << none.raw;
}

TEST_F(ToolCallsTest, AnUnansweredCallTimesOutInTheCodeAndTheJobEndsOnItsOwnTerms) {
  std::string call_id;
  auto [events, rec] = Run({{"language", "python"},
                            {"tools", {kAddTool}},
                            {"tool_timeout_ms", 1000},
                            {"code",
                             "import time\n"
                             "t = time.time()\n"
                             "try:\n"
                             "    kiln.tool('add', {'a': 1, 'b': 2})\n"
                             "except kiln.ToolTimeout as e:\n"
                             "    print('timeout after', round(time.time() - t))\n"}},
                           [&](const json& call) {
                             call_id = call["call_id"];
                             return std::nullopt;
                           });
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(rec["stdout"], "timeout after 1\n");
  ASSERT_FALSE(call_id.empty());
  // The call is closed: a late answer is refused, as is a second one.
  auto late =
      cluster_->Request("POST", "/v1/executions/" + rec["id"].get<std::string>() + "/tool-results",
                        json{{"call_id", call_id}, {"result", 3}}.dump());
  EXPECT_EQ(late.status, 409) << late.raw;
  EXPECT_EQ(late.body["error"]["code"], "TOOL_CALL_CLOSED");
}

TEST_F(ToolCallsTest, AFloodOfCallsStopsAtTheLimits) {
  const auto never = [](const json&) -> std::optional<json> { return std::nullopt; };
  // 20 at once: 8 wait (and time out, unanswered), the rest are refused at once.
  auto [events, rec] = Run({{"language", "python"},
                            {"tools", {kAddTool}},
                            {"tool_timeout_ms", 3000},
                            {"code",
                             "import threading\n"
                             "out = []\n"
                             "def call():\n"
                             "    try:\n"
                             "        kiln.tool('add', {'a': 1, 'b': 1})\n"
                             "    except kiln.ToolError as e:\n"
                             "        out.append(type(e).__name__)\n"
                             "ts = [threading.Thread(target=call) for _ in range(20)]\n"
                             "[t.start() for t in ts]\n"
                             "[t.join() for t in ts]\n"
                             "print(out.count('ToolTimeout'), out.count('ToolRefused'))\n"}},
                           never);
  EXPECT_EQ(rec["status"], "succeeded") << rec.dump();
  EXPECT_EQ(rec["stdout"], "8 12\n");
  EXPECT_EQ(CountEvents(events, "tool_call"), 8u);

  // One after another, each timing out at once: the 257th is refused.
  auto [more_events, more] = Run({{"language", "python"},
                                  {"tools", {kAddTool}},
                                  {"tool_timeout_ms", 1},
                                  {"code",
                                   "n = 0\n"
                                   "while True:\n"
                                   "    try:\n"
                                   "        kiln.tool('add', {'a': 1, 'b': 1})\n"
                                   "    except kiln.ToolTimeout:\n"
                                   "        n += 1\n"
                                   "    except kiln.ToolRefused as e:\n"
                                   "        print(n, e)\n"
                                   "        break\n"}},
                                 never);
  EXPECT_EQ(more["status"], "succeeded") << more.dump();
  EXPECT_EQ(more["stdout"], "256 at most 256 calls per execution\n");
  // The broker opens calls behind the worker: those still queued when the
  // job ended are not shown, none beyond the limit is.
  EXPECT_LE(CountEvents(more_events, "tool_call"), 256u);
  EXPECT_GE(CountEvents(more_events, "tool_call"), 1u);
}

// A worker (every party is untrusted) that calls a tool of a job running on
// another worker learns nothing of it: not even why its arguments fail the
// schema, which would tell of the schema. The job's own worker is told.
TEST_F(ToolCallsTest, ARogueWorkerLearnsNothingOfAnotherWorkersJob) {
  json request = {{"language", "python"},
                  {"tools", {kAddTool}},
                  {"wait", false},
                  {"code", "import time\ntime.sleep(60)\n"}};
  auto r = cluster_->Request("POST", "/v1/executions", request.dump());
  ASSERT_EQ(r.status, 202) << r.raw;
  const std::string id = r.body["id"];
  ASSERT_TRUE(WaitFor(
      [&] { return cluster_->Request("GET", "/v1/executions/" + id).body["status"] == "running"; },
      std::chrono::seconds(20)));

  // A runtime no job asks for: the rogue is given no work.
  RogueWorker rogue(cluster_->worker_endpoint(0));
  rogue.Send(RogueRegistration("rogue-tools", {"cobol"}));
  ASSERT_TRUE(HasMessage(rogue.Drain(std::chrono::milliseconds(1000)),
                         common::protocol::MessageType::kRegisterAck));
  const auto answer_to = [&](uint64_t call, const std::string& args) {
    rogue.Send(common::protocol::ToolCall{
        .job_id = id, .call = call, .name = "add", .arguments_json = args});
    for (const auto& m : rogue.Drain(std::chrono::milliseconds(1500))) {
      if (const auto* t = std::get_if<common::protocol::ToolResult>(&m); t && t->call == call) {
        return *t;
      }
    }
    return common::protocol::ToolResult{.error_type = "no answer"};
  };
  // Arguments that fail the schema: a refusal that says nothing of it.
  auto bad = answer_to(1, R"({"a": "one"})");
  EXPECT_EQ(bad.error_type, "ToolUnavailable");
  EXPECT_EQ(bad.error_message, "no such execution on this worker");
  // Arguments that pass: not opened (the job is not the rogue's).
  auto good = answer_to(2, R"({"a": 1, "b": 2})");
  EXPECT_FALSE(good.ok);
  EXPECT_EQ(good.error_type, "ToolUnavailable");
  EXPECT_THAT(good.error_message, ::testing::HasSubstr("another worker"));
  auto rec = cluster_->Request("GET", "/v1/executions/" + id);
  EXPECT_EQ(rec.body["status"], "running") << "the job goes on untouched: " << rec.raw;
  cluster_->Request("POST", "/v1/executions/" + id + "/cancel");
}

TEST_F(ToolCallsTest, HostileAnswersGetTheApisErrors) {
  // A job that waits for its answer while the hostile ones are tried.
  auto r = cluster_->Request("POST", "/v1/executions",
                             json{{"language", "python"},
                                  {"wait", false},
                                  {"tools", {kAddTool}},
                                  {"code", "print(kiln.tool('add', {'a': 2, 'b': 3}))\n"}}
                                 .dump());
  ASSERT_EQ(r.status, 202) << r.raw;
  const std::string id = r.body["id"];
  const std::string path = "/v1/executions/" + id + "/tool-results";
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster_->RedisCommand({"HEXISTS", "{kiln}:tools:" + id, "c1"}).integer == 1;
      },
      std::chrono::seconds(20)));
  struct Case {
    std::string body, token;
    int status;
    std::string code;
  };
  const std::vector<Case> cases = {
      {"not json", TestCluster::kToken, 400, "INVALID_REQUEST"},
      {R"({"call_id":"c1"})", TestCluster::kToken, 400, "INVALID_REQUEST"},
      {R"({"call_id":"c1","result":1,"error":"x"})", TestCluster::kToken, 400, "INVALID_REQUEST"},
      {R"({"call_id":"x1","result":1})", TestCluster::kToken, 400, "INVALID_REQUEST"},
      {R"({"call_id":"c1","result":1,"more":1})", TestCluster::kToken, 400, "INVALID_REQUEST"},
      {R"({"call_id":"c1","error":7})", TestCluster::kToken, 400, "INVALID_REQUEST"},
      {R"({"call_id":"c1","error":")" + std::string(5000, 'e') + R"("})", TestCluster::kToken, 400,
       "LIMIT_EXCEEDED"},
      {R"({"call_id":"c9","result":1})", TestCluster::kToken, 404, "NOT_FOUND"},
      {R"({"call_id":"c1","result":1})", TestCluster::kOtherToken, 404, "NOT_FOUND"},
      {R"({"call_id":"c1","result":1})", TestCluster::kAdminToken, 403, "FORBIDDEN"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 80));
    auto a = cluster_->Request("POST", path, c.body, c.token);
    EXPECT_EQ(a.status, c.status) << a.raw;
    EXPECT_EQ(a.body["error"]["code"], c.code) << a.raw;
  }
  auto unknown = cluster_->Request("POST", "/v1/executions/ex_nope/tool-results",
                                   R"({"call_id":"c1","result":1})");
  EXPECT_EQ(unknown.status, 404) << unknown.raw;
  // None of it disturbed the call: the real answer still goes through, once.
  auto ok =
      cluster_->Request("POST", path, R"({"call_id":"c1","result":5})", TestCluster::kToken, 1);
  EXPECT_EQ(ok.status, 200) << ok.raw;
  auto again = cluster_->Request("POST", path, R"({"call_id":"c1","result":6})");
  EXPECT_EQ(again.status, 409) << again.raw;
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster_->Request("GET", "/v1/executions/" + id).body.value("status", "") ==
               "succeeded";
      },
      std::chrono::seconds(20)));
  EXPECT_EQ(cluster_->Request("GET", "/v1/executions/" + id).body["stdout"], "5\n");
  // Counted where each was taken.
  const std::string metrics = cluster_->Request("GET", "/metrics", "", "").raw +
                              cluster_->Request("GET", "/metrics", "", "", 1).raw;
  EXPECT_NE(metrics.find(R"(kiln_tool_calls_total{outcome="forwarded",tenant="tenant-a"})"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(kiln_tool_calls_total{outcome="answered",tenant="tenant-a"})"),
            std::string::npos);
}

// The native protocol: a subscribed submit sees tool_call messages between
// its output and answers them with tool_answer, on the same DEALER, through
// the broker that did not dispatch the job.
TEST_F(ToolCallsTest, NativeClientsFollowAndAnswerCalls) {
  namespace client = common::protocol::client;
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(cluster_->client_endpoint(1));
  const auto send = [&](const client::Message& m) {
    const std::string frame = client::Encode(m);
    dealer.send(zmq::buffer(frame), zmq::send_flags::none);
  };
  const json request = {{"language", "python"},
                        {"tools", {kAddTool}},
                        {"code",
                         "print(kiln.tool('add', {'a': 1, 'b': 2}))\n"
                         "try:\n"
                         "    kiln.tool('add', {'a': 0, 'b': 0})\n"
                         "except kiln.ToolError as e:\n"
                         "    print('error:', e)\n"}};
  send(client::Submit{1, TestCluster::kToken, request.dump(), "", /*subscribe=*/true});
  std::vector<std::string> calls, answered, errors;
  std::optional<json> record;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!record && std::chrono::steady_clock::now() < deadline) {
    zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(1000)) == 0) continue;
    zmq::message_t msg;
    ASSERT_TRUE(dealer.recv(msg, zmq::recv_flags::none));
    auto m = client::Decode(msg.to_string_view());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    if (auto* call = std::get_if<client::ToolCall>(&*m)) {
      calls.push_back(call->call_id);
      EXPECT_EQ(call->name, "add");
      if (calls.size() == 1) {
        // An unknown call first: refused, the real one still open.
        send(client::ToolAnswer{100, TestCluster::kToken, call->id, "c99", "1"});
        send(client::ToolAnswer{101, TestCluster::kToken, call->id, call->call_id, "3"});
      } else {
        send(client::ToolAnswer{102, TestCluster::kToken, call->id, call->call_id, "",
                                /*is_error=*/true, "no such sum"});
      }
    } else if (auto* ok = std::get_if<client::ToolAnswered>(&*m)) {
      answered.push_back(ok->call_id);
    } else if (auto* err = std::get_if<client::Error>(&*m)) {
      errors.push_back(err->code);
      EXPECT_EQ(err->request_id, 100u) << err->message;
    } else if (auto* res = std::get_if<client::Result>(&*m)) {
      record = json::parse(res->record_json);
    }
  }
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ((*record)["stdout"], "3\nerror: no such sum\n") << record->dump();
  EXPECT_EQ(calls, (std::vector<std::string>{"c1", "c2"}));
  EXPECT_EQ(answered, (std::vector<std::string>{"c1", "c2"}));
  EXPECT_EQ(errors, (std::vector<std::string>{"NOT_FOUND"}));
}

// The gVisor isolation level: kiln-init installs the tool channel inside
// gVisor's kernel with the stdio, so calls work there too.
TEST(GvisorToolCallsTest, CallsWorkInsideGvisor) {
  std::string why;
  if (!GvisorUsable(&why)) GTEST_SKIP() << "isolation level gvisor: " << why;
  ClusterOptions o;
  o.workers = 1;
  o.extra_sandbox_yaml = "  isolation: gvisor\n";
  o.tenant_a_fields = ", isolation: gvisor";
  auto cluster = TestCluster::Start(o);
  auto r = cluster->Request("POST", "/v1/executions",
                            json{{"language", "python"},
                                 {"wait", false},
                                 {"tools", {kAddTool}},
                                 {"code", "print(kiln.tool('add', {'a': 40, 'b': 2}))\n"}}
                                .dump());
  ASSERT_EQ(r.status, 202) << r.raw;
  const std::string id = r.body["id"];
  auto events = Follow(*cluster, id, 0, Add);
  auto rec = cluster->Request("GET", "/v1/executions/" + id).body;
  EXPECT_EQ(rec["isolation"], "gvisor") << rec.dump();
  EXPECT_EQ(rec["stdout"], "42\n") << rec.dump() << cluster->DumpLogs();
  EXPECT_EQ(CountEvents(events, "tool_call"), 1u);
}

}  // namespace
}  // namespace kiln::testing
