// RaiseFdLimit: lets a daemon hold as many descriptors as the system allows
// it. A broker holds one per client and worker connection, so the usual soft
// limit of 1024 would be exhausted long before its connection limits are.
//
//   auto limit = common::RaiseFdLimit();   // in main(), before serving
//   if (limit.ok()) spdlog::info("open files limit {}", *limit);
//
// Raises RLIMIT_NOFILE's soft limit to its hard limit (to
// /proc/sys/fs/nr_open when the hard limit is unlimited) and returns the soft
// limit in effect afterwards. Any thread; meant for main().
#pragma once

#include <cstdint>

#include "common/status.hpp"

namespace kiln::common {

StatusOr<uint64_t> RaiseFdLimit();

}  // namespace kiln::common
