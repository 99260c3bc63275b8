// The scheduling scripts of the broker's upkeep and recovery (declared in
// schedule_scripts.hpp): Tick (each broker's heartbeat: its registration and
// its jobs' leases renewed, ended jobs, strays and expired sessions
// reported), Claim (the in-flight jobs of dead brokers taken over) and
// LoseWorker (a dead worker's sessions marked lost). Only ScheduleStore and
// SessionStore run them; the shared prelude is in schedule_prelude.cpp.
#include "broker/store/schedule_prelude.hpp"
#include "broker/store/schedule_scripts.hpp"

namespace kiln::broker::scripts {
namespace {

// ARGV: broker, now, lease ms, broker dead-after ms, n, then n (id, tenant,
// worker) of the jobs this broker has in flight, then the number of workers
// it knows and their ids, then stray_before ms. Renews the broker's
// registration and its jobs' leases (re-adding one that expired), and
// reports the jobs it no longer owns (ended elsewhere, or taken over) and
// the strays: jobs running on its name that it does not hold, started before
// stray_before (a submit whose answer never reached it).
// Returns {{ids no longer owned}, global leases, live brokers,
//          {tenant, queued, leases, ...}, live sessions, approvals pending,
//          {ids whose approval window has passed (up to 100)},
//          {worker, session, ...: expired sessions whose sandboxes must go},
//          {stray ids (up to 100)}}.
constexpr const char* kTick = R"lua(
local broker, now, lease_ms, dead_after = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n = tonumber(ARGV[5])
redis.call('ZADD', K.brokers, now, broker)
local gone = {}
local held = {}
for k = 0, n - 1 do
  local id, tenant, worker = ARGV[6 + 3 * k], ARGV[7 + 3 * k], ARGV[8 + 3 * k]
  held[id] = true
  local f = redis.call('HMGET', jobkey(id), 'status', 'broker')
  if f[1] == 'running' and f[2] == broker then
    local exp = now + lease_ms
    redis.call('ZADD', K.lease_global, exp, id)
    redis.call('ZADD', K.lease_t .. tenant, exp, id)
    redis.call('ZADD', K.lease_w .. worker, exp, id)
  else
    gone[#gone + 1] = id
  end
end
-- Sessions whose keys expired (idle past their TTL): their workers destroy
-- the sandboxes. SREM decides which broker tells the worker.
local closed = {}
local nw = tonumber(ARGV[6 + 3 * n])
for k = 1, nw do
  local w = ARGV[6 + 3 * n + k]
  for _, sid in ipairs(redis.call('SMEMBERS', K.sessions_w .. w)) do
    if redis.call('EXISTS', K.session .. sid) == 0 and
        redis.call('SREM', K.sessions_w .. w, sid) == 1 then
      closed[#closed + 1] = w
      closed[#closed + 1] = sid
    end
  end
end
local stats = {}
local sessions = 0
for _, t in ipairs(redis.call('HKEYS', K.tenants)) do
  stats[#stats + 1] = t
  stats[#stats + 1] = redis.call('ZCARD', K.q .. t)
  stats[#stats + 1] = count_live(K.lease_t .. t, now)
  sessions = sessions + redis.call('ZCARD', K.sessions_t .. t)
end
local stray_before = tonumber(ARGV[7 + 3 * n + nw])
local strays = {}
local ik = K.inflight .. broker
local mine = redis.call('HKEYS', ik)
for _, id in ipairs(mine) do
  if not held[id] then
    local f = redis.call('HMGET', jobkey(id), 'status', 'broker', 'started_ms')
    if f[1] ~= 'running' or f[2] ~= broker then
      redis.call('HDEL', ik, id)  -- ended, or moved on: a leftover entry
    elseif tonumber(f[3] or '0') < stray_before and #strays < 100 then
      strays[#strays + 1] = id
    end
  end
end
local brokers = redis.call('ZCOUNT', K.brokers, now - dead_after, '+inf')
local expired = redis.call('ZRANGEBYSCORE', K.approvals, '-inf', now, 'LIMIT', 0, 100)
return {gone, count_live(K.lease_global, now), brokers, stats, sessions,
        redis.call('ZCARD', K.approvals), expired, closed, strays}
)lua";

// ARGV: self, dead_before ms, include_self ('1' on start-up). Takes over
// the in-flight bookkeeping of brokers silent since dead_before (and this
// broker's own from before a restart). Returns id, worker pairs.
constexpr const char* kClaim = R"lua(
local self, dead_before, include_self = ARGV[1], ARGV[2], ARGV[3]
local victims = {}
for _, b in ipairs(redis.call('ZRANGEBYSCORE', K.brokers, '-inf', dead_before)) do
  if b ~= self and redis.call('ZREM', K.brokers, b) == 1 then victims[#victims + 1] = b end
end
if include_self == '1' then victims[#victims + 1] = self end
local out = {}
for _, b in ipairs(victims) do
  local m = redis.call('HGETALL', K.inflight .. b)
  for i = 1, #m, 2 do
    if b ~= self then
      redis.call('HSET', K.inflight .. self, m[i], m[i + 1])
      redis.call('HSET', jobkey(m[i]), 'broker', self)
    end
    out[#out + 1] = m[i]
    out[#out + 1] = m[i + 1]
  end
  if b ~= self then redis.call('DEL', K.inflight .. b) end
end
return out
)lua";

// ARGV: worker, session ttl ms. The worker died: its sessions are lost
// (later calls get SESSION_LOST until they expire). Returns the ids of the
// sessions' jobs that are still queued (the caller ends them SESSION_LOST).
constexpr const char* kLoseWorker = R"lua(
local worker, ttl = ARGV[1], ARGV[2]
local wk = K.sessions_w .. worker
local out = {}
for _, sid in ipairs(redis.call('SMEMBERS', wk)) do
  local sk = K.session .. sid
  if redis.call('EXISTS', sk) == 1 then
    local head = redis.call('HGET', sk, 'head') or ''
    if head ~= '' and redis.call('HGET', jobkey(head), 'status') == 'queued' then out[#out + 1] = head end
    for _, id in ipairs(redis.call('LRANGE', K.sq .. sid, 0, -1)) do out[#out + 1] = id end
    redis.call('DEL', K.sq .. sid)
    redis.call('HSET', sk, 'state', 'lost', 'head', '')
    redis.call('PEXPIRE', sk, ttl)
  end
end
redis.call('DEL', wk)
return out
)lua";

}  // namespace

const RedisScript& Tick() {
  static const RedisScript s(WithPrelude(kTick));
  return s;
}
const RedisScript& Claim() {
  static const RedisScript s(WithPrelude(kClaim));
  return s;
}
const RedisScript& LoseWorker() {
  static const RedisScript s(WithPrelude(kLoseWorker));
  return s;
}

}  // namespace kiln::broker::scripts
