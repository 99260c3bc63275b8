// MountIntoSandbox: puts a host folder, read-only, at a path inside a running
// sandbox's mount namespace (a job's packages on request at /packages).
//
//   RETURN_IF_ERROR(MountIntoSandbox(pidfd, pid, "/var/cache/kiln/packages/..", "/packages"));
//
// The sandbox's namespaces are private (nothing propagates from the host), so
// the worker clones the folder as a detached mount (open_tree), makes it
// read-only, nosuid and nodev (mount_setattr), and a short-lived child of the
// worker enters the sandbox's mount namespace (setns by pidfd; a
// multi-threaded process cannot) and moves the mount onto `target`, which
// must be a directory of the sandbox's read-only root, after detaching
// whatever was mounted there before. The job cannot undo it: it has no
// capabilities in that namespace. Worker side only; any thread.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.hpp"

namespace kiln::worker::sandbox {

// `pidfd` and `pid` name the sandbox's pid 1, alive (not yet reaped).
common::Status MountIntoSandbox(int pidfd, pid_t pid, const std::string& host_dir,
                                const char* target);

}  // namespace kiln::worker::sandbox
