#include "broker/webhook/callback_url.hpp"

#include <charconv>

#include "common/network_policy.hpp"

namespace kiln::broker {
namespace {

common::Status Bad(std::string_view why) {
  return common::InvalidRequest("callback_url: " + std::string(why));
}

}  // namespace

std::string CallbackUrl::Origin() const {
  return (https ? "https://" : "http://") + host + ":" + std::to_string(port);
}

common::StatusOr<CallbackUrl> ParseCallbackUrl(std::string_view url) {
  if (url.size() > kMaxCallbackUrlBytes) {
    return Bad("at most " + std::to_string(kMaxCallbackUrlBytes) + " bytes");
  }
  for (unsigned char c : url) {
    if (c <= ' ' || c >= 0x7f) return Bad("printable ASCII without spaces only");
  }
  CallbackUrl out;
  std::string_view rest;
  if (url.substr(0, 8) == "https://") {
    out.https = true;
    rest = url.substr(8);
  } else if (url.substr(0, 7) == "http://") {
    rest = url.substr(7);
  } else {
    return Bad("expected an http:// or https:// URL");
  }
  if (url.find('#') != std::string_view::npos) return Bad("no fragment (#...)");
  const size_t slash = std::min(rest.find('/'), rest.find('?'));
  std::string_view authority = rest.substr(0, slash);
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (out.target[0] == '?') out.target.insert(0, "/");
  if (authority.find('@') != std::string_view::npos) return Bad("no user info (user@host)");
  if (authority.find('[') != std::string_view::npos) return Bad("IPv6 literals are not supported");
  out.port = out.https ? 443 : 80;
  if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
    const std::string_view p = authority.substr(colon + 1);
    unsigned port = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || port == 0 || port > 65535) {
      return Bad("the port must be 1-65535");
    }
    out.port = static_cast<uint16_t>(port);
    authority = authority.substr(0, colon);
  }
  auto host = common::NormalizeHost(authority);
  if (!host.ok() || host->find('*') != std::string::npos) {
    return Bad("'" + std::string(authority.substr(0, 255)) + "' is not a host name or address");
  }
  out.host = std::move(*host);
  return out;
}

}  // namespace kiln::broker
