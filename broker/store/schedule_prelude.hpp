// The Lua prelude every scheduling script starts with: the key table K
// (redis_keys.hpp) and the shared helpers (reading the scheduling context,
// picking a worker, starting, queueing and popping jobs, moving a session
// on). Only schedule_scripts.cpp and schedule_recovery_scripts.cpp call it,
// to build their scripts' sources; nothing else runs these helpers.
#pragma once

#include <string>

namespace kiln::broker::scripts {

// The source of a scheduling script: the key table, the prelude, then `body`.
std::string WithPrelude(const char* body);

}  // namespace kiln::broker::scripts
