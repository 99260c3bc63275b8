// Credentials: the unprivileged uid/gid, no supplementary groups, no
// capabilities in any set, locked securebits, no_new_privs.
//
// Child side only, raw system calls: glibc's setuid()/setgroups() wrappers
// broadcast to every thread of the calling process, and the vfork-style child
// shares its memory (and glibc's thread list) with the multithreaded worker.
#pragma once

#include <sys/types.h>

namespace kiln::worker::sandbox {

// Drops the bounding set, locks securebits, sets groups/gid/uid and clears
// ambient, inheritable, permitted and effective capabilities.
int DropToUser(uid_t uid, gid_t gid);
int SetNoNewPrivs();

}  // namespace kiln::worker::sandbox
