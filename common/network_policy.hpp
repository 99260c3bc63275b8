// Network on request: the destinations a tenant may allow and a job may ask
// for (docs/api.md, "Network"), and what a job's traffic came to. The broker
// checks a job's `network` against its tenant's allowlist at submit; the
// worker's egress gateway matches every connection against the job's list
// again. Pure functions; any thread.
//
//   ASSIGN_OR_RETURN(auto allow, ParseDestinations(tenant_list, "network.allow"));
//   if (!Covers(allow, requested)) return Status(Code::kNetworkNotAllowed, ...);
//   bool ok = Matches(allow, "api.github.com", 443);
//
// A destination is `host:port`. The host is a DNS name (`api.github.com`),
// `*.` and a name (any name below it, not the name itself), `*` (any host)
// or an IPv4 address; the port is 1-65535 or `*` (any). Names compare
// case-insensitively and without a trailing dot. IPv6 literals are not
// destinations (a name that resolves to IPv6 addresses is).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::common {

struct Destination {
  std::string host;   // lowercase: a name, "*.<name>", "*", or an IPv4 address
  uint16_t port = 0;  // 0: any port
  std::string ToString() const;
  friend bool operator==(const Destination&, const Destination&) = default;
};

// INVALID_REQUEST naming what is wrong (the caller prefixes the field).
StatusOr<Destination> ParseDestination(std::string_view text);

// Each entry parsed, at most protocol::kMaxNetworkDestinations, no entry
// twice; messages start with `field[i]: ` (or `field: `).
StatusOr<std::vector<Destination>> ParseDestinations(const std::vector<std::string>& texts,
                                                     std::string_view field);

// A host as a client named it (a CONNECT authority's or URL's host), made
// comparable: lowercase, without a trailing dot; INVALID_REQUEST unless it
// is a DNS name or an IPv4 address.
StatusOr<std::string> NormalizeHost(std::string_view host);
bool IsIpv4Literal(std::string_view host);

// Whether `host` (normalized) at `port` is one of `list`'s destinations.
bool Matches(const std::vector<Destination>& list, std::string_view host, uint16_t port);

// Whether every connection `requested` allows is allowed by some entry of
// `policy` (a job may narrow its tenant's list, never widen it).
bool Covers(const std::vector<Destination>& policy, const Destination& requested);

// What one job (or one session execution) did on the network, as the
// worker's gateway counted it; the broker puts it on the record and in the
// audit trail. `destinations` holds each host:port asked for once (at most
// kMaxNetworkDestinations; `destinations_truncated` when more were asked).
struct DestinationUse {
  std::string host;
  uint16_t port = 0;
  bool allowed = false;  // false: refused, `reason` says why
  uint64_t count = 0;    // times asked for
  // refused: not_allowed, address_refused, resolve_failed, connect_failed, limit
  std::string reason;
  friend bool operator==(const DestinationUse&, const DestinationUse&) = default;
};

struct NetworkUsage {
  uint64_t connections = 0;  // allowed and connected
  uint64_t refused = 0;      // asked for and refused (or failed before connecting)
  uint64_t bytes_in = 0;     // from destinations to the job
  uint64_t bytes_out = 0;    // from the job to destinations
  std::vector<DestinationUse> destinations;
  bool destinations_truncated = false;
  // Set when the job broke a network limit: "bytes" or "connections".
  std::string limit;

  nlohmann::json ToJson() const;
  // Reads what a worker sent; anything malformed or out of bounds is
  // INVALID_REQUEST (the broker then records no usage).
  static StatusOr<NetworkUsage> FromJson(std::string_view text);
  friend bool operator==(const NetworkUsage&, const NetworkUsage&) = default;
};

}  // namespace kiln::common
