// HeldFile: a small kernel file (a cgroup knob or counter) opened once and
// then read or written whole at offset 0 as often as needed. A session's
// executions read their cgroup's counters several times each and freeze it
// after each one; opening the file every time walks its path (about 6% of a
// busy worker's CPU on session statements, docs/performance.md).
//
//   HeldFile usage = HeldFile::Open(dir + "/cpuacct.usage", O_RDONLY);
//   if (auto ns = usage.ReadU64(); ns.ok()) ...
//
// Parent side only (it allocates). Reading at offset 0 restarts a seq_file
// (cgroup files are), so each Read() sees fresh figures; pread and pwrite
// never move the descriptor's offset, so calls may come from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker::sandbox {

class HeldFile {
 public:
  HeldFile() = default;
  // Never fails: a file that cannot be opened gives a HeldFile whose reads
  // and writes return the open's error (hosts lack some counters).
  static HeldFile Open(std::string path, int flags);

  bool valid() const { return fd_.valid(); }
  const std::string& path() const { return path_; }
  // The whole file (at most 1 MiB).
  common::StatusOr<std::string> Read() const;
  // A file holding one unsigned decimal number.
  common::StatusOr<uint64_t> ReadU64() const;
  // ReadU64() less `base` (0 below it: a counter counted from a reset);
  // unset when the file cannot be read.
  std::optional<uint64_t> ReadU64Since(uint64_t base) const;
  // One write of `value` at offset 0.
  common::Status Write(std::string_view value) const;

 private:
  std::string path_;
  common::UniqueFd fd_;
  int open_errno_ = 0;
};

}  // namespace kiln::worker::sandbox
