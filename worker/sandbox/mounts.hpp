// Mounts: the sandbox's minimal filesystem view.
//
// The child (in its own mount namespace, as root) mounts a fresh tmpfs at
// <state_dir>/root, fills it from a precomputed list of MountOps, then
// pivot_root()s into it and detaches the old root:
//   /usr /bin /lib /lib64 /lib32 /sbin   read-only binds (or the host's symlinks)
//   /etc                                  only ld.so.cache, alternatives, ssl/certs,
//                                         localtime, python3*, nsswitch.conf...,
//                                         plus a generated passwd, group, hosts
//   <ro_binds>                            read-only binds from the config
//   /workspace                            the host's per-sandbox tmpfs (rw, exec allowed)
//   /packages                             empty; a job's installed packages (read-only)
//   /tmp                                  a private size-capped tmpfs (rw, mode 1777)
//   /proc                                 a private proc (this pid namespace), host
//                                         facts masked (kcore, keys, key-users, cmdline,
//                                         interrupts, boot_id, pressure/...), sys/irq/bus
//                                         read-only
//   /dev                                  tmpfs with null zero random urandom,
//                                         fd/stdin/stdout/stderr links, shm -> /tmp
// Everything nosuid, everything but /workspace, /tmp and /usr-like binds noexec
// or read-only; the root itself is remounted read-only at the end.
//
// The workspace is mounted by the worker on the host at <state_dir>/ws/<id>
// (tmpfs, size-capped, owned by the sandbox uid, mode 0700), so the worker can
// add and collect files before and after the process runs.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::worker::sandbox {

enum class MountOpKind : uint8_t {
  kMkdir,      // mkdir target (EEXIST is fine)
  kTouch,      // create an empty file as a bind target
  kSymlink,    // symlink(source, target)
  kWriteFile,  // write source (a C string) into a new file target
  kTmpfs,      // mount tmpfs at target with data and flags
  kBind,       // bind source onto target (flags adds MS_REC)
  kRemount,    // mount(NULL, target, NULL, flags, data) with MS_REMOUNT in flags
  kProc,       // mount proc at target
  kMknod,      // character device `dev` at target; falls back to binding source
};

struct MountOp {
  MountOpKind kind;
  const char* source = nullptr;
  const char* target = nullptr;
  const char* data = nullptr;
  unsigned long flags = 0;
  mode_t mode = 0;
  dev_t dev = 0;
  bool optional = false;  // a missing source or target (ENOENT) skips the op
};

// What the host offers, found once in Sandbox::Create().
struct HostEntry {
  // Absolute host path, also the path in the sandbox (a kSymlink may exist
  // only in the sandbox: /node_modules).
  std::string path;
  enum Kind { kDir, kFile, kSymlink } kind = kDir;
  std::string link_target;  // for kSymlink
};
struct FilesystemLayout {
  std::string root_dir;            // mount point of the new root: <state_dir>/root
  std::vector<HostEntry> entries;  // system dirs, /etc pieces, ro_binds, in order
  std::string init_host_path;      // bound read-only (exec allowed) at kSandboxInitPath
};
// An empty directory in every sandbox: a job's packages on request appear
// there, read-only (SandboxProcess::MountPackages).
inline constexpr const char* kSandboxPackagesPath = "/packages";
// Where the sandbox's pid 1 (kiln-init) appears inside every sandbox.
inline constexpr const char* kSandboxInitPath = "/etc/kiln-init";
// config's init_path, or kiln-init next to the running executable; checked
// to be a regular, executable file.
common::StatusOr<std::string> ResolveInitPath(const std::string& configured);
// `node_modules` (SandboxConfig::node_modules) becomes a /node_modules
// symlink in the sandbox root, its tree bound read-only unless a system path
// (/usr) already shows it; a tree missing on the host is left out.
common::StatusOr<FilesystemLayout> ProbeFilesystemLayout(const std::string& state_dir,
                                                         const std::vector<std::string>& ro_binds,
                                                         const std::string& node_modules = "");

// One spawn's list of operations; owns the strings the ops point to.
struct MountPlan {
  std::deque<std::string> strings;
  std::vector<MountOp> ops;
  const char* new_root = nullptr;
  const char* Keep(std::string s) { return strings.emplace_back(std::move(s)).c_str(); }
};
struct SpawnMounts {
  std::string workspace_host;  // the host tmpfs to bind at /workspace
  uint64_t tmp_bytes = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
MountPlan BuildMountPlan(const FilesystemLayout& layout, const SpawnMounts& spawn);

// Parent side: the host workspace tmpfs.
common::Status MountWorkspace(const std::string& path, uint64_t bytes, uid_t uid, gid_t gid);

// The inode cap of a job's tmpfs of `bytes` (/workspace, /tmp): one per 4 KiB,
// at least 4096. Without it a tmpfs allows half the host's RAM pages in
// inodes, so empty files, which cost no bytes, were limited by nothing.
uint64_t TmpfsInodesFor(uint64_t bytes);
void UnmountWorkspace(const std::string& path);
// Unmounts and removes <ws_dir>/<name> for which is_stale(name).
void CleanupStaleWorkspaces(const std::string& ws_dir,
                            const std::function<bool(const std::string&)>& is_stale);

// Child side (no allocation): makes every mount private, runs the ops, and
// pivots into new_root. On failure returns the errno and sets *failed_target.
int ApplyMountPlan(const MountOp* ops, size_t count, const char* new_root,
                   const char** failed_target);

}  // namespace kiln::worker::sandbox
