#include "broker/store/session_store.hpp"

#include "broker/store/schedule_scripts.hpp"
#include "common/protocol/session_key.hpp"

namespace kiln::broker {
namespace {

int64_t ToInt(const std::string& s) { return std::strtoll(s.c_str(), nullptr, 10); }

}  // namespace

nlohmann::json SessionInfo::ToJson() const {
  auto opt = [](const std::string& s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
  };
  return {{"id", id},
          {"language", language},
          {"worker", opt(worker)},
          {"state", state},
          {"epoch", epoch},
          {"created_at", created_ms},
          {"last_used_at", last_used_ms},
          {"execution_count", executions},
          {"conversation_id", opt(conversation_id)}};
}

common::StatusOr<std::vector<SessionInfo>> SessionStore::List(const std::string& tenant,
                                                              const std::string& conversation) {
  auto conn = pool_->Acquire();
  auto reply = conn->Eval(scripts::ListSessions(), {tenant, conversation});
  if (!reply.ok()) return reply.status().WithContext("listing sessions");
  std::vector<SessionInfo> out;
  for (const auto& e : reply->elements) {
    if (e.elements.empty()) continue;
    SessionInfo s;
    s.id = std::string(common::protocol::SessionIdOf(e.elements[0].str));
    for (size_t i = 1; i + 1 < e.elements.size(); i += 2) {
      const std::string& k = e.elements[i].str;
      const std::string& v = e.elements[i + 1].str;
      if (k == "tenant")
        s.tenant = v;
      else if (k == "language")
        s.language = v;
      else if (k == "worker")
        s.worker = v;
      else if (k == "state")
        s.state = v;
      else if (k == "conversation")
        s.conversation_id = v;
      else if (k == "generation")
        s.epoch = static_cast<uint64_t>(ToInt(v));
      else if (k == "created_ms")
        s.created_ms = ToInt(v);
      else if (k == "last_used_ms")
        s.last_used_ms = ToInt(v);
      else if (k == "executions")
        s.executions = static_cast<uint64_t>(ToInt(v));
    }
    out.push_back(std::move(s));
  }
  return out;
}

common::StatusOr<DeletedSession> SessionStore::Delete(const std::string& tenant,
                                                      const std::string& id) {
  auto conn = pool_->Acquire();
  auto reply =
      conn->Eval(scripts::DeleteSession(), {tenant, common::protocol::SessionKey(tenant, id)});
  if (!reply.ok()) return reply.status().WithContext("deleting session " + id);
  const auto& e = reply->elements;
  if (e.empty() || e[0].str != "deleted") {
    // Session keys carry the tenant: another tenant's session of the same
    // name is a different session, and this one does not exist.
    return common::Status(common::Code::kSessionNotFound, "no session with id " + id);
  }
  if (e.size() != 4) return common::Internal("redis: unexpected reply deleting a session");
  DeletedSession d{e[1].str, e[2].str, {}};
  for (const auto& q : e[3].elements) d.queued_jobs.push_back(q.str);
  return d;
}

common::StatusOr<std::vector<std::string>> SessionStore::LoseWorker(const std::string& worker) {
  auto conn = pool_->Acquire();
  auto reply = conn->Eval(scripts::LoseWorker(), {worker, std::to_string(ttl_ms_)});
  if (!reply.ok()) return reply.status().WithContext("losing the sessions of " + worker);
  std::vector<std::string> out;
  for (const auto& q : reply->elements) out.push_back(q.str);
  return out;
}

}  // namespace kiln::broker
