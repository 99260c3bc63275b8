// cgroups: per-sandbox memory (no swap), pids and CPU limits, the usage
// figures reported when a sandbox ends, and the usage of all sandboxes
// together (the prefix cgroup) for the worker's metrics. Two drivers behind
// one small interface: v2 (unified hierarchy, needs memory+pids+cpu
// delegated to our prefix) and v1 (one hierarchy per controller, our prefix
// in each).
//
//   ASSIGN_OR_RETURN(auto manager, CgroupManager::Create(options));
//   CgroupUsage all = manager->Usage();   // e.g. once a second, any thread
//
// A sandbox that is never frozen (one-shot jobs, the warm pool's) gets a
// cgroup that served earlier sandboxes, once it is empty, with its counters
// zeroed or taken as a baseline, instead of a mkdir and limit writes in
// every hierarchy per sandbox and an rmdir after (cgroup_pool.hpp).
//
// Parent side only. The child joins its cgroups itself, before it unshares
// its cgroup namespace, by writing "0" to the pre-opened cgroup.procs
// descriptors of join_fds() (contain.cpp): no sync pipe round trip, and the
// cgroup namespace is then rooted at the sandbox's own cgroup.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "common/unique_fd.hpp"
#include "worker/sandbox/sandbox.hpp"

namespace kiln::worker::sandbox {

struct CgroupStats {
  std::optional<double> cpu_ms;           // user+system of every process that ran in it
  std::optional<uint64_t> peak_bytes;     // high-water mark of charged memory
  std::optional<uint64_t> current_bytes;  // charged now
  bool oom_killed = false;                // the kernel's OOM killer acted in it
};

// Which of CgroupStats' fields a caller wants: each is a file read (or
// two), and a session statement reads its sandbox's counters three times.
namespace stats {
inline constexpr unsigned kCpu = 1, kPeak = 2, kCurrent = 4, kOom = 8;
inline constexpr unsigned kAll = kCpu | kPeak | kCurrent | kOom;
}  // namespace stats

// Every sandbox under <prefix> together (warm, running and session ones),
// from the prefix cgroup's hierarchical counters. A field is unset when the
// host lacks its file (v1 without a cpuacct hierarchy, v2 without memory).
struct CgroupUsage {
  // Charged now: v1 memory.usage_in_bytes, v2 memory.current.
  std::optional<uint64_t> memory_bytes;
  // user+system of everything that ever ran under <prefix>, removed sandboxes
  // included, so it only grows: v1 cpuacct.usage, v2 cpu.stat usage_usec.
  std::optional<double> cpu_seconds;
};

// One sandbox's cgroup(s). Destroy() (or the destructor) removes them, or
// gives them back to their manager's pool for a later sandbox.
class SandboxCgroup {
 public:
  virtual ~SandboxCgroup() = default;
  virtual common::Status SetLimits(const SandboxLimits& limits) = 0;
  // Writable cgroup.procs descriptors (O_CLOEXEC), one per hierarchy.
  virtual const std::vector<common::UniqueFd>& join_fds() const = 0;
  // The fields in `wanted` (stats::k*); the others stay unset.
  virtual CgroupStats Stats(unsigned wanted = stats::kAll) const = 0;
  // Stops (true) or resumes (false) every process in the cgroup; returns
  // once they are all stopped. v2: cgroup.freeze; v1: the freezer hierarchy,
  // joined only by sandboxes created `freezable` (UNAVAILABLE otherwise, or
  // when the host mounts no freezer). v1 leaves `init` (the sandbox's
  // kiln-init: no code of the job's, not dumpable, asleep while its program
  // is stopped) out of the per-process stop, which spares it two wake-ups
  // per session execution; 0: none left out.
  virtual common::Status Freeze(bool frozen, pid_t init = 0) = 0;
  // SIGKILLs every process still in the cgroup (v2: cgroup.kill), frozen
  // ones included.
  virtual void KillAll() = 0;
  // Removes the directories (retrying while the last tasks exit), or gives
  // them back to the pool they came from.
  virtual common::Status Destroy() = 0;
};

// A driver's sandbox cgroup that can serve one sandbox after another
// (CgroupPool). Destroy() removes it for good.
class ReusableCgroup : public SandboxCgroup {
 public:
  // No process is in it (read afresh, not from a held descriptor).
  virtual bool Empty() const = 0;
  // Readies an empty one for its next sandbox: from now on Stats() counts
  // only what runs in it from now (counters zeroed, or their values now
  // taken as the baseline). False when it cannot be (v2's memory.peak is
  // resettable only since Linux 6.12): then it is not reused.
  virtual bool Reset() = 0;
};

struct CgroupOptions {
  std::string mode = "auto";  // auto, v1, v2
  std::string prefix = "kiln";
  uint32_t cpu_millicores = 1000;
  // Tests only: accept a v2 hierarchy without memory/pids/cpu (limits whose
  // files are missing are skipped). Never set by the worker.
  bool require_controllers = true;
};

class CgroupManager {
 public:
  virtual ~CgroupManager() = default;
  // Picks and probes the driver; creates <prefix> in each hierarchy. The
  // error names what is missing (controller, mount, permission).
  static common::StatusOr<std::unique_ptr<CgroupManager>> Create(const CgroupOptions& options);

  virtual std::string version() const = 0;  // "v1" or "v2"
  // `freezable`: v1 also joins the freezer hierarchy (one more attach per
  // spawn, so only for sandboxes that are frozen: sessions). A sandbox that
  // is not gets an idle cgroup of the pool when one is ready (named
  // <pid>-cg<n>, not after `id`).
  virtual common::StatusOr<std::unique_ptr<SandboxCgroup>> CreateFor(const std::string& id,
                                                                     const SandboxLimits& limits,
                                                                     bool freezable) = 0;
  // Reads one or two small files of <prefix>; only reads, so any thread may
  // call it while others create sandboxes.
  virtual CgroupUsage Usage() const = 0;
  // Kills and removes sub-cgroups of <prefix> for which is_stale(name) holds.
  virtual void CleanupStale(const std::function<bool(const std::string&)>& is_stale) = 0;
};

// Internal to the drivers.
common::StatusOr<std::unique_ptr<CgroupManager>> CreateCgroupV1(const CgroupOptions& options);
common::StatusOr<std::unique_ptr<CgroupManager>> CreateCgroupV2(const CgroupOptions& options);
// The cgroup2 mount point, or "" if none.
std::string FindCgroup2Mount();
// rmdir with retries while the cgroup still has exiting tasks (EBUSY).
common::Status RemoveCgroupDir(const std::string& dir);
// SIGKILLs every pid listed in <dir>/cgroup.procs.
void KillCgroupProcs(const std::string& dir);
// Sends `sig` to every pid listed in <dir>/cgroup.procs but `spare`, in
// the order listed (v1: ascending), or from the last to the first with
// newest_first.
void SignalCgroupProcs(const std::string& dir, int sig, bool newest_first = false, pid_t spare = 0);
// Polls `done` (every 50 us for the first millisecond, then every
// millisecond) for up to 2 s: OK once it holds, else INTERNAL with `what`.
common::Status WaitUntil(const std::function<bool()>& done, const std::string& what);
// A counter's growth since `base` (a pooled cgroup's baseline; 0 when new).
inline uint64_t CountedSince(uint64_t now, uint64_t base) { return now > base ? now - base : 0; }
// Names of the immediate sub-directories of dir.
std::vector<std::string> ListSubdirs(const std::string& dir);

}  // namespace kiln::worker::sandbox
