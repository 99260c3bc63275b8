#include "worker/sandbox/workspace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/relative_path.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

using common::Status;
using common::StatusOr;
using common::UniqueFd;
using common::protocol::FileEntry;

namespace {

constexpr uint64_t kResolve =
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;

int OpenBeneath(int dirfd, const std::string& path, uint64_t flags, mode_t mode) {
  struct open_how how = {};
  how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = kResolve;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof how));
}

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    if (slash > pos) parts.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  return parts;
}

// Collects the regular files beneath dirfd; sets *cut when it stops early.
void Walk(int dirfd, const std::string& prefix, int depth, std::vector<std::string>* out,
          size_t* seen, bool* cut) {
  if (depth > kMaxCollectDepth) {
    *cut = true;
    return;
  }
  int fd = ::dup(dirfd);
  if (fd < 0) return;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return;
  }
  while (struct dirent* e = ::readdir(d)) {
    if (++*seen > kMaxCollectEntries) {
      *cut = true;
      break;
    }
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string rel = prefix.empty() ? name : prefix + "/" + name;
    if (e->d_type == DT_REG) {
      out->push_back(rel);
    } else if (e->d_type == DT_DIR) {
      UniqueFd sub(OpenBeneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0));
      if (sub.valid()) Walk(sub.get(), rel, depth + 1, out, seen, cut);
    }
  }
  ::closedir(d);
}

}  // namespace

Status ValidateRelativePath(const std::string& path) {
  return common::CheckRelativePath(path).WithContext("file path");
}

Status WriteWorkspaceFiles(const std::string& workspace, const std::vector<FileEntry>& files,
                           uid_t uid, gid_t gid) {
  UniqueFd root(::open(workspace.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!root.valid()) return common::ErrnoStatus("open workspace " + workspace, errno);
  for (const FileEntry& f : files) {
    RETURN_IF_ERROR(ValidateRelativePath(f.path));
    std::vector<std::string> parts = Split(f.path);
    UniqueFd dir(::dup(root.get()));
    if (!dir.valid()) return common::ErrnoStatus("dup", errno);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (::mkdirat(dir.get(), parts[i].c_str(), 0755) == 0) {
        UniqueFd made(OpenBeneath(dir.get(), parts[i], O_RDONLY | O_DIRECTORY, 0));
        if (made.valid()) (void)::fchown(made.get(), uid, gid);
      } else if (errno != EEXIST) {
        return common::ErrnoStatus("mkdir " + parts[i] + " for " + f.path, errno);
      }
      UniqueFd next(OpenBeneath(dir.get(), parts[i], O_RDONLY | O_DIRECTORY, 0));
      if (!next.valid() && (errno == ENOTDIR || errno == ELOOP)) {
        return common::InvalidRequest(parts[i] + " of " + f.path +
                                      " exists in the workspace and is not a directory");
      }
      if (!next.valid())
        return common::ErrnoStatus("open directory " + parts[i] + " of " + f.path, errno);
      dir = std::move(next);
    }
    // The sandbox may have put anything at this path. Non-blocking, so a
    // FIFO fails (ENXIO, no reader) or opens without waiting for one; no
    // O_TRUNC before we know it is a regular file; symlinks never followed
    // (OpenBeneath). Sockets fail with ENXIO; device nodes cannot be opened
    // on the nodev workspace.
    UniqueFd out(OpenBeneath(dir.get(), parts.back(), O_WRONLY | O_CREAT | O_NONBLOCK, 0644));
    if (!out.valid()) {
      if (errno == ENXIO || errno == ELOOP || errno == EACCES || errno == ENOTDIR ||
          errno == EISDIR) {
        return common::InvalidRequest(f.path +
                                      " exists in the workspace and is not a regular file");
      }
      return common::ErrnoStatus("create " + f.path, errno);
    }
    struct stat st;
    if (::fstat(out.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return common::InvalidRequest(f.path + " exists in the workspace and is not a regular file");
    }
    if (::ftruncate(out.get(), 0) != 0) return common::ErrnoStatus("truncate " + f.path, errno);
    if (::fchown(out.get(), uid, gid) != 0) return common::ErrnoStatus("chown " + f.path, errno);
    size_t done = 0;
    while (done < f.content.size()) {
      ssize_t n = ::write(out.get(), f.content.data() + done, f.content.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return common::Status(
            errno == ENOSPC ? common::Code::kLimitExceeded : common::Code::kInternal,
            "writing " + f.path + ": " + std::string(strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
  }
  return Status::Ok();
}

StatusOr<CollectedFiles> ReadWorkspaceFiles(const std::string& workspace,
                                            const std::vector<std::string>& patterns,
                                            uint64_t max_bytes, size_t max_files) {
  CollectedFiles out;
  if (patterns.empty()) return out;
  UniqueFd root(::open(workspace.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!root.valid()) return common::ErrnoStatus("open workspace " + workspace, errno);
  std::vector<std::string> paths;
  size_t seen = 0;
  Walk(root.get(), "", 0, &paths, &seen, &out.incomplete);
  std::sort(paths.begin(), paths.end());
  uint64_t total = 0;
  for (const std::string& rel : paths) {
    bool match = false;
    for (const std::string& pat : patterns)
      match = match || ::fnmatch(pat.c_str(), rel.c_str(), 0) == 0;
    if (!match) continue;
    UniqueFd fd(OpenBeneath(root.get(), rel, O_RDONLY | O_NONBLOCK, 0));
    if (!fd.valid()) continue;
    struct stat st;
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    uint64_t size = static_cast<uint64_t>(st.st_size);
    if (out.files.size() >= max_files || total + size > max_bytes) {
      ++out.omitted;
      continue;
    }
    FileEntry e;
    e.path = rel;
    e.content.resize(size);
    size_t got = 0;
    while (got < size) {
      ssize_t n = ::read(fd.get(), e.content.data() + got, size - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    e.content.resize(got);
    total += got;
    out.files.push_back(std::move(e));
  }
  return out;
}

}  // namespace kiln::worker::sandbox
