// ToolChannel: the worker's side of one execution's tool calls (docs/api.md,
// "Tool callbacks"). The sandbox's code writes requests on its fd 6, one
// JSON line each; the channel refuses what the job may not call, sends the
// rest to the broker as protocol::ToolCall, and writes each answer — the
// broker's ToolResult, or a timeout of its own — back as one JSON line.
//
//   ToolChannel tools(job, policy, [&](protocol::ToolCall c) { post(c); });
//   if (!tools.Read(fd, now)) stop_watching();      // POLLIN on the socket
//   tools.OnResult(result);                         // from the ToolMailbox
//   tools.Tick(now);  if (tools.wants_write()) tools.Write(fd);
//
// Everything from the sandbox is hostile: a line over kMaxLine is dropped
// unread (answered with a null id), malformed requests are refused, at most
// kMaxInFlight calls wait at once and kMaxCalls are made per execution, and
// the replies waiting for a sandbox that does not read are bounded
// (kMaxUnwritten: past it the oldest calls' replies are lost, which only
// hurts the code that stopped reading). Arguments pass through the job's
// secrets filter before they leave. The broker is checked too: an answer to
// a call that is not waiting is ignored.
//
// No poll of its own: the ExecutionDriver's loop calls it. One thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.hpp"
#include "common/protocol/messages.hpp"
#include "common/secrets/secrets_filter.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker {

// ToolMailbox: carries the broker's ToolResults from the worker's event loop
// to the job thread running the execution, which polls fd() (an eventfd).
// Post() and Take() are thread-safe.
class ToolMailbox {
 public:
  ToolMailbox();
  int fd() const { return fd_.get(); }
  void Post(common::protocol::ToolResult result);
  std::deque<common::protocol::ToolResult> Take();

 private:
  common::UniqueFd fd_;
  std::mutex mu_;
  std::deque<common::protocol::ToolResult> results_;
};

class ToolChannel {
 public:
  using TimePoint = common::SteadyClock::time_point;
  using SendFn = std::function<void(common::protocol::ToolCall)>;

  static constexpr size_t kMaxCalls = common::protocol::kMaxToolCalls;
  static constexpr size_t kMaxInFlight = common::protocol::kMaxToolCallsWaiting;
  // A request: the arguments' limit and room for the id and name.
  static constexpr size_t kMaxLine = common::protocol::kMaxToolArgumentBytes + 16 * 1024;
  static constexpr size_t kMaxUnwritten = 16u << 20;
  static constexpr uint64_t kDefaultTimeoutMs = 30'000;

  // `job` and `policy` outlive the channel.
  ToolChannel(const common::protocol::Execute& job, const common::SecretsPolicy& policy,
              SendFn send);

  // Reads what the sandbox wrote (a non-blocking socket). False once it is
  // closed or failed: stop watching it.
  bool Read(int fd, TimePoint now);
  // The broker's answer to one of this execution's calls.
  void OnResult(const common::protocol::ToolResult& result);
  // Answers the calls whose time is up with ToolTimeout.
  void Tick(TimePoint now);
  // Writes queued replies (a non-blocking socket); watch POLLOUT while
  // wants_write().
  void Write(int fd);
  bool wants_write() const { return written_ < out_.size(); }
  // When the next call times out, if any waits.
  std::optional<TimePoint> NextDeadline() const;
  // The execution is over: calls still waiting get ToolUnavailable (a
  // session's code may still be blocked in one when it is thawed).
  void Close();

  uint64_t calls() const { return calls_; }
  size_t waiting() const { return waiting_.size(); }

 private:
  struct Waiting {
    std::string id;  // the sandbox's id, as JSON text
    TimePoint deadline;
  };
  void OnLine(std::string_view line, TimePoint now);
  void Reply(std::string_view id, std::string_view body);  // body: `"result":...` or `"error":...`
  void ReplyError(std::string_view id, std::string_view type, std::string_view message);

  const common::protocol::Execute& job_;
  const common::SecretsPolicy& policy_;
  SendFn send_;
  std::chrono::milliseconds timeout_;
  std::string in_;           // an incomplete line
  bool discarding_ = false;  // inside a line over kMaxLine
  std::string out_;          // replies not yet written
  size_t written_ = 0;       // of out_
  uint64_t calls_ = 0;
  std::map<uint64_t, Waiting> waiting_;  // by call number
};

}  // namespace kiln::worker
