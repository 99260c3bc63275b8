// Host probe: what Sandbox::Create() checks before the worker may start.
// Each check names its layer; Create() refuses to start on the first
// missing layer unless the operator relaxed it (and it can be relaxed).
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"

namespace kiln::worker::sandbox {

// Layers that may be relaxed by config. The others are the sandbox itself:
// without them there is nothing left to relax to.
bool IsRelaxableLayer(const std::string& layer);
bool IsKnownLayer(const std::string& layer);

// The worker's own privileges: which layers it could not set up, and why
// (e.g. "user_ids" -> "the worker lacks CAP_SETUID").
std::vector<std::pair<std::string, std::string>> MissingWorkerPrivileges();

// Creatable namespaces: layer name -> error message ("" when fine).
std::vector<std::pair<std::string, std::string>> ProbeNamespaces();

}  // namespace kiln::worker::sandbox
