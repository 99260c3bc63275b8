// The gVisor isolation level: a Sandbox whose every spawn runs on gVisor's
// user-space kernel (runsc), inside a cgroup of its own, with the standard
// level's filesystem view, uid, limits and files API (gvisor_sandbox.cpp).
// Only Sandbox::Create calls it, for SandboxConfig::isolation == "gvisor".
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.hpp"
#include "worker/sandbox/sandbox.hpp"

namespace kiln::worker::sandbox {

// Checks runsc and the cgroups, removes leftovers of dead workers (names
// `is_stale` accepts), and boots one sandbox end to end.
common::StatusOr<std::unique_ptr<Sandbox>> CreateGvisorSandbox(
    const SandboxConfig& config, const std::function<bool(const std::string&)>& is_stale);

}  // namespace kiln::worker::sandbox
