// The built-in policy rules (policy.use_defaults: true), after the seeds'
// blocked/warned pattern lists, tuned to spare ordinary code.
//
//   for (const PolicyRule& r : DefaultPolicyRules()) std::cout << r.name << "\n";
//
// The policy layer is an early warning, not the security boundary: the sandbox
// contains whatever runs, and any of these patterns is easy to evade
// (getattr(os, "sys" + "tem")). So a rule blocks only code whose plain intent
// is destruction or escape and which ordinary jobs never need (wiping /, fork
// bombs, formatting or writing disks, piping a download into a shell, reverse
// shells, sending credential files out, raw memory via ctypes, Node's internal
// bindings). What ordinary code does now and then (subprocess, eval, network
// libraries, child_process) only warns: the warning lands in the record and in
// metrics, and a reviewer approving jobs sees it. docs/policy.md lists them all.
// Pure function; any thread.
#pragma once

#include <vector>

#include "broker/policy/policy_config.hpp"

namespace kiln::broker {

const std::vector<PolicyRule>& DefaultPolicyRules();

}  // namespace kiln::broker
