// Host-side file helpers shared by the sandbox's parent-side code (cgroup
// files, mountinfo, /proc). Never used in the cloned child: they allocate.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::worker::sandbox {

// Writes `value` to an existing file (cgroup knobs, /proc files): one write.
common::Status WriteFileString(const std::string& path, std::string_view value);
// Reads a small file whole (at most 1 MiB).
common::StatusOr<std::string> ReadFileString(const std::string& path);
// Reads a file holding one unsigned decimal number.
common::StatusOr<uint64_t> ReadFileU64(const std::string& path);
// "key value" lines (cpu.stat, memory.events, memory.oom_control): the value of key.
std::optional<uint64_t> ParseKeyedU64(std::string_view text, std::string_view key);
bool PathExists(const std::string& path);
// mkdir -p with mode for the last component (0755 for parents).
common::Status MakeDirs(const std::string& path, mode_t mode);

struct MountInfo {
  std::string mount_point;
  std::string fs_type;
  std::string super_options;  // e.g. "rw,memory"
};
// Parsed /proc/self/mountinfo (octal escapes decoded).
std::vector<MountInfo> ReadMountInfo();

}  // namespace kiln::worker::sandbox
