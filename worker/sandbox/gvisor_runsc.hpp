// Running runsc for the gVisor level: the vfork'd child that execs it (in
// the sandbox's cgroups, with its own stdio), the short runsc commands run
// to their end (kill, pause, resume), and the tail of runsc's log for error
// messages. Only gvisor_sandbox.cpp calls these; any thread may.
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::worker::sandbox {

// The runsc child: its own descriptor table, the cgroups, a session of its
// own; dies with the worker. Runs on the vfork stack: no allocation. Exit
// status 120-124: one of its steps failed (runsc never ran).
struct RunscPlan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int stdio[3] = {-1, -1, -1};
  const int* cgroup_fds = nullptr;
  int cgroup_fd_count = 0;
};

// The child's entry point: CloneVforked(flags, StartRunsc, &plan, &pidfd).
int StartRunsc(void* arg);

// Runs a short runsc command (kill, pause, resume) to its end; OK when it
// exited 0. One that takes longer than kRunscCommandTimeoutMs (a wedged
// Sentry) is killed and fails.
constexpr int kRunscCommandTimeoutMs = 10000;
common::Status RunRunsc(const std::vector<std::string>& args);

// The last lines of runsc's log: why a sandbox did not start.
std::string LogTail(const std::string& path);

}  // namespace kiln::worker::sandbox
