// The Lua scripts of the broker's scheduling state in Redis (slot leases,
// tenant queues, sessions, broker registry). Only ScheduleStore and
// SessionStore run them; each script's arguments and reply are described
// next to its source in schedule_scripts.cpp (Tick, Claim, LoseWorker: in
// schedule_recovery_scripts.cpp).
#pragma once

#include "broker/store/redis_connection.hpp"

namespace kiln::broker::scripts {

const RedisScript& Submit();
const RedisScript& Finish();
const RedisScript& Requeue();
const RedisScript& Approve();
const RedisScript& Pump();
const RedisScript& Tick();
const RedisScript& Claim();
const RedisScript& LoseWorker();
const RedisScript& Load();
const RedisScript& ListSessions();
const RedisScript& DeleteSession();

}  // namespace kiln::broker::scripts
