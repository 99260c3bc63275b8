// Sample wire messages for the codec's tests and the fuzz smoke test: one of
// each type with every field set, and one of each with only what is required.
//
//   for (const protocol::Message& m : FullMessages()) EXPECT_TRUE(Decode(Encode(m)).ok());
//
// Plain data built on each call; any thread.
#pragma once

#include <string>
#include <vector>

#include "common/protocol/messages.hpp"

namespace kiln::common::protocol::samples {

// Every byte value, so byte-string fields prove they are carried as raw bytes.
inline std::string AllBytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s.push_back(static_cast<char>(i));
  return s;
}

inline Limits FullLimits() {
  return Limits{.timeout_ms = 30000,
                .memory_mb = 256,
                .cpu_ms = 20000,
                .max_output_bytes = 1 << 20,
                .max_pids = 64};
}

// One message of each type, in type-number order, with every field set
// (every optional present, every list non-empty, numbers away from zero).
inline std::vector<Message> FullMessages() {
  return {
      Register{.worker_id = "worker-1",
               .hostname = "host-a.example",
               .runtimes = {"python", "javascript", "shell"},
               .slots = 8,
               .sandbox_layers = {"namespaces", "seccomp", "landlock", "cgroups"},
               .metrics_endpoint = "10.0.0.5:9100",
               .heartbeat_interval_ms = 1000,
               .incarnation = "7f3a9c0e5b2d4e61",
               .held_jobs = {"ex_0123456789", "ex_abc"},
               .isolation = "gvisor",
               .runtime_versions = {{"python", "3.11.2"}, {"shell", "5.2.15(1)-release"}},
               .packages = {"python numpy 1.24.2", "javascript @scope/x 1.0.0"}},
      RegisterAck{.broker_id = "broker-1", .heartbeat_interval_ms = 1000, .heartbeat_liveness = 3},
      Heartbeat{.sender_id = "worker-1", .running = 3, .free_slots = 5, .draining = true},
      Execute{.job_id = "ex_0123456789",
              .tenant = "acme",
              .language = "python",
              .code = "print('hi')\n" + AllBytes(),
              .session_id = "ses_42",
              .session_epoch = 12,
              .session_ttl_ms = 600000,
              .input_json = R"({"a": [1, 2, 3], "b": "\u00e9"})",
              .env = {{"LANG", "C.UTF-8"}, {"MODE", "test"}, {"EMPTY", ""}},
              .files = {{.path = "data/in.bin", .content = AllBytes()},
                        {.path = "empty.txt", .content = ""}},
              .collect = {"out/*.png", "result.csv"},
              .limits = FullLimits(),
              .stream_output = true,
              .secrets = {"hunter2-token", "s3cr3t"},
              .isolation = "gvisor",
              .stdin_data = "line one\nline two\n",
              .packages = {"tabulate==0.9.0", "@types/node@20.1.0"},
              .network_allow = {"api.github.com:443", "*.wikipedia.org:*"},
              .network_max_bytes = 1ull << 26,
              .network_max_connections = 64,
              .tools = {"search", "fetch_page"},
              .tool_timeout_ms = 30000},
      OutputChunk{.job_id = "ex_0123456789",
                  .stream = Stream::kStderr,
                  .seq = 1ull << 40,
                  .offset = 1ull << 33,
                  .data = "partial line\n" + AllBytes()},
      Result{.job_id = "ex_0123456789",
             .reason = EndReason::kSandboxViolation,
             .exit_code = -1,
             .signal = 31,
             .stdout_data = "out\n" + AllBytes(),
             .stderr_data = "err\n",
             .truncated = true,
             .result_json = R"({"answer": 42})",
             .error = ErrorInfo{.type = "ZeroDivisionError",
                                .message = "division by zero",
                                .traceback = "Traceback (most recent call last):\n  ..."},
             .duration_ms = 123.456,
             .cpu_ms = 78.5,
             .max_rss_kb = 45678,
             .files = {{.path = "out/plot.png", .content = AllBytes()}},
             .files_truncated = true,
             .files_omitted = 44,
             .outputs = {{.mime = "text/plain", .data = "42"},
                         {.mime = "image/png", .data = AllBytes()}},
             .outputs_truncated = true,
             .redactions = 2,
             .session_epoch = 7,
             .session_reset = true,
             .worker_error = "sandbox setup failed",
             .network_json = R"({"bytes_in": 10, "connections": 1})"},
      Cancel{.job_id = "ex_0123456789"},
      Disconnect{.reason = "shutting down"},
      CloseSession{.session_id = "ses_42"},
      ResultAck{.job_id = "ex_0123456789"},
      ToolCall{.job_id = "ex_0123456789",
               .call = 3,
               .name = "search",
               .arguments_json = R"({"q":"kiln"})"},
      ToolResult{.job_id = "ex_0123456789",
                 .call = 3,
                 .ok = false,
                 .result_json = "[1,2]",
                 .error_type = "ToolError",
                 .error_message = "not found"},
  };
}

// One message of each type with only the required fields set; everything
// else keeps its default (optionals empty, lists empty).
inline std::vector<Message> MinimalMessages() {
  return {
      Register{.worker_id = "w", .runtimes = {}, .slots = 0},
      RegisterAck{.broker_id = "b"},
      Heartbeat{.sender_id = "s"},
      Execute{.job_id = "j", .tenant = "", .language = "", .code = ""},
      OutputChunk{.job_id = "j"},
      Result{.job_id = "j"},
      Cancel{.job_id = "j"},
      Disconnect{},
      CloseSession{.session_id = "s"},
      ResultAck{.job_id = "j"},
      ToolCall{.job_id = "j"},
      ToolResult{.job_id = "j"},
  };
}

}  // namespace kiln::common::protocol::samples
