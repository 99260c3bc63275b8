// GvisorSpec: the OCI runtime spec (config.json) of one gVisor sandbox, as a
// pure function of what the spawn needs. Used by the gVisor level's Sandbox
// (gvisor_sandbox.cpp); unit-tested without runsc.
//
// The filesystem view matches the standard level's (mounts.hpp): the host's
// system directories and the chosen /etc pieces read-only, kiln-init at
// /etc/kiln-init, the host's workspace tmpfs at /workspace, a size-capped
// /tmp and /dev/shm, the worker's control socket folder read-only at
// /etc/kiln-control, and an empty read-only /sys. The root itself is a per-spawn folder on the host
// (symlinks such as /bin -> usr/bin, the generated passwd, group, hosts),
// read-only. No capabilities, no_new_privs, the sandbox uid, the job's
// rlimits; namespaces are gVisor's own (its kernel has no host ones to
// share). cgroups are left to the worker (runsc runs with --ignore-cgroups
// inside the sandbox's cgroup), so the spec has no resources section.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "worker/sandbox/mounts.hpp"
#include "worker/sandbox/rlimits.hpp"

namespace kiln::worker::sandbox {

// Where the worker's control socket folder appears inside a gVisor sandbox.
inline constexpr const char* kGvisorControlDir = "/etc/kiln-control";
// Where libkiln-gvisor-compat.so (worker/init/gvisor_compat.cpp) appears;
// the rootfs's /etc/ld.so.preload names it.
inline constexpr const char* kGvisorCompatLib = "/etc/kiln-gvisor-compat.so";

struct GvisorSpecInput {
  std::string rootfs;              // host folder: the read-only root
  std::vector<HostEntry> entries;  // FilesystemLayout::entries
  std::string init_host_path;      // kiln-init on the host
  std::string compat_lib_host;     // bound read-only at kGvisorCompatLib
  std::string workspace_host;      // bound read-write at /workspace
  std::string control_dir_host;    // bound read-only at kGvisorControlDir
  uint64_t tmp_bytes = 0;
  uint32_t uid = 0, gid = 0;
  std::vector<std::string> argv;  // the whole command, kiln-init first
  std::vector<std::string> env;   // "KEY=VALUE"
  RlimitSet rlimits{};
};

nlohmann::json BuildGvisorSpec(const GvisorSpecInput& in);

}  // namespace kiln::worker::sandbox
