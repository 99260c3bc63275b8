#include "worker/sandbox/host_probe.hpp"

#include <linux/capability.h>
#include <sched.h>

#include <cstring>
#include <vector>

#include "worker/sandbox/fs_util.hpp"
#include "worker/sandbox/namespaces.hpp"
#include "worker/sandbox/sandbox.hpp"

namespace kiln::worker::sandbox {

bool IsKnownLayer(const std::string& layer) {
  for (const char* n : kLayerNames) {
    if (layer == n) return true;
  }
  return false;
}

bool IsRelaxableLayer(const std::string& layer) {
  static const char* const kRelaxable[] = {"net_ns",  "ipc_ns",   "uts_ns",  "cgroup_ns",
                                           "time_ns", "landlock", "seccomp", "cgroups"};
  for (const char* n : kRelaxable) {
    if (layer == n) return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> MissingWorkerPrivileges() {
  std::vector<std::pair<std::string, std::string>> missing;
  auto status = ReadFileString("/proc/self/status");
  uint64_t eff = 0;
  if (status.ok()) {
    size_t pos = status->find("CapEff:");
    if (pos != std::string::npos) eff = std::strtoull(status->c_str() + pos + 7, nullptr, 16);
  }
  struct Need {
    int cap;
    const char* name;
    const char* layer;
  };
  for (Need n :
       {Need{CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "mount_ns"},
        Need{CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "filesystem"},
        Need{CAP_SETUID, "CAP_SETUID", "user_ids"}, Need{CAP_SETGID, "CAP_SETGID", "user_ids"},
        Need{CAP_SETPCAP, "CAP_SETPCAP", "capabilities"}, Need{CAP_KILL, "CAP_KILL", "pid_ns"}}) {
    if (!(eff & (1ull << n.cap))) {
      missing.emplace_back(n.layer, std::string("the worker lacks ") + n.name +
                                        " (run it as root or grant the capability)");
    }
  }
  return missing;
}

std::vector<std::pair<std::string, std::string>> ProbeNamespaces() {
  std::vector<std::pair<std::string, std::string>> out;
  struct Ns {
    const char* layer;
    unsigned long flag;
  };
  for (Ns ns :
       {Ns{"pid_ns", CLONE_NEWPID}, Ns{"mount_ns", CLONE_NEWNS}, Ns{"net_ns", CLONE_NEWNET},
        Ns{"ipc_ns", CLONE_NEWIPC}, Ns{"uts_ns", CLONE_NEWUTS}, Ns{"cgroup_ns", CLONE_NEWCGROUP}}) {
    int err = ProbeNamespace(ns.flag);
    out.emplace_back(
        ns.layer,
        err == 0 ? "" : std::string("cannot create the namespace: ") + std::strerror(err));
  }
  int err = ProbeTimeNamespace();
  out.emplace_back("time_ns", err == 0 ? ""
                                       : std::string("cannot create a time namespace (Linux 5.6+, "
                                                     "CONFIG_TIME_NS): ") +
                                             std::strerror(err));
  return out;
}

}  // namespace kiln::worker::sandbox
