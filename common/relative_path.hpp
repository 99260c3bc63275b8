// CheckRelativePath: the one rule for paths inside a job's workspace — the
// `files` a client uploads, the `collect` patterns, files written back by the
// CLI: 1 to 1024 bytes, not absolute, no NUL, no empty, "." or ".." parts,
// and no part longer than a file name may be (kMaxPathPartBytes, NAME_MAX).
//
//   RETURN_IF_ERROR(common::CheckRelativePath(path).WithContext("files[0].path"));
//
// The broker validates with it, the CLI checks early, the worker checks again
// before it writes (and resolves paths beneath the workspace with openat2).
// Pure function; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.hpp"

namespace kiln::common {

inline constexpr size_t kMaxRelativePathBytes = 1024;
// NAME_MAX of Linux file systems (tmpfs included): a longer part cannot be created.
inline constexpr size_t kMaxPathPartBytes = 255;

inline Status CheckRelativePath(std::string_view path) {
  const std::string shown(path.substr(0, 200));
  if (path.empty() || path.size() > kMaxRelativePathBytes) {
    return InvalidRequest("path must have 1-1024 bytes");
  }
  if (path.front() == '/') return InvalidRequest("'" + shown + "' is not a relative path");
  if (path.find('\0') != std::string_view::npos) return InvalidRequest("NUL in path");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return InvalidRequest("'" + shown + "' must not contain empty, '.' or '..' parts");
    }
    if (part.size() > kMaxPathPartBytes) {
      return InvalidRequest("a part of the path is " + std::to_string(part.size()) +
                            " bytes, above the file name limit of " +
                            std::to_string(kMaxPathPartBytes) + " ('" +
                            std::string(part.substr(0, 40)) + "...')");
    }
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace kiln::common
