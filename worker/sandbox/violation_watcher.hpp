// ViolationWatcher: the worker's side of the seccomp kill list.
//
// The calls no program may make (kexec, modules, reboot, swap, any foreign
// ABI: seccomp_policy.hpp) do not kill the calling process in the kernel;
// the filter hands them to a user-notification listener instead. A kernel
// kill (SIGSYS) is only visible to the killed process's parent, which is the
// worker for a sandbox's pid 1 but the job's own code for every other
// process: a violation by a child went unreported. Through the listener the
// worker sees a violation by any process of the sandbox, records which call
// it was, and SIGKILLs the sandbox's pid 1 (its pid namespace takes every
// other process with it). The calling thread is blocked in the kernel until
// then and never returns from the call.
//
// One watcher per Sandbox: a thread waiting on every live sandbox's listener
// with epoll. Callers: linux_sandbox_process.cpp (Watch() after each spawn;
// dropping the Watch on teardown).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

class ViolationWatcher {
 public:
  // What one sandbox's listener reported (shared with the watcher thread).
  struct Record {
    common::UniqueFd listener;
    common::UniqueFd pidfd;  // a dup of the sandbox's pid 1
    std::atomic<bool> fired{false};
    std::atomic<int> nr{-1};
    std::atomic<uint32_t> arch{0};
  };

  // Removes its sandbox from the watch when dropped.
  class Watch {
   public:
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    // Whether the sandbox made a call from the kill list (and was killed).
    bool fired() const { return record_->fired.load(); }
    // The call, e.g. "kexec_load", or "a system call of a foreign ABI
    // (arch 0x40000003, nr 11)". Empty while not fired.
    std::string Describe() const;

   private:
    friend class ViolationWatcher;
    Watch(ViolationWatcher* w, uint64_t key, std::shared_ptr<Record> r)
        : watcher_(w), key_(key), record_(std::move(r)) {}
    ViolationWatcher* watcher_;
    uint64_t key_;
    std::shared_ptr<Record> record_;
  };

  static common::StatusOr<std::unique_ptr<ViolationWatcher>> Start();
  ~ViolationWatcher();  // stops the thread; every Watch must be gone first

  // Watches `listener` (a seccomp user-notification fd) for the sandbox
  // whose pid 1 is `pidfd` (borrowed: it is dup'd).
  common::StatusOr<std::unique_ptr<Watch>> Add(common::UniqueFd listener, int pidfd);

 private:
  ViolationWatcher() = default;
  void Run();
  void Handle(uint64_t key, uint32_t events);
  void Remove(uint64_t key);

  common::UniqueFd epoll_, stop_;
  std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Record>> records_;  // guarded by mu_
  uint64_t next_key_ = 1;                                // guarded by mu_
  std::thread thread_;
};

}  // namespace kiln::worker::sandbox
