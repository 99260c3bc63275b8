#include "cli/run_request.hpp"

#include <gtest/gtest.h>

#include "common/base64.hpp"

namespace kiln::cli {
namespace {

using nlohmann::json;

TEST(RunRequestTest, LanguageFromExtension) {
  EXPECT_EQ(LanguageFromPath("a.py"), "python");
  EXPECT_EQ(LanguageFromPath("dir.v2/a.PY"), "python");
  EXPECT_EQ(LanguageFromPath("a.js"), "javascript");
  EXPECT_EQ(LanguageFromPath("a.mjs"), "javascript");
  EXPECT_EQ(LanguageFromPath("a.cjs"), "javascript");
  EXPECT_EQ(LanguageFromPath("/tmp/x.sh"), "shell");
  EXPECT_EQ(LanguageFromPath("x.bash"), "shell");
  EXPECT_EQ(LanguageFromPath("x.txt"), std::nullopt);
  EXPECT_EQ(LanguageFromPath("Makefile"), std::nullopt);
  EXPECT_EQ(LanguageFromPath(".py"), std::nullopt);  // a hidden file, not an extension
  EXPECT_EQ(LanguageFromPath("py.d/run"), std::nullopt);
}

TEST(RunRequestTest, NormalizeLanguage) {
  EXPECT_EQ(*NormalizeLanguage("python"), "python");
  EXPECT_EQ(*NormalizeLanguage("py"), "python");
  EXPECT_EQ(*NormalizeLanguage("js"), "javascript");
  EXPECT_EQ(*NormalizeLanguage("bash"), "shell");
  EXPECT_FALSE(NormalizeLanguage("ruby").ok());
  EXPECT_FALSE(NormalizeLanguage("").ok());
}

TEST(RunRequestTest, InputValuesAreJsonWhenTheyParseElseStrings) {
  auto in = ParseInputs({"n=10", "xs=[1,2]", "name=ada", "flag=true", "s=\"q\"", "empty=", "eq=a=b",
                         "o={\"k\":null}"},
                        std::nullopt);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ((*in)["n"], 10);
  EXPECT_EQ((*in)["xs"], json::array({1, 2}));
  EXPECT_EQ((*in)["name"], "ada");
  EXPECT_EQ((*in)["flag"], true);
  EXPECT_EQ((*in)["s"], "q");
  EXPECT_EQ((*in)["empty"], "");
  EXPECT_EQ((*in)["eq"], "a=b");
  EXPECT_EQ((*in)["o"], json({{"k", nullptr}}));
}

TEST(RunRequestTest, InputJsonMergesWithPairs) {
  auto in = ParseInputs({"b=2"}, std::string(R"({"a": [1]})"));
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(*in, json({{"a", {1}}, {"b", 2}}));
}

TEST(RunRequestTest, InputErrors) {
  EXPECT_FALSE(ParseInputs({"novalue"}, std::nullopt).ok());
  EXPECT_FALSE(ParseInputs({"=1"}, std::nullopt).ok());
  EXPECT_FALSE(ParseInputs({"a=1", "a=2"}, std::nullopt).ok());
  EXPECT_FALSE(ParseInputs({"a=1"}, std::string(R"({"a": 0})")).ok());
  EXPECT_FALSE(ParseInputs({}, std::string("[1]")).ok());
  EXPECT_FALSE(ParseInputs({}, std::string("{")).ok());
}

TEST(RunRequestTest, Env) {
  auto env = ParseEnv({"A=1", "B_2=x=y", "EMPTY="});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->at("A"), "1");
  EXPECT_EQ(env->at("B_2"), "x=y");
  EXPECT_EQ(env->at("EMPTY"), "");
  EXPECT_FALSE(ParseEnv({"1A=x"}).ok());
  EXPECT_FALSE(ParseEnv({"A-B=x"}).ok());
  EXPECT_FALSE(ParseEnv({"A"}).ok());
  EXPECT_FALSE(ParseEnv({"A=1", "A=2"}).ok());
}

TEST(RunRequestTest, FileSpec) {
  auto f = ParseFileSpec("data/in.csv");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->local_path, "data/in.csv");
  EXPECT_EQ(f->dest, "in.csv");
  f = ParseFileSpec("/tmp/x.bin:inputs/x.bin");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->local_path, "/tmp/x.bin");
  EXPECT_EQ(f->dest, "inputs/x.bin");
  EXPECT_FALSE(ParseFileSpec("a:").ok());
  EXPECT_FALSE(ParseFileSpec(":b").ok());
  EXPECT_FALSE(ParseFileSpec("a:../b").ok());
  EXPECT_FALSE(ParseFileSpec("a:/etc/passwd").ok());
  EXPECT_FALSE(ParseFileSpec("a:x//y").ok());
}

TEST(RunRequestTest, CheckRelativePath) {
  EXPECT_TRUE(CheckRelativePath("out/a.png").ok());
  EXPECT_FALSE(CheckRelativePath("").ok());
  EXPECT_FALSE(CheckRelativePath("/abs").ok());
  EXPECT_FALSE(CheckRelativePath("a/../../b").ok());
  EXPECT_FALSE(CheckRelativePath("./a").ok());
  EXPECT_FALSE(CheckRelativePath("a/").ok());
  EXPECT_FALSE(CheckRelativePath(std::string("a\0b", 3)).ok());
}

TEST(RunRequestTest, MinimalBodyLeavesDefaultsToTheBroker) {
  RunRequest r;
  r.language = "python";
  r.code = "print(1)";
  EXPECT_EQ(BuildSubmitBody(r),
            json({{"language", "python"}, {"code", "print(1)"}, {"wait", true}}));
}

TEST(RunRequestTest, FullBody) {
  RunRequest r;
  r.language = "shell";
  r.code = "cat in";
  r.session_id = "s1";
  r.conversation_id = "chat:7";
  r.input = {{"n", 1}};
  r.files.push_back({"in", std::string("\x00\xff", 2)});
  r.collect = {"out/*"};
  r.env = {{"A", "b"}};
  r.packages = {"jq"};
  r.network_allow = {"api.github.com:443"};
  r.timeout_ms = 1500;
  r.memory_mb = 64;
  r.cpu_ms = 900;
  r.max_output_bytes = 4096;
  r.max_pids = 8;
  r.wait = false;
  json body = BuildSubmitBody(r);
  EXPECT_EQ(body["session_id"], "s1");
  EXPECT_EQ(body["conversation_id"], "chat:7");
  EXPECT_EQ(body["input"], json({{"n", 1}}));
  EXPECT_EQ(body["files"][0]["path"], "in");
  EXPECT_EQ(*common::Base64Decode(body["files"][0]["content_base64"].get<std::string>()),
            std::string("\x00\xff", 2));
  EXPECT_EQ(body["collect"], json::array({"out/*"}));
  EXPECT_EQ(body["env"], json({{"A", "b"}}));
  EXPECT_EQ(body["packages"], json::array({"jq"}));
  EXPECT_EQ(body["network"], json::array({"api.github.com:443"}));
  RunRequest plain;
  plain.language = "python";
  plain.code = "1";
  EXPECT_FALSE(BuildSubmitBody(plain).contains("network"));
  plain.network = true;
  EXPECT_EQ(BuildSubmitBody(plain)["network"], true);
  EXPECT_EQ(body["limits"], json({{"timeout_ms", 1500},
                                  {"memory_mb", 64},
                                  {"cpu_ms", 900},
                                  {"max_output_bytes", 4096},
                                  {"max_pids", 8}}));
  EXPECT_EQ(body["wait"], false);
}

TEST(RunRequestTest, WaitReadTimeoutCoversTheJobTimeout) {
  EXPECT_EQ(WaitReadTimeout(std::nullopt), std::chrono::seconds(330));
  EXPECT_EQ(WaitReadTimeout(1000), std::chrono::seconds(31));
  EXPECT_EQ(WaitReadTimeout(1001), std::chrono::seconds(32));
  EXPECT_EQ(WaitReadTimeout(300000), std::chrono::seconds(330));
  EXPECT_GT(WaitReadTimeout(UINT64_MAX), std::chrono::seconds(0));
  // Packages are installed before the timeout starts: up to 300 s more.
  EXPECT_EQ(WaitReadTimeout(1000, true), std::chrono::seconds(331));
  EXPECT_EQ(WaitReadTimeout(std::nullopt, true), std::chrono::seconds(630));
}

}  // namespace
}  // namespace kiln::cli
