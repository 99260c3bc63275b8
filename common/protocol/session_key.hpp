// A session's key inside the cluster: its tenant and the id the tenant gave
// it. Session ids are the tenant's own names ("main", "analysis-1"), so two
// tenants may use the same one without meeting: Redis keys, the worker
// protocol and the workers' session tables all use the key; the API shows
// only the tenant's id. Tenant names have no '/' (broker config), session
// ids neither (submit_request.cpp), so the split is unambiguous.
//
//   SessionKey("acme", "main") == "acme/main";  SessionIdOf("acme/main") == "main"
//
// Part of the worker protocol (docs/protocol.md, `session_id`). Callers: the
// broker's stores (Redis arguments), JobSpec::ToExecute and session API; the
// worker's logs (which name the tenant's id, as the broker's do).
#pragma once

#include <string>
#include <string_view>

namespace kiln::common::protocol {

inline std::string SessionKey(std::string_view tenant, std::string_view id) {
  std::string key;
  key.reserve(tenant.size() + 1 + id.size());
  key.append(tenant).append("/").append(id);
  return key;
}

inline std::string_view SessionIdOf(std::string_view key) {
  size_t slash = key.rfind('/');
  return slash == std::string_view::npos ? key : key.substr(slash + 1);
}

}  // namespace kiln::common::protocol
