// libkiln-gvisor-compat.so: preloaded (through /etc/ld.so.preload) into every
// dynamically linked program of a gVisor-level sandbox, nowhere else.
//
// Debian 12's runsc (2022-12) refuses statx() with AT_NO_AUTOMOUNT (EINVAL),
// a flag coreutils passes on every call: `ls`, `stat` and `cp -a` failed on
// every file. gVisor's kernel has no automounts, so the flag means nothing
// there; this statx drops it and asks the same question. Later gVisor
// releases accept the flag, and then this changes nothing.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" __attribute__((visibility("default"))) int statx(int dirfd, const char* path, int flags,
                                                            unsigned int mask, struct statx* buf) {
  return static_cast<int>(syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf));
}
