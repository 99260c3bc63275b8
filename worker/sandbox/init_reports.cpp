// InitReports (init_reports.hpp).
#include "worker/sandbox/init_reports.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln::worker::sandbox {

void InitReports::ReadFrom(int fd) {
  char rec[5];
  while (fd >= 0 && ::read(fd, rec, sizeof rec) == sizeof rec) {
    int value;
    std::memcpy(&value, rec + 1, sizeof value);
    if (rec[0] == 'E') exec_errno = value;
    if (rec[0] == 'X') program_status = value;
    if (rec[0] == 'A') limits_ack = value;
  }
}

void InitReports::ApplyTo(ExitStatus* st) const {
  if (!program_status) return;
  st->exit_code.reset();
  st->signal.reset();
  if (WIFEXITED(*program_status)) {
    st->exit_code = WEXITSTATUS(*program_status);
  } else if (WIFSIGNALED(*program_status)) {
    st->signal = WTERMSIG(*program_status);
  }
}

common::Status CannotExecute(const std::string& program, int err) {
  return common::Status(
      err == ENOENT || err == EACCES ? common::Code::kRuntimeUnavailable : common::Code::kInternal,
      "sandbox setup failed at step 'execve' on " + program + ": " + std::strerror(err));
}

}  // namespace kiln::worker::sandbox
