// UidPool: the sandbox uids one worker may hand out, exclusive on the host.
//
//   UidPool pool(base, count, "/run/kiln-uids");
//   ASSIGN_OR_RETURN(UidLease lease, pool.Acquire());   // lease.uid is ours
//   ...
//   pool.Release(std::move(lease));   // after every process of the sandbox is gone
//
// Each live sandbox holds one uid of [base, base+count); uid == gid. A uid
// is this pool's to hand out while it holds the uid's lock file on the host
// (flock, released when the sandbox ends or the worker dies, taking its
// sandboxes with it): other workers' pools skip it. Used by every isolation
// level's Sandbox; thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

struct UidLease {
  uint32_t uid = 0;
  common::UniqueFd lock;
};

class UidPool {
 public:
  UidPool(uint32_t base, uint32_t count, std::string lock_dir)
      : base_(base), used_(count, false), lock_dir_(std::move(lock_dir)) {}

  common::StatusOr<UidLease> Acquire();
  // Closing the lock frees the uid for the whole host.
  void Release(UidLease lease);

 private:
  std::mutex mu_;
  uint32_t base_;
  std::vector<bool> used_;
  std::string lock_dir_;
  size_t next_ = 0;
};

}  // namespace kiln::worker::sandbox
