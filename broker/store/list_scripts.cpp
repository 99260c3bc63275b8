#include "broker/store/list_scripts.hpp"

#include "broker/store/redis_keys.hpp"

namespace kiln::broker::scripts {
namespace {

// ARGV: tenant, the newest bound of XREVRANGE ('(' entry id: exclusive; an
// ms alone: inclusive; '+': none), the oldest ('-': none), scan budget,
// limit, session key ('' any), then the statuses wanted (none: any). The
// tenant's list is a stream of {id = <job id>} entries in submission order
// (the submit script and JobStore::CreateEnded add them). Looks at up to
// `budget` entries, newest first; one whose job hash has expired is deleted.
// Returns {{{id, status, language, session, created_ms, started_ms,
// finished_ms}, ...}, next cursor ('' when nothing older is left)}.
constexpr const char* kListJobs = R"lua(
local lk = K.jobs_t .. ARGV[1]
local newest, oldest, budget, limit, skey = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local want = nil
if #ARGV > 6 then
  want = {}
  for i = 7, #ARGV do want[ARGV[i]] = true end
end
local entries = redis.call('XREVRANGE', lk, newest, oldest, 'COUNT', budget)
local items, seen = {}, 0
for _, e in ipairs(entries) do
  seen = seen + 1
  local id = e[2][2]
  local f = redis.call('HMGET', K.job .. id, 'status', 'language', 'session', 'created_ms',
                       'started_ms', 'finished_ms')
  if not f[1] then
    redis.call('XDEL', lk, e[1])
  elseif (want == nil or want[f[1]]) and (skey == '' or f[3] == skey) then
    items[#items + 1] = {id, f[1], f[2] or '', f[3] or '', f[4] or '', f[5] or '', f[6] or ''}
    if #items == limit then break end
  end
end
local next_cursor = ''
if seen < #entries or #entries == budget then next_cursor = entries[seen][1] end
return {items, next_cursor}
)lua";

}  // namespace

const RedisScript& ListJobs() {
  static const RedisScript s(keys::LuaKeyTable() + kListJobs);
  return s;
}

}  // namespace kiln::broker::scripts
