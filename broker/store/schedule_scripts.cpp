// The Lua scripts behind ScheduleStore and SessionStore. Each runs
// atomically in Redis, so slots, queues and sessions stay consistent however
// many brokers call them at once. Keys come from broker/store/redis_keys.hpp
// (the table K) and are documented in docs/architecture.md ("Redis keys").
//
// This file: the scripts a job or a session request runs (submit, finish,
// requeue, approve, pump, load; list and delete sessions). The shared Lua
// prelude is in schedule_prelude.cpp; the broker's upkeep and recovery
// (Tick, Claim, LoseWorker) in schedule_recovery_scripts.cpp.
#include "broker/store/schedule_scripts.hpp"

#include "broker/store/schedule_prelude.hpp"

namespace kiln::broker::scripts {
namespace {

// ARGV: id, tenant, language, session, priority (0-9), job ttl s, spec,
// warnings (JSON array, '' for none), idempotency key, tenant queue cap,
// tenant session cap, session ttl ms, conversation, created ms, hold ('1':
// needs approval), approval deadline ms, placement token (what a worker must
// offer: PlacementToken), isolation level, callback ('1': the job has a
// callback_url, so its end enters the webhook outbox), then ctx. Until the job ends its
// state lives in the hash's fields only (JobStore::Load builds the record
// from them); the record JSON is written once, by the finish script.
// `language` is the job's and its session's language as clients see it.
// Returns {'replay', id} | {'error', code, message} | {'held', epoch} |
//         {'dispatched', worker, epoch} | {'queued', position, reason, epoch}.
constexpr const char* kSubmit = R"lua(
local id, tenant, language, sid = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local priority, ttl, spec, warnings, idem = tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local max_queue, sess_cap, sess_ttl = tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12]
local conversation, created = ARGV[13], ARGV[14]
local hold, approval_deadline, placement, isolation = ARGV[15], ARGV[16], ARGV[17], ARGV[18]
local callback = ARGV[19]
local ctx = read_ctx(20)
-- Too late, the client has been told 503 and may submit again: storing the
-- job as well would run it twice.
if late(ctx) then
  return {'error', 'UNAVAILABLE', 'redis answered the submit too late; nothing was stored'}
end
local idem_key = K.idem .. tenant .. ':' .. idem
if idem ~= '' then
  local earlier = redis.call('GET', idem_key)
  if earlier then return {'replay', earlier} end
end
local sk = K.session .. sid
local epoch, new_session = '', false
-- What admit needs of the session, read (or made) here once.
local known = {}
if sid ~= '' then
  local s = redis.call('HMGET', sk, 'tenant', 'language', 'state', 'head', 'worker', 'epoch',
                       'generation')
  if s[1] then
    if s[1] ~= tenant then return {'error', 'SESSION_FORBIDDEN', 'session ' .. shown(sid) .. ' belongs to another tenant'} end
    if s[2] ~= language then
      return {'error', 'SESSION_LANGUAGE_MISMATCH', 'session ' .. shown(sid) .. ' runs ' .. s[2] .. ', not ' .. language}
    end
    if s[3] == 'lost' then
      return {'error', 'SESSION_LOST', 'the worker holding session ' .. shown(sid) .. ' was lost; its state is gone'}
    end
    if s[6] then epoch = s[6] .. '/' .. (s[7] or '1') end  -- as epoch_of reads it
    known = {state = s[3], head = s[4] or '', worker = s[5] or '', epoch = epoch}
  else
    local tk = K.sessions_t .. tenant
    if redis.call('ZCARD', tk) >= sess_cap then
      -- Drop expired sessions from the index before refusing.
      for _, old in ipairs(redis.call('ZRANGE', tk, 0, -1)) do
        if redis.call('EXISTS', K.session .. old) == 0 then redis.call('ZREM', tk, old) end
      end
      if redis.call('ZCARD', tk) >= sess_cap then
        return {'error', 'SESSION_BUSY_LIMIT', 'tenant has ' .. sess_cap .. ' live sessions (the limit); delete one or let it expire'}
      end
    end
    new_session = true
  end
end
local qk = K.q .. tenant
known.queued = redis.call('ZCARD', qk)
if known.queued >= max_queue then
  return {'error', 'QUEUE_FULL', 'tenant queue holds ' .. max_queue .. ' jobs (the limit); retry later'}
end
if new_session then
  -- Its incarnation is unique across every session ever created: a session
  -- deleted and created again under the same id is a new one for the worker
  -- too. Clients see the generation: 1 for a new session.
  local incarnation = tostring(redis.call('INCR', K.epoch))
  redis.call('HSET', sk, 'tenant', tenant, 'language', language, 'state', 'idle', 'head', '',
             'worker', '', 'epoch', incarnation, 'generation', 1, 'created_ms', created,
             'last_used_ms', created, 'executions', 0, 'conversation', conversation)
  epoch = incarnation .. '/1'
  known = {state = 'idle', head = '', worker = '', epoch = epoch, queued = known.queued}
  redis.call('ZADD', K.sessions_t .. tenant, created, sid)
end
local seq = redis.call('INCR', K.seq)
-- Priority first (9 before 0), then submission order; exact in a double.
local score = string.format('%.0f', (9 - priority) * 1e13 + seq)
local jk = jobkey(id)
local fields = {'spec', spec, 'status', 'queued', 'tenant', tenant, 'language', language,
                'isolation', isolation, 'placement', placement, 'session', sid, 'score', score,
                'created_ms', created}
if warnings ~= '' then fields[#fields + 1] = 'warnings'; fields[#fields + 1] = warnings end
if callback == '1' then fields[#fields + 1] = 'callback'; fields[#fields + 1] = '1' end
if hold ~= '1' then fields[#fields + 1] = 'approval'; fields[#fields + 1] = 'auto' end
redis.call('HSET', jk, unpack(fields))
redis.call('EXPIRE', jk, ttl)
-- The tenant's list of executions (GET /v1/executions), in time order;
-- entries older than any record still kept go.
redis.call('XADD', K.jobs_t .. tenant, 'MINID', '~',
           string.format('%d', math.max(0, tonumber(created) - tonumber(ttl) * 1000)), '*', 'id', id)
if idem ~= '' then redis.call('SET', idem_key, id, 'EX', ttl) end
if hold == '1' then
  if sid ~= '' and redis.call('HGET', sk, 'trusted') == '1' then
    redis.call('HSET', jk, 'approval', 'trusted_session')
  else
    -- Waits for an admin; holds no slot and no place in any queue.
    redis.call('HSET', jk, 'status', 'awaiting_approval')
    redis.call('ZADD', K.approvals, approval_deadline, id)
    if sid ~= '' then redis.call('PERSIST', sk) end
    return {'held', epoch}
  end
end
return admit(ctx, id, tenant, placement, sid, score, known)
)lua";

// ARGV: id, status, record, job ttl s, expect, session
// ttl ms, new session epoch ('<incarnation>/<generation>'; '' unless the worker reset the
// session), usage day ('YYYY-MM-DD'), cpu µs, output bytes, usage ttl s, then ctx. Stores a
// terminal record unless the job has already ended (one terminal state, whoever writes first),
// releases its leases and queue places, moves its session on, announces it, then starts queued
// jobs. `expect` is 'any' or the status the job must still have ('queued', 'awaiting_approval').
// Returns {'stored' | 'ended' | 'missing' | 'state', {pop output}, status, approval ('auto',
// 'trusted_session', 'admin:<n>', 'none')}.
constexpr const char* kFinish = R"lua(
local id, status, record, ttl, expect, sess_ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local new_epoch, usage_day, cpu_us, output_bytes, usage_ttl = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local ctx = read_ctx(12)
local jk = jobkey(id)
local cur = redis.call('HMGET', jk, 'status', 'tenant', 'worker', 'broker', 'session', 'callback',
                      'approval', 'wait_reason')
if not cur[1] then return {'missing', pop(ctx), '', ''} end
if TERMINAL[cur[1]] then return {'ended', pop(ctx), cur[1], ''} end
if expect ~= 'any' and cur[1] ~= expect then return {'state', {}, cur[1], ''} end
local tenant, worker, owner, sid = cur[2], cur[3] or '', cur[4] or '', cur[5] or ''
redis.call('HSET', jk, 'record', record, 'status', status, 'finished_ms', ctx.now_s)
redis.call('ZADD', K.audit_pending, ctx.now_s, id)  -- AuditStore: until its entry is written
-- Its record goes to its callback_url (WebhookSender), once, from now.
if cur[6] == '1' then redis.call('ZADD', K.webhooks, 'NX', ctx.now_s, id) end
-- The tenant's usage of the day (GET /v1/usage), counted once: only the
-- first to end the job gets here.
local uk = K.usage .. tenant .. ':' .. usage_day
if redis.call('HINCRBY', uk, 'executions', 1) == 1 then redis.call('EXPIRE', uk, usage_ttl) end
if cpu_us ~= '0' then redis.call('HINCRBY', uk, 'cpu_us', cpu_us) end
if output_bytes ~= '0' then redis.call('HINCRBY', uk, 'output_bytes', output_bytes) end
if cur[8] then redis.call('HDEL', jk, 'wait_reason') end
redis.call('EXPIRE', jk, ttl)
-- A running job left its queue when it started and waits for no approval.
if cur[1] ~= 'running' then
  local qk = K.q .. tenant
  if redis.call('ZREM', qk, id) == 1 and redis.call('ZCARD', qk) == 0 then
    redis.call('ZREM', K.active, tenant)
  end
  redis.call('ZREM', K.approvals, id)
end
redis.call('ZREM', K.lease_global, id)
redis.call('ZREM', K.lease_t .. tenant, id)
if worker ~= '' then redis.call('ZREM', K.lease_w .. worker, id) end
if owner ~= '' then redis.call('HDEL', K.inflight .. owner, id) end
if sid ~= '' then
  if new_epoch ~= '' and redis.call('EXISTS', K.session .. sid) == 1 then
    local incarnation, generation = string.match(new_epoch, '^(%d+)/(%d+)$')
    if incarnation then
      redis.call('HSET', K.session .. sid, 'epoch', incarnation, 'generation', generation)
    end
  end
  session_after(sid, id, tenant, ctx.now_s, sess_ttl)
end
redis.call('PUBLISH', K.events, 'done ' .. id)
return {'stored', pop(ctx), status, cur[7] or 'none'}
)lua";

// ARGV: id, then ctx. A worker refused a running job (no free slot, or
// draining): give its leases back and put it in its old place in the queue.
// Returns the pop output.
constexpr const char* kRequeue = R"lua(
local id = ARGV[1]
local ctx = read_ctx(2)
local jk = jobkey(id)
local f = redis.call('HMGET', jk, 'status', 'tenant', 'worker', 'broker', 'session', 'score')
if f[1] ~= 'running' then return pop(ctx) end
local tenant, worker, owner, sid = f[2], f[3] or '', f[4] or '', f[5] or ''
redis.call('ZREM', K.lease_global, id)
redis.call('ZREM', K.lease_t .. tenant, id)
redis.call('ZREM', K.lease_w .. worker, id)
redis.call('HDEL', K.inflight .. owner, id)
redis.call('HSET', jk, 'status', 'queued', 'wait_reason', 'refused')
redis.call('HDEL', jk, 'worker', 'broker', 'started_ms', 'epoch')
if sid ~= '' then
  local sk = K.session .. sid
  -- A session that never ran anywhere may bind to another worker.
  if redis.call('HGET', sk, 'executions') == '0' and redis.call('HGET', sk, 'worker') == worker then
    redis.call('HSET', sk, 'worker', '')
    redis.call('SREM', K.sessions_w .. worker, sid)
  end
end
enqueue(tenant, id, f[6])
return pop(ctx)
)lua";

// ARGV: id, trust session ('1'/'0'), approver, then ctx. An admin approved
// a job awaiting approval: it competes for slots from now on (and, trusted,
// the rest of its session needs no approval).
// Returns {'missing'} | {'state', status} | admit's reply, with the job's
// spec appended when it was dispatched.
constexpr const char* kApprove = R"lua(
local id, trust, approver = ARGV[1], ARGV[2], ARGV[3]
local ctx = read_ctx(4)
local jk = jobkey(id)
local f = redis.call('HMGET', jk, 'status', 'tenant', 'language', 'session', 'score', 'spec',
                     'placement')
if not f[1] then return {'missing'} end
if f[1] ~= 'awaiting_approval' then return {'state', f[1]} end
local sid = f[4] or ''
redis.call('ZREM', K.approvals, id)
redis.call('HSET', jk, 'status', 'queued', 'approval', approver)
if trust == '1' and sid ~= '' and redis.call('EXISTS', K.session .. sid) == 1 then
  redis.call('HSET', K.session .. sid, 'trusted', '1')
end
local r = admit(ctx, id, f[2], f[7] or f[3], sid, f[5])
if r[1] == 'dispatched' then r[#r + 1] = f[6] end
if r[1] == 'error' then redis.call('HSET', jk, 'status', 'awaiting_approval') end
return r
)lua";

// ARGV: ctx. Starts queued jobs that can run now.
constexpr const char* kPump = R"lua(
return pop(read_ctx(1))
)lua";

// ARGV: id. The fields of a job's hash, from which a live job's record is
// built (a terminal job's stored record JobStore::Load reads with a plain
// HGET: it holds up to max_output_bytes of output, and passing it through
// Lua costs Redis about ten times what HGET does): status, worker, start,
// epoch, while queued its place in line and why it waits, then tenant,
// session key, language, isolation, created ms and warnings.
// Returns nil | {status, worker, started_ms, epoch, position, reason}.
constexpr const char* kLoad = R"lua(
local id = ARGV[1]
local f = redis.call('HMGET', jobkey(id), 'status', 'worker', 'started_ms', 'epoch', 'tenant',
                     'session', 'wait_reason', 'language', 'isolation', 'created_ms', 'warnings')
if not f[1] then return nil end
local position = -1
if f[1] == 'queued' then
  local r = redis.call('ZRANK', K.q .. f[5], id)
  if r then
    position = r + 1
  elseif (f[6] or '') ~= '' then
    local p = redis.call('LPOS', K.sq .. f[6], id)
    if p then position = p + 2 end
  end
end
return {f[1], f[2] or '', f[3] or '', f[4] or '', position, f[7] or '', f[5] or '', f[6] or '',
        f[8] or '', f[9] or '', f[10] or '', f[11] or ''}
)lua";

// ARGV: tenant, conversation ('' for all). The tenant's live sessions;
// expired ones leave the index. Returns per session {id, field, value, ...}.
constexpr const char* kListSessions = R"lua(
local tenant, conversation = ARGV[1], ARGV[2]
local tk = K.sessions_t .. tenant
local out = {}
for _, sid in ipairs(redis.call('ZRANGE', tk, 0, -1)) do
  local sk = K.session .. sid
  if redis.call('EXISTS', sk) == 0 then
    redis.call('ZREM', tk, sid)
  elseif conversation == '' or redis.call('HGET', sk, 'conversation') == conversation then
    local e = {sid}
    for _, v in ipairs(redis.call('HGETALL', sk)) do e[#e + 1] = v end
    out[#out + 1] = e
  end
end
return out
)lua";

// ARGV: tenant, session. Deletes a session of the tenant. Returns
// {'missing'} | {'forbidden'} |
// {'deleted', worker, running job or '', {queued job ids}}.
constexpr const char* kDeleteSession = R"lua(
local tenant, sid = ARGV[1], ARGV[2]
local sk = K.session .. sid
local s = redis.call('HMGET', sk, 'tenant', 'worker', 'head')
if not s[1] then return {'missing'} end
if s[1] ~= tenant then return {'forbidden'} end
local worker, head = s[2] or '', s[3] or ''
local queued = redis.call('LRANGE', K.sq .. sid, 0, -1)
local running = ''
if head ~= '' then
  if redis.call('HGET', jobkey(head), 'status') == 'queued' then
    queued[#queued + 1] = head
  else
    running = head
  end
end
redis.call('DEL', sk, K.sq .. sid)
redis.call('ZREM', K.sessions_t .. tenant, sid)
if worker ~= '' then redis.call('SREM', K.sessions_w .. worker, sid) end
return {'deleted', worker, running, queued}
)lua";

}  // namespace

const RedisScript& Submit() {
  static const RedisScript s(WithPrelude(kSubmit));
  return s;
}
const RedisScript& Finish() {
  static const RedisScript s(WithPrelude(kFinish));
  return s;
}
const RedisScript& Requeue() {
  static const RedisScript s(WithPrelude(kRequeue));
  return s;
}
const RedisScript& Approve() {
  static const RedisScript s(WithPrelude(kApprove));
  return s;
}
const RedisScript& Pump() {
  static const RedisScript s(WithPrelude(kPump));
  return s;
}
const RedisScript& Load() {
  static const RedisScript s(WithPrelude(kLoad));
  return s;
}
const RedisScript& ListSessions() {
  static const RedisScript s(WithPrelude(kListSessions));
  return s;
}
const RedisScript& DeleteSession() {
  static const RedisScript s(WithPrelude(kDeleteSession));
  return s;
}

}  // namespace kiln::broker::scripts
