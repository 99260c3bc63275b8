#include "broker/store/output_scripts.hpp"

#include "broker/store/redis_keys.hpp"

namespace kiln::broker::scripts {
namespace {

// ARGV: job id, ttl_s, max entries kept, the sending worker ('' for the
// broker's own), then per chunk: stream ('stdout' or 'stderr'), seq, offset,
// data. A chunk is stored where it continues its
// stream (its offset at or before the stored end, its data past it: only the
// new bytes are kept), in entries of at most 64 KiB, with seq increasing
// (renumbered after the last stored one when needed: a completion sends 0).
// Nothing is stored unless the job is running, and on the sending worker:
// chunks never follow the end, and no worker writes another's output.
// Returns {stdout end, stderr end, entries stored}; {-1, -1, 0} when the job
// is not running, {-2, -2, 0} when it runs on another worker.
constexpr const char* kAppendOutput = R"lua(
local id = ARGV[1]
local jk = K.job .. id
local ok = K.out .. id
local f = redis.call('HMGET', jk, 'status', 'out_stdout', 'out_stderr', 'out_seq', 'worker')
if f[1] ~= 'running' then return {-1, -1, 0} end
if ARGV[4] ~= '' and f[5] ~= ARGV[4] then return {-2, -2, 0} end
local ends = {stdout = tonumber(f[2]) or 0, stderr = tonumber(f[3]) or 0}
local seq = tonumber(f[4]) or -1
local stored = 0
for i = 5, #ARGV - 3, 4 do
  local s, q, off, data = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
  local e = ends[s]
  if e and q and off and off <= e and off + #data > e then
    local pos = e - off + 1
    while pos <= #data do
      local piece = string.sub(data, pos, pos + 65535)
      if q <= seq then q = seq + 1 end
      redis.call('XADD', ok, 'MAXLEN', '~', ARGV[3], '*', 'stream', s, 'seq', string.format('%d', q),
                 'offset', string.format('%d', e), 'data', piece)
      seq = q
      e = e + #piece
      pos = pos + #piece
      stored = stored + 1
    end
    ends[s] = e
  end
end
if stored > 0 then
  redis.call('HSET', jk, 'out_stdout', string.format('%d', ends.stdout),
             'out_stderr', string.format('%d', ends.stderr), 'out_seq', string.format('%d', seq))
  redis.call('EXPIRE', ok, ARGV[2])
end
return {ends.stdout, ends.stderr, stored}
)lua";

}  // namespace

const RedisScript& AppendOutput() {
  static const RedisScript s(keys::LuaKeyTable() + kAppendOutput);
  return s;
}

}  // namespace kiln::broker::scripts
