#include "broker/api/submit_request.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln::broker
