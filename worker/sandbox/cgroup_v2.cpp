// cgroup v2 driver: <mount>/<prefix>/<id> with memory, pids and cpu enabled
// in <prefix>'s subtree_control; cgroup.kill for teardown.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <set>
#include <sstream>

#include "worker/sandbox/cgroup_pool.hpp"
#include "worker/sandbox/cgroups.hpp"
#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/held_file.hpp"

namespace kiln::worker::sandbox {
namespace {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

constexpr uint64_t kCpuPeriodUs = 100000;
const char* const kControllers[] = {"memory", "pids", "cpu"};

std::set<std::string> Words(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string w;
  while (in >> w) out.insert(w);
  return out;
}

class CgroupV2 final : public ReusableCgroup {
 public:
  explicit CgroupV2(std::string dir) : dir_(std::move(dir)) {}
  ~CgroupV2() override { (void)Destroy(); }

  Status Open(uint32_t cpu_millicores) {
    if (::mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST)
      return common::ErrnoStatus("mkdir " + dir_, errno);
    created_ = true;
    UniqueFd fd(::open((dir_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd.valid()) return common::ErrnoStatus("open " + dir_ + "/cgroup.procs", errno);
    join_fds_.push_back(std::move(fd));
    if (PathExists(dir_ + "/cpu.max")) {
      uint64_t quota = static_cast<uint64_t>(cpu_millicores) * kCpuPeriodUs / 1000;
      RETURN_IF_ERROR(WriteFileString(dir_ + "/cpu.max",
                                      std::to_string(quota) + " " + std::to_string(kCpuPeriodUs)));
    }
    if (PathExists(dir_ + "/memory.swap.max"))
      RETURN_IF_ERROR(WriteFileString(dir_ + "/memory.swap.max", "0"));
    // The files read (or written) per execution, opened once (held_file.hpp).
    cpu_stat_ = HeldFile::Open(dir_ + "/cpu.stat", O_RDONLY);
    // Writable since Linux 6.12 (a write resets the peak seen through that
    // descriptor): Reset() needs it so, else the cgroup is not reused.
    mem_peak_ = HeldFile::Open(dir_ + "/memory.peak", O_RDWR);
    if (!mem_peak_.valid() && PathExists(dir_ + "/memory.peak")) {
      mem_peak_ = HeldFile::Open(dir_ + "/memory.peak", O_RDONLY);
      peak_resettable_ = false;
    }
    mem_now_ = HeldFile::Open(dir_ + "/memory.current", O_RDONLY);
    mem_events_ = HeldFile::Open(dir_ + "/memory.events", O_RDONLY);
    freeze_ = HeldFile::Open(dir_ + "/cgroup.freeze", O_WRONLY);
    events_ = HeldFile::Open(dir_ + "/cgroup.events", O_RDONLY);
    return Status::Ok();
  }

  Status SetLimits(const SandboxLimits& limits) override {
    if (PathExists(dir_ + "/memory.max")) {
      RETURN_IF_ERROR(WriteFileString(dir_ + "/memory.max", std::to_string(limits.memory_bytes)));
    }
    if (PathExists(dir_ + "/pids.max")) {
      RETURN_IF_ERROR(WriteFileString(dir_ + "/pids.max", std::to_string(limits.max_pids)));
    }
    return Status::Ok();
  }

  const std::vector<UniqueFd>& join_fds() const override { return join_fds_; }

  CgroupStats Stats(unsigned wanted) const override {
    CgroupStats s;
    if (wanted & stats::kCpu) {
      if (auto us = CpuUsec()) s.cpu_ms = CountedSince(*us, base_.cpu_usec) / 1e3;
    }
    if (wanted & stats::kPeak) s.peak_bytes = mem_peak_.ReadU64Since(base_.memory);
    if (wanted & stats::kCurrent) s.current_bytes = mem_now_.ReadU64Since(base_.memory);
    if (wanted & stats::kOom) s.oom_killed = OomKills() > base_.oom_kills;
    return s;
  }

  bool Empty() const override {
    auto ev = events_.Read();
    return ev.ok() && ParseKeyedU64(*ev, "populated").value_or(1) == 0;
  }

  // The peak is reset (to the memory charged now: page cache the last
  // sandbox left, which its next one may reclaim); the rest becomes the
  // baseline the figures are counted from.
  bool Reset() override {
    if (mem_peak_.valid() && (!peak_resettable_ || !mem_peak_.Write("reset").ok())) return false;
    Baseline b;
    b.cpu_usec = CpuUsec().value_or(0);
    b.memory = mem_now_.ReadU64().value_or(0);
    b.oom_kills = OomKills();
    base_ = b;
    return true;
  }

  Status Freeze(bool frozen, pid_t /*init*/) override {
    RETURN_IF_ERROR(freeze_.Write(frozen ? "1" : "0"));
    if (!frozen) return Status::Ok();
    return WaitUntil(
        [&] {
          auto ev = events_.Read();
          return ev.ok() && ParseKeyedU64(*ev, "frozen").value_or(0) == 1;
        },
        "cgroup v2: " + dir_ + " did not freeze");
  }

  void KillAll() override {
    if (!WriteFileString(dir_ + "/cgroup.kill", "1").ok()) KillCgroupProcs(dir_);
  }

  Status Destroy() override {
    join_fds_.clear();
    for (HeldFile* f : {&cpu_stat_, &mem_peak_, &mem_now_, &mem_events_, &freeze_, &events_}) {
      *f = HeldFile();
    }
    if (!created_) return Status::Ok();
    created_ = false;
    return RemoveCgroupDir(dir_);
  }

 private:
  // Counter values when the cgroup was last reset: zero for a new one.
  struct Baseline {
    uint64_t cpu_usec = 0, memory = 0, oom_kills = 0;
  };
  std::optional<uint64_t> CpuUsec() const {
    auto st = cpu_stat_.Read();
    return st.ok() ? ParseKeyedU64(*st, "usage_usec") : std::nullopt;
  }
  uint64_t OomKills() const {
    auto ev = mem_events_.Read();
    return ev.ok() ? ParseKeyedU64(*ev, "oom_kill").value_or(0) : 0;
  }

  std::string dir_;
  std::vector<UniqueFd> join_fds_;
  HeldFile cpu_stat_, mem_peak_, mem_now_, mem_events_, freeze_, events_;
  bool peak_resettable_ = true;
  Baseline base_;
  bool created_ = false;
};

class CgroupV2Manager final : public CgroupManager {
 public:
  CgroupV2Manager(std::string base, uint32_t millicores)
      : base_(std::move(base)), millicores_(millicores) {}
  // Sandbox cgroups die with their processes; remove our prefix too.
  ~CgroupV2Manager() override {
    pool_->Clear();
    ::rmdir(base_.c_str());
  }
  CgroupV2Manager(const CgroupV2Manager&) = delete;
  CgroupV2Manager& operator=(const CgroupV2Manager&) = delete;
  std::string version() const override { return "v2"; }

  StatusOr<std::unique_ptr<SandboxCgroup>> CreateFor(const std::string& id,
                                                     const SandboxLimits& limits,
                                                     bool freezable) override {
    // Any v2 cgroup can freeze; a pooled one never has (sessions, which
    // freeze, are not pooled: no frozen state to undo on reuse).
    if (!freezable) {
      if (auto cg = pool_->Take(limits)) return pool_->Lease(std::move(cg));
    }
    // A pooled cgroup serves many sandboxes: named for none of them.
    const std::string name =
        freezable ? id : std::to_string(::getpid()) + "-cg" + std::to_string(++made_);
    auto cg = std::make_unique<CgroupV2>(base_ + "/" + name);
    RETURN_IF_ERROR(cg->Open(millicores_).WithContext("cgroup v2"));
    RETURN_IF_ERROR(cg->SetLimits(limits).WithContext("cgroup v2 limits"));
    if (!freezable) return pool_->Lease(std::move(cg));
    return std::unique_ptr<SandboxCgroup>(std::move(cg));
  }

  // Both files are hierarchical; cpu.stat's usage_usec exists even without
  // the cpu controller, memory.current only with memory.
  CgroupUsage Usage() const override {
    CgroupUsage u;
    if (auto bytes = ReadFileU64(base_ + "/memory.current"); bytes.ok()) u.memory_bytes = *bytes;
    if (auto st = ReadFileString(base_ + "/cpu.stat"); st.ok()) {
      if (auto us = ParseKeyedU64(*st, "usage_usec")) u.cpu_seconds = *us / 1e6;
    }
    return u;
  }

  void CleanupStale(const std::function<bool(const std::string&)>& is_stale) override {
    for (const std::string& name : ListSubdirs(base_)) {
      if (!is_stale(name)) continue;
      std::string dir = base_ + "/" + name;
      if (!WriteFileString(dir + "/cgroup.kill", "1").ok()) KillCgroupProcs(dir);
      (void)RemoveCgroupDir(dir);
    }
  }

 private:
  std::string base_;
  uint32_t millicores_;
  std::shared_ptr<CgroupPool> pool_ = std::make_shared<CgroupPool>();
  std::atomic<uint64_t> made_{0};  // pooled cgroups made
};

}  // namespace

StatusOr<std::unique_ptr<CgroupManager>> CreateCgroupV2(const CgroupOptions& options) {
  std::string mount = FindCgroup2Mount();
  if (mount.empty()) return common::Unavailable("cgroup v2: no cgroup2 file system is mounted");
  ASSIGN_OR_RETURN(std::string available, ReadFileString(mount + "/cgroup.controllers"));
  std::set<std::string> have = Words(available);
  std::string missing;
  for (const char* c : kControllers) {
    if (!have.count(c)) missing += std::string(missing.empty() ? "" : ", ") + c;
  }
  if (!missing.empty() && options.require_controllers) {
    std::string avail;
    for (const std::string& w : have) avail += (avail.empty() ? "" : " ") + w;
    return common::Unavailable("cgroup v2 at " + mount + " lacks the controllers: " + missing +
                               " (it has: " + (avail.empty() ? std::string("none") : avail) + ")");
  }
  std::string enable;
  for (const char* c : kControllers) {
    if (have.count(c)) enable += std::string(enable.empty() ? "+" : " +") + c;
  }
  if (!enable.empty()) {
    Status st = WriteFileString(mount + "/cgroup.subtree_control", enable);
    if (!st.ok()) return st.WithContext("cgroup v2: enabling controllers at the root");
  }
  std::string base = mount + "/" + options.prefix;
  if (::mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) {
    return common::ErrnoStatus("cgroup v2: cannot create " + base, errno);
  }
  if (!enable.empty()) {
    Status st = WriteFileString(base + "/cgroup.subtree_control", enable);
    if (!st.ok()) return st.WithContext("cgroup v2: delegating controllers to " + base);
  }
  if (!PathExists(base + "/cgroup.kill")) {
    return common::Unavailable("cgroup v2: cgroup.kill missing (kernel older than 5.14)");
  }
  return std::unique_ptr<CgroupManager>(new CgroupV2Manager(base, options.cpu_millicores));
}

}  // namespace kiln::worker::sandbox
