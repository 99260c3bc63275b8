#include "worker/sandbox/cgroups.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "worker/sandbox/fs_util.hpp"

namespace kiln::worker::sandbox {

using common::Status;
using common::StatusOr;

std::string FindCgroup2Mount() {
  for (const MountInfo& m : ReadMountInfo()) {
    if (m.fs_type == "cgroup2") return m.mount_point;
  }
  return "";
}

Status RemoveCgroupDir(const std::string& dir) {
  for (int attempt = 0;; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return Status::Ok();
    if (errno != EBUSY || attempt >= 200) return common::ErrnoStatus("rmdir " + dir, errno);
    if (attempt % 20 == 19) KillCgroupProcs(dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 20 ? 1 : 10));
  }
}

void KillCgroupProcs(const std::string& dir) { SignalCgroupProcs(dir, SIGKILL); }

void SignalCgroupProcs(const std::string& dir, int sig, bool newest_first, pid_t spare) {
  auto text = ReadFileString(dir + "/cgroup.procs");
  if (!text.ok()) return;
  std::vector<pid_t> pids;
  const char* p = text->data();
  const char* end = p + text->size();
  while (p < end) {  // one decimal pid per line
    pid_t pid = 0;
    auto [next, ec] = std::from_chars(p, end, pid);
    if (ec == std::errc() && pid > 0 && pid != spare) pids.push_back(pid);
    p = next == p ? p + 1 : next;
  }
  if (newest_first) std::reverse(pids.begin(), pids.end());
  for (pid_t p : pids) ::kill(p, sig);
}

common::Status WaitUntil(const std::function<bool()>& done, const std::string& what) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    if (done()) return common::Status::Ok();
    // Most waits end within a millisecond: poll finely at first.
    std::this_thread::sleep_for(i < 20 ? std::chrono::microseconds(50)
                                       : std::chrono::microseconds(1000));
  }
  return done() ? common::Status::Ok() : common::Internal(what);
}

std::vector<std::string> ListSubdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR) continue;
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    out.push_back(name);
  }
  ::closedir(d);
  return out;
}

StatusOr<std::unique_ptr<CgroupManager>> CgroupManager::Create(const CgroupOptions& options) {
  if (options.prefix.empty() || options.prefix.find("..") != std::string::npos ||
      options.prefix.front() == '/') {
    return common::InvalidRequest("cgroup_prefix must be a relative name, got '" + options.prefix +
                                  "'");
  }
  if (options.mode == "v1") return CreateCgroupV1(options);
  if (options.mode == "v2") return CreateCgroupV2(options);
  if (options.mode != "auto") {
    return common::InvalidRequest("cgroup_mode must be auto, v1 or v2, got '" + options.mode + "'");
  }
  auto v2 = CreateCgroupV2(options);
  if (v2.ok()) return v2;
  auto v1 = CreateCgroupV1(options);
  if (v1.ok()) return v1;
  return common::Unavailable("neither cgroup v2 (" + v2.status().message() + ") nor v1 (" +
                             v1.status().message() + ") is usable");
}

}  // namespace kiln::worker::sandbox
