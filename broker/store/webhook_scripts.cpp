#include "broker/store/webhook_scripts.hpp"

#include "broker/store/redis_keys.hpp"

namespace kiln::broker::scripts {
namespace {

// ARGV: now ms, lease ms, max. The deliveries due by now are leased (their
// next try moves to now + lease, so a broker that dies while delivering
// leaves them to the next claim after it) and their attempt counted.
// Returns {job id, attempt, ...}.
constexpr const char* kClaimWebhooks = R"lua(
local now, lease, max = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', K.webhooks, '-inf', now, 'LIMIT', 0, max)
local out = {}
for _, id in ipairs(due) do
  redis.call('ZADD', K.webhooks, 'XX', now + lease, id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HINCRBY', K.webhook_attempts, id, 1)
end
return out
)lua";

}  // namespace

const RedisScript& ClaimWebhooks() {
  static const RedisScript s(keys::LuaKeyTable() + kClaimWebhooks);
  return s;
}

}  // namespace kiln::broker::scripts
