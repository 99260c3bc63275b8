#include "worker/sandbox/rlimits.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "worker/sandbox/fs_util.hpp"

namespace kiln::worker::sandbox {

namespace {
constexpr rlim_t kStackBytes = 8ull << 20;

rlim_t CpuSeconds(uint64_t cpu_ms) { return static_cast<rlim_t>((cpu_ms + 999) / 1000); }
}  // namespace

RlimitSet RlimitsFor(const SandboxLimits& limits) {
  RlimitSet s{};
  auto clamp = [](int resource, rlim_t v) {
    struct rlimit cur;
    if (::getrlimit(static_cast<__rlimit_resource>(resource), &cur) == 0 && v > cur.rlim_max)
      return cur.rlim_max;
    return v;
  };
  rlim_t cpu = CpuSeconds(limits.cpu_ms);
  if (cpu == 0) cpu = 1;
  // SIGXCPU at the soft limit, SIGKILL one second later at the hard one.
  s.resource[0] = RLIMIT_CPU, s.value[0] = {cpu, cpu + 1};
  s.resource[1] = RLIMIT_FSIZE, s.value[1] = {limits.file_size_bytes, limits.file_size_bytes};
  rlim_t nofile = limits.open_files < 16 ? 16 : limits.open_files;
  s.resource[2] = RLIMIT_NOFILE, s.value[2] = {nofile, nofile};
  s.resource[3] = RLIMIT_CORE, s.value[3] = {0, 0};
  s.resource[4] = RLIMIT_STACK, s.value[4] = {kStackBytes, kStackBytes};
  // Counts threads too (node starts ~10): never below the pids limit.
  s.resource[5] = RLIMIT_NPROC, s.value[5] = {limits.max_pids, limits.max_pids};
  for (int i = 0; i < kRlimitCount; ++i) {
    s.value[i].rlim_max = clamp(s.resource[i], s.value[i].rlim_max);
    if (s.value[i].rlim_cur > s.value[i].rlim_max) s.value[i].rlim_cur = s.value[i].rlim_max;
  }
  return s;
}

namespace {
// Lowers pid's limits to `set` (hard limits clamped to the current ones: a
// limit is never raised). 0 or an errno; EPERM from the first call when the
// caller may not prlimit pid at all, before anything changed. `set` becomes
// the values applied.
int LowerLimits(pid_t pid, RlimitSet& set) {
  for (int i = 0; i < kRlimitCount; ++i) {
    auto res = static_cast<__rlimit_resource>(set.resource[i]);
    struct rlimit old;
    if (::prlimit(pid, res, nullptr, &old) != 0) return errno;
    struct rlimit& v = set.value[i];
    if (v.rlim_max > old.rlim_max) v.rlim_max = old.rlim_max;
    if (v.rlim_cur > v.rlim_max) v.rlim_cur = v.rlim_max;
    if (::prlimit(pid, res, &v, nullptr) != 0) return errno;
  }
  return 0;
}

// Lowers pid's limits from this thread with its real uid and gid switched to
// the sandbox's: prlimit lets a caller whose real ids are the target's do
// so without CAP_SYS_RESOURCE. Raw syscalls change only this thread's
// credentials; its effective and saved ids stay root, so it keeps its
// capabilities and switches back. Nothing of the sandbox can reach the
// thread meanwhile (own pid namespace, no ptrace). 0 or an errno (EPERM as
// LowerLimits, or when the ids cannot be switched: not root).
int LowerLimitsWithRealIds(pid_t pid, uid_t uid, gid_t gid, RlimitSet& set) {
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  if (::getresuid(&ruid, &euid, &suid) != 0 || ::getresgid(&rgid, &egid, &sgid) != 0) return errno;
  if (::syscall(SYS_setresgid, gid, -1, -1) != 0) return errno;
  int err = 0;
  if (::syscall(SYS_setresuid, uid, -1, -1) != 0) {
    err = errno;
  } else {
    err = LowerLimits(pid, set);
    // A worker thread must never go on with a sandbox's id.
    if (::syscall(SYS_setresuid, ruid, -1, -1) != 0) std::abort();
  }
  if (::syscall(SYS_setresgid, rgid, -1, -1) != 0) std::abort();
  return err;
}

}  // namespace

int ApplyRlimits(const RlimitSet& set) {
  for (int i = 0; i < kRlimitCount; ++i) {
    if (::setrlimit(static_cast<__rlimit_resource>(set.resource[i]), &set.value[i]) != 0)
      return errno;
  }
  return 0;
}

common::StatusOr<bool> ApplyJobRlimits(pid_t pid, uid_t uid, gid_t gid,
                                       const SandboxLimits& limits) {
  RlimitSet set = RlimitsFor(limits);
  // CPU already used by pid (utime + stime, fields 14 and 15 of /proc/<pid>/stat).
  auto stat = ReadFileString("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.ok()) return stat.status().WithContext("reading the sandbox's cpu time");
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return common::Internal("malformed /proc/pid/stat");
  std::istringstream in(stat->substr(paren + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  long hz = ::sysconf(_SC_CLK_TCK);
  uint64_t used_ms = (utime + stime) * 1000 / static_cast<uint64_t>(hz > 0 ? hz : 100);
  rlim_t cpu = CpuSeconds(used_ms + limits.cpu_ms);
  set.value[0] = {cpu, cpu + 1};
  // A worker with CAP_SYS_RESOURCE (a root worker) may prlimit any process.
  // Once each soft limit equals its hard one, applying the same limits
  // again changes nothing (a hard limit is never raised, and the CPU limit
  // is already clamped to it).
  auto settled = [](const RlimitSet& applied) {
    for (const struct rlimit& v : applied.value) {
      if (v.rlim_cur != v.rlim_max) return false;
    }
    return true;
  };
  int err = LowerLimits(pid, set);
  if (err == 0) return settled(set);
  if (err != EPERM) return common::ErrnoStatus("prlimit on the sandbox", err);
  // Without it (a root worker whose bounding set lacks CAP_SYS_RESOURCE), a
  // caller with the sandbox's ids may: this thread, its real ids switched
  // for the calls. (EPERM comes from the first call, before `set` changed.)
  err = LowerLimitsWithRealIds(pid, uid, gid, set);
  if (err != 0) return common::ErrnoStatus("prlimit on the sandbox", err);
  return settled(set);
}

}  // namespace kiln::worker::sandbox
