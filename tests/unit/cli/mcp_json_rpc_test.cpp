#include <gtest/gtest.h>

#include "cli/mcp/json_rpc.hpp"

namespace kiln::cli::mcp {
namespace {

using nlohmann::json;

TEST(JsonRpcTest, Requests) {
  auto d = DecodeLine(R"({"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":null}})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.message->kind, Message::Kind::kRequest);
  EXPECT_EQ(d.message->id, 7);
  EXPECT_EQ(d.message->method, "tools/list");
  EXPECT_TRUE(d.message->params.contains("cursor"));
  d = DecodeLine("{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"ping\"}\r");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.message->id, "abc");
  EXPECT_TRUE(d.message->params.is_object());
}

TEST(JsonRpcTest, NotificationsAndResponses) {
  auto d = DecodeLine(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.message->kind, Message::Kind::kNotification);
  d = DecodeLine(R"({"jsonrpc":"2.0","method":"notifications/x","params":[1]})");
  ASSERT_TRUE(d.ok());  // bad params on a notification: still never answered
  d = DecodeLine(R"({"jsonrpc":"2.0","id":1,"result":{}})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.message->kind, Message::Kind::kResponse);
}

TEST(JsonRpcTest, ParseErrors) {
  for (const char* line :
       {"", "{", "not json", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\""}) {
    auto d = DecodeLine(line);
    ASSERT_FALSE(d.ok()) << line;
    EXPECT_EQ(d.error.code, kParseError) << line;
    EXPECT_TRUE(d.error_id.is_null());
  }
}

TEST(JsonRpcTest, InvalidRequests) {
  struct Case {
    const char* line;
    int code;
    json id;
  };
  for (const Case& c : std::vector<Case>{
           {"[]", kInvalidRequest, nullptr},
           {R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])", kInvalidRequest, nullptr},
           {"42", kInvalidRequest, nullptr},
           {R"({"id":1,"method":"ping"})", kInvalidRequest, 1},
           {R"({"jsonrpc":"1.0","id":1,"method":"ping"})", kInvalidRequest, 1},
           {R"({"jsonrpc":"2.0","id":null,"method":"ping"})", kInvalidRequest, nullptr},
           {R"({"jsonrpc":"2.0","id":{},"method":"ping"})", kInvalidRequest, nullptr},
           {R"({"jsonrpc":"2.0","id":2,"method":5})", kInvalidRequest, 2},
           {R"({"jsonrpc":"2.0","id":3})", kInvalidRequest, 3},
           {R"({"jsonrpc":"2.0","id":4,"method":"ping","params":[1]})", kInvalidParams, 4},
       }) {
    auto d = DecodeLine(c.line);
    ASSERT_FALSE(d.ok()) << c.line;
    EXPECT_EQ(d.error.code, c.code) << c.line;
    EXPECT_EQ(d.error_id, c.id) << c.line;
  }
}

TEST(JsonRpcTest, Encoding) {
  std::string line = EncodeLine(ResultResponse(1, {{"a", "x\ny"}}));
  EXPECT_EQ(line, "{\"id\":1,\"jsonrpc\":\"2.0\",\"result\":{\"a\":\"x\\ny\"}}\n");
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line, whatever the content
  json e = ErrorResponse(nullptr, {kParseError, "Parse error", nullptr});
  EXPECT_TRUE(e["id"].is_null());
  EXPECT_EQ(e["error"]["code"], -32700);
  EXPECT_FALSE(e["error"].contains("data"));
  // Invalid UTF-8 in a string does not break the framing.
  EXPECT_NO_THROW(EncodeLine(ResultResponse(1, {{"s", std::string("\xff\xfe")}})));
}

}  // namespace
}  // namespace kiln::cli::mcp
