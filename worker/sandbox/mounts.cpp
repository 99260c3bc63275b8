#include "worker/sandbox/mounts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <set>

#include "worker/sandbox/fs_util.hpp"

namespace kiln::worker::sandbox {

using common::Status;
using common::StatusOr;

namespace {

// Host paths the runtimes need; the first group is required to exist.
const char* const kSystemPaths[] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"};
// /etc/matplotlibrc: Debian's matplotlib keeps it there (the rest of its data
// is under /usr/share); without it `import matplotlib` fails.
const char* const kEtcPaths[] = {
    "/etc/ld.so.cache",   "/etc/alternatives",    "/etc/localtime",
    "/etc/ssl/certs",     "/etc/ssl/openssl.cnf", "/etc/ca-certificates.conf",
    "/etc/nsswitch.conf", "/etc/host.conf",       "/etc/gai.conf",
    "/etc/protocols",     "/etc/services",        "/etc/mime.types",
    "/etc/magic",         "/etc/timezone",        "/etc/debian_version",
    "/etc/os-release",    "/etc/inputrc",         "/etc/bash.bashrc",
    "/etc/profile",       "/etc/matplotlibrc",
};
// Host facts a job has no use for: kernel memory and timers, other users'
// key quotas, the kernel command line, device interrupt counts (a side
// channel on co-tenants' activity), the boot id (identifies the host).
const char* const kProcMaskedFiles[] = {
    "/proc/kcore",       "/proc/keys",          "/proc/timer_list",
    "/proc/sched_debug", "/proc/latency_stats", "/proc/key-users",
    "/proc/cmdline",     "/proc/interrupts",    "/proc/sys/kernel/random/boot_id"};
// Host-wide pressure stall figures (the host's load, not the job's).
const char* const kProcMaskedDirs[] = {"/proc/pressure"};
const char* const kProcReadOnly[] = {"/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs",
                                     "/proc/sysrq-trigger"};

StatusOr<HostEntry> Describe(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return common::ErrnoStatus("stat " + path, errno);
  HostEntry e;
  e.path = path;
  if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
    if (n < 0) return common::ErrnoStatus("readlink " + path, errno);
    e.kind = HostEntry::kSymlink;
    e.link_target.assign(buf, static_cast<size_t>(n));
  } else if (S_ISDIR(st.st_mode)) {
    e.kind = HostEntry::kDir;
  } else if (S_ISREG(st.st_mode)) {
    e.kind = HostEntry::kFile;
  } else {
    return common::InvalidRequest(path + " is neither a file, a directory nor a symlink");
  }
  return e;
}

bool IsSafeAbsolute(const std::string& p) {
  if (p.size() < 2 || p[0] != '/' || p.back() == '/') return false;
  if (p.find("//") != std::string::npos) return false;
  for (size_t pos = 0; pos < p.size();) {
    size_t next = p.find('/', pos + 1);
    if (next == std::string::npos) next = p.size();
    std::string part = p.substr(pos + 1, next - pos - 1);
    if (part == "." || part == "..") return false;
    pos = next;
  }
  return true;
}

}  // namespace

StatusOr<FilesystemLayout> ProbeFilesystemLayout(const std::string& state_dir,
                                                 const std::vector<std::string>& ro_binds,
                                                 const std::string& node_modules) {
  FilesystemLayout layout;
  layout.root_dir = state_dir + "/root";
  ASSIGN_OR_RETURN(HostEntry usr, Describe("/usr"));
  if (usr.kind != HostEntry::kDir) return common::Unavailable("/usr is not a directory");
  for (const char* p : kSystemPaths) {
    auto e = Describe(p);
    if (e.ok()) layout.entries.push_back(std::move(*e));
  }
  std::vector<std::string> etc(std::begin(kEtcPaths), std::end(kEtcPaths));
  glob_t g{};
  if (::glob("/etc/python3*", 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) etc.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  for (const std::string& p : etc) {
    auto e = Describe(p);
    if (e.ok()) layout.entries.push_back(std::move(*e));
  }
  static const char* const kReserved[] = {"/workspace",  "/tmp",       "/proc",     "/dev",
                                          "/etc/passwd", "/etc/group", "/etc/hosts"};
  std::vector<std::string> binds = ro_binds;
  if (!node_modules.empty()) {
    if (!IsSafeAbsolute(node_modules)) {
      return common::InvalidRequest("node_modules '" + node_modules +
                                    "' must be a normalized absolute path");
    }
    struct stat st;
    if (::stat(node_modules.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      layout.entries.push_back(
          {.path = "/node_modules", .kind = HostEntry::kSymlink, .link_target = node_modules});
      bool shown = false;
      for (const char* p : kSystemPaths) {
        size_t n = std::strlen(p);
        shown = shown || (node_modules.compare(0, n, p) == 0 && node_modules[n] == '/');
      }
      if (!shown) binds.push_back(node_modules);
    }
  }
  for (const std::string& p : binds) {
    if (!IsSafeAbsolute(p))
      return common::InvalidRequest("ro_bind '" + p + "' must be a normalized absolute path");
    for (const char* r : kReserved) {
      size_t n = std::strlen(r);
      if (p.compare(0, n, r) == 0 && (p.size() == n || p[n] == '/')) {
        return common::InvalidRequest("ro_bind '" + p + "' would cover the sandbox's own " + r);
      }
    }
    if (p.compare(0, state_dir.size(), state_dir) == 0) {
      return common::InvalidRequest("ro_bind '" + p + "' is inside the worker's state_dir");
    }
    ASSIGN_OR_RETURN(HostEntry e, Describe(p));
    layout.entries.push_back(std::move(e));
  }
  return layout;
}

// config.init_path, or kiln-init next to the running executable; a regular,
// executable file.
StatusOr<std::string> ResolveInitPath(const std::string& configured) {
  std::string path = configured;
  if (path.empty()) {
    char exe[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return common::ErrnoStatus("readlink /proc/self/exe", errno);
    exe[n] = '\0';
    std::string dir(exe);
    path = dir.substr(0, dir.rfind('/')) + "/kiln-init";
  }
  struct stat st;
  if (path[0] != '/' || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      ::access(path.c_str(), X_OK) != 0) {
    return common::Unavailable("the sandbox's pid 1, '" + path +
                               "', is missing or not executable (build the kiln-init target, or "
                               "set sandbox.init_path)");
  }
  return path;
}

MountPlan BuildMountPlan(const FilesystemLayout& layout, const SpawnMounts& spawn) {
  MountPlan plan;
  const std::string& root = layout.root_dir;
  plan.new_root = plan.Keep(root);
  std::set<std::string> dirs;  // relative to root, already created
  auto add = [&](MountOp op) { plan.ops.push_back(op); };
  auto at = [&](const std::string& abs) { return plan.Keep(root + abs); };
  auto ensure_parents = [&](const std::string& abs) {
    for (size_t pos = abs.find('/', 1); pos != std::string::npos; pos = abs.find('/', pos + 1)) {
      std::string d = abs.substr(0, pos);
      if (dirs.insert(d).second) add({.kind = MountOpKind::kMkdir, .target = at(d), .mode = 0755});
    }
  };
  constexpr unsigned long kRoBind = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV;

  add({.kind = MountOpKind::kTmpfs,
       .source = "tmpfs",
       .target = plan.new_root,
       .data = "size=1m,nr_inodes=4096,mode=0755",
       .flags = MS_NOSUID | MS_NODEV});
  for (const HostEntry& e : layout.entries) {
    ensure_parents(e.path);
    const char* target = at(e.path);
    switch (e.kind) {
      case HostEntry::kSymlink:
        add({.kind = MountOpKind::kSymlink, .source = plan.Keep(e.link_target), .target = target});
        break;
      case HostEntry::kDir:
        if (dirs.insert(e.path).second)
          add({.kind = MountOpKind::kMkdir, .target = target, .mode = 0755});
        [[fallthrough]];
      case HostEntry::kFile:
        if (e.kind == HostEntry::kFile)
          add({.kind = MountOpKind::kTouch, .target = target, .mode = 0644});
        add({.kind = MountOpKind::kBind, .source = plan.Keep(e.path), .target = target});
        add({.kind = MountOpKind::kRemount, .target = target, .flags = kRoBind});
        break;
    }
  }
  ensure_parents("/etc/x");
  std::string u = std::to_string(spawn.uid), g = std::to_string(spawn.gid);
  add({.kind = MountOpKind::kWriteFile,
       .source =
           plan.Keep("root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsandbox:x:" + u + ":" + g +
                     ":sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/"
                     "sbin/nologin\n"),
       .target = at("/etc/passwd"),
       .mode = 0644});
  add({.kind = MountOpKind::kWriteFile,
       .source = plan.Keep("root:x:0:\nsandbox:x:" + g + ":\nnogroup:x:65534:\n"),
       .target = at("/etc/group"),
       .mode = 0644});
  add({.kind = MountOpKind::kWriteFile,
       .source = "127.0.0.1\tlocalhost kiln\n::1\tlocalhost ip6-localhost ip6-loopback\n",
       .target = at("/etc/hosts"),
       .mode = 0644});
  add({.kind = MountOpKind::kWriteFile,
       .source = "kiln\n",
       .target = at("/etc/hostname"),
       .mode = 0644});
  if (!layout.init_host_path.empty()) {
    // Its own read-only bind: executable, unlike the rest of /etc's files.
    const char* init = at(kSandboxInitPath);
    add({.kind = MountOpKind::kTouch, .target = init, .mode = 0755});
    add({.kind = MountOpKind::kBind, .source = plan.Keep(layout.init_host_path), .target = init});
    add({.kind = MountOpKind::kRemount, .target = init, .flags = kRoBind});
  }

  // /workspace: the host's tmpfs (its nosuid,nodev flags carry over to the bind).
  add({.kind = MountOpKind::kMkdir, .target = at("/workspace"), .mode = 0755});
  add({.kind = MountOpKind::kBind,
       .source = plan.Keep(spawn.workspace_host),
       .target = at("/workspace")});
  // /packages: empty; where a job's packages on request are mounted from the
  // host once it arrives (SandboxProcess::MountPackages).
  add({.kind = MountOpKind::kMkdir, .target = at(kSandboxPackagesPath), .mode = 0755});
  // /tmp: private, size-capped.
  add({.kind = MountOpKind::kMkdir, .target = at("/tmp"), .mode = 0755});
  add({.kind = MountOpKind::kTmpfs,
       .source = "tmpfs",
       .target = at("/tmp"),
       .data = plan.Keep("size=" + std::to_string(spawn.tmp_bytes) + ",nr_inodes=" +
                         std::to_string(TmpfsInodesFor(spawn.tmp_bytes)) + ",mode=1777"),
       .flags = MS_NOSUID | MS_NODEV});
  // /proc: of the new pid namespace, with Docker-style masking.
  add({.kind = MountOpKind::kMkdir, .target = at("/proc"), .mode = 0755});
  add({.kind = MountOpKind::kProc,
       .source = "proc",
       .target = at("/proc"),
       .data = "hidepid=invisible",
       .flags = MS_NOSUID | MS_NODEV | MS_NOEXEC});
  for (const char* p : kProcMaskedFiles) {
    add({.kind = MountOpKind::kBind, .source = "/dev/null", .target = at(p), .optional = true});
  }
  for (const char* p : kProcMaskedDirs) {
    add({.kind = MountOpKind::kTmpfs,
         .source = "tmpfs",
         .target = at(p),
         .data = "size=4k,nr_inodes=1,mode=0555",
         .flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
         .optional = true});
  }
  for (const char* p : kProcReadOnly) {
    const char* t = at(p);
    add({.kind = MountOpKind::kBind, .source = t, .target = t, .flags = MS_REC, .optional = true});
    add({.kind = MountOpKind::kRemount,
         .target = t,
         .flags = kRoBind | MS_NOEXEC,
         .optional = true});
  }
  // /dev: four devices and a few links, then read-only.
  add({.kind = MountOpKind::kMkdir, .target = at("/dev"), .mode = 0755});
  add({.kind = MountOpKind::kTmpfs,
       .source = "tmpfs",
       .target = at("/dev"),
       .data = "size=64k,nr_inodes=64,mode=0755",
       .flags = MS_NOSUID | MS_NOEXEC});
  struct Dev {
    const char* name;
    unsigned minor;
  };
  for (Dev d : {Dev{"null", 3}, Dev{"zero", 5}, Dev{"random", 8}, Dev{"urandom", 9}}) {
    std::string name = std::string("/dev/") + d.name;
    add({.kind = MountOpKind::kMknod,
         .source = plan.Keep(name),
         .target = at(name),
         .mode = 0666,
         .dev = makedev(1, d.minor)});
  }
  struct Link {
    const char* name;
    const char* to;
  };
  for (Link l : {Link{"/dev/fd", "/proc/self/fd"}, Link{"/dev/stdin", "/proc/self/fd/0"},
                 Link{"/dev/stdout", "/proc/self/fd/1"}, Link{"/dev/stderr", "/proc/self/fd/2"},
                 Link{"/dev/shm", "/tmp"}}) {
    add({.kind = MountOpKind::kSymlink, .source = l.to, .target = at(l.name)});
  }
  add({.kind = MountOpKind::kRemount,
       .target = at("/dev"),
       .flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC});
  add({.kind = MountOpKind::kRemount,
       .target = plan.new_root,
       .flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV});
  return plan;
}

uint64_t TmpfsInodesFor(uint64_t bytes) { return std::max<uint64_t>(4096, bytes / 4096); }

Status MountWorkspace(const std::string& path, uint64_t bytes, uid_t uid, gid_t gid) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
    return common::ErrnoStatus("mkdir " + path, errno);
  std::string data = "size=" + std::to_string(bytes) +
                     ",nr_inodes=" + std::to_string(TmpfsInodesFor(bytes)) +
                     ",mode=0700,uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
  if (::mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, data.c_str()) != 0) {
    int err = errno;
    ::rmdir(path.c_str());
    return common::ErrnoStatus("mount workspace tmpfs at " + path, err);
  }
  return Status::Ok();
}

void UnmountWorkspace(const std::string& path) {
  while (::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) {
  }
  ::rmdir(path.c_str());
}

void CleanupStaleWorkspaces(const std::string& ws_dir,
                            const std::function<bool(const std::string&)>& is_stale) {
  DIR* d = ::opendir(ws_dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != ".." && is_stale(n)) names.push_back(n);
  }
  ::closedir(d);
  for (const std::string& n : names) UnmountWorkspace(ws_dir + "/" + n);
}

// ---------------------------------------------------------------------------
// Child side: raw calls only.

namespace {
int RunOp(const MountOp& op) {
  switch (op.kind) {
    case MountOpKind::kMkdir:
      return ::mkdir(op.target, op.mode) == 0 || errno == EEXIST ? 0 : errno;
    case MountOpKind::kTouch: {
      int fd = ::open(op.target, O_WRONLY | O_CREAT | O_CLOEXEC, op.mode);
      if (fd < 0) return errno;
      ::close(fd);
      return 0;
    }
    case MountOpKind::kSymlink:
      return ::symlink(op.source, op.target) == 0 ? 0 : errno;
    case MountOpKind::kWriteFile: {
      int fd = ::open(op.target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, op.mode);
      if (fd < 0) return errno;
      size_t len = std::strlen(op.source);
      ssize_t n = ::write(fd, op.source, len);
      int err = n == static_cast<ssize_t>(len) ? 0 : (n < 0 ? errno : EIO);
      ::close(fd);
      return err;
    }
    case MountOpKind::kTmpfs:
      return ::mount(op.source, op.target, "tmpfs", op.flags, op.data) == 0 ? 0 : errno;
    case MountOpKind::kBind:
      return ::mount(op.source, op.target, nullptr, MS_BIND | op.flags, nullptr) == 0 ? 0 : errno;
    case MountOpKind::kRemount:
      return ::mount(nullptr, op.target, nullptr, op.flags, op.data) == 0 ? 0 : errno;
    case MountOpKind::kProc:
      if (::mount(op.source, op.target, "proc", op.flags, op.data) == 0) return 0;
      // Kernels without hidepid=invisible: plain proc (pid namespace still hides the host).
      return ::mount(op.source, op.target, "proc", op.flags, nullptr) == 0 ? 0 : errno;
    case MountOpKind::kMknod: {
      if (::mknod(op.target, S_IFCHR | op.mode, op.dev) == 0) return 0;
      // No CAP_MKNOD (some containers): bind the host's node instead.
      int fd = ::open(op.target, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
      if (fd < 0) return errno;
      ::close(fd);
      return ::mount(op.source, op.target, nullptr, MS_BIND, nullptr) == 0 ? 0 : errno;
    }
  }
  return EINVAL;
}
}  // namespace

int ApplyMountPlan(const MountOp* ops, size_t count, const char* new_root,
                   const char** failed_target) {
  *failed_target = "/";
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
  for (size_t i = 0; i < count; ++i) {
    int err = RunOp(ops[i]);
    if (err == ENOENT && ops[i].optional) continue;
    if (err != 0) {
      *failed_target = ops[i].target;
      return err;
    }
  }
  *failed_target = new_root;
  if (::chdir(new_root) != 0) return errno;
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return errno;
  // Detaching the old root waits for an RCU grace period (~2 ms here): the
  // largest mount cost, and unavoidable (the host tree must be gone).
  if (::umount2(".", MNT_DETACH) != 0) return errno;
  *failed_target = "/workspace";
  if (::chdir("/workspace") != 0) return errno;
  return 0;
}

}  // namespace kiln::worker::sandbox
