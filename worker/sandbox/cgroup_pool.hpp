// CgroupPool: a CgroupManager's idle sandbox cgroups, reused by later
// sandboxes instead of a mkdir (and limit writes) in every hierarchy per
// sandbox and an rmdir after it — which also leaves no dying memory cgroup
// behind per job (the kernel keeps a removed one while pages are charged to
// it). Only cgroups of sandboxes that are never frozen come here.
//
//   if (auto cg = pool->Take(limits)) return pool->Lease(std::move(cg));
//   ASSIGN_OR_RETURN(auto fresh, MakeNew(...));  // the driver's own
//   return pool->Lease(std::move(fresh));        // destroying it gives it back
//
// A cgroup is handed out again only when no process is in it (checked as
// it is taken: the last ones of its sandbox may still be exiting when it
// comes back) and once it is reset (ReusableCgroup::Reset) and its limits
// are written; one that fails either is removed. Past kMaxIdle idle ones, a
// returned cgroup is removed.
//
// Thread-safe. The manager calls Clear() before it removes its prefix; a
// lease that outlives the pool removes its cgroup itself.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

#include "worker/sandbox/cgroups.hpp"

namespace kiln::worker::sandbox {

class CgroupPool : public std::enable_shared_from_this<CgroupPool> {
 public:
  static constexpr size_t kMaxIdle = 32;

  // An idle cgroup, empty, reset and with `limits`; null when none is ready
  // (the caller makes a new one).
  std::unique_ptr<ReusableCgroup> Take(const SandboxLimits& limits);
  // `cg` as its sandbox's cgroup; destroying the lease gives it back here.
  std::unique_ptr<SandboxCgroup> Lease(std::unique_ptr<ReusableCgroup> cg);
  // Removes every idle cgroup; what is given back afterwards is removed too.
  void Clear();
  size_t idle() const;

 private:
  class Leased;
  void GiveBack(std::unique_ptr<ReusableCgroup> cg);

  mutable std::mutex mu_;
  std::deque<std::unique_ptr<ReusableCgroup>> idle_;  // oldest first
  bool closed_ = false;
};

}  // namespace kiln::worker::sandbox
