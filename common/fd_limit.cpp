#include "common/fd_limit.hpp"

#include <sys/resource.h>

#include <cerrno>
#include <fstream>

namespace kiln::common {

StatusOr<uint64_t> RaiseFdLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0)
    return ErrnoStatus("getrlimit(RLIMIT_NOFILE)", errno);
  rlim_t want = limit.rlim_max;
  if (want == RLIM_INFINITY) {
    // The kernel refuses more than fs.nr_open descriptors per process.
    uint64_t nr_open = 1u << 20;
    std::ifstream("/proc/sys/fs/nr_open") >> nr_open;
    want = nr_open;
  }
  if (limit.rlim_cur < want) {
    rlimit raised = limit;
    raised.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      return ErrnoStatus("setrlimit(RLIMIT_NOFILE)", errno);
    }
    limit = raised;
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace kiln::common
