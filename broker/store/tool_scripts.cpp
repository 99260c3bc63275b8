#include "broker/store/tool_scripts.hpp"

#include "broker/store/redis_keys.hpp"

namespace kiln::broker::scripts {
namespace {

// A call is one field of K.tools .. job: 'c<n>' -> "<state>|<worker's call
// number>|<deadline ms>|<worker>|<name>|<arguments sha256>|<answer sha256>",
// state p (waiting), a (answered with a result) or e (with an error); 'seq'
// counts the job's calls. Times are Redis' own (TIME), as in the other scripts.
constexpr const char* kNow = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
)lua";

// ARGV: job id, worker, worker's call number, name, arguments (JSON), their
// sha256, timeout ms, ttl s, max calls, max stream entries. Opens the call
// when the job is running on that worker and has calls left, and puts a
// tool_call entry on its output stream. Returns {n} (the call is 'c<n>'),
// {-1} not running, {-2} another worker's job, {-3} over max calls.
constexpr const char* kOpenToolCall = R"lua(
local id = ARGV[1]
local f = redis.call('HMGET', K.job .. id, 'status', 'worker')
if f[1] ~= 'running' then return {-1} end
if f[2] ~= ARGV[2] then return {-2} end
local tk = K.tools .. id
local n = redis.call('HINCRBY', tk, 'seq', 1)
redis.call('EXPIRE', tk, ARGV[8])
if n > tonumber(ARGV[9]) then return {-3} end
local call = 'c' .. n
redis.call('HSET', tk, call, table.concat(
  {'p', ARGV[3], string.format('%d', now + tonumber(ARGV[7])), ARGV[2], ARGV[4], ARGV[6], ''}, '|'))
local ok = K.out .. id
redis.call('XADD', ok, 'MAXLEN', '~', ARGV[10], '*', 'stream', 'tool_call', 'call', call,
           'name', ARGV[4], 'arguments', ARGV[5])
redis.call('EXPIRE', ok, ARGV[8])
return {n}
)lua";

// ARGV: job id, tenant, call ('c<n>'), 'a' or 'e', the answer's sha256,
// max stream entries. Answers a waiting call of a running job of the
// tenant's, once, before its deadline, and puts a tool_result entry on the
// stream. Returns {1, worker, worker's call number}, or {-1} unknown job or
// call (another tenant's too), {-2} answered already, {-3} timed out, {-4}
// the job is not running.
constexpr const char* kAnswerToolCall = R"lua(
local id = ARGV[1]
local f = redis.call('HMGET', K.job .. id, 'status', 'tenant')
if not f[1] or f[2] ~= ARGV[2] then return {-1} end
local tk = K.tools .. id
local rec = redis.call('HGET', tk, ARGV[3])
if not rec then return {-1} end
local state, wcall, deadline, worker, name, args =
  string.match(rec, '^(%a)|(%d+)|(%d+)|([^|]*)|([^|]*)|([^|]*)|')
if not state then return {-1} end
if state ~= 'p' then return {-2} end
if now > tonumber(deadline) then return {-3} end
if f[1] ~= 'running' then return {-4} end
redis.call('HSET', tk, ARGV[3],
  table.concat({ARGV[4], wcall, deadline, worker, name, args, ARGV[5]}, '|'))
redis.call('XADD', K.out .. id, 'MAXLEN', '~', ARGV[6], '*', 'stream', 'tool_result', 'call',
           ARGV[3], 'ok', ARGV[4] == 'a' and '1' or '0')
return {1, worker, wcall}
)lua";

}  // namespace

const RedisScript& OpenToolCall() {
  static const RedisScript s(keys::LuaKeyTable() + kNow + kOpenToolCall);
  return s;
}

const RedisScript& AnswerToolCall() {
  static const RedisScript s(keys::LuaKeyTable() + kNow + kAnswerToolCall);
  return s;
}

}  // namespace kiln::broker::scripts
