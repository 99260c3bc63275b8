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

// Refuses empty, absolute, `..`-containing or over-long paths.
common::Status ValidateRelativePath(const std::string& path);

// Writes the files (creating directories), owned by uid/gid.
common::Status WriteWorkspaceFiles(const std::string& workspace,
                                   const std::vector<common::protocol::FileEntry>& files, uid_t uid,
                                   gid_t gid);

// Regular files whose relative path matches one of the glob patterns
// (fnmatch, `*` also crosses `/`), sorted by path; files that would take the
// total over max_bytes are left out. Symlinks and special files are skipped.
common::StatusOr<std::vector<common::protocol::FileEntry>> ReadWorkspaceFiles(
    const std::string& workspace, const std::vector<std::string>& patterns, uint64_t max_bytes);

}  // namespace kiln::worker::sandbox
