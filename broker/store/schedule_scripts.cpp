// The Lua scripts behind ScheduleStore and SessionStore. Each runs
// atomically in Redis, so slots, queues and sessions stay consistent however
// many brokers call them at once. Keys come from broker/store/redis_keys.hpp
// (the table K) and are documented in docs/architecture.md ("Redis keys").
#include "broker/store/schedule_scripts.hpp"

#include "broker/store/redis_keys.hpp"

namespace kiln::broker::scripts {
namespace {

// Shared helpers, prepended to every scheduling script.
//
// A scheduling context (ctx) comes last in ARGV, after each script's own
// fixed arguments: now_ms, deadline ms (wall clock, checked against Redis's
// TIME; 0: none), lease_ms, broker id, global limit (0: none), sessions per
// worker, queue entries scanned per tenant, jobs to start at most, worker
// count, then per worker: id, slots, ",token,token," (the placement tokens it
// offers, e.g. ",python,shell," or ",python@gvisor,": PlacementToken in
// broker/job/isolation.hpp spells them; these scripts only compare them).
constexpr const char* kPrelude = R"lua(
local TERMINAL = {succeeded = true, failed = true, timed_out = true, memory_exceeded = true,
                  cancelled = true, rejected = true, error = true}
local function jobkey(id) return K.job .. id end
-- Sessions are keyed '<tenant>/<id>' (broker/job/session_key.hpp); messages
-- to the tenant name the id it chose.
local function shown(sid) return (string.gsub(sid, '^.*/', '')) end
-- A session's epoch as the broker reads it, '<incarnation>/<generation>'
-- (SessionEpoch in broker/job/job.hpp), or '' for no session.
local function epoch_of(sk)
  local e = redis.call('HMGET', sk, 'epoch', 'generation')
  if not e[1] then return '' end
  return e[1] .. '/' .. (e[2] or '1')
end

local function read_ctx(i)
  local c = {now = tonumber(ARGV[i]), now_s = ARGV[i], deadline = tonumber(ARGV[i + 1]),
             lease_ms = tonumber(ARGV[i + 2]), broker = ARGV[i + 3],
             global_limit = tonumber(ARGV[i + 4]), wsess_cap = tonumber(ARGV[i + 5]),
             scan = tonumber(ARGV[i + 6]), budget = tonumber(ARGV[i + 7]), workers = {}}
  local n = tonumber(ARGV[i + 8])
  for k = 0, n - 1 do
    local j = i + 9 + 3 * k
    c.workers[#c.workers + 1] = {id = ARGV[j], slots = tonumber(ARGV[j + 1]), runtimes = ARGV[j + 2]}
  end
  return c
end

-- Whether Redis runs this script after the broker stopped waiting for its
-- answer (Redis was paused or slow). Such a script starts no job: the
-- broker would never learn of the start and never send the job, and a
-- submit it answered 503 must not be stored.
local function late(ctx)
  if ctx.deadline <= 0 then return false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > ctx.deadline
end

-- Leases are sorted-set members scored by their expiry: expired ones are
-- dropped before counting, so a dead holder's slots come back by themselves.
local function count_live(key, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- A tenant's slot limit (0: none) and weight, published by the brokers.
local function tenant_conf(t)
  local v = redis.call('HGET', K.tenants, t)
  if v then
    local limit, weight = string.match(v, '^(%d+) (%d+)')
    if limit then return tonumber(limit), math.max(tonumber(weight), 1) end
  end
  return 0, 1
end

-- The least-loaded worker that may run a job now, or nil and why it waits.
-- `placement`: the job's placement token (its language, and its isolation
-- level unless standard), which the worker must offer.
local function pick_worker(ctx, tenant, placement, pinned, new_session)
  if ctx.global_limit > 0 and count_live(K.lease_global, ctx.now) >= ctx.global_limit then
    return nil, 'global'
  end
  local tlimit = tenant_conf(tenant)
  if tlimit > 0 and count_live(K.lease_t .. tenant, ctx.now) >= tlimit then
    return nil, 'tenant'
  end
  local best, best_load, best_busy, offered = nil, 0, 0, false
  for _, w in ipairs(ctx.workers) do
    if (pinned == '' or w.id == pinned) and string.find(w.runtimes, ',' .. placement .. ',', 1, true) then
      offered = true
      local busy = count_live(K.lease_w .. w.id, ctx.now)
      if busy < w.slots and (not new_session or
          redis.call('SCARD', K.sessions_w .. w.id) < ctx.wsess_cap) then
        local load = busy / w.slots
        if best == nil or load < best_load or (load == best_load and busy < best_busy) then
          best, best_load, best_busy = w.id, load, busy
        end
      end
    end
  end
  if best then return best end
  if not offered then
    if pinned ~= '' then return nil, 'session_worker' end
    return nil, 'runtime'
  end
  return nil, 'worker'
end

-- Takes the three leases and marks the job running on `worker`, owned by
-- this broker; binds a new session to the worker. Returns the session epoch.
local function start_job(ctx, id, tenant, worker, sid)
  local exp = ctx.now + ctx.lease_ms
  redis.call('ZADD', K.lease_global, exp, id)
  redis.call('ZADD', K.lease_t .. tenant, exp, id)
  redis.call('ZADD', K.lease_w .. worker, exp, id)
  redis.call('HSET', K.inflight .. ctx.broker, id, worker)
  local epoch = ''
  if sid ~= '' then
    local sk = K.session .. sid
    if (redis.call('HGET', sk, 'worker') or '') == '' then
      redis.call('HSET', sk, 'worker', worker)
      redis.call('SADD', K.sessions_w .. worker, sid)
    end
    epoch = epoch_of(sk)
  end
  redis.call('HSET', jobkey(id), 'status', 'running', 'worker', worker, 'broker', ctx.broker,
             'started_ms', ctx.now_s, 'epoch', epoch)
  redis.call('HDEL', jobkey(id), 'wait_reason')
  return epoch
end

-- Puts a job in its tenant's queue; a tenant that becomes active starts at
-- the current virtual time, so an idle tenant banks no credit.
local function enqueue(tenant, id, score)
  redis.call('ZADD', K.q .. tenant, score, id)
  local v = redis.call('GET', K.vtime) or '0'
  redis.call('ZADD', K.active, 'NX', v, tenant)
end

-- Starts up to ctx.budget queued jobs. Tenants are served by stride
-- scheduling (weighted round-robin): the active tenant with the lowest pass
-- goes first and its pass grows by 1e6 / weight per started job. Within a
-- tenant the queue is ordered by priority, then submission; the first
-- ctx.scan entries are tried so one job waiting for a busy session worker
-- does not hold up the others. Returns id, worker, spec, epoch per job; a
-- worker of '' marks an execution of a lost session (its worker died): the
-- caller ends it SESSION_LOST, and until then every pop names it again.
local function pop(ctx)
  local out = {}
  if late(ctx) then return out end
  local started = 0
  local lost = {}
  while started < ctx.budget do
    local active = redis.call('ZRANGE', K.active, 0, -1, 'WITHSCORES')
    if #active == 0 then break end
    local placed = false
    for a = 1, #active, 2 do
      local tenant, pass = active[a], active[a + 1]
      local qk = K.q .. tenant
      local ids = redis.call('ZRANGE', qk, 0, ctx.scan - 1)
      if #ids == 0 then
        redis.call('ZREM', K.active, tenant)
      else
        for _, id in ipairs(ids) do
          local f = redis.call('HMGET', jobkey(id), 'language', 'session', 'spec', 'placement')
          if not f[1] then
            redis.call('ZREM', qk, id)  -- its record expired
          else
            local sid = f[2] or ''
            local pinned, state = '', ''
            if sid ~= '' then
              local s = redis.call('HMGET', K.session .. sid, 'worker', 'state')
              pinned, state = s[1] or '', s[2] or ''
            end
            local w, why = nil, nil
            if state == 'lost' then
              -- Never started elsewhere: a fresh interpreter would silently
              -- run it without the session's state.
              why = 'session_lost'
              if not lost[id] then
                lost[id] = true
                out[#out + 1] = id
                out[#out + 1] = ''
                out[#out + 1] = f[3]
                out[#out + 1] = ''
              end
            else
              -- Jobs queued before placement tokens existed hold only a language.
              w, why = pick_worker(ctx, tenant, f[4] or f[1], pinned, sid ~= '' and pinned == '')
            end
            if w then
              redis.call('ZREM', qk, id)
              local epoch = start_job(ctx, id, tenant, w, sid)
              local _, weight = tenant_conf(tenant)
              redis.call('SET', K.vtime, pass)
              redis.call('ZINCRBY', K.active, 1000000 / weight, tenant)
              if redis.call('ZCARD', qk) == 0 then redis.call('ZREM', K.active, tenant) end
              out[#out + 1] = id
              out[#out + 1] = w
              out[#out + 1] = f[3]
              out[#out + 1] = epoch
              started = started + 1
              placed = true
              break
            elseif why == 'global' then
              return out
            elseif why == 'tenant' then
              break
            end
            redis.call('HSET', jobkey(id), 'wait_reason', why)
          end
        end
      end
      if placed then break end
    end
    if not placed then break end
  end
  return out
end

-- After a session's current execution ends: the next waiting one (if any)
-- joins its tenant's queue, else the session idles and its TTL runs.
local function session_after(sid, id, tenant, now, ttl_ms)
  local sk = K.session .. sid
  if redis.call('EXISTS', sk) == 0 then return end
  if redis.call('HGET', sk, 'head') ~= id then
    redis.call('LREM', K.sq .. sid, 0, id)
    -- An execution that never became the head (denied, cancelled while
    -- awaiting approval): the idle session's TTL runs again.
    if redis.call('HGET', sk, 'head') == '' and redis.call('LLEN', K.sq .. sid) == 0 then
      redis.call('PEXPIRE', sk, ttl_ms)
    end
    return
  end
  redis.call('HSET', sk, 'last_used_ms', now)
  redis.call('HINCRBY', sk, 'executions', 1)
  local nxt = redis.call('LPOP', K.sq .. sid)
  if nxt then
    redis.call('HSET', sk, 'head', nxt)
    enqueue(tenant, nxt, redis.call('HGET', jobkey(nxt), 'score'))
  else
    redis.call('HSET', sk, 'head', '')
    if redis.call('HGET', sk, 'state') == 'busy' then redis.call('HSET', sk, 'state', 'idle') end
    redis.call('PEXPIRE', sk, ttl_ms)
  end
end

-- Lets an accepted job compete for slots: a session's execution waits
-- behind the one running (or queued) before it; otherwise it starts now if
-- its tenant has nothing queued ahead and a slot is free, else it queues.
-- Returns {'dispatched', worker, epoch} | {'queued', position, reason, epoch}
--       | {'error', code, message}.
local function admit(ctx, id, tenant, placement, sid, score)
  local jk = jobkey(id)
  local qk = K.q .. tenant
  local epoch = ''
  local pinned = ''
  if sid ~= '' then
    local sk = K.session .. sid
    if redis.call('EXISTS', sk) == 0 then
      return {'error', 'SESSION_NOT_FOUND', 'session ' .. shown(sid) .. ' was deleted'}
    end
    if redis.call('HGET', sk, 'state') == 'lost' then
      return {'error', 'SESSION_LOST', 'the worker holding session ' .. shown(sid) .. ' was lost; its state is gone'}
    end
    epoch = epoch_of(sk)
    redis.call('PERSIST', sk)
    if (redis.call('HGET', sk, 'head') or '') ~= '' then
      -- One execution per session at a time, in submission order.
      local n = redis.call('RPUSH', K.sq .. sid, id)
      redis.call('HSET', jk, 'wait_reason', 'session')
      return {'queued', n + 1, 'session', epoch}
    end
    redis.call('HSET', sk, 'head', id, 'state', 'busy')
    pinned = redis.call('HGET', sk, 'worker') or ''
  end
  if redis.call('ZCARD', qk) == 0 then
    local w, why = pick_worker(ctx, tenant, placement, pinned, sid ~= '' and pinned == '')
    if w and late(ctx) then w, why = nil, 'worker' end
    if w then
      return {'dispatched', w, start_job(ctx, id, tenant, w, sid)}
    end
    redis.call('HSET', jk, 'wait_reason', why)
    enqueue(tenant, id, score)
    return {'queued', 1, why, epoch}
  end
  enqueue(tenant, id, score)
  redis.call('HSET', jk, 'wait_reason', 'fifo')
  return {'queued', redis.call('ZRANK', qk, id) + 1, 'fifo', epoch}
end
)lua";

// ARGV: id, tenant, language, session, priority (0-9), job ttl s, spec,
// warnings (JSON array, '' for none), idempotency key, tenant queue cap,
// tenant session cap, session ttl ms, conversation, created ms, hold ('1':
// needs approval), approval deadline ms, placement token (what a worker must
// offer: PlacementToken), isolation level, then ctx. Until the job ends its
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
local ctx = read_ctx(19)
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
if sid ~= '' then
  local s = redis.call('HMGET', sk, 'tenant', 'language', 'state', 'head')
  if s[1] then
    if s[1] ~= tenant then return {'error', 'SESSION_FORBIDDEN', 'session ' .. shown(sid) .. ' belongs to another tenant'} end
    if s[2] ~= language then
      return {'error', 'SESSION_LANGUAGE_MISMATCH', 'session ' .. shown(sid) .. ' runs ' .. s[2] .. ', not ' .. language}
    end
    if s[3] == 'lost' then
      return {'error', 'SESSION_LOST', 'the worker holding session ' .. shown(sid) .. ' was lost; its state is gone'}
    end
    epoch = epoch_of(sk)
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
if redis.call('ZCARD', qk) >= max_queue then
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
  redis.call('ZADD', K.sessions_t .. tenant, created, sid)
end
local seq = redis.call('INCR', K.seq)
-- Priority first (9 before 0), then submission order; exact in a double.
local score = string.format('%.0f', (9 - priority) * 1e13 + seq)
local jk = jobkey(id)
redis.call('HSET', jk, 'spec', spec, 'status', 'queued', 'tenant', tenant, 'language', language,
           'isolation', isolation, 'placement', placement, 'session', sid, 'score', score,
           'created_ms', created)
if warnings ~= '' then redis.call('HSET', jk, 'warnings', warnings) end
redis.call('EXPIRE', jk, ttl)
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
else
  redis.call('HSET', jk, 'approval', 'auto')
end
return admit(ctx, id, tenant, placement, sid, score)
)lua";

// ARGV: id, status, record, job ttl s, expect, session
// ttl ms, new session epoch ('<incarnation>/<generation>'; '' unless the worker reset the
// session), then ctx. Stores a terminal
// record unless the job has already ended (one terminal state, whoever writes first), releases its
// leases and queue places, moves its session on, announces it, then starts queued jobs. `expect` is
// 'any' or the status the job must still have ('queued', 'awaiting_approval'). Returns {'stored' |
// 'ended' | 'missing' | 'state', {pop output}, status, approval ('auto', 'trusted_session',
// 'admin:<n>', 'none')}.
constexpr const char* kFinish = R"lua(
local id, status, record, ttl, expect, sess_ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local new_epoch = ARGV[7]
local ctx = read_ctx(8)
local jk = jobkey(id)
local cur = redis.call('HMGET', jk, 'status', 'tenant', 'worker', 'broker', 'session')
if not cur[1] then return {'missing', pop(ctx), '', ''} end
if TERMINAL[cur[1]] then return {'ended', pop(ctx), cur[1], ''} end
if expect ~= 'any' and cur[1] ~= expect then return {'state', {}, cur[1], ''} end
local tenant, worker, owner, sid = cur[2], cur[3] or '', cur[4] or '', cur[5] or ''
redis.call('HSET', jk, 'record', record, 'status', status, 'finished_ms', ctx.now_s)
redis.call('ZADD', K.audit_pending, ctx.now, id)  -- AuditStore: until its entry is written
redis.call('HDEL', jk, 'wait_reason')
redis.call('EXPIRE', jk, ttl)
local qk = K.q .. tenant
if redis.call('ZREM', qk, id) == 1 and redis.call('ZCARD', qk) == 0 then
  redis.call('ZREM', K.active, tenant)
end
redis.call('ZREM', K.lease_global, id)
redis.call('ZREM', K.lease_t .. tenant, id)
redis.call('ZREM', K.approvals, id)
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
return {'stored', pop(ctx), status, redis.call('HGET', jk, 'approval') or 'none'}
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

std::string WithPrelude(const char* body) { return keys::LuaKeyTable() + kPrelude + body; }

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
