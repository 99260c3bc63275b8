#include "broker/service/submit_request.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "broker/service/submit_service.hpp"
#include "common/base64.hpp"

namespace kiln::broker {
namespace {

using common::Code;
using ::testing::HasSubstr;

BrokerConfig Config() {
  BrokerConfig c;
  c.max_code_bytes = 100;
  c.max_files_bytes = 10;
  return c;
}

common::Status Error(const std::string& body) {
  auto r = ParseSubmitRequest(body, "t", Config());
  return r.ok() ? common::Status::Ok() : r.status();
}

TEST(SubmitRequest, NetworkIsTrueFalseOrAListOfDestinations) {
  auto on = ParseSubmitRequest(R"({"language":"python","code":"1","network":true})", "t", Config());
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->network);
  EXPECT_TRUE(on->network_allow.empty());
  auto off =
      ParseSubmitRequest(R"({"language":"python","code":"1","network":false})", "t", Config());
  EXPECT_FALSE(off->network);
  auto list = ParseSubmitRequest(
      R"({"language":"python","code":"1","network":["API.example.test:443"]})", "t", Config());
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->network_allow, std::vector<std::string>{"api.example.test:443"});
  EXPECT_THAT(Error(R"({"language":"python","code":"1","network":"yes"})").message(),
              HasSubstr("network: expected"));
  EXPECT_THAT(Error(R"({"language":"python","code":"1","network":[]})").message(),
              HasSubstr("network: an empty list"));
  EXPECT_THAT(Error(R"({"language":"python","code":"1","network":["a.io"]})").message(),
              HasSubstr("network[0]: "));
  EXPECT_THAT(Error(R"({"language":"python","code":"1","network":[1]})").message(),
              HasSubstr("network[0]: expected a string"));
  std::string many = R"({"language":"python","code":"1","network":[)";
  for (int i = 0; i < 65; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + ".io:1\"";
  EXPECT_EQ(Error(many + "]}").code(), Code::kLimitExceeded);
}

TEST(SubmitRequest, AdmitNetworkNarrowsToTheTenantsAllowlistOnly) {
  TenantConfig tenant;
  tenant.name = "acme";
  tenant.network.allow = {"api.example.test:443", "*.wiki.org:443"};
  tenant.network.max_bytes = 1000;
  JobSpec all;
  all.network = true;
  ASSERT_TRUE(AdmitNetwork(tenant, &all).ok());
  EXPECT_EQ(all.network_allow, tenant.network.allow);
  EXPECT_EQ(all.network_max_bytes, 1000u);
  JobSpec some;
  some.network = true;
  some.network_allow = {"en.wiki.org:443"};
  ASSERT_TRUE(AdmitNetwork(tenant, &some).ok());
  EXPECT_EQ(some.network_allow, std::vector<std::string>{"en.wiki.org:443"});
  JobSpec wider;
  wider.network = true;
  wider.network_allow = {"en.wiki.org:443", "evil.io:443"};
  auto st = AdmitNetwork(tenant, &wider);
  EXPECT_EQ(st.code(), Code::kNetworkNotAllowed);
  EXPECT_THAT(st.message(), HasSubstr("network[1]: evil.io:443"));
  TenantConfig closed;
  closed.name = "closed";
  JobSpec asks;
  asks.network = true;
  EXPECT_EQ(AdmitNetwork(closed, &asks).code(), Code::kNetworkNotAllowed);
  JobSpec none;
  EXPECT_TRUE(AdmitNetwork(closed, &none).ok());
  EXPECT_TRUE(none.network_allow.empty());
}

TEST(SubmitRequest, MinimalRequestGetsDefaults) {
  auto r = ParseSubmitRequest(R"({"language":"python","code":"x=1"})", "acme", Config());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tenant, "acme");
  EXPECT_EQ(r->language, "python");
  EXPECT_EQ(r->code, "x=1");
  EXPECT_TRUE(r->wait);
  EXPECT_EQ(r->limits, Config().default_limits);
  EXPECT_THAT(r->id, ::testing::StartsWith("ex_"));
  EXPECT_GT(r->created_ms, 0);
}

TEST(SubmitRequest, FullRequestIsParsed) {
  auto r = ParseSubmitRequest(
      R"({"language":"shell","code":"x","session_id":"s-1","input":{"a":[1,2]},
          "files":[{"path":"d/f.txt","content_base64":"YWJj"}],"collect":["out/*"],
          "env":{"K":"v"},"limits":{"timeout_ms":500,"memory_mb":64},"wait":false})",
      "acme", Config());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->session_id, "s-1");
  EXPECT_EQ(r->input_json, R"({"a":[1,2]})");
  ASSERT_EQ(r->files.size(), 1u);
  EXPECT_EQ(r->files[0].content, "abc");
  EXPECT_EQ(r->collect, std::vector<std::string>{"out/*"});
  EXPECT_EQ(r->env.at("K"), "v");
  EXPECT_EQ(r->limits.timeout_ms, 500u);
  EXPECT_EQ(r->limits.memory_mb, 64u);
  EXPECT_FALSE(r->wait);
}

TEST(SubmitRequest, RejectsMalformedAndUnknown) {
  EXPECT_EQ(Error("{").code(), Code::kInvalidRequest);
  EXPECT_EQ(Error("[1]").code(), Code::kInvalidRequest);
  EXPECT_THAT(Error(R"({"language":"python","code":"1","x":1})").message(), HasSubstr("'x'"));
  EXPECT_THAT(Error(R"({"language":"ruby","code":"1"})").message(), HasSubstr("ruby"));
  EXPECT_EQ(Error(R"({"code":"1"})").code(), Code::kInvalidRequest);
  EXPECT_EQ(Error(R"({"language":"python"})").code(), Code::kInvalidRequest);
  EXPECT_EQ(Error(R"({"language":"python","code":5})").code(), Code::kInvalidRequest);
  EXPECT_THAT(Error(R"({"language":"python","code":"1","limits":{"cpu":1}})").message(),
              HasSubstr("cpu"));
  EXPECT_EQ(Error(R"({"language":"python","code":"1","wait":"yes"})").code(),
            Code::kInvalidRequest);
}

TEST(SubmitRequest, EnforcesSizesAndMaxima) {
  EXPECT_EQ(Error(R"({"language":"python","code":")" + std::string(101, 'x') + "\"}").code(),
            Code::kLimitExceeded);
  EXPECT_TRUE(Error(R"({"language":"python","code":")" + std::string(100, 'x') + "\"}").ok());
  EXPECT_EQ(Error(R"({"language":"python","code":"1","limits":{"timeout_ms":300001}})").code(),
            Code::kLimitExceeded);
  EXPECT_TRUE(Error(R"({"language":"python","code":"1","limits":{"timeout_ms":300000}})").ok());
  EXPECT_EQ(Error(R"({"language":"python","code":"1","limits":{"timeout_ms":-5}})").code(),
            Code::kInvalidRequest);
  EXPECT_EQ(Error(R"({"language":"python","code":"1","limits":{"timeout_ms":1.5}})").code(),
            Code::kInvalidRequest);
  std::string big = common::Base64Encode(std::string(11, 'a'));
  EXPECT_EQ(Error(R"({"language":"python","code":"1","files":[{"path":"a","content_base64":")" +
                  big + "\"}]}")
                .code(),
            Code::kLimitExceeded);
}

TEST(SubmitRequest, RejectsUnsafePathsAndNames) {
  for (const char* path : {"../x", "/etc/passwd", "a/../../b", "a//b", "./a", ""}) {
    std::string body = std::string(R"({"language":"python","code":"1","files":[{"path":")") + path +
                       R"(","content_base64":""}]})";
    EXPECT_EQ(Error(body).code(), Code::kInvalidRequest) << path;
  }
  EXPECT_EQ(Error(R"({"language":"python","code":"1","input":{"1bad":1}})").code(),
            Code::kInvalidRequest);
  EXPECT_EQ(Error(R"({"language":"python","code":"1","input":[1]})").code(), Code::kInvalidRequest);
  EXPECT_EQ(Error(R"({"language":"python","code":"1","env":{"A-B":"x"}})").code(),
            Code::kInvalidRequest);
  EXPECT_EQ(Error(R"({"language":"python","code":"1","env":{"A":1}})").code(),
            Code::kInvalidRequest);
  EXPECT_EQ(Error(R"({"language":"python","code":"1","session_id":"a b"})").code(),
            Code::kInvalidRequest);
  EXPECT_EQ(
      Error(R"({"language":"python","code":"1","files":[{"path":"a","content_base64":"@@"}]})")
          .code(),
      Code::kInvalidRequest);
}

// A request with `files` (path, content "") and the rest of `extra` (JSON members).
std::string WithFiles(const std::vector<std::string>& paths,
                      const std::string& language = "python") {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& p : paths) files.push_back({{"path", p}, {"content_base64", ""}});
  return nlohmann::json{{"language", language}, {"code", "1"}, {"files", files}}.dump();
}

std::string Request(const std::string& language, const std::string& code,
                    const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = extra;
  j["language"] = language;
  j["code"] = code;
  return j.dump();
}

// Inputs the worker would refuse after dispatch (the job would end `error`,
// INTERNAL) are refused here, with the field named.
TEST(SubmitRequest, FileNameLongerThanNameMaxNamesTheFile) {
  const std::string part255(255, 'n');
  EXPECT_TRUE(Error(WithFiles({"ok.txt", "d/" + part255})).ok());
  auto st = Error(WithFiles({"ok.txt", "d/" + std::string(256, 'n')}));
  EXPECT_EQ(st.code(), Code::kInvalidRequest);
  EXPECT_THAT(st.message(), ::testing::StartsWith("files[1].path: "));
  EXPECT_THAT(st.message(), HasSubstr("256 bytes"));
  EXPECT_THAT(Error(WithFiles({std::string(300, 'x')})).message(),
              ::testing::StartsWith("files[0].path: "));
  // Total length: 1024 bytes at most, whatever the parts.
  std::string deep;
  while (deep.size() < 1025) deep += "abcd/";
  EXPECT_THAT(Error(WithFiles({deep + "x"})).message(), ::testing::StartsWith("files[0].path: "));
}

TEST(SubmitRequest, FileThatIsAlsoADirectoryIsRefused) {
  auto st = Error(WithFiles({"a", "a/b"}));
  EXPECT_EQ(st.code(), Code::kInvalidRequest);
  EXPECT_THAT(st.message(), ::testing::StartsWith("files[1].path: 'a/b' needs 'a'"));
  EXPECT_THAT(st.message(), HasSubstr("files[0]"));
  // Either order, any depth.
  EXPECT_THAT(Error(WithFiles({"x/y/z", "q", "x/y"})).message(),
              ::testing::StartsWith("files[0].path: 'x/y/z' needs 'x/y'"));
  // Siblings and names that only share a prefix are fine.
  EXPECT_TRUE(Error(WithFiles({"a/b", "a/c", "ab", "a.txt", "a/bc"})).ok());
}

TEST(SubmitRequest, CollectPatternsAreNamedByIndex) {
  auto st = Error(Request("python", "1", {{"collect", {"out/*", std::string(256, 'p')}}}));
  EXPECT_EQ(st.code(), Code::kInvalidRequest);
  EXPECT_THAT(st.message(), ::testing::StartsWith("collect[1]: "));
  EXPECT_THAT(Error(Request("python", "1", {{"collect", {"ok", "/abs"}}})).message(),
              ::testing::StartsWith("collect[1]: "));
  EXPECT_THAT(Error(Request("python", "1", {{"collect", {"ok", 3}}})).message(),
              ::testing::StartsWith("collect[1]: "));
}

TEST(SubmitRequest, NulInCodeIsRefusedForShellOnly) {
  const std::string code("echo a\0b", 8);
  auto st = Error(Request("shell", code));
  EXPECT_EQ(st.code(), Code::kInvalidRequest);
  EXPECT_THAT(st.message(), ::testing::StartsWith("code: "));
  // Python and JavaScript take the code as it is: a NUL byte is the
  // interpreter's error (an ordinary failed job), or text in a JS string.
  EXPECT_TRUE(Error(Request("python", code)).ok());
  EXPECT_TRUE(Error(Request("javascript", code)).ok());
}

TEST(SubmitRequest, NamesTheShellCannotAssignAreRefused) {
  EXPECT_THAT(Error(Request("shell", "x", {{"env", {{"UID", "0"}}}})).message(),
              ::testing::StartsWith("env.UID: "));
  EXPECT_THAT(Error(Request("shell", "x", {{"env", {{"__kiln_in", "0"}}}})).message(),
              ::testing::StartsWith("env.__kiln_in: "));
  EXPECT_THAT(Error(Request("shell", "x", {{"input", {{"SHELLOPTS", 1}}}})).message(),
              ::testing::StartsWith("input.SHELLOPTS: "));
  EXPECT_THAT(Error(Request("shell", "x", {{"input", {{"__kiln", 1}}}})).message(),
              ::testing::StartsWith("input.__kiln: "));
  EXPECT_THAT(
      Error(Request("shell", "x", {{"input", {{"K", 1}}}, {"env", {{"K", "v"}}}})).message(),
      ::testing::StartsWith("input.K: "));
  EXPECT_THAT(Error(Request("shell", "x", {{"input", {{"K", std::string("a\0b", 3)}}}})).message(),
              ::testing::StartsWith("input.K: "));
  // Inside a JSON value a NUL is escaped, so only string values are refused.
  EXPECT_TRUE(Error(Request("shell", "x",
                            {{"input", {{"K", nlohmann::json::array({std::string("a\0b", 3)})}}}}))
                  .ok());
  // The other languages have no such rules.
  EXPECT_TRUE(Error(Request("python", "x",
                            {{"input", {{"UID", 1}, {"K", std::string("a\0b", 3)}}},
                             {"env", {{"K", "v"}, {"__kiln_x", "y"}}}}))
                  .ok());
}

TEST(SubmitRequest, JavaScriptReadOnlyGlobalsAreRefusedAsInputKeys) {
  for (const char* key : {"undefined", "NaN", "Infinity"}) {
    auto st = Error(Request("javascript", "x", {{"input", {{key, 1}}}}));
    EXPECT_EQ(st.code(), Code::kInvalidRequest) << key;
    EXPECT_THAT(st.message(), ::testing::StartsWith(std::string("input.") + key + ": "));
    EXPECT_TRUE(Error(Request("python", "x", {{"input", {{key, 1}}}})).ok()) << key;
  }
}

TEST(SubmitRequest, StdinIsATextOfAtMostOneMebibyte) {
  auto r = ParseSubmitRequest(R"({"language":"python","code":"x","stdin":"a\nb"})", "t", Config());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdin_data, "a\nb");
  const std::string fits(1 << 20, 'x');
  const std::string over((1 << 20) + 1, 'x');
  auto body = [](const std::string& lang, const std::string& in) {
    return nlohmann::json{{"language", lang}, {"code", "x"}, {"stdin", in}}.dump();
  };
  for (const char* lang : {"python", "javascript", "shell"}) {
    EXPECT_TRUE(ParseSubmitRequest(body(lang, fits), "t", Config()).ok()) << lang;
    common::Status st = Error(body(lang, over));
    EXPECT_EQ(st.code(), Code::kInvalidRequest) << lang;
    EXPECT_THAT(st.message(), ::testing::StartsWith("stdin: 1048577 bytes, above the maximum"));
  }
  EXPECT_EQ(Error(R"({"language":"python","code":"x","stdin":5})").code(), Code::kInvalidRequest);
  EXPECT_THAT(Error(R"({"language":"python","code":"x","stdin":["a"]})").message(),
              HasSubstr("stdin: expected a string"));
  // NUL: fine in python and javascript, refused for shell (bash strings cannot hold it).
  EXPECT_TRUE(
      ParseSubmitRequest(R"({"language":"python","code":"x","stdin":"a\u0000"})", "t", Config())
          .ok());
  EXPECT_THAT(Error(R"({"language":"shell","code":"x","stdin":"a\u0000"})").message(),
              HasSubstr("stdin: shell"));
}

TEST(SubmitRequest, PackagesAreCheckedSpecs) {
  auto r = ParseSubmitRequest(
      R"({"language":"python","code":"x","packages":["tabulate==0.9.0","humanize"]})", "t",
      Config());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->packages, (std::vector<std::string>{"tabulate==0.9.0", "humanize"}));
  r = ParseSubmitRequest(
      R"({"language":"javascript","code":"x","packages":["@types/node@20.1.0"]})", "t", Config());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(
      ParseSubmitRequest(R"({"language":"shell","code":"x","packages":[]})", "t", Config()).ok());
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"language":"python","code":"x","packages":"tabulate"})", "packages: expected an array"},
      {R"({"language":"python","code":"x","packages":[1]})", "packages[0]: expected a string"},
      {R"({"language":"python","code":"x","packages":["a","b c"]})", "packages[1]: 'b c'"},
      {R"({"language":"python","code":"x","packages":["a","A"]})", "packages[1]: 'A' is already"},
      {R"({"language":"python","code":"x","packages":["x @ https://e/x.whl"]})", "packages[0]: "},
      {R"({"language":"javascript","code":"x","packages":["x@^1"]})", "packages[0]: "},
      {R"({"language":"shell","code":"x","packages":["jq"]})", "packages: shell jobs take no"},
  };
  for (const auto& [body, message] : refused) {
    common::Status st = Error(body);
    EXPECT_EQ(st.code(), Code::kInvalidRequest) << body;
    EXPECT_THAT(st.message(), ::testing::StartsWith(message)) << body;
  }
  nlohmann::json many = {
      {"language", "python"}, {"code", "x"}, {"packages", nlohmann::json::array()}};
  for (int i = 0; i < 33; ++i) many["packages"].push_back("p" + std::to_string(i));
  EXPECT_EQ(Error(many.dump()).code(), Code::kLimitExceeded);
}

}  // namespace
}  // namespace kiln::broker
