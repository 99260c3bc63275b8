// The Lua script behind JobStore::AppendOutput: a job's output stored in
// order, without gaps, and never after the job's end. Only JobStore runs it.
#pragma once

#include "broker/store/redis_connection.hpp"

namespace kiln::broker::scripts {

const RedisScript& AppendOutput();

}  // namespace kiln::broker::scripts
