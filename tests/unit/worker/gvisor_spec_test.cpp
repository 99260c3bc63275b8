// BuildGvisorSpec: the OCI spec of a gVisor-level sandbox, checked as data
// (the gVisor runs themselves are in tests/sandbox and tests/integration).
#include "worker/sandbox/gvisor_spec.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace kiln::worker::sandbox {
namespace {

using nlohmann::json;

GvisorSpecInput Input() {
  GvisorSpecInput in;
  in.rootfs = "/run/kiln/gvisor/1-0/rootfs";
  in.entries = {{"/usr", HostEntry::kDir, ""},
                {"/bin", HostEntry::kSymlink, "usr/bin"},
                {"/etc/ld.so.cache", HostEntry::kFile, ""}};
  in.init_host_path = "/opt/kiln/kiln-init";
  in.compat_lib_host = "/opt/kiln/libkiln-gvisor-compat.so";
  in.workspace_host = "/run/kiln/ws/1-0";
  in.control_dir_host = "/run/kiln/gvisor/1-0/ctl";
  in.tmp_bytes = 1 << 20;
  in.uid = in.gid = 200123;
  in.argv = {"/etc/kiln-init", "--connect", "/etc/kiln-control/s", "/usr/bin/python3", "-c", "1"};
  in.env = {"PATH=/usr/bin", "HOME=/workspace"};
  SandboxLimits limits;
  limits.max_pids = 32;
  limits.open_files = 100;
  in.rlimits = RlimitsFor(limits);
  return in;
}

std::map<std::string, json> MountsByDestination(const json& spec) {
  std::map<std::string, json> out;
  for (const json& m : spec["mounts"]) out[m["destination"].get<std::string>()] = m;
  return out;
}

bool HasOption(const json& mount, const std::string& option) {
  for (const json& o : mount["options"]) {
    if (o == option) return true;
  }
  return false;
}

TEST(GvisorSpec, ProcessRunsAsTheSandboxUidWithNothingElse) {
  json spec = BuildGvisorSpec(Input());
  const json& p = spec["process"];
  EXPECT_EQ(p["user"]["uid"], 200123);
  EXPECT_EQ(p["user"]["gid"], 200123);
  EXPECT_EQ(p["user"]["additionalGids"], json::array());
  EXPECT_EQ(p["args"][0], "/etc/kiln-init");
  EXPECT_EQ(p["args"][3], "/usr/bin/python3");
  EXPECT_EQ(p["env"], json::array({"PATH=/usr/bin", "HOME=/workspace"}));
  EXPECT_EQ(p["cwd"], "/workspace");
  EXPECT_EQ(p["noNewPrivileges"], true);
  EXPECT_EQ(p["terminal"], false);
  for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"}) {
    EXPECT_EQ(p["capabilities"][set], json::array()) << set;
  }
  std::map<std::string, json> rl;
  for (const json& r : p["rlimits"]) rl[r["type"].get<std::string>()] = r;
  EXPECT_EQ(rl["RLIMIT_NPROC"]["hard"], 32);
  EXPECT_EQ(rl["RLIMIT_NOFILE"]["soft"], 100);
  EXPECT_EQ(rl["RLIMIT_CORE"]["hard"], 0);
  EXPECT_EQ(spec["root"]["readonly"], true);
  EXPECT_EQ(spec["root"]["path"], "/run/kiln/gvisor/1-0/rootfs");
  EXPECT_FALSE(spec["linux"].contains("resources")) << "cgroups are the worker's";
  std::vector<std::string> ns;
  for (const json& n : spec["linux"]["namespaces"]) ns.push_back(n["type"]);
  EXPECT_THAT(ns, ::testing::UnorderedElementsAre("pid", "network", "ipc", "uts", "mount"));
}

TEST(GvisorSpec, OnlyTheWorkspaceIsWritableFromTheHost) {
  auto mounts = MountsByDestination(BuildGvisorSpec(Input()));
  ASSERT_TRUE(mounts.count("/workspace"));
  EXPECT_EQ(mounts["/workspace"]["source"], "/run/kiln/ws/1-0");
  EXPECT_TRUE(HasOption(mounts["/workspace"], "rw"));
  for (const char* ro : {"/usr", "/etc/ld.so.cache", "/etc/kiln-init", "/etc/kiln-control",
                         "/etc/kiln-gvisor-compat.so"}) {
    ASSERT_TRUE(mounts.count(ro)) << ro;
    EXPECT_EQ(mounts[ro]["type"], "bind") << ro;
    EXPECT_TRUE(HasOption(mounts[ro], "ro")) << ro;
    EXPECT_FALSE(HasOption(mounts[ro], "rw")) << ro;
    EXPECT_TRUE(HasOption(mounts[ro], "nosuid")) << ro;
  }
  EXPECT_EQ(mounts["/etc/kiln-control"]["source"], "/run/kiln/gvisor/1-0/ctl");
  // Symlinks live in the rootfs folder, not as mounts.
  EXPECT_FALSE(mounts.count("/bin"));
  // Memory-backed, size-capped, private: /tmp and /dev/shm; /sys empty.
  for (const char* t : {"/tmp", "/dev/shm"}) {
    ASSERT_TRUE(mounts.count(t)) << t;
    EXPECT_EQ(mounts[t]["type"], "tmpfs") << t;
    EXPECT_TRUE(HasOption(mounts[t], "size=1048576")) << t;
  }
  ASSERT_TRUE(mounts.count("/sys"));
  EXPECT_EQ(mounts["/sys"]["type"], "tmpfs");
  EXPECT_TRUE(HasOption(mounts["/sys"], "ro"));
  EXPECT_EQ(mounts["/proc"]["type"], "proc");
  // Nothing else of the host: every bind's source is one the input named.
  for (auto& [dest, m] : mounts) {
    if (m["type"] != "bind") continue;
    EXPECT_THAT(m["source"].get<std::string>(),
                ::testing::AnyOf("/usr", "/etc/ld.so.cache", "/opt/kiln/kiln-init",
                                 "/opt/kiln/libkiln-gvisor-compat.so", "/run/kiln/ws/1-0",
                                 "/run/kiln/gvisor/1-0/ctl"))
        << dest;
  }
}

}  // namespace
}  // namespace kiln::worker::sandbox
