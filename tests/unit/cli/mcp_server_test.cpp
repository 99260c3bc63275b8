#include "cli/mcp/mcp_server.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "common/base64.hpp"
#include "tests/unit/cli/fake_backend.hpp"

namespace kiln::cli::mcp {
namespace {

using common::Code;
using common::Status;
using nlohmann::json;

json Request(int id, const std::string& method, json params = json::object()) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

class McpServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<McpServer> Make() {
    auto server = McpServer::Create(&backend_);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(*server) : nullptr;
  }
  // Sends one request; the decoded answer.
  json Send(McpServer& s, const json& request) {
    auto line = s.HandleLine(request.dump());
    EXPECT_TRUE(line.has_value()) << request.dump();
    if (!line) return nullptr;
    EXPECT_EQ(line->back(), '\n');
    return json::parse(*line);
  }
  std::unique_ptr<McpServer> Initialized() {
    auto s = Make();
    Send(*s, Request(0, "initialize", {{"protocolVersion", "2025-06-18"}}));
    s->HandleLine(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
    return s;
  }
  json Call(McpServer& s, const std::string& tool, json args) {
    return Send(s, Request(9, "tools/call", {{"name", tool}, {"arguments", std::move(args)}}));
  }

  FakeBackend backend_;
};

TEST_F(McpServerTest, InitializeNegotiatesTheVersion) {
  for (auto [asked, answered] : std::vector<std::pair<std::string, std::string>>{
           {"2025-06-18", "2025-06-18"},
           {"2025-03-26", "2025-03-26"},
           {"2024-11-05", "2024-11-05"},
           {"2025-11-25", "2025-06-18"},  // newer than this server: it offers its own
           {"1999-01-01", "2025-06-18"}}) {
    auto s = Make();
    json r = Send(*s, Request(1, "initialize",
                              {{"protocolVersion", asked},
                               {"capabilities", json::object()},
                               {"clientInfo", {{"name", "t"}, {"version", "1"}}}}));
    EXPECT_EQ(r["id"], 1);
    EXPECT_EQ(r["result"]["protocolVersion"], answered) << asked;
    EXPECT_EQ(r["result"]["serverInfo"]["name"], "kiln");
    EXPECT_EQ(r["result"]["capabilities"]["tools"]["listChanged"], false);
    EXPECT_EQ(s->protocol_version(), answered);
  }
}

TEST_F(McpServerTest, InitializeOnceAndWithAVersion) {
  auto s = Make();
  EXPECT_EQ(Send(*s, Request(1, "initialize"))["error"]["code"], kInvalidParams);
  EXPECT_EQ(Send(*s, Request(2, "initialize",
                             {{"protocolVersion", "2025-06-18"}}))["result"]["protocolVersion"],
            "2025-06-18");
  EXPECT_EQ(
      Send(*s, Request(3, "initialize", {{"protocolVersion", "2025-06-18"}}))["error"]["code"],
      kInvalidRequest);
}

TEST_F(McpServerTest, ToolsNeedInitializeButPingDoesNot) {
  auto s = Make();
  EXPECT_EQ(Send(*s, Request(1, "tools/list"))["error"]["code"], kInvalidRequest);
  EXPECT_EQ(Send(*s, Request(2, "tools/call", {{"name", "list_sessions"}}))["error"]["code"],
            kInvalidRequest);
  EXPECT_EQ(Send(*s, Request(3, "ping"))["result"], json::object());
  EXPECT_TRUE(backend_.listed().empty());
}

TEST_F(McpServerTest, UnknownMethodsNotificationsAndResponses) {
  auto s = Initialized();
  json r = Send(*s, Request(5, "resources/list"));
  EXPECT_EQ(r["error"]["code"], kMethodNotFound);
  EXPECT_EQ(r["id"], 5);
  EXPECT_FALSE(s->HandleLine(R"({"jsonrpc":"2.0","method":"notifications/cancelled",)"
                             R"("params":{"requestId":1}})"));
  EXPECT_FALSE(s->HandleLine(R"({"jsonrpc":"2.0","method":"no/such/notification"})"));
  EXPECT_FALSE(s->HandleLine(R"({"jsonrpc":"2.0","id":99,"result":{}})"));
  auto parse_error = s->HandleLine("{oops");
  ASSERT_TRUE(parse_error);
  EXPECT_EQ(json::parse(*parse_error)["error"]["code"], kParseError);
  EXPECT_TRUE(json::parse(*parse_error)["id"].is_null());
}

TEST_F(McpServerTest, ListsThreeToolsWithSchemas) {
  auto s = Initialized();
  json tools = Send(*s, Request(1, "tools/list"))["result"]["tools"];
  ASSERT_EQ(tools.size(), 3u);
  EXPECT_EQ(tools[0]["name"], "execute_code");
  EXPECT_EQ(tools[1]["name"], "list_sessions");
  EXPECT_EQ(tools[2]["name"], "kill_session");
  for (const auto& t : tools) {
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t["name"];
    EXPECT_EQ(t["outputSchema"]["type"], "object") << t["name"];
    EXPECT_TRUE(t["description"].is_string());
  }
  EXPECT_EQ(tools[0]["inputSchema"]["properties"]["runtime"]["enum"],
            json::array({"python", "javascript", "shell"}));
  EXPECT_EQ(tools[0]["inputSchema"]["required"], json::array({"runtime", "code"}));
  EXPECT_EQ(Send(*s, Request(2, "tools/list", {{"cursor", "x"}}))["error"]["code"], kInvalidParams);
  EXPECT_EQ(backend_.probes(), 1);  // asked once, at startup
}

TEST_F(McpServerTest, DisabledCodeExecutionHidesExecuteCode) {
  backend_.capabilities = json{{"code_execution", false}, {"runtimes", json::array()}};
  auto s = Initialized();
  json tools = Send(*s, Request(1, "tools/list"))["result"]["tools"];
  ASSERT_EQ(tools.size(), 2u);
  EXPECT_EQ(tools[0]["name"], "list_sessions");
  json r = Call(*s, "execute_code", {{"runtime", "python"}, {"code", "1"}});
  EXPECT_EQ(r["error"]["code"], kInvalidParams);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("disabled"), std::string::npos);
  EXPECT_TRUE(backend_.submits().empty());
}

TEST_F(McpServerTest, TheProbeDecidesTheOffer) {
  // An older broker without /v1/capabilities: enabled.
  EXPECT_TRUE(OfferFromCapabilities(Status(Code::kNotFound, "no route"))->code_execution);
  // The disabled code as an error answer: disabled.
  EXPECT_FALSE(OfferFromCapabilities(Status(Code::kCodeExecutionDisabled, "off"))->code_execution);
  // A refused token: the server cannot start.
  EXPECT_EQ(OfferFromCapabilities(Status(Code::kUnauthorized, "bad")).status().code(),
            Code::kUnauthorized);
  backend_.capabilities = Status(Code::kForbidden, "no");
  EXPECT_FALSE(McpServer::Create(&backend_).ok());
  // Unreachable: enabled, with a note to log.
  auto offer = OfferFromCapabilities(common::Unavailable("cannot connect"));
  ASSERT_TRUE(offer.ok());
  EXPECT_TRUE(offer->code_execution);
  EXPECT_NE(offer->note.find("cannot connect"), std::string::npos);
  // Runtimes narrow the enum; unknown ones are dropped; none leaves all three.
  offer = OfferFromCapabilities(json{{"code_execution", true}, {"runtimes", {"shell", "ruby"}}});
  EXPECT_EQ(offer->runtimes, std::vector<std::string>{"shell"});
  offer = OfferFromCapabilities(json{{"code_execution", true}, {"runtimes", json::array()}});
  EXPECT_EQ(offer->runtimes.size(), 3u);
}

TEST_F(McpServerTest, TheDescriptionNamesThePreinstalledPackages) {
  json caps = {{"code_execution", true},
               {"runtimes", {"python", "javascript"}},
               {"packages",
                {{"python", {"numpy", "pandas", 7, "bad name", "x,y", std::string(200, 'a')}},
                 {"javascript", {"lodash"}},
                 {"ruby", {"rails"}}}}};
  auto offer = OfferFromCapabilities(caps);
  ASSERT_TRUE(offer.ok());
  EXPECT_EQ(offer->packages["python"], (std::vector<std::string>{"numpy", "pandas"}));
  EXPECT_EQ(offer->packages.count("ruby"), 0u);
  ToolCatalog catalog(*offer);
  const std::string d = catalog.List()[0]["description"];
  EXPECT_NE(d.find("Pre-installed packages: python: numpy, pandas; javascript: lodash (require or "
                   "await import())."),
            std::string::npos)
      << d;
  // No packages: the description says nothing about them.
  ToolCatalog bare(Offer{});
  EXPECT_EQ(bare.List()[0]["description"].get<std::string>().find("Pre-installed"),
            std::string::npos);
}

TEST_F(McpServerTest, ExecuteCodeSubmitsAndShapesTheRecord) {
  backend_.submit_answer = json{{"id", "ex_9"},       {"status", "succeeded"}, {"stdout", "2\n"},
                                {"stderr", ""},       {"exit_code", 0},        {"truncated", false},
                                {"duration_ms", 3.5}, {"result", {{"k", 1}}},  {"session_id", "s1"},
                                {"session_epoch", 2}, {"error", nullptr}};
  auto s = Initialized();
  json r = Call(*s, "execute_code",
                {{"runtime", "python"},
                 {"code", "print(1+1)"},
                 {"sessionId", "s1"},
                 {"conversationId", "c:1"},
                 {"timeoutMs", 1500}});
  ASSERT_TRUE(r.contains("result")) << r.dump();
  json sc = r["result"]["structuredContent"];
  EXPECT_EQ(sc["stdout"], "2\n");
  EXPECT_EQ(sc["exitCode"], 0);
  EXPECT_EQ(sc["timedOut"], false);
  EXPECT_EQ(sc["durationMs"], 3.5);
  EXPECT_EQ(sc["result"], json({{"k", 1}}));
  EXPECT_EQ(sc["sessionId"], "s1");
  EXPECT_EQ(sc["sessionEpoch"], 2);
  EXPECT_EQ(sc["executionId"], "ex_9");
  EXPECT_EQ(r["result"]["isError"], false);
  EXPECT_EQ(r["result"]["content"][0]["type"], "text");
  EXPECT_EQ(json::parse(r["result"]["content"][0]["text"].get<std::string>()), sc);

  ASSERT_EQ(backend_.submits().size(), 1u);
  json body = backend_.submits()[0];
  EXPECT_EQ(body["language"], "python");
  EXPECT_EQ(body["code"], "print(1+1)");
  EXPECT_EQ(body["session_id"], "s1");
  EXPECT_EQ(body["conversation_id"], "c:1");
  EXPECT_EQ(body["limits"]["timeout_ms"], 1500);
  EXPECT_EQ(body["wait"], true);
  EXPECT_EQ(backend_.read_timeouts()[0], std::chrono::seconds(32));  // 2 s + margin
  EXPECT_FALSE(body.contains("packages"));
}

TEST_F(McpServerTest, ExecuteCodePassesPackagesAndWaitsForTheirInstall) {
  backend_.submit_answer = json{{"id", "ex_9"}, {"status", "succeeded"}};
  auto s = Initialized();
  json r = Call(*s, "execute_code",
                {{"runtime", "python"},
                 {"code", "import tabulate"},
                 {"timeoutMs", 1500},
                 {"packages", {"tabulate==0.9.0"}}});
  ASSERT_TRUE(r.contains("result")) << r.dump();
  ASSERT_EQ(backend_.submits().size(), 1u);
  EXPECT_EQ(backend_.submits()[0]["packages"], json({"tabulate==0.9.0"}));
  // The install (up to 300 s) comes before the job's own 2 s.
  EXPECT_EQ(backend_.read_timeouts()[0], std::chrono::seconds(332));
}

TEST_F(McpServerTest, NetworkIsOfferedOnlyWithAnAllowlistAndNamesIt) {
  // Without an allowlist: no `network` argument, and the description says so.
  {
    auto s = Initialized();
    json tools = Send(*s, Request(2, "tools/list", json::object()))["result"]["tools"];
    EXPECT_FALSE(tools[0]["inputSchema"]["properties"].contains("network"));
    EXPECT_NE(tools[0]["description"].get<std::string>().find("No network access"),
              std::string::npos);
  }
  backend_.capabilities = json{
      {"code_execution", true},
      {"runtimes", {"python"}},
      {"network",
       {{"allow", {"api.github.com:443", 5, "a b:1", "*.wiki.org:443"}}, {"max_bytes", 1000}}}};
  auto s = Initialized();
  json tools = Send(*s, Request(2, "tools/list", json::object()))["result"]["tools"];
  EXPECT_EQ(tools[0]["inputSchema"]["properties"]["network"]["type"], "boolean");
  const std::string d = tools[0]["description"];
  EXPECT_NE(d.find("pass network: true; then HTTP(S) to api.github.com:443, *.wiki.org:443 only"),
            std::string::npos)
      << d;
  backend_.submit_answer = json{{"id", "ex_9"}, {"status", "succeeded"}};
  json r = Call(*s, "execute_code", {{"runtime", "python"}, {"code", "1"}, {"network", true}});
  ASSERT_TRUE(r.contains("result")) << r.dump();
  EXPECT_EQ(backend_.submits().back()["network"], true);
  r = Call(*s, "execute_code", {{"runtime", "python"}, {"code", "1"}});
  EXPECT_FALSE(backend_.submits().back().contains("network"));
  r = Call(*s, "execute_code", {{"runtime", "python"}, {"code", "1"}, {"network", "yes"}});
  EXPECT_TRUE(r.contains("error")) << r.dump();
}

TEST_F(McpServerTest, TheDescriptionStatesTheLimitsAndTheSessionTtl) {
  backend_.capabilities =
      json{{"code_execution", true},
           {"runtimes", {"python"}},
           {"limits",
            {{"default", {{"timeout_ms", 30000}, {"memory_mb", 256}, {"max_output_bytes", 102400}}},
             {"max", {{"timeout_ms", 300000}}},
             {"max_code_bytes", 1 << 20},
             {"max_files_bytes", 10 << 20}}},
           {"session_ttl_s", 600}};
  auto s = Initialized();
  json tool = Send(*s, Request(2, "tools/list", json::object()))["result"]["tools"][0];
  const std::string d = tool["description"];
  EXPECT_NE(d.find("Limits per call: timeoutMs 30 s by default, at most 300 s (wall clock); "
                   "memory 256 MiB; stdout and stderr 100 KiB together, cut beyond (truncated: "
                   "true); code 1 MiB; files 10 MiB in all. A session unused for 10 min ends, "
                   "and its variables are lost."),
            std::string::npos)
      << d;
  EXPECT_EQ(tool["inputSchema"]["properties"]["timeoutMs"]["maximum"], 300000);
  // A broker that says nothing (or nonsense) about limits: no sentence, no maximum.
  backend_.capabilities =
      json{{"code_execution", true}, {"limits", {{"default", {{"timeout_ms", -5}}}}}};
  s = Initialized();
  tool = Send(*s, Request(2, "tools/list", json::object()))["result"]["tools"][0];
  EXPECT_EQ(tool["description"].get<std::string>().find("Limits"), std::string::npos);
  EXPECT_FALSE(tool["inputSchema"]["properties"]["timeoutMs"].contains("maximum"));
}

TEST_F(McpServerTest, InputFilesAndCollectReachTheSubmitAndFilesComeBack) {
  const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + std::string(4, '\0');
  const std::string binary("\x00\xff\x01", 3);
  backend_.submit_answer =
      json{{"id", "ex_9"},
           {"status", "succeeded"},
           {"files",
            {{{"path", "out/a.txt"}, {"content_base64", common::Base64Encode("héllo\n")}},
             {{"path", "out/b.bin"}, {"content_base64", common::Base64Encode(binary)}},
             {{"path", "out/c.png"}, {"content_base64", common::Base64Encode(png)}},
             {{"path", "out/d"}, {"content_base64", "!!"}},
             7}},
           {"files_truncated", true}};
  auto s = Initialized();
  json r = Call(*s, "execute_code",
                {{"runtime", "python"},
                 {"code", "x"},
                 {"input", {{"n", 3}, {"name", "ada"}}},
                 {"files",
                  {{{"path", "data/in.csv"}, {"content", "a,b\n"}},
                   {{"path", "raw.bin"}, {"contentBase64", common::Base64Encode(binary)}}}},
                 {"collect", {"out/*"}}});
  ASSERT_TRUE(r.contains("result")) << r.dump();
  json body = backend_.submits().back();
  EXPECT_EQ(body["input"], json({{"n", 3}, {"name", "ada"}}));
  EXPECT_EQ(body["collect"], json({"out/*"}));
  ASSERT_EQ(body["files"].size(), 2u) << body.dump();
  EXPECT_EQ(body["files"][0],
            json({{"path", "data/in.csv"}, {"content_base64", common::Base64Encode("a,b\n")}}));
  EXPECT_EQ(body["files"][1]["content_base64"], common::Base64Encode(binary));

  json sc = r["result"]["structuredContent"];
  ASSERT_EQ(sc["files"].size(), 3u) << sc.dump();  // the malformed two are skipped
  EXPECT_EQ(sc["files"][0], json({{"path", "out/a.txt"}, {"size", 7}, {"text", "héllo\n"}}));
  EXPECT_EQ(
      sc["files"][1],
      json({{"path", "out/b.bin"}, {"size", 3}, {"contentBase64", common::Base64Encode(binary)}}));
  EXPECT_EQ(sc["files"][2]["contentBase64"], common::Base64Encode(png));
  EXPECT_EQ(sc["filesTruncated"], true);
  // The image also as MCP image content, after the JSON text.
  json content = r["result"]["content"];
  ASSERT_EQ(content.size(), 2u) << content.dump();
  EXPECT_EQ(
      content[1],
      json({{"type", "image"}, {"data", common::Base64Encode(png)}, {"mimeType", "image/png"}}));

  // Without collect: an empty list, never absent (the outputSchema requires it).
  backend_.submit_answer = json{{"id", "ex_9"}, {"status", "succeeded"}};
  sc = Call(*s, "execute_code",
            {{"runtime", "python"}, {"code", "x"}})["result"]["structuredContent"];
  EXPECT_EQ(sc["files"], json::array());
  EXPECT_EQ(sc["filesTruncated"], false);
}

TEST_F(McpServerTest, OutcomesOfTheCodeAreNotToolErrorsButRefusalsAre) {
  auto s = Initialized();
  struct Case {
    json record;
    bool is_error;
  };
  for (const Case& c : std::vector<Case>{
           {{{"status", "failed"}, {"exit_code", 3}}, false},
           {{{"status", "timed_out"}, {"exit_code", nullptr}}, false},
           {{{"status", "rejected"}, {"error", {{"code", "SECURITY_BLOCKED"}, {"message", "m"}}}},
            true},
           {{{"status", "error"}, {"error", {{"code", "WORKER_LOST"}, {"message", "m"}}}}, true},
           {{{"status", "awaiting_approval"}}, true}}) {
    backend_.submit_answer = c.record;
    json r = Call(*s, "execute_code", {{"runtime", "shell"}, {"code", "x"}});
    EXPECT_EQ(r["result"]["isError"], c.is_error) << c.record.dump();
    EXPECT_EQ(r["result"]["structuredContent"]["status"], c.record["status"]);
    EXPECT_EQ(r["result"]["structuredContent"]["timedOut"], c.record["status"] == "timed_out");
  }
  backend_.submit_answer = json{{"status", "rejected"},
                                {"error", {{"code", "SECURITY_BLOCKED"}, {"message", "rule x"}}}};
  json r = Call(*s, "execute_code", {{"runtime", "shell"}, {"code", "x"}});
  EXPECT_EQ(r["result"]["structuredContent"]["error"]["code"], "SECURITY_BLOCKED");
}

TEST_F(McpServerTest, OddRecordsStillMatchTheOutputSchema) {
  backend_.submit_answer =
      json{{"status", "failed"},  {"stdout", nullptr}, {"stderr", 5},
           {"truncated", "yes"},  {"exit_code", "1"},  {"error", {{"code", nullptr}}},
           {"session_epoch", 1.5}};
  auto s = Initialized();
  json sc = Call(*s, "execute_code",
                 {{"runtime", "python"}, {"code", "1"}})["result"]["structuredContent"];
  EXPECT_EQ(sc["stdout"], "");
  EXPECT_EQ(sc["stderr"], "");
  EXPECT_EQ(sc["truncated"], false);
  EXPECT_TRUE(sc["exitCode"].is_null());
  EXPECT_TRUE(sc["sessionEpoch"].is_null());
  EXPECT_EQ(sc["error"]["code"], "");
}

TEST_F(McpServerTest, ApiErrorsBecomeToolErrorsWithTheirCode) {
  backend_.submit_answer = Status(Code::kCodeExecutionDisabled, "code execution is off");
  auto s = Initialized();
  json r = Call(*s, "execute_code", {{"runtime", "python"}, {"code", "1"}, {"sessionId", "s2"}});
  ASSERT_TRUE(r.contains("result")) << r.dump();
  EXPECT_EQ(r["result"]["isError"], true);
  json sc = r["result"]["structuredContent"];
  EXPECT_EQ(sc["status"], "request_failed");
  EXPECT_EQ(sc["error"]["code"], "CODE_EXECUTION_DISABLED");
  EXPECT_EQ(sc["error"]["message"], "code execution is off");
  EXPECT_EQ(sc["sessionId"], "s2");
  EXPECT_TRUE(sc["exitCode"].is_null());
  EXPECT_NE(r["result"]["content"][0]["text"].get<std::string>().find("CODE_EXECUTION_DISABLED"),
            std::string::npos);

  backend_.delete_answer = Status(Code::kSessionNotFound, "no session s2");
  r = Call(*s, "kill_session", {{"sessionId", "s2"}});
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_EQ(r["result"]["structuredContent"]["error"]["code"], "SESSION_NOT_FOUND");
  EXPECT_EQ(r["result"]["structuredContent"]["deleted"], false);

  backend_.sessions_answer = Status(Code::kQueueFull, "busy");
  r = Call(*s, "list_sessions", json::object());
  EXPECT_EQ(r["result"]["isError"], true);
  EXPECT_EQ(r["result"]["structuredContent"]["error"]["retryable"], true);
  EXPECT_EQ(r["result"]["structuredContent"]["sessions"], json::array());
}

TEST_F(McpServerTest, BadArgumentsAndUnknownToolsAreInvalidParams) {
  auto s = Initialized();
  for (const json& call : std::vector<json>{
           {{"name", "nope"}, {"arguments", json::object()}},
           {{"arguments", json::object()}},
           {{"name", 5}},
           {{"name", "execute_code"}, {"arguments", {{"code", "1"}}}},
           {{"name", "execute_code"}, {"arguments", {{"runtime", "ruby"}, {"code", "1"}}}},
           {{"name", "execute_code"}, {"arguments", {{"runtime", "python"}, {"code", 1}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"extra", true}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"timeoutMs", 0}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"timeoutMs", 1.5}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"sessionId", "a/b"}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"packages", "numpy"}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"packages", {"a", 1}}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"input", {1, 2}}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"collect", "*.png"}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"files", {{"path", "a"}}}}}},
           {{"name", "execute_code"},
            {"arguments", {{"runtime", "python"}, {"code", "1"}, {"files", {{{"path", "a"}}}}}}},
           {{"name", "execute_code"},
            {"arguments",
             {{"runtime", "python"},
              {"code", "1"},
              {"files", {{{"path", "a"}, {"content", "x"}, {"contentBase64", "eA=="}}}}}}},
           {{"name", "execute_code"},
            {"arguments",
             {{"runtime", "python"},
              {"code", "1"},
              {"files", {{{"path", "a"}, {"contentBase64", "not base64!"}}}}}}},
           {{"name", "execute_code"},
            {"arguments",
             {{"runtime", "python"},
              {"code", "1"},
              {"files", {{{"path", "a"}, {"content", "x"}, {"mode", 7}}}}}}},
           {{"name", "execute_code"},
            {"arguments",
             {{"runtime", "python"}, {"code", "1"}, {"files", {{{"path", 1}, {"content", "x"}}}}}}},
           {{"name", "execute_code"}, {"arguments", "print(1)"}},
           {{"name", "kill_session"}, {"arguments", json::object()}},
           {{"name", "list_sessions"}, {"arguments", {{"conversationId", ""}}}},
       }) {
    json r = Send(*s, Request(4, "tools/call", call));
    EXPECT_EQ(r["error"]["code"], kInvalidParams) << call.dump() << " -> " << r.dump();
    EXPECT_EQ(r["id"], 4);
  }
  EXPECT_TRUE(backend_.submits().empty());
  EXPECT_TRUE(backend_.deleted().empty());
}

TEST_F(McpServerTest, SessionsAreListedAndKilled) {
  backend_.sessions_answer = json{{"sessions",
                                   {{{"id", "s1"},
                                     {"language", "python"},
                                     {"worker", "w1"},
                                     {"state", "idle"},
                                     {"created_at", 1000},
                                     {"last_used_at", 2000},
                                     {"execution_count", 2},
                                     {"epoch", 1},
                                     {"conversation_id", "c1"}}}}};
  backend_.delete_answer = json{{"id", "s1"}, {"state", "deleted"}};
  auto s = Initialized();
  json r = Call(*s, "list_sessions", {{"conversationId", "c1"}});
  EXPECT_EQ(r["result"]["isError"], false);
  json session = r["result"]["structuredContent"]["sessions"][0];
  EXPECT_EQ(session["sessionId"], "s1");
  EXPECT_EQ(session["runtime"], "python");
  EXPECT_EQ(session["lastUsedAt"], 2000);
  EXPECT_EQ(session["executionCount"], 2);
  EXPECT_EQ(session["conversationId"], "c1");
  EXPECT_EQ(backend_.listed(), std::vector<std::string>{"c1"});
  r = Call(*s, "list_sessions", json::object());
  EXPECT_EQ(backend_.listed().back(), "");
  r = Call(*s, "list_sessions", {{"conversationId", nullptr}});  // null: as if absent
  EXPECT_EQ(r["result"]["isError"], false) << r.dump();
  EXPECT_EQ(backend_.listed().back(), "");

  r = Call(*s, "kill_session", {{"sessionId", "s1"}});
  EXPECT_EQ(r["result"]["isError"], false);
  EXPECT_EQ(r["result"]["structuredContent"]["deleted"], true);
  EXPECT_EQ(r["result"]["structuredContent"]["state"], "deleted");
  EXPECT_EQ(backend_.deleted(), std::vector<std::string>{"s1"});
}

TEST_F(McpServerTest, EveryExecutionCarriesItsOwnIdempotencyKey) {
  auto s = Initialized();
  backend_.submit_answer = json{{"id", "ex_1"}, {"status", "succeeded"}};
  Call(*s, "execute_code", {{"runtime", "python"}, {"code", "1"}});
  Call(*s, "execute_code", {{"runtime", "python"}, {"code", "1"}});
  auto keys = backend_.keys();
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].rfind("mcp-", 0), 0u) << keys[0];
  EXPECT_EQ(keys[0].size(), 4u + 32u);
  EXPECT_NE(keys[0], keys[1]);
}

TEST_F(McpServerTest, CancelledCallCancelsItsExecutionAndGetsNoResponse) {
  auto s = Initialized();
  backend_.submit_answer = json{{"id", "ex_1"}, {"status", "cancelled"}};
  backend_.submit_delay = std::chrono::milliseconds(1500);
  std::optional<std::string> answer = "not yet";
  std::thread call([&] {
    answer = s->HandleLine(
        Request(42, "tools/call",
                {{"name", "execute_code"}, {"arguments", {{"runtime", "python"}, {"code", "x"}}}})
            .dump());
  });
  // Cancel once the call has submitted (the fake records the submit first).
  for (int i = 0; i < 200 && backend_.submits().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(backend_.submits().size(), 1u);
  // Another request id, and a malformed one, cancel nothing.
  s->HandleLine(
      R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41}})");
  s->HandleLine(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{}})");
  EXPECT_TRUE(backend_.cancelled().empty());
  EXPECT_FALSE(s->HandleLine(R"({"jsonrpc":"2.0","method":"notifications/cancelled",)"
                             R"("params":{"requestId":42,"reason":"user"}})")
                   .has_value());
  call.join();
  EXPECT_FALSE(answer.has_value()) << *answer;
  // The same submit again without waiting (same key: the same job), then its cancel.
  auto submits = backend_.submits();
  auto keys = backend_.keys();
  ASSERT_EQ(submits.size(), 2u);
  EXPECT_EQ(submits[1]["wait"], false);
  EXPECT_EQ(submits[1]["code"], "x");
  EXPECT_EQ(keys[1], keys[0]);
  EXPECT_EQ(backend_.cancelled(), std::vector<std::string>{"ex_1"});
  // A finished call can no longer be cancelled; later calls answer as usual.
  backend_.submit_delay = std::chrono::milliseconds(0);
  s->HandleLine(
      R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":42}})");
  EXPECT_EQ(backend_.cancelled().size(), 1u);
  json r = Call(*s, "execute_code", {{"runtime", "python"}, {"code", "y"}});
  EXPECT_EQ(r["id"], 9);
}

}  // namespace
}  // namespace kiln::cli::mcp
