// Host-side probes for the escape suite (escape_test.cpp): what the host sees
// while and after hostile jobs run — processes by uid and command line, a
// job's host workspace, cgroup modes the host offers, and a process started
// as a given uid (a same-uid neighbour that only the pid namespace protects).
//
//   UidProcess s = UidProcess::Start(uid, {"/bin/sleep", "300"});
//   EXPECT_TRUE(s.running());
//
// Header-only: the suite is one source file (see escape.cmake).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.hpp"

namespace kiln::testing::escape {

// Words of a whitespace-separated line.
inline std::set<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::set<std::string> out;
  for (std::string w; in >> w;) out.insert(w);
  return out;
}

// Whether the host can run workers with `sandbox.cgroup_mode: <mode>`; if not,
// `why` says what is missing. Mirrors the worker's own probe (cgroup_v1.cpp,
// cgroup_v2.cpp): v1 needs memory, pids, cpu and cpuacct hierarchies; v2 needs
// memory, pids and cpu at the root of the cgroup2 mount.
inline bool CgroupModeAvailable(const std::string& mode, std::string* why) {
  std::ifstream mounts("/proc/self/mounts");
  std::set<std::string> v1_controllers;
  std::string v2_mount;
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream in(line);
    std::string dev, dir, type, opts;
    in >> dev >> dir >> type >> opts;
    if (type == "cgroup2" && v2_mount.empty()) v2_mount = dir;
    if (type == "cgroup") {
      std::stringstream os(opts);
      for (std::string o; std::getline(os, o, ',');) v1_controllers.insert(o);
    }
  }
  if (mode == "v1") {
    std::string missing;
    for (const char* c : {"memory", "pids", "cpu", "cpuacct"}) {
      if (!v1_controllers.count(c)) missing += std::string(missing.empty() ? "" : ", ") + c;
    }
    if (!missing.empty()) *why = "no cgroup v1 hierarchy for: " + missing;
    return missing.empty();
  }
  if (v2_mount.empty()) {
    *why = "no cgroup2 file system is mounted";
    return false;
  }
  std::set<std::string> have = Words(ReadFile(v2_mount + "/cgroup.controllers"));
  std::string missing;
  for (const char* c : {"memory", "pids", "cpu"}) {
    if (!have.count(c)) missing += std::string(missing.empty() ? "" : ", ") + c;
  }
  if (!missing.empty()) {
    std::string avail;
    for (const std::string& w : have) avail += (avail.empty() ? "" : " ") + w;
    *why = "cgroup v2 at " + v2_mount + " lacks the controllers " + missing +
           " (it has: " + (avail.empty() ? "none" : avail) + ")";
  }
  return missing.empty();
}

// Live processes of the host: pid, real uid, command line (NULs as spaces).
struct HostProcess {
  pid_t pid;
  uid_t uid;
  std::string cmdline;
};

inline std::vector<HostProcess> HostProcesses() {
  std::vector<HostProcess> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::string base = "/proc/" + std::string(e->d_name);
    std::ifstream status(base + "/status");
    long uid = -1;
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Uid:", 0) == 0) {
        uid = strtol(line.c_str() + 4, nullptr, 10);
        break;
      }
    }
    if (uid < 0) continue;  // gone meanwhile
    std::string cmd = ReadFile(base + "/cmdline");
    for (char& c : cmd) {
      if (c == '\0') c = ' ';
    }
    out.push_back({static_cast<pid_t>(pid), static_cast<uid_t>(uid), cmd});
  }
  closedir(d);
  return out;
}

// Processes (any uid) whose command line contains `needle`.
inline std::vector<HostProcess> ProcessesMatching(const std::string& needle) {
  std::vector<HostProcess> out;
  for (auto& p : HostProcesses()) {
    if (p.cmdline.find(needle) != std::string::npos) out.push_back(p);
  }
  return out;
}

// Number of processes per uid in [lo, hi].
inline std::map<uid_t, int> ProcessCountByUid(uid_t lo, uid_t hi) {
  std::map<uid_t, int> counts;
  for (auto& p : HostProcesses()) {
    if (p.uid >= lo && p.uid <= hi) ++counts[p.uid];
  }
  return counts;
}

// Host directories `<state_dir>/ws/<id>` (of any worker under `cluster_dir`)
// that hold a file named `name`; waits up to `timeout` for one to appear.
inline std::string FindHostWorkspaceWith(const std::string& cluster_dir, int workers,
                                         const std::string& name,
                                         std::chrono::milliseconds timeout) {
  std::string found;
  WaitFor(
      [&] {
        for (int w = 0; w < workers; ++w) {
          std::string ws = cluster_dir + "/w" + std::to_string(w) + "/ws";
          DIR* d = opendir(ws.c_str());
          if (d == nullptr) continue;
          while (dirent* e = readdir(d)) {
            std::string dir = ws + "/" + e->d_name;
            struct stat st {};
            if (e->d_name[0] != '.' && ::stat((dir + "/" + name).c_str(), &st) == 0) found = dir;
          }
          closedir(d);
        }
        return !found.empty();
      },
      timeout);
  return found;
}

// Writes `content` to dir/name atomically (tmp file + rename), so a job that
// polls for the file never reads half of it.
inline void PublishFile(const std::string& dir, const std::string& name,
                        const std::string& content) {
  WriteFile(dir + "/." + name + ".tmp", content);
  ::rename((dir + "/." + name + ".tmp").c_str(), (dir + "/" + name).c_str());
}

// Whether a file named `name` exists anywhere under `root` (host side).
inline bool TreeHasFile(const std::string& root, const std::string& name) {
  DIR* d = opendir(root.c_str());
  if (d == nullptr) return false;
  bool hit = false;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (n == name) hit = true;
    if (!hit && e->d_type == DT_DIR) hit = TreeHasFile(root + "/" + n, name);
    if (hit) break;
  }
  closedir(d);
  return hit;
}

// A process started as uid:gid `uid` with no supplementary groups (the test
// runs as root). Killed (SIGKILL) and reaped when destroyed.
class UidProcess {
 public:
  static UidProcess Start(uid_t uid, const std::vector<std::string>& argv) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      int null_fd = ::open("/dev/null", O_RDWR);
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      ::close_range(3, ~0U, 0);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
          ::setresuid(uid, uid, uid) != 0) {
        ::_exit(126);
      }
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    UidProcess p;
    p.pid_ = pid;
    return p;
  }
  UidProcess() = default;
  UidProcess(UidProcess&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  UidProcess& operator=(UidProcess&&) = delete;
  ~UidProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  bool running() const {
    siginfo_t info{};
    if (pid_ <= 0 || ::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
    return info.si_pid == 0;
  }
  // The process's real uid as the host sees it (-1 if gone).
  long uid() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Uid:", 0) == 0) return strtol(line.c_str() + 4, nullptr, 10);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace kiln::testing::escape
