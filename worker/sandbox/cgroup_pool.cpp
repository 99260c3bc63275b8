#include "worker/sandbox/cgroup_pool.hpp"

namespace kiln::worker::sandbox {

using common::Status;

class CgroupPool::Leased final : public SandboxCgroup {
 public:
  Leased(std::weak_ptr<CgroupPool> pool, std::unique_ptr<ReusableCgroup> cg)
      : pool_(std::move(pool)), cg_(std::move(cg)) {}
  ~Leased() override { (void)Destroy(); }

  Status SetLimits(const SandboxLimits& limits) override { return cg_->SetLimits(limits); }
  const std::vector<common::UniqueFd>& join_fds() const override { return cg_->join_fds(); }
  CgroupStats Stats(unsigned wanted) const override { return cg_->Stats(wanted); }
  Status Freeze(bool frozen, pid_t init) override { return cg_->Freeze(frozen, init); }
  void KillAll() override { cg_->KillAll(); }
  Status Destroy() override {
    if (!cg_) return Status::Ok();
    std::unique_ptr<ReusableCgroup> cg = std::move(cg_);
    if (auto pool = pool_.lock()) {
      pool->GiveBack(std::move(cg));
      return Status::Ok();
    }
    return cg->Destroy();
  }

 private:
  std::weak_ptr<CgroupPool> pool_;
  std::unique_ptr<ReusableCgroup> cg_;  // null once destroyed
};

std::unique_ptr<ReusableCgroup> CgroupPool::Take(const SandboxLimits& limits) {
  // The oldest first: its last processes have had the longest to exit. A
  // second try, then a new cgroup: never a wait on the spawn's path.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<ReusableCgroup> cg;
    {
      std::lock_guard lock(mu_);
      if (idle_.empty()) return nullptr;
      cg = std::move(idle_.front());
      idle_.pop_front();
    }
    if (!cg->Empty()) {
      GiveBack(std::move(cg));  // still draining: to the back, for later
      continue;
    }
    if (cg->Reset() && cg->SetLimits(limits).ok()) return cg;
    (void)cg->Destroy();
  }
  return nullptr;
}

std::unique_ptr<SandboxCgroup> CgroupPool::Lease(std::unique_ptr<ReusableCgroup> cg) {
  return std::make_unique<Leased>(weak_from_this(), std::move(cg));
}

void CgroupPool::GiveBack(std::unique_ptr<ReusableCgroup> cg) {
  {
    std::lock_guard lock(mu_);
    if (!closed_ && idle_.size() < kMaxIdle) {
      idle_.push_back(std::move(cg));
      return;
    }
  }
  cg->KillAll();
  (void)cg->Destroy();
}

void CgroupPool::Clear() {
  std::deque<std::unique_ptr<ReusableCgroup>> idle;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    idle.swap(idle_);
  }
  for (auto& cg : idle) {
    cg->KillAll();
    (void)cg->Destroy();
  }
}

size_t CgroupPool::idle() const {
  std::lock_guard lock(mu_);
  return idle_.size();
}

}  // namespace kiln::worker::sandbox
