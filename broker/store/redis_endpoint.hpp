// RedisEndpoint: where the broker's Redis is and how to log in to it — the
// one description, parsed from `broker.redis.url`, that every connection uses.
//
//   ASSIGN_OR_RETURN(RedisEndpoint ep, RedisEndpoint::Parse("redis+sentinel://:pw@s1,s2/kiln"));
//   spdlog::info("redis {}", ep.Redacted());  // the password as ***
//
// Forms (docs/operations.md, "Redis: authentication, Sentinel and failover"):
//   redis://[user[:password]@]host[:port][/db][?options]
//   unix://[user[:password]@]/path/to/socket[?db=N&options]
//   redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/master[/db][?options]
// options: min_replicas=N, replica_timeout_ms=T, sentinel_user=U, sentinel_password=P.
// The user and passwords are percent-decoded (%40 is @, %3A is :, %2F is /).
// A parse error never quotes the password. Plain values: any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::broker {

struct RedisHostPort {
  std::string host;
  int port = 0;
};

struct RedisEndpoint {
  // Where Redis is, without Sentinel: host/port, or a unix socket.
  std::string host;  // empty for a unix socket
  int port = 6379;
  std::string unix_path;
  int db = 0;
  // Sent as AUTH on every connect: `AUTH password` (user empty) or
  // `AUTH user password` (a Redis 6 ACL user). No AUTH when password is empty.
  std::string user;
  std::string password;
  // With Sentinel: the sentinels asked in turn for the address of
  // `master_name` on every connect (host/port/unix_path are then unused),
  // logging in to them with sentinel_user/sentinel_password if set.
  std::vector<RedisHostPort> sentinels;
  std::string master_name;
  std::string sentinel_user;
  std::string sentinel_password;
  // When min_replicas > 0, writes are followed by `WAIT min_replicas
  // replica_timeout_ms` in the same round trip (RedisConnection).
  int min_replicas = 0;
  int replica_timeout_ms = 0;

  bool uses_sentinel() const { return !sentinels.empty(); }
  // INVALID_REQUEST naming what is wrong (never the password).
  static common::StatusOr<RedisEndpoint> Parse(std::string_view url);
  // The endpoint as a URL for logs and errors, every password as ***.
  std::string Redacted() const;
};

// Longest replica_timeout_ms accepted: WAIT must answer within the
// connection's reply timeout (kRedisTimeoutMs, 2 s).
inline constexpr int kMaxReplicaTimeoutMs = 1500;
// replica_timeout_ms when min_replicas is set and the timeout is not.
inline constexpr int kDefaultReplicaTimeoutMs = 500;
inline constexpr int kDefaultSentinelPort = 26379;

}  // namespace kiln::broker
