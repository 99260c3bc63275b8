// UidPool (uid_pool.hpp): host-wide uid locks with flock.
#include "worker/sandbox/uid_pool.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

namespace kiln::worker::sandbox {

common::StatusOr<UidLease> UidPool::Acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  size_t elsewhere = 0;
  for (size_t i = 0; i < used_.size(); ++i) {
    size_t slot = (next_ + i) % used_.size();
    if (used_[slot]) continue;
    const uint32_t uid = base_ + static_cast<uint32_t>(slot);
    std::string path = lock_dir_ + "/" + std::to_string(uid);
    common::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd.valid()) return common::ErrnoStatus("open uid lock " + path, errno);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return common::ErrnoStatus("flock " + path, errno);
      ++elsewhere;  // a sandbox of another worker on this host runs as uid
      continue;
    }
    used_[slot] = true;
    next_ = slot + 1;
    return UidLease{uid, std::move(fd)};
  }
  return common::Unavailable(
      "all sandbox uids are in use" +
      (elsewhere ? " (" + std::to_string(elsewhere) + " of them by other workers on this host)"
                 : std::string()));
}

void UidPool::Release(UidLease lease) {
  std::lock_guard<std::mutex> lock(mu_);
  used_[lease.uid - base_] = false;
  lease.lock.Reset();
}

}  // namespace kiln::worker::sandbox
