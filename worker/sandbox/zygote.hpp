// Zygote: an interpreter that has started once and loaded a runtime's
// wrapper, and forks one sandbox per job, so a job's sandbox costs a fork
// and the contain steps instead of an interpreter start (docs/security.md,
// "Zygote-born sandboxes"; docs/performance.md).
//
//   ASSIGN_OR_RETURN(auto z, Zygote::Start(argv, env, library));
//   ASSIGN_OR_RETURN(ZygoteChild child, z->Spawn(EncodeZygotePlan(...), ZygoteFds(plan)));
//
// The zygote (worker/runtimes/wrappers/python_zygote.py) runs on the host as
// the worker's user, outside every sandbox, and never runs a job's code: it
// only receives plans from the worker over a private socket pair (fd 3) and
// calls libkiln-zygote.so (zygote_child.cpp), whose clone is the worker's
// child (CLONE_PARENT). The sandbox is then a SandboxProcess like any other.
//
// A dedicated thread starts the zygote and stays until the Zygote is
// destroyed: every sandbox's parent-death signal is tied to that thread (the
// zygote's parent, hence its clones'), so keep the Zygote alive as long as
// any sandbox it spawned (LinuxSandboxProcess holds a shared_ptr).
//
// Thread-safe: Spawn() may be called from any thread (one request at a time
// on the socket; the clone answers in well under a millisecond).
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

struct ZygoteChild {
  pid_t pid = -1;
  common::UniqueFd pidfd;
};

class Zygote {
 public:
  // Runs argv + [library] with exactly `env`; waits until it is ready.
  static common::StatusOr<std::shared_ptr<Zygote>> Start(const std::vector<std::string>& argv,
                                                         const std::vector<std::string>& env,
                                                         const std::string& library);
  ~Zygote();  // ends the zygote (its sandboxes get their parent-death signal)

  // One sandbox from `message` (zygote_plan.hpp) and its descriptors: the
  // clone's pid and pidfd, once cloned (its contain steps are still running:
  // the caller waits for its "R" report). UNAVAILABLE when the zygote has
  // died (alive() is false from then on); the zygote's own errors otherwise.
  common::StatusOr<ZygoteChild> Spawn(const std::string& message, const std::vector<int>& fds);
  bool alive() const;
  pid_t pid() const { return pid_; }
  uint64_t spawned() const;

  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;

 private:
  Zygote() = default;
  void Launch(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              common::Status* result);

  mutable std::mutex mu_;
  common::UniqueFd sock_;  // the worker's end of the socket pair
  common::UniqueFd stop_;  // eventfd: the launcher thread ends the zygote when written
  pid_t pid_ = -1;
  common::UniqueFd pidfd_;  // the zygote's; the launcher thread takes it
  bool dead_ = false;
  uint64_t spawned_ = 0;
  std::thread launcher_;
};

}  // namespace kiln::worker::sandbox
