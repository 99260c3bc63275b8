// cgroup v1 driver: one directory per hierarchy (memory, pids, cpu, cpuacct;
// hierarchies that co-mount several controllers are joined once).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>

#include "worker/sandbox/cgroup_pool.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/held_file.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

constexpr uint64_t kCfsPeriodUs = 100000;

struct V1Paths {
  // <mount>/<prefix>; cpuacct and freezer may be "" (not mounted)
  std::string memory, pids, cpu, cpuacct, freezer;
};

class CgroupV1 final : public ReusableCgroup {
 public:
  CgroupV1(std::vector<std::string> dirs, const V1Paths& base, const std::string& id,
           bool freezable)
      : dirs_(std::move(dirs)),
        memory_(base.memory + "/" + id),
        pids_(base.pids + "/" + id),
        cpu_(base.cpu + "/" + id),
        cpuacct_(base.cpuacct.empty() ? "" : base.cpuacct + "/" + id),
        freezer_(base.freezer.empty() || !freezable ? "" : base.freezer + "/" + id) {}
  ~CgroupV1() override { (void)Destroy(); }

  Status Open(uint32_t cpu_millicores) {
    for (const std::string& dir : dirs_) {
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return common::ErrnoStatus("mkdir " + dir, errno);
      created_ = true;
      UniqueFd fd(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd.valid()) return common::ErrnoStatus("open " + dir + "/cgroup.procs", errno);
      join_fds_.push_back(std::move(fd));
    }
    uint64_t quota = static_cast<uint64_t>(cpu_millicores) * kCfsPeriodUs / 1000;
    RETURN_IF_ERROR(WriteFileString(cpu_ + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs)));
    RETURN_IF_ERROR(WriteFileString(cpu_ + "/cpu.cfs_quota_us", std::to_string(quota)));
    has_memsw_ = PathExists(memory_ + "/memory.memsw.limit_in_bytes");
    (void)WriteFileString(memory_ + "/memory.swappiness", "0");
    // The files read (or written) per execution, opened once (held_file.hpp).
    if (!cpuacct_.empty()) cpu_usage_ = HeldFile::Open(cpuacct_ + "/cpuacct.usage", O_RDONLY);
    mem_peak_ = HeldFile::Open(memory_ + "/memory.max_usage_in_bytes", O_RDWR);  // Reset writes it
    mem_now_ = HeldFile::Open(memory_ + "/memory.usage_in_bytes", O_RDONLY);
    oom_control_ = HeldFile::Open(memory_ + "/memory.oom_control", O_RDONLY);
    // Not cgroup.procs: v1 serves a list it built for the open file while
    // that stays open (and is read at least once a second), missing the
    // processes started since.
    if (!freezer_.empty()) freezer_state_ = HeldFile::Open(freezer_ + "/freezer.state", O_RDWR);
    return Status::Ok();
  }

  Status SetLimits(const SandboxLimits& limits) override {
    std::string mem = std::to_string(limits.memory_bytes);
    // memsw >= limit at all times: raise memsw first when growing, after when shrinking.
    if (has_memsw_) (void)WriteFileString(memory_ + "/memory.memsw.limit_in_bytes", mem);
    RETURN_IF_ERROR(WriteFileString(memory_ + "/memory.limit_in_bytes", mem));
    if (has_memsw_) RETURN_IF_ERROR(WriteFileString(memory_ + "/memory.memsw.limit_in_bytes", mem));
    RETURN_IF_ERROR(WriteFileString(pids_ + "/pids.max", std::to_string(limits.max_pids)));
    return Status::Ok();
  }

  const std::vector<UniqueFd>& join_fds() const override { return join_fds_; }

  CgroupStats Stats(unsigned wanted) const override {
    CgroupStats s;
    if ((wanted & stats::kCpu) && cpu_usage_.valid()) {
      if (auto ns = cpu_usage_.ReadU64(); ns.ok()) s.cpu_ms = CountedSince(*ns, base_.cpu_ns) / 1e6;
    }
    if (wanted & stats::kPeak) s.peak_bytes = mem_peak_.ReadU64Since(base_.memory);
    if (wanted & stats::kCurrent) s.current_bytes = mem_now_.ReadU64Since(base_.memory);
    if (!(wanted & stats::kOom)) return s;
    if (auto oom = oom_control_.Read(); oom.ok()) {
      auto kills = ParseKeyedU64(*oom, "oom_kill");
      if (kills.has_value()) {
        s.oom_killed = *kills > base_.oom_kills;
      } else if (auto fail = ReadFileU64(memory_ + "/memory.failcnt"); fail.ok()) {
        s.oom_killed = *fail > base_.failcnt;  // old kernels: the limit was hit at least once
      }
    }
    return s;
  }

  bool Empty() const override {
    // pids_: every process of the sandbox joined every hierarchy.
    auto procs = ReadFileString(pids_ + "/cgroup.procs");
    return procs.ok() && procs->find_first_not_of(" \n") == std::string::npos;
  }

  // The high-water mark is reset (to the memory charged now: page cache the
  // last sandbox left, which its next one may reclaim); the rest becomes
  // the baseline the figures are counted from.
  bool Reset() override {
    if (!mem_peak_.Write("0").ok()) return false;
    Baseline b;
    if (cpu_usage_.valid()) b.cpu_ns = cpu_usage_.ReadU64().value_or(0);
    b.memory = mem_now_.ReadU64().value_or(0);
    if (auto oom = oom_control_.Read(); oom.ok()) {
      b.oom_kills = ParseKeyedU64(*oom, "oom_kill").value_or(0);
    }
    b.failcnt = ReadFileU64(memory_ + "/memory.failcnt").value_or(0);
    base_ = b;
    return true;
  }

  // A task frozen by the v1 freezer does not die of SIGKILL until thawed: a
  // sandbox left frozen by a worker that died (its parent-death SIGKILL
  // pending) would live on, holding memory and a uid the host believes
  // free. So the freezer only makes the stop atomic: frozen, every process
  // gets SIGSTOP (none can fork meanwhile), then the cgroup is thawed and
  // each stops before running another instruction of its own. Stopped
  // processes die of SIGKILL. Resuming is SIGCONT to each (none forked).
  // `init` gets neither signal: it only waits for signals of its own, and
  // each would wake it for nothing (it is frozen for the atomic moment only).
  Status Freeze(bool frozen, pid_t init) override {
    if (freezer_.empty()) return common::Unavailable("cgroup v1: no freezer for this sandbox");
    if (!frozen) {
      // Newest first: a parent resumes after the children it may wait for.
      SignalCgroupProcs(freezer_, SIGCONT, /*newest_first=*/true, init);
      return Status::Ok();
    }
    RETURN_IF_ERROR(freezer_state_.Write("FROZEN"));
    Status st = WaitUntil(
        [&] {
          auto state = freezer_state_.Read();
          return state.ok() && state->rfind("FROZEN", 0) == 0;
        },
        "cgroup v1: " + freezer_ + " did not freeze");
    if (st.ok()) SignalCgroupProcs(freezer_, SIGSTOP, /*newest_first=*/false, init);
    // Thawed, each task returns into the kernel's signal path it was frozen
    // in (or from a syscall that now sees the pending signal) and stops
    // there: no waiting for it, and SIGKILL works on it from here on.
    RETURN_IF_ERROR(freezer_state_.Write("THAWED"));
    return st;
  }

  void KillAll() override {
    KillCgroupProcs(pids_);
    if (!freezer_.empty()) (void)freezer_state_.Write("THAWED");
  }

  Status Destroy() override {
    join_fds_.clear();
    for (HeldFile* f : {&cpu_usage_, &mem_peak_, &mem_now_, &oom_control_, &freezer_state_}) {
      *f = HeldFile();
    }
    if (!created_) return Status::Ok();
    Status first;
    for (const std::string& dir : dirs_) {
      Status st = RemoveCgroupDir(dir);
      if (!st.ok() && first.ok()) first = st;
    }
    created_ = false;
    return first;
  }

 private:
  // Counter values when the cgroup was last reset: zero for a new one.
  struct Baseline {
    uint64_t cpu_ns = 0, memory = 0, oom_kills = 0, failcnt = 0;
  };

  std::vector<std::string> dirs_;  // distinct hierarchy dirs of this sandbox
  std::string memory_, pids_, cpu_, cpuacct_, freezer_;
  std::vector<UniqueFd> join_fds_;
  HeldFile cpu_usage_, mem_peak_, mem_now_, oom_control_, freezer_state_;
  Baseline base_;
  bool has_memsw_ = false;
  bool created_ = false;
};

class CgroupV1Manager final : public CgroupManager {
 public:
  CgroupV1Manager(V1Paths base, uint32_t millicores)
      : base_(std::move(base)), millicores_(millicores) {
    KeepFreezerActive();
  }
  // Every sandbox cgroup is gone by now (they die with their processes):
  // remove our prefix too, so a stopped worker leaves no trace.
  ~CgroupV1Manager() override {
    pool_->Clear();
    if (!keeper_.empty()) {
      (void)WriteFileString(keeper_ + "/freezer.state", "THAWED");
      ::rmdir(keeper_.c_str());
    }
    for (const std::string* b :
         {&base_.memory, &base_.pids, &base_.cpu, &base_.cpuacct, &base_.freezer}) {
      if (!b->empty()) ::rmdir(b->c_str());
    }
  }
  CgroupV1Manager(const CgroupV1Manager&) = delete;
  CgroupV1Manager& operator=(const CgroupV1Manager&) = delete;

  std::string version() const override { return "v1"; }

  StatusOr<std::unique_ptr<SandboxCgroup>> CreateFor(const std::string& id,
                                                     const SandboxLimits& limits,
                                                     bool freezable) override {
    if (!freezable) {
      if (auto cg = pool_->Take(limits)) return pool_->Lease(std::move(cg));
    }
    // A pooled cgroup serves many sandboxes: named for none of them.
    const std::string name =
        freezable ? id : std::to_string(::getpid()) + "-cg" + std::to_string(++made_);
    std::vector<std::string> dirs;
    for (const std::string* b :
         {&base_.memory, &base_.pids, &base_.cpu, &base_.cpuacct, &base_.freezer}) {
      if (b->empty() || (b == &base_.freezer && !freezable)) continue;
      std::string dir = *b + "/" + name;
      bool dup = false;
      for (const auto& d : dirs) dup = dup || d == dir;
      if (!dup) dirs.push_back(dir);
    }
    auto cg = std::make_unique<CgroupV1>(std::move(dirs), base_, name, freezable);
    RETURN_IF_ERROR(cg->Open(millicores_).WithContext("cgroup v1"));
    RETURN_IF_ERROR(cg->SetLimits(limits).WithContext("cgroup v1 limits"));
    if (!freezable) return pool_->Lease(std::move(cg));
    return std::unique_ptr<SandboxCgroup>(std::move(cg));
  }

  // Memory is hierarchical (see Create) and cpuacct charges every ancestor
  // as it goes: the prefix's figures cover all its sandboxes.
  CgroupUsage Usage() const override {
    CgroupUsage u;
    if (auto bytes = ReadFileU64(base_.memory + "/memory.usage_in_bytes"); bytes.ok())
      u.memory_bytes = *bytes;
    if (!base_.cpuacct.empty()) {
      if (auto ns = ReadFileU64(base_.cpuacct + "/cpuacct.usage"); ns.ok())
        u.cpu_seconds = *ns / 1e9;
    }
    return u;
  }

  void CleanupStale(const std::function<bool(const std::string&)>& is_stale) override {
    // Thawed first: a frozen task dies of SIGKILL only once thawed.
    if (!base_.freezer.empty()) {
      for (const std::string& name : ListSubdirs(base_.freezer)) {
        if (is_stale(name))
          (void)WriteFileString(base_.freezer + "/" + name + "/freezer.state", "THAWED");
      }
    }
    for (const std::string* b :
         {&base_.pids, &base_.memory, &base_.cpu, &base_.cpuacct, &base_.freezer}) {
      if (b->empty()) continue;
      for (const std::string& name : ListSubdirs(*b)) {
        if (!is_stale(name)) continue;
        KillCgroupProcs(*b + "/" + name);
        (void)RemoveCgroupDir(*b + "/" + name);
      }
    }
  }

 private:
  // The kernel patches its code on every CPU (a static key, with IPIs) when
  // the first v1 cgroup starts freezing and when the last one thaws. Each
  // session freezes and thaws its cgroup after every execution, so on an
  // otherwise unfrozen host that happened twice per execution (keeping the
  // key on gave 9% more session statements per second on a 2-core host,
  // docs/performance.md). An empty cgroup that stays frozen keeps it on:
  // the patching never happens. Best effort; named like a sandbox of this process, so a later
  // worker's CleanupStale removes one left by a crash.
  void KeepFreezerActive() {
    if (base_.freezer.empty()) return;
    std::string dir = base_.freezer + "/" + std::to_string(::getpid()) + "-freezer-keeper";
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return;
    if (!WriteFileString(dir + "/freezer.state", "FROZEN").ok()) {
      ::rmdir(dir.c_str());
      return;
    }
    keeper_ = std::move(dir);
  }

  V1Paths base_;
  uint32_t millicores_;
  std::string keeper_;  // "" when there is none
  std::shared_ptr<CgroupPool> pool_ = std::make_shared<CgroupPool>();
  std::atomic<uint64_t> made_{0};  // pooled cgroups made
};

}  // namespace

StatusOr<std::unique_ptr<CgroupManager>> CreateCgroupV1(const CgroupOptions& options) {
  std::map<std::string, std::string> mounts;  // controller -> mount point
  for (const MountInfo& m : ReadMountInfo()) {
    if (m.fs_type != "cgroup") continue;
    size_t pos = 0;
    const std::string& o = m.super_options;
    while (pos <= o.size()) {
      size_t comma = o.find(',', pos);
      if (comma == std::string::npos) comma = o.size();
      std::string opt = o.substr(pos, comma - pos);
      if (!mounts.count(opt)) mounts[opt] = m.mount_point;
      pos = comma + 1;
    }
  }
  V1Paths base;
  for (const char* ctrl : {"memory", "pids", "cpu"}) {
    if (!mounts.count(ctrl)) {
      return common::Unavailable(std::string("cgroup v1: no '") + ctrl + "' hierarchy is mounted");
    }
  }
  base.memory = mounts["memory"] + "/" + options.prefix;
  base.pids = mounts["pids"] + "/" + options.prefix;
  base.cpu = mounts["cpu"] + "/" + options.prefix;
  if (mounts.count("cpuacct")) base.cpuacct = mounts["cpuacct"] + "/" + options.prefix;
  if (mounts.count("freezer")) base.freezer = mounts["freezer"] + "/" + options.prefix;
  for (const std::string* b : {&base.memory, &base.pids, &base.cpu, &base.cpuacct, &base.freezer}) {
    if (b->empty()) continue;
    if (::mkdir(b->c_str(), 0755) != 0 && errno != EEXIST) {
      return common::ErrnoStatus("cgroup v1: cannot create " + *b, errno);
    }
    if (::access((*b + "/cgroup.procs").c_str(), W_OK) != 0) {
      return common::ErrnoStatus("cgroup v1: cannot write " + *b + "/cgroup.procs", errno);
    }
  }
  // So that the prefix's memory.usage_in_bytes includes its sandboxes: the
  // only mode since Linux 5.11; older kernels take it while it has no children.
  (void)WriteFileString(base.memory + "/memory.use_hierarchy", "1");
  if (!PathExists(base.memory + "/memory.limit_in_bytes")) {
    return common::Unavailable("cgroup v1: memory.limit_in_bytes missing under " + base.memory);
  }
  return std::unique_ptr<CgroupManager>(new CgroupV1Manager(base, options.cpu_millicores));
}

}  // namespace kiln::worker::sandbox
