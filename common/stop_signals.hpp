// BlockStopSignals: how a Kiln daemon's main() takes SIGINT and SIGTERM.
//
//   sigset_t stop = common::BlockStopSignals();   // first thing, before threads
//   ... sigwait(&stop, &sig) or signalfd(-1, &stop, ...) ...
//
// Blocks SIGINT and SIGTERM in the calling thread (threads started later
// inherit the mask), so exactly one place waits for them, and ignores SIGPIPE
// (a peer that went away is an error return, not a death). Call from main()
// before any other thread starts.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace kiln::common {

inline sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

}  // namespace kiln::common
