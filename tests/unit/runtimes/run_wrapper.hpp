// RunWrapper: runs a Runtime's one-shot launch for real, without a sandbox, the
// way a warm sandbox would: fds 0-3 are pipes (frame in, stdout, stderr,
// control out), the environment is exactly Launch::env, cwd is a fresh temp dir.
//
//   RunOutput out = RunWrapper(runtime, *runtime.EncodeJob("print(1)", "", {}));
//   EXPECT_EQ(out.stdout_data, "1\n");
//
// Test-only; one call at a time per thread. A run that outlives `timeout` is
// killed and reported with timed_out, so a wrapper bug cannot hang ctest.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "worker/runtimes/runtime.hpp"

namespace kiln::worker::runtimes::testing {

struct RunOutput {
  int exit_status = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string stdout_data;
  std::string stderr_data;
  std::string control;  // everything written to fd 3
};

RunOutput RunWrapper(const Runtime& runtime, std::string_view frame,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace kiln::worker::runtimes::testing
