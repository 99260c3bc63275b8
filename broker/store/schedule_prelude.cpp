// The Lua prelude shared by every scheduling script (schedule_prelude.hpp):
// the helpers that keep slots, queues and sessions consistent. Only
// WithPrelude reads it, for schedule_scripts.cpp and
// schedule_recovery_scripts.cpp.
#include "broker/store/schedule_prelude.hpp"

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

-- Lease counts for one pop, read once and kept current as it starts jobs
-- (counted): trying a queue's entries one after another then costs no
-- recount of every lease set per entry. Without one (admit), pick_worker
-- counts afresh.
local function new_counts(ctx)
  local c = {busy = {}, tenant = {}, conf = {}, global = nil, any_free = false}
  for _, w in ipairs(ctx.workers) do
    local busy = count_live(K.lease_w .. w.id, ctx.now)
    c.busy[w.id] = busy
    if busy < w.slots then c.any_free = true end
  end
  return c
end

local function counted(ctx, c, tenant, worker)
  c.busy[worker] = c.busy[worker] + 1
  c.any_free = false
  for _, w in ipairs(ctx.workers) do
    if c.busy[w.id] < w.slots then c.any_free = true end
  end
  if c.global then c.global = c.global + 1 end
  if c.tenant[tenant] then c.tenant[tenant] = c.tenant[tenant] + 1 end
end

local function tenant_conf_in(c, t)
  if not c then return tenant_conf(t) end
  local v = c.conf[t]
  if not v then
    local limit, weight = tenant_conf(t)
    v = {limit, weight}
    c.conf[t] = v
  end
  return v[1], v[2]
end

-- The least-loaded worker that may run a job now, or nil and why it waits.
-- `placement`: the job's placement token (its language, and its isolation
-- level unless standard), which the worker must offer. `c`: a pop's counts
-- (new_counts), or nil.
local function pick_worker(ctx, tenant, placement, pinned, new_session, c)
  if ctx.global_limit > 0 then
    local n
    if c then
      c.global = c.global or count_live(K.lease_global, ctx.now)
      n = c.global
    else
      n = count_live(K.lease_global, ctx.now)
    end
    if n >= ctx.global_limit then return nil, 'global' end
  end
  local tlimit = tenant_conf_in(c, tenant)
  if tlimit > 0 then
    local n
    if c then
      c.tenant[tenant] = c.tenant[tenant] or count_live(K.lease_t .. tenant, ctx.now)
      n = c.tenant[tenant]
    else
      n = count_live(K.lease_t .. tenant, ctx.now)
    end
    if n >= tlimit then return nil, 'tenant' end
  end
  local best, best_load, best_busy, offered = nil, 0, 0, false
  for _, w in ipairs(ctx.workers) do
    if (pinned == '' or w.id == pinned) and string.find(w.runtimes, ',' .. placement .. ',', 1, true) then
      offered = true
      local busy
      if c then busy = c.busy[w.id] else busy = count_live(K.lease_w .. w.id, ctx.now) end
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
-- `sess` (optional): the session's {worker =, epoch =} as the caller read
-- them in this script; `fresh`: the job has no wait_reason to clear (just
-- submitted). Both only save reading and writing again what is known.
local function start_job(ctx, id, tenant, worker, sid, sess, fresh)
  local exp = tostring(ctx.now + ctx.lease_ms)
  redis.call('ZADD', K.lease_global, exp, id)
  redis.call('ZADD', K.lease_t .. tenant, exp, id)
  redis.call('ZADD', K.lease_w .. worker, exp, id)
  redis.call('HSET', K.inflight .. ctx.broker, id, worker)
  local epoch = ''
  if sid ~= '' then
    local sk = K.session .. sid
    local bound
    if sess then bound = sess.worker else bound = redis.call('HGET', sk, 'worker') or '' end
    if bound == '' then
      redis.call('HSET', sk, 'worker', worker)
      redis.call('SADD', K.sessions_w .. worker, sid)
    end
    if sess then epoch = sess.epoch else epoch = epoch_of(sk) end
  end
  redis.call('HSET', jobkey(id), 'status', 'running', 'worker', worker, 'broker', ctx.broker,
             'started_ms', ctx.now_s, 'epoch', epoch)
  if not fresh then redis.call('HDEL', jobkey(id), 'wait_reason') end
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
-- caller ends it SESSION_LOST, and until then every pop that walks past it
-- names it again.
local function pop(ctx)
  local out = {}
  local started = 0
  local lost = {}
  local c = nil  -- new_counts, once there is a queue to walk
  while started < ctx.budget do
    -- Once this pop has taken the last free slot nothing more can start:
    -- the queue is not walked again (the next pop walks it).
    if c and not c.any_free then break end
    local active = redis.call('ZRANGE', K.active, 0, -1, 'WITHSCORES')
    if #active == 0 then break end
    -- Asked only when there is a queue: most pops find none.
    if not c and late(ctx) then break end
    c = c or new_counts(ctx)
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
              w, why = pick_worker(ctx, tenant, f[4] or f[1], pinned, sid ~= '' and pinned == '', c)
            end
            if w then
              redis.call('ZREM', qk, id)
              local epoch = start_job(ctx, id, tenant, w, sid)
              counted(ctx, c, tenant, w)
              local _, weight = tenant_conf_in(c, tenant)
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
  local s = redis.call('HMGET', sk, 'head', 'state', 'executions')
  if not s[1] and not s[2] and redis.call('EXISTS', sk) == 0 then return end
  if s[1] ~= id then
    redis.call('LREM', K.sq .. sid, 0, id)
    -- An execution that never became the head (denied, cancelled while
    -- awaiting approval): the idle session's TTL runs again.
    if s[1] == '' and redis.call('LLEN', K.sq .. sid) == 0 then
      redis.call('PEXPIRE', sk, ttl_ms)
    end
    return
  end
  local executions = (tonumber(s[3]) or 0) + 1  -- counted in the HSET below
  local nxt = redis.call('LPOP', K.sq .. sid)
  if nxt then
    redis.call('HSET', sk, 'last_used_ms', now, 'head', nxt, 'executions', executions)
    enqueue(tenant, nxt, redis.call('HGET', jobkey(nxt), 'score'))
  else
    if s[2] == 'busy' then
      redis.call('HSET', sk, 'last_used_ms', now, 'head', '', 'state', 'idle', 'executions',
                 executions)
    else
      redis.call('HSET', sk, 'last_used_ms', now, 'head', '', 'executions', executions)
    end
    redis.call('PEXPIRE', sk, ttl_ms)
  end
end

-- Lets an accepted job compete for slots: a session's execution waits
-- behind the one running (or queued) before it; otherwise it starts now if
-- its tenant has nothing queued ahead and a slot is free, else it queues.
-- `known` (optional, from the submit script): the job was just stored (no
-- wait_reason yet), `known.queued` is its tenant's queue length and, for a
-- session, `known` holds the session's {state =, head =, worker =, epoch =}
-- as that script read or made them.
-- Returns {'dispatched', worker, epoch} | {'queued', position, reason, epoch}
--       | {'error', code, message}.
local function admit(ctx, id, tenant, placement, sid, score, known)
  local jk = jobkey(id)
  local qk = K.q .. tenant
  local epoch = ''
  local pinned = ''
  if sid ~= '' then
    local sk = K.session .. sid
    local s = known
    if not s then
      if redis.call('EXISTS', sk) == 0 then
        return {'error', 'SESSION_NOT_FOUND', 'session ' .. shown(sid) .. ' was deleted'}
      end
      local f = redis.call('HMGET', sk, 'state', 'head', 'worker')
      s = {state = f[1], head = f[2] or '', worker = f[3] or '', epoch = epoch_of(sk)}
    end
    if s.state == 'lost' then
      return {'error', 'SESSION_LOST', 'the worker holding session ' .. shown(sid) .. ' was lost; its state is gone'}
    end
    epoch = s.epoch
    redis.call('PERSIST', sk)
    if s.head ~= '' then
      -- One execution per session at a time, in submission order.
      local n = redis.call('RPUSH', K.sq .. sid, id)
      redis.call('HSET', jk, 'wait_reason', 'session')
      return {'queued', n + 1, 'session', epoch}
    end
    redis.call('HSET', sk, 'head', id, 'state', 'busy')
    pinned = s.worker
  end
  local queued
  if known then queued = known.queued else queued = redis.call('ZCARD', qk) end
  if queued == 0 then
    local w, why = pick_worker(ctx, tenant, placement, pinned, sid ~= '' and pinned == '')
    -- The submit script asked at its start (known), moments ago.
    if w and not known and late(ctx) then w, why = nil, 'worker' end
    if w then
      return {'dispatched', w,
              start_job(ctx, id, tenant, w, sid, {worker = pinned, epoch = epoch}, known ~= nil)}
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

}  // namespace

std::string WithPrelude(const char* body) { return keys::LuaKeyTable() + kPrelude + body; }

}  // namespace kiln::broker::scripts
