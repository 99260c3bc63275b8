#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "cli/mcp/stdio_server.hpp"
#include "tests/unit/cli/fake_backend.hpp"

namespace kiln::cli::mcp {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A StdioServer on two pipes, run on its own thread.
class Harness {
 public:
  explicit Harness(Backend* backend, int parallel = 4) {
    auto server = McpServer::Create(backend);
    EXPECT_TRUE(server.ok());
    server_ = std::move(*server);
    EXPECT_EQ(pipe2(in_, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out_, O_CLOEXEC), 0);
    stdio_ = std::make_unique<StdioServer>(server_.get(), in_[0], out_[1], parallel);
    thread_ = std::thread([this] { status_ = stdio_->Run(); });
  }
  ~Harness() {
    CloseInput();
    if (thread_.joinable()) thread_.join();
    close(in_[0]);
    close(out_[0]);
    close(out_[1]);
  }
  void Write(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = write(in_[1], bytes.data() + done, bytes.size() - done);
      ASSERT_GT(n, 0);
      done += static_cast<size_t>(n);
    }
  }
  void CloseInput() {
    if (in_[1] >= 0) close(in_[1]);
    in_[1] = -1;
  }
  // The next response line, decoded.
  json Read() {
    while (true) {
      auto nl = buffered_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return json::parse(line);
      }
      char buf[4096];
      ssize_t n = read(out_[0], buf, sizeof buf);
      if (n <= 0) return nullptr;
      buffered_.append(buf, static_cast<size_t>(n));
    }
  }
  common::Status Finish() {
    CloseInput();
    thread_.join();
    return status_;
  }

 private:
  std::unique_ptr<McpServer> server_;
  int in_[2] = {-1, -1};
  int out_[2] = {-1, -1};
  std::unique_ptr<StdioServer> stdio_;
  std::thread thread_;
  common::Status status_;
  std::string buffered_;
};

std::string Line(const json& j) { return j.dump() + "\n"; }

json Request(int id, const std::string& method, json params = json::object()) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

json Execute(int id, const std::string& code) {
  return Request(
      id, "tools/call",
      {{"name", "execute_code"}, {"arguments", {{"runtime", "python"}, {"code", code}}}});
}

TEST(StdioServerTest, AnswersLinesSplitAnywhere) {
  FakeBackend backend;
  Harness h(&backend);
  std::string bytes = Line(Request(1, "initialize", {{"protocolVersion", "2025-06-18"}})) +
                      "\n   \n" + Line(Request(2, "ping"));
  for (char c : bytes) h.Write(std::string(1, c));
  EXPECT_EQ(h.Read()["id"], 1);
  EXPECT_EQ(h.Read()["result"], json::object());
  h.Write("{bad json\n");
  json e = h.Read();
  EXPECT_EQ(e["error"]["code"], kParseError);
  EXPECT_TRUE(e["id"].is_null());
  h.Write(Request(3, "ping").dump());  // the last line, without "\n"
  EXPECT_TRUE(h.Finish().ok());
  EXPECT_EQ(h.Read()["id"], 3);
}

TEST(StdioServerTest, ASlowCallDoesNotHoldUpOthers) {
  FakeBackend backend;
  backend.submit_answer = json{{"echo", true}};
  backend.submit_delay = std::chrono::milliseconds(800);
  Harness h(&backend);
  h.Write(Line(Request(1, "initialize", {{"protocolVersion", "2025-06-18"}})));
  EXPECT_EQ(h.Read()["id"], 1);
  auto start = Clock::now();
  h.Write(Line(Execute(2, "slow")) + Line(Request(3, "ping")));
  EXPECT_EQ(h.Read()["id"], 3);  // the ping overtakes the execution
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(700));
  json r = h.Read();
  EXPECT_EQ(r["id"], 2);
  EXPECT_EQ(r["result"]["structuredContent"]["stdout"], "slow");
}

TEST(StdioServerTest, CallsRunInParallelAndAllAreAnsweredAtEof) {
  FakeBackend backend;
  backend.submit_answer = json{{"echo", true}};
  backend.submit_delay = std::chrono::milliseconds(500);
  Harness h(&backend, /*parallel=*/4);
  h.Write(Line(Request(1, "initialize", {{"protocolVersion", "2025-06-18"}})));
  EXPECT_EQ(h.Read()["id"], 1);
  auto start = Clock::now();
  for (int i = 0; i < 8; ++i) h.Write(Line(Execute(10 + i, "c" + std::to_string(i))));
  EXPECT_TRUE(h.Finish().ok());  // returns only after every call was answered
  auto took = Clock::now() - start;
  std::set<int> ids;
  for (int i = 0; i < 8; ++i) {
    json r = h.Read();
    ASSERT_TRUE(r.is_object());
    int id = r["id"];
    EXPECT_EQ(r["result"]["structuredContent"]["stdout"], "c" + std::to_string(id - 10));
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 8u);
  // 8 calls of 0.5 s, 4 at a time: about 1 s, not 4 s.
  EXPECT_LT(took, std::chrono::milliseconds(2500));
  EXPECT_GE(took, std::chrono::milliseconds(950));
}

TEST(StdioServerTest, AnOverlongLineIsRefusedAndSkipped) {
  FakeBackend backend;
  Harness h(&backend);
  std::thread writer([&] {
    std::string big = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"" +
                      std::string(StdioServer::kMaxLineBytes, 'a') + "\"}}\n";
    h.Write(big);
    h.Write(Line(Request(2, "ping")));
  });
  json refused = h.Read();
  EXPECT_EQ(refused["error"]["code"], kInvalidRequest);
  EXPECT_TRUE(refused["id"].is_null());
  EXPECT_EQ(h.Read()["id"], 2);
  writer.join();
}

}  // namespace
}  // namespace kiln::cli::mcp
