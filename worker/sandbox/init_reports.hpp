// InitReports: what kiln-init (worker/init/main.cpp) tells the worker over
// its status channel, for every isolation level's SandboxProcess. Records of
// 5 bytes: "E" + errno (the program could not be executed), "X" + its wait
// status (it ended), "A" + errno (the job's rlimits were applied, gVisor).
//
//   InitReports reports;
//   reports.ReadFrom(status_fd);            // non-blocking: whole records so far
//   if (reports.exec_errno) return CannotExecute(program, reports.exec_errno);
//   reports.ApplyTo(&exit_status);          // the program's end, not pid 1's
//
// Not thread-safe: owned by its SandboxProcess.
#pragma once

#include <optional>
#include <string>

#include "common/status.hpp"
#include "worker/sandbox/sandbox.hpp"

namespace kiln::worker::sandbox {

struct InitReports {
  int exec_errno = 0;                 // kiln-init could not execute the program
  std::optional<int> program_status;  // the program's wait status, once it ended
  std::optional<int> limits_ack;      // the last rlimits sent were applied (errno)

  // Takes every whole record readable now from `fd` (non-blocking).
  void ReadFrom(int fd);
  // The program's own exit code or signal instead of pid 1's, when kiln-init
  // saw it end (absent when pid 1 itself was killed: a timeout, a cancel, a
  // violation, the OOM killer).
  void ApplyTo(ExitStatus* st) const;
};

// The program could not be executed: RUNTIME_UNAVAILABLE when it is missing
// or not executable, INTERNAL otherwise.
common::Status CannotExecute(const std::string& program, int err);

}  // namespace kiln::worker::sandbox
