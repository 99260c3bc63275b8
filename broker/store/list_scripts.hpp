// The Lua script behind JobStore::List: a page of a tenant's executions,
// newest first, filtered, with a bounded scan. Only JobStore runs it.
#pragma once

#include "broker/store/redis_connection.hpp"

namespace kiln::broker::scripts {

const RedisScript& ListJobs();

}  // namespace kiln::broker::scripts
