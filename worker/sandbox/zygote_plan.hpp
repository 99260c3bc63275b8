// ZygotePlan: a ChildPlan as bytes, for a child that a zygote (zygote.hpp)
// clones instead of the worker. The worker encodes the plan it would have
// run itself; the zygote's library (zygote_child.cpp) decodes it and runs it
// in its own clone. Descriptors travel beside the bytes (SCM_RIGHTS), in the
// order ZygoteFds() gives.
//
// Message: u32 env_bytes, the program's environment ("K=V" entries, each
// ending in NUL; the zygote's interpreter applies it), then the plan. Both
// sides run on one host, so integers are in host byte order.
//
// Decoding is defensive (the bytes come over a socket, from the worker only,
// but a short or corrupt message must fail cleanly): every count and length
// is bounded and checked. Any thread may call these; no shared state.
#pragma once

#include <linux/filter.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "worker/sandbox/contain.hpp"

namespace kiln::worker::sandbox {

// The bytes of `plan` (its descriptors are not in them: see ZygoteFds),
// with the namespaces to clone and the program's environment.
std::string EncodeZygotePlan(const ChildPlan& plan, unsigned long clone_flags,
                             const std::vector<std::string>& env);
// The plan's descriptors in the order the message expects them.
std::vector<int> ZygoteFds(const ChildPlan& plan);

// A decoded plan and the storage its pointers refer to (not movable).
struct DecodedZygotePlan {
  ChildPlan plan;
  unsigned long clone_flags = 0;
  std::vector<std::string> env;
  std::vector<const char*> envp;  // plan.envp: env, null-terminated
  std::deque<std::string> strings;
  std::vector<MountOp> ops;
  std::vector<sock_filter> filters[2];
  std::vector<int> cgroup_fds;
};

// Decodes a message and its `fd_count` received descriptors. Null with
// *error set when the message is malformed or the descriptors do not match.
std::unique_ptr<DecodedZygotePlan> DecodeZygotePlan(const char* data, size_t size, const int* fds,
                                                    int fd_count, std::string* error);

}  // namespace kiln::worker::sandbox
