// BuildGvisorSpec (gvisor_spec.hpp).
#include "worker/sandbox/gvisor_spec.hpp"

#include <sys/resource.h>

namespace kiln::worker::sandbox {
namespace {

using nlohmann::json;

const char* RlimitName(int resource) {
  switch (resource) {
    case RLIMIT_CPU:
      return "RLIMIT_CPU";
    case RLIMIT_FSIZE:
      return "RLIMIT_FSIZE";
    case RLIMIT_NOFILE:
      return "RLIMIT_NOFILE";
    case RLIMIT_CORE:
      return "RLIMIT_CORE";
    case RLIMIT_STACK:
      return "RLIMIT_STACK";
    case RLIMIT_NPROC:
      return "RLIMIT_NPROC";
    default:
      return nullptr;
  }
}

json Bind(const std::string& source, const std::string& dest, bool writable) {
  json options = json::array({"rbind", "nosuid", "nodev"});
  options.push_back(writable ? "rw" : "ro");
  return {{"destination", dest}, {"type", "bind"}, {"source", source}, {"options", options}};
}

}  // namespace

json BuildGvisorSpec(const GvisorSpecInput& in) {
  json mounts = json::array();
  mounts.push_back({{"destination", "/proc"},
                    {"type", "proc"},
                    {"source", "proc"},
                    {"options", {"nosuid", "noexec", "nodev"}}});
  mounts.push_back({{"destination", "/dev"},
                    {"type", "tmpfs"},
                    {"source", "tmpfs"},
                    {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}});
  // runsc mounts its own sysfs when the spec has none: an empty one instead.
  mounts.push_back({{"destination", "/sys"},
                    {"type", "tmpfs"},
                    {"source", "tmpfs"},
                    {"options", {"ro", "nosuid", "nodev", "noexec", "mode=555", "size=4k"}}});
  for (const HostEntry& e : in.entries) {
    if (e.kind == HostEntry::kSymlink) continue;  // in the rootfs folder
    mounts.push_back(Bind(e.path, e.path, false));
  }
  mounts.push_back(Bind(in.init_host_path, "/etc/kiln-init", false));
  mounts.push_back(Bind(in.compat_lib_host, kGvisorCompatLib, false));
  mounts.push_back(Bind(in.control_dir_host, kGvisorControlDir, false));
  mounts.push_back(Bind(in.workspace_host, "/workspace", true));
  mounts.push_back(
      {{"destination", "/tmp"},
       {"type", "tmpfs"},
       {"source", "tmpfs"},
       {"options", {"nosuid", "nodev", "mode=1777", "size=" + std::to_string(in.tmp_bytes)}}});
  // POSIX semaphores and shared memory (multiprocessing's locks).
  mounts.push_back(
      {{"destination", "/dev/shm"},
       {"type", "tmpfs"},
       {"source", "shm"},
       {"options",
        {"nosuid", "nodev", "noexec", "mode=1777", "size=" + std::to_string(in.tmp_bytes)}}});

  json rlimits = json::array();
  for (int i = 0; i < kRlimitCount; ++i) {
    const char* name = RlimitName(in.rlimits.resource[i]);
    if (name == nullptr) continue;
    rlimits.push_back({{"type", name},
                       {"hard", static_cast<uint64_t>(in.rlimits.value[i].rlim_max)},
                       {"soft", static_cast<uint64_t>(in.rlimits.value[i].rlim_cur)}});
  }
  json empty = json::array();
  json process = {{"terminal", false},
                  {"user", {{"uid", in.uid}, {"gid", in.gid}, {"additionalGids", json::array()}}},
                  {"args", in.argv},
                  {"env", in.env},
                  {"cwd", "/workspace"},
                  {"capabilities",
                   {{"bounding", empty},
                    {"effective", empty},
                    {"inheritable", empty},
                    {"permitted", empty},
                    {"ambient", empty}}},
                  {"rlimits", rlimits},
                  {"noNewPrivileges", true}};
  json namespaces = json::array();
  for (const char* ns : {"pid", "network", "ipc", "uts", "mount"}) {
    namespaces.push_back({{"type", ns}});
  }
  return {{"ociVersion", "1.0.0"},
          {"process", process},
          {"root", {{"path", in.rootfs}, {"readonly", true}}},
          {"hostname", "kiln"},
          {"mounts", mounts},
          {"linux", {{"namespaces", namespaces}}}};
}

}  // namespace kiln::worker::sandbox
