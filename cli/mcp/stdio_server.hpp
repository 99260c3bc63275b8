// StdioServer: carries MCP messages between a McpServer and a pair of file
// descriptors (stdin/stdout for `kiln mcp`), one JSON-RPC message per line.
//
//   StdioServer stdio(server.get(), STDIN_FILENO, STDOUT_FILENO);
//   Status st = stdio.Run();   // returns at EOF on the input
//
// The calling thread reads and answers everything but tools/call itself;
// tools/call requests (which wait for executions) go through a bounded queue
// to `parallel_calls` threads, so a long execution does not hold up pings or
// other calls; their answers may come out of order, as JSON-RPC allows. When
// every call thread is busy and the queue is full, reading pauses. A line over
// kMaxLineBytes is answered with -32600 and skipped. Writes are whole lines
// under a lock. At EOF, calls in flight are answered before Run returns.
// Run is called once, from one thread. Never writes anything but protocol
// messages to `out_fd` (logs go to stderr).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "cli/mcp/json_rpc.hpp"
#include "cli/mcp/mcp_server.hpp"
#include "common/status.hpp"

namespace kiln::cli::mcp {

class StdioServer {
 public:
  static constexpr size_t kMaxLineBytes = 16 << 20;

  StdioServer(McpServer* server, int in_fd, int out_fd, int parallel_calls = 4)
      : server_(server), in_fd_(in_fd), out_fd_(out_fd), parallel_calls_(parallel_calls) {}

  // Serves until EOF on the input (OK) or until reading or writing fails.
  common::Status Run();

 private:
  void OnLine(std::string_view line);
  void Write(const std::string& line);
  void Enqueue(Message message);
  void CallLoop();

  McpServer* server_;
  const int in_fd_;
  const int out_fd_;
  const int parallel_calls_;

  std::mutex write_mu_;
  common::Status write_error_;  // guarded by write_mu_

  std::mutex queue_mu_;
  std::condition_variable queue_changed_;
  std::deque<Message> queue_;  // guarded by queue_mu_; at most parallel_calls_ long
  bool closing_ = false;       // guarded by queue_mu_
};

}  // namespace kiln::cli::mcp
