// The Lua script behind WebhookStore::Claim. Only WebhookStore runs it.
#pragma once

#include "broker/store/redis_connection.hpp"

namespace kiln::broker::scripts {

const RedisScript& ClaimWebhooks();

}  // namespace kiln::broker::scripts
