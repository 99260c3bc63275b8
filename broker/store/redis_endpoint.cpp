#include "broker/store/redis_endpoint.hpp"

#include <charconv>

namespace kiln::broker {
namespace {

using common::InvalidRequest;
using common::Status;

constexpr std::string_view kRedis = "redis://";
constexpr std::string_view kUnix = "unix://";
constexpr std::string_view kSentinel = "redis+sentinel://";

// A whole decimal integer in [lo, hi].
bool ParseInt(std::string_view s, int lo, int hi, int* out) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; `what` names the part in the error (never its value).
common::StatusOr<std::string> PercentDecode(std::string_view s, std::string_view what) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    const int hi = i + 2 < s.size() ? HexDigit(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? HexDigit(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      return InvalidRequest("redis url: bad %-escape in the " + std::string(what) +
                            " (write % as %25)");
    }
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

// Escapes what would end the user part of a URL, for Redacted().
std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c == '%' || c == '@' || c == ':' || c == '/' || c == '?' || c == '&' || c < 0x21) {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

// "user:password" (either part may be empty) into the endpoint.
Status ParseUserInfo(std::string_view info, RedisEndpoint* ep) {
  const size_t colon = info.find(':');
  ASSIGN_OR_RETURN(ep->user, PercentDecode(info.substr(0, colon), "user"));
  // The errors do not quote the user: it may be a password written without its ':'.
  if (colon == std::string_view::npos) {
    if (!ep->user.empty()) {
      return InvalidRequest(
          "redis url: a user without a password (write redis://:password@host for a password "
          "alone, user:password@ for an ACL user; any password for a nopass user)");
    }
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(ep->password, PercentDecode(info.substr(colon + 1), "password"));
  if (!ep->user.empty() && ep->password.empty()) {
    return InvalidRequest("redis url: a user with an empty password");
  }
  return Status::Ok();
}

// "host", "host:port", "[v6]:port"; an empty host is `default_host`.
common::StatusOr<RedisHostPort> ParseHostPort(std::string_view s, int default_port,
                                              std::string_view default_host) {
  RedisHostPort hp{std::string(default_host), default_port};
  std::string_view port;
  if (s.starts_with('[')) {
    const size_t close = s.find(']');
    if (close == std::string_view::npos) return InvalidRequest("redis url: unclosed '[' in host");
    hp.host = s.substr(1, close - 1);
    const std::string_view after = s.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return InvalidRequest("redis url: bad host '" + std::string(s) + "'");
      port = after.substr(1);
      if (port.empty()) return InvalidRequest("redis url: empty port in '" + std::string(s) + "'");
    }
  } else {
    const size_t colon = s.rfind(':');
    if (colon != std::string_view::npos) {
      port = s.substr(colon + 1);
      if (port.empty()) return InvalidRequest("redis url: empty port in '" + std::string(s) + "'");
      s = s.substr(0, colon);
    }
    if (!s.empty()) hp.host = s;
  }
  if (!port.empty() && !ParseInt(port, 1, 65535, &hp.port)) {
    return InvalidRequest("redis url: bad port '" + std::string(port) + "'");
  }
  if (hp.host.empty()) return InvalidRequest("redis url: empty host");
  return hp;
}

Status ParseDb(std::string_view s, RedisEndpoint* ep) {
  if (s.empty()) return Status::Ok();
  if (!ParseInt(s, 0, 1 << 20, &ep->db)) {
    return InvalidRequest("redis url: bad database number '" + std::string(s) + "'");
  }
  return Status::Ok();
}

// "a=1&b=2" into the endpoint's options.
Status ParseQuery(std::string_view query, bool is_unix, RedisEndpoint* ep) {
  bool timeout_set = false;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    const std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    if (key == "min_replicas") {
      if (!ParseInt(value, 0, 64, &ep->min_replicas)) {
        return InvalidRequest("redis url: min_replicas must be 0 to 64, not '" +
                              std::string(value) + "'");
      }
    } else if (key == "replica_timeout_ms") {
      if (!ParseInt(value, 1, kMaxReplicaTimeoutMs, &ep->replica_timeout_ms)) {
        return InvalidRequest("redis url: replica_timeout_ms must be 1 to " +
                              std::to_string(kMaxReplicaTimeoutMs) + ", not '" +
                              std::string(value) + "'");
      }
      timeout_set = true;
    } else if (key == "sentinel_user" && ep->uses_sentinel()) {
      ASSIGN_OR_RETURN(ep->sentinel_user, PercentDecode(value, "sentinel_user"));
    } else if (key == "sentinel_password" && ep->uses_sentinel()) {
      ASSIGN_OR_RETURN(ep->sentinel_password, PercentDecode(value, "sentinel_password"));
    } else if (key == "db" && is_unix) {
      RETURN_IF_ERROR(ParseDb(value, ep));
    } else {
      return InvalidRequest("redis url: unknown option '" + key +
                            "' (known: min_replicas, replica_timeout_ms; sentinel_user, "
                            "sentinel_password with redis+sentinel://; db with unix://)");
    }
  }
  if (ep->min_replicas > 0 && !timeout_set) ep->replica_timeout_ms = kDefaultReplicaTimeoutMs;
  if (!ep->sentinel_user.empty() && ep->sentinel_password.empty()) {
    return InvalidRequest("redis url: sentinel_user needs a sentinel_password");
  }
  return Status::Ok();
}

}  // namespace

common::StatusOr<RedisEndpoint> RedisEndpoint::Parse(std::string_view url) {
  RedisEndpoint ep;
  const bool is_unix = url.starts_with(kUnix);
  const bool is_sentinel = url.starts_with(kSentinel);
  std::string_view rest;
  if (is_unix) {
    rest = url.substr(kUnix.size());
  } else if (is_sentinel) {
    rest = url.substr(kSentinel.size());
  } else if (url.starts_with(kRedis)) {
    rest = url.substr(kRedis.size());
  } else if (url.starts_with("rediss://")) {
    return InvalidRequest("redis url: TLS (rediss://) is not supported");
  } else {
    return InvalidRequest("redis url must start with redis://, unix:// or redis+sentinel://");
  }
  // The credentials are everything before the last '@' (before the last
  // "@/" for unix://, whose path may hold '@'), so a password with a raw
  // / ? or : still parses, and no error below can quote a piece of one.
  const size_t at = !is_unix                ? rest.rfind('@')
                    : rest.starts_with('/') ? std::string_view::npos
                                            : rest.rfind("@/");
  if (at != std::string_view::npos) {
    RETURN_IF_ERROR(ParseUserInfo(rest.substr(0, at), &ep));
    rest = rest.substr(at + 1);
  }
  std::string_view query;
  if (const size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const size_t slash = is_unix ? 0 : rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);

  if (is_unix) {
    ep.host.clear();
    ep.unix_path = path;
    if (ep.unix_path.empty()) return InvalidRequest("redis url: empty unix socket path");
  } else if (is_sentinel) {
    while (true) {
      const size_t comma = authority.find(',');
      ASSIGN_OR_RETURN(RedisHostPort hp,
                       ParseHostPort(authority.substr(0, comma), kDefaultSentinelPort, ""));
      ep.sentinels.push_back(std::move(hp));
      if (comma == std::string_view::npos) break;
      authority = authority.substr(comma + 1);
    }
    // "/master[/db]"
    path = path.empty() ? path : path.substr(1);
    const size_t next = path.find('/');
    ep.master_name = path.substr(0, next);
    if (ep.master_name.empty()) {
      return InvalidRequest(
          "redis url: redis+sentinel:// needs the master's name: "
          "redis+sentinel://host:port[,host:port...]/master[/db]");
    }
    if (next != std::string_view::npos) RETURN_IF_ERROR(ParseDb(path.substr(next + 1), &ep));
    ep.host.clear();
    ep.port = 0;
  } else {
    ASSIGN_OR_RETURN(RedisHostPort hp, ParseHostPort(authority, 6379, "127.0.0.1"));
    ep.host = std::move(hp.host);
    ep.port = hp.port;
    if (!path.empty()) RETURN_IF_ERROR(ParseDb(path.substr(1), &ep));
  }
  RETURN_IF_ERROR(ParseQuery(query, is_unix, &ep));
  return ep;
}

std::string RedisEndpoint::Redacted() const {
  std::string out = uses_sentinel()     ? std::string(kSentinel)
                    : unix_path.empty() ? std::string(kRedis)
                                        : std::string(kUnix);
  if (!user.empty() || !password.empty()) {
    out += PercentEncode(user);
    if (!password.empty()) out += ":***";
    out += "@";
  }
  const auto host_port = [](const std::string& h, int p) {
    return (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + std::to_string(p);
  };
  std::vector<std::string> options;
  if (uses_sentinel()) {
    for (size_t i = 0; i < sentinels.size(); ++i) {
      // Appended piecewise: GCC 12 at -O3 misreads `"," + std::string&&` as
      // an overlapping memcpy (-Werror=restrict, GCC bug 105329).
      if (i > 0) out += ',';
      out += host_port(sentinels[i].host, sentinels[i].port);
    }
    out += "/" + master_name;
    if (db != 0) out += "/" + std::to_string(db);
    if (!sentinel_user.empty()) options.push_back("sentinel_user=" + PercentEncode(sentinel_user));
    if (!sentinel_password.empty()) options.push_back("sentinel_password=***");
  } else if (!unix_path.empty()) {
    out += unix_path;
    if (db != 0) options.push_back("db=" + std::to_string(db));
  } else {
    out += host_port(host, port);
    if (db != 0) out += "/" + std::to_string(db);
  }
  if (min_replicas > 0) {
    options.push_back("min_replicas=" + std::to_string(min_replicas));
    options.push_back("replica_timeout_ms=" + std::to_string(replica_timeout_ms));
  }
  for (size_t i = 0; i < options.size(); ++i) out += (i == 0 ? "?" : "&") + options[i];
  return out;
}

}  // namespace kiln::broker
