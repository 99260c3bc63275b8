#include "broker/auth/endpoint_exposure.hpp"

#include <arpa/inet.h>

#include <string>

namespace kiln::broker {

bool IsLoopbackEndpoint(std::string_view endpoint) {
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) return true;
  if (!endpoint.starts_with("tcp://")) return false;
  std::string_view rest = endpoint.substr(6);
  // tcp://source;address:port binds nothing at `source`.
  if (auto semi = rest.find(';'); semi != std::string_view::npos) rest = rest.substr(semi + 1);
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string host(rest.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;  // a wildcard, an interface name or another host's name
}

common::Status CheckWorkerEndpointExposure(std::string_view endpoint, bool curve,
                                           bool allow_unauthenticated) {
  if (curve || allow_unauthenticated || IsLoopbackEndpoint(endpoint)) return common::Status::Ok();
  return common::InvalidRequest(
      "broker.workers.endpoint " + std::string(endpoint) +
      " is reachable from other hosts without CURVE: anyone who reaches it could register as a "
      "worker and receive jobs. Set broker.workers.secret_key_file and accepted_keys_dir "
      "(kiln keygen), or broker.workers.allow_unauthenticated: true on a network you trust");
}

}  // namespace kiln::broker
