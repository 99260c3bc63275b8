#include "broker/store/job_store.hpp"

namespace kiln::broker {
namespace {

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

common::Status JobStore::Create(const JobSpec& spec, const JobRecord& record) {
  const std::string key = JobKey(spec.id);
  auto conn = pool_->Acquire();
  auto r =
      conn->Pipeline({{"HSET", key, "spec", Dump(spec.ToJson()), "record", Dump(record.ToJson()),
                       "status", JobStatusName(record.status), "tenant", spec.tenant},
                      {"EXPIRE", key, ttl_s_}});
  return r.ok() ? common::Status::Ok() : r.status().WithContext("storing job " + spec.id);
}

common::StatusOr<std::string> JobStore::CreateIdempotent(const JobSpec& spec,
                                                         const JobRecord& record,
                                                         const std::string& key) {
  // KEYS: idem, job. ARGV: id, ttl, spec, record, status, tenant.
  static constexpr const char* kScript = R"lua(
local earlier = redis.call('GET', KEYS[1])
if earlier then return earlier end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('HSET', KEYS[2], 'spec', ARGV[3], 'record', ARGV[4], 'status', ARGV[5], 'tenant', ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return ''
)lua";
  const std::string idem = "{kiln}:idem:" + spec.tenant + ":" + key;
  const std::string job = JobKey(spec.id);
  const std::string spec_json = Dump(spec.ToJson());
  const std::string record_json = Dump(record.ToJson());
  auto conn = pool_->Acquire();
  auto r = conn->Command({"EVAL", kScript, "2", idem, job, spec.id, ttl_s_, spec_json, record_json,
                          JobStatusName(record.status), spec.tenant});
  if (!r.ok()) return r.status().WithContext("storing job " + spec.id);
  return r->str;
}

common::Status JobStore::Update(const JobRecord& record) {
  const std::string key = JobKey(record.id);
  auto conn = pool_->Acquire();
  auto r = conn->Pipeline(
      {{"HSET", key, "record", Dump(record.ToJson()), "status", JobStatusName(record.status)},
       {"EXPIRE", key, ttl_s_}});
  return r.ok() ? common::Status::Ok() : r.status().WithContext("updating job " + record.id);
}

common::StatusOr<JobRecord> JobStore::Load(const std::string& id) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"HGET", JobKey(id), "record"}));
  if (r.is_nil()) return common::NotFound("no execution with id " + id);
  auto j = nlohmann::json::parse(r.str, nullptr, false);
  if (j.is_discarded()) return common::Internal("stored record of " + id + " is not JSON");
  return JobRecord::FromJson(j);
}

common::StatusOr<JobSpec> JobStore::LoadSpec(const std::string& id) {
  auto conn = pool_->Acquire();
  ASSIGN_OR_RETURN(RedisReply r, conn->Command({"HGET", JobKey(id), "spec"}));
  if (r.is_nil()) return common::NotFound("no execution with id " + id);
  auto j = nlohmann::json::parse(r.str, nullptr, false);
  if (j.is_discarded()) return common::Internal("stored spec of " + id + " is not JSON");
  return JobSpec::FromJson(j);
}

common::Status JobStore::AppendChunk(const common::protocol::OutputChunk& c) {
  const std::string key = OutputKey(c.job_id);
  auto conn = pool_->Acquire();
  auto r =
      conn->Pipeline({{"XADD", key, "MAXLEN", "~", std::to_string(kMaxChunksKept), "*", "stream",
                       c.stream == common::protocol::Stream::kStdout ? "stdout" : "stderr", "seq",
                       std::to_string(c.seq), "data", c.data},
                      {"EXPIRE", key, ttl_s_}});
  return r.ok() ? common::Status::Ok() : r.status().WithContext("storing output of " + c.job_id);
}

common::StatusOr<std::vector<JobStore::StoredChunk>> JobStore::ReadChunks(
    RedisConnection* conn, const std::string& id, const std::string& after_id, int block_ms) {
  const std::string key = OutputKey(id);
  const std::string block = std::to_string(block_ms);
  std::vector<std::string_view> argv = {"XREAD", "COUNT", "256"};
  if (block_ms >= 0) {
    argv.push_back("BLOCK");
    argv.push_back(block);
  }
  for (std::string_view a :
       {std::string_view("STREAMS"), std::string_view(key), std::string_view(after_id)}) {
    argv.push_back(a);
  }
  ASSIGN_OR_RETURN(RedisReply r, conn->Command(argv));
  std::vector<StoredChunk> out;
  if (r.type != RedisReply::Type::kArray || r.elements.empty()) return out;  // timeout: nil
  // [[key, [[entry-id, [field, value, ...]], ...]]]
  const RedisReply& entries = r.elements[0].elements.at(1);
  for (const RedisReply& e : entries.elements) {
    StoredChunk sc;
    sc.event_id = e.elements.at(0).str;
    sc.chunk.job_id = id;
    const auto& f = e.elements.at(1).elements;
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      if (f[i].str == "stream") {
        sc.chunk.stream = f[i + 1].str == "stderr" ? common::protocol::Stream::kStderr
                                                   : common::protocol::Stream::kStdout;
      } else if (f[i].str == "seq") {
        sc.chunk.seq = std::strtoull(f[i + 1].str.c_str(), nullptr, 10);
      } else if (f[i].str == "data") {
        sc.chunk.data = f[i + 1].str;
      }
    }
    out.push_back(std::move(sc));
  }
  return out;
}

common::Status JobStore::Ping() {
  auto conn = pool_->Acquire();
  auto r = conn->Command({"PING"});
  return r.ok() ? common::Status::Ok() : r.status();
}

}  // namespace kiln::broker
