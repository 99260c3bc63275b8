#include "common/network_policy.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "common/json/bounded_json.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::common {
namespace {

constexpr size_t kMaxNameBytes = 253;  // RFC 1035, without the trailing dot

bool IsLabelChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// A DNS name of lowercase labels: 1-63 characters of [a-z0-9_-], not
// starting or ending with '-'. ('_' appears in real service names.)
bool IsDnsName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    if (!std::all_of(label.begin(), label.end(), IsLabelChar)) return false;
    start = dot + 1;
  }
  return true;
}

bool EndsWithLabels(std::string_view host, std::string_view suffix) {
  return host.size() > suffix.size() + 1 && host.ends_with(suffix) &&
         host[host.size() - suffix.size() - 1] == '.';
}

bool HostMatches(std::string_view pattern, std::string_view host) {
  if (pattern == "*") return true;
  if (pattern.starts_with("*."))
    return !IsIpv4Literal(host) && EndsWithLabels(host, pattern.substr(2));
  return pattern == host;
}

uint64_t ReadCount(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (!it->is_number_unsigned()) throw std::invalid_argument(std::string(key) + ": not a count");
  return it->get<uint64_t>();
}

}  // namespace

bool IsIpv4Literal(std::string_view host) {
  if (host.empty() || host.size() > 15) return false;
  std::string s(host);
  in_addr a;
  // inet_pton takes only the dotted-quad form: no "0x7f.1" or "2130706433".
  return ::inet_pton(AF_INET, s.c_str(), &a) == 1;
}

StatusOr<std::string> NormalizeHost(std::string_view host) {
  std::string h(host);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  if (h.size() > 1 && h.back() == '.') h.pop_back();
  if (IsIpv4Literal(h) || IsDnsName(h)) return h;
  return InvalidRequest("'" + std::string(host.substr(0, 64)) +
                        "' is not a DNS name or an IPv4 address");
}

std::string Destination::ToString() const {
  return host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
}

StatusOr<Destination> ParseDestination(std::string_view text) {
  if (text.size() > protocol::kMaxDestinationBytes) {
    return InvalidRequest("longer than " + std::to_string(protocol::kMaxDestinationBytes) +
                          " bytes");
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return InvalidRequest("'" + std::string(text) + "' has no port (write host:port, e.g. " +
                          "api.github.com:443, or host:* for any port)");
  }
  std::string_view host = text.substr(0, colon), port = text.substr(colon + 1);
  Destination d;
  if (port != "*") {
    unsigned value = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
      return InvalidRequest("'" + std::string(text) + "': the port must be 1-65535 or *");
    }
    d.port = static_cast<uint16_t>(value);
  }
  if (host == "*") {
    d.host = "*";
    return d;
  }
  const bool wildcard = host.starts_with("*.");
  auto name = NormalizeHost(wildcard ? host.substr(2) : host);
  if (!name.ok() || (wildcard && IsIpv4Literal(*name))) {
    return InvalidRequest("'" + std::string(text) +
                          "': the host must be a DNS name, *.name, * or an IPv4 address");
  }
  d.host = wildcard ? "*." + *name : *name;
  return d;
}

StatusOr<std::vector<Destination>> ParseDestinations(const std::vector<std::string>& texts,
                                                     std::string_view field) {
  if (texts.size() > protocol::kMaxNetworkDestinations) {
    return Status(Code::kLimitExceeded, std::string(field) + ": " + std::to_string(texts.size()) +
                                            " destinations, above the maximum of " +
                                            std::to_string(protocol::kMaxNetworkDestinations));
  }
  std::vector<Destination> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = std::string(field) + "[" + std::to_string(i) + "]: ";
    auto d = ParseDestination(texts[i]);
    if (!d.ok()) return InvalidRequest(where + d.status().message());
    if (!seen.insert(d->ToString()).second) {
      return InvalidRequest(where + d->ToString() + " is listed twice");
    }
    out.push_back(*std::move(d));
  }
  return out;
}

bool Matches(const std::vector<Destination>& list, std::string_view host, uint16_t port) {
  return std::any_of(list.begin(), list.end(), [&](const Destination& d) {
    return (d.port == 0 || d.port == port) && HostMatches(d.host, host);
  });
}

bool Covers(const std::vector<Destination>& policy, const Destination& requested) {
  return std::any_of(policy.begin(), policy.end(), [&](const Destination& p) {
    if (p.port != 0 && p.port != requested.port) return false;
    if (p.host == "*") return true;
    if (requested.host == "*") return false;
    if (!requested.host.starts_with("*.")) return HostMatches(p.host, requested.host);
    // A wildcard is covered by the same wildcard or a wider one.
    if (!p.host.starts_with("*.")) return false;
    std::string_view want = std::string_view(requested.host).substr(2);
    std::string_view have = std::string_view(p.host).substr(2);
    return want == have || EndsWithLabels(want, have);
  });
}

nlohmann::json NetworkUsage::ToJson() const {
  nlohmann::json dests = nlohmann::json::array();
  for (const auto& d : destinations) {
    nlohmann::json e = {
        {"host", d.host}, {"port", d.port}, {"allowed", d.allowed}, {"count", d.count}};
    if (!d.allowed) e["reason"] = d.reason;
    dests.push_back(std::move(e));
  }
  nlohmann::json j = {{"connections", connections},
                      {"refused", refused},
                      {"bytes_in", bytes_in},
                      {"bytes_out", bytes_out},
                      {"destinations", std::move(dests)}};
  if (destinations_truncated) j["destinations_truncated"] = true;
  if (!limit.empty()) j["limit"] = limit;
  return j;
}

StatusOr<NetworkUsage> NetworkUsage::FromJson(std::string_view text) {
  if (text.size() > protocol::kMaxNetworkUsageBytes)
    return InvalidRequest("network usage too large");
  auto parsed = ParseJson(text, {.max_depth = 4, .max_values = 4096}, "network usage");
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return InvalidRequest("network usage: not an object");
  static const std::set<std::string> kReasons = {"not_allowed", "address_refused", "resolve_failed",
                                                 "connect_failed", "limit"};
  try {
    NetworkUsage u;
    u.connections = ReadCount(j, "connections");
    u.refused = ReadCount(j, "refused");
    u.bytes_in = ReadCount(j, "bytes_in");
    u.bytes_out = ReadCount(j, "bytes_out");
    if (auto it = j.find("limit"); it != j.end()) {
      u.limit = it->get<std::string>();
      if (u.limit != "bytes" && u.limit != "connections")
        return InvalidRequest("network usage: limit");
    }
    u.destinations_truncated = j.value("destinations_truncated", false);
    const nlohmann::json& dests = j.at("destinations");
    if (!dests.is_array() || dests.size() > protocol::kMaxNetworkDestinations) {
      return InvalidRequest("network usage: destinations");
    }
    for (const auto& e : dests) {
      DestinationUse d;
      auto host = NormalizeHost(e.at("host").get<std::string>());
      if (!host.ok()) return InvalidRequest("network usage: a destination's host");
      d.host = *std::move(host);
      const uint64_t port = e.at("port").get<uint64_t>();
      if (port == 0 || port > 65535) return InvalidRequest("network usage: a destination's port");
      d.port = static_cast<uint16_t>(port);
      d.allowed = e.at("allowed").get<bool>();
      d.count = ReadCount(e, "count");
      if (!d.allowed) {
        d.reason = e.at("reason").get<std::string>();
        if (!kReasons.count(d.reason)) return InvalidRequest("network usage: a refusal's reason");
      }
      u.destinations.push_back(std::move(d));
    }
    return u;
  } catch (const std::exception& e) {
    return InvalidRequest(std::string("network usage: ") + e.what());
  }
}

}  // namespace kiln::common
