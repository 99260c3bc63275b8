// CallbackUrl: a submission's `callback_url` (docs/api.md, "Webhooks"),
// parsed strictly: http or https, a DNS name or IPv4 address, an optional
// port, an optional path and query; no user info, no fragment, no IPv6
// literal, no spaces or control bytes, at most kMaxCallbackUrlBytes. What the
// tenant's webhooks.allow is matched against (host, port) and what the
// sender connects to. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace kiln::broker {

inline constexpr size_t kMaxCallbackUrlBytes = 2048;

struct CallbackUrl {
  bool https = false;
  std::string host;            // lowercase
  uint16_t port = 0;           // the scheme's default when the URL names none
  std::string target;          // path and query, "/" at least
  std::string Origin() const;  // "https://host:port", what an HTTP client connects to
};

// INVALID_REQUEST with a message starting "callback_url: ".
common::StatusOr<CallbackUrl> ParseCallbackUrl(std::string_view url);

}  // namespace kiln::broker
