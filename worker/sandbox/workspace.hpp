// Workspace files seen from the host: AddFiles and CollectFiles on
// <state_dir>/ws/<id>. The sandboxed code may have planted symlinks there,
// so every path is resolved with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
// | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): nothing the worker (root)
// writes or reads can land outside the workspace.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/protocol/messages.hpp"
#include "common/status.hpp"

namespace kiln::worker::sandbox {

// The broker's rule (common/relative_path.hpp): refuses empty, absolute,
// NUL-, `.`- or `..`-containing paths, over 1024 bytes or with a part over 255.
common::Status ValidateRelativePath(const std::string& path);

// Writes the files (creating directories), owned by uid/gid. The sandbox
// may have prepared the paths: a part that is not a regular file (FIFO,
// socket, symlink, directory) or not a directory is INVALID_REQUEST, found
// without following or blocking on it.
common::Status WriteWorkspaceFiles(const std::string& workspace,
                                   const std::vector<common::protocol::FileEntry>& files, uid_t uid,
                                   gid_t gid);

// What `collect` found.
struct CollectedFiles {
  std::vector<common::protocol::FileEntry> files;
  // Matching files found but left out: over the byte budget or past max_files.
  uint32_t omitted = 0;
  // The search stopped early (more than kMaxCollectEntries entries, or
  // directories deeper than kMaxCollectDepth): matching files may be missing.
  bool incomplete = false;
  // Something that matched may be missing from `files`.
  bool truncated() const { return omitted > 0 || incomplete; }
};

inline constexpr size_t kMaxCollectEntries = 10000;
inline constexpr int kMaxCollectDepth = 32;

// Regular files whose relative path matches one of the glob patterns
// (fnmatch, `*` also crosses `/`), sorted by path; a file that would take the
// total over max_bytes, or the count over max_files, is left out (and
// counted in `omitted`); a smaller file after it may still fit. Symlinks and
// special files are skipped.
common::StatusOr<CollectedFiles> ReadWorkspaceFiles(const std::string& workspace,
                                                    const std::vector<std::string>& patterns,
                                                    uint64_t max_bytes,
                                                    size_t max_files = common::protocol::kMaxFiles);

}  // namespace kiln::worker::sandbox
