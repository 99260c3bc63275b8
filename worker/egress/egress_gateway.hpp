// EgressGateway: the worker's HTTP(S) forward proxy for jobs with network on
// request (docs/security.md, "Network on request"). Each job (or session
// execution) that may use the network gets a lease: a socket listening on
// 127.0.0.1:3128 inside its own sandbox's network namespace, where the job
// has no other route. The gateway reads one request per connection —
// `CONNECT host:port` (HTTPS and any TLS) or a plain-HTTP request in
// absolute form (`GET http://host/path`) — matches host:port against the
// job's allowlist, resolves the name itself (the job has no DNS), connects
// from the worker's network only to addresses the AddressFilter allows, and
// then relays bytes both ways, counting them. What it refuses gets a 403
// (502 when the name does not resolve or the destination does not answer).
//
//   ASSIGN_OR_RETURN(auto gateway, EgressGateway::Create(config));
//   ASSIGN_OR_RETURN(auto lease, gateway->Open(std::move(listen_fd), job));
//   poll(lease->limit_fd()) ...          // readable once a cap is broken: stop the job
//   common::NetworkUsage usage = lease->Finish();   // closes every connection
//
// One I/O thread serves every lease; Open and Finish may be called from any
// other thread (never from a gateway callback).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/network_policy.hpp"
#include "common/status.hpp"
#include "common/unique_fd.hpp"
#include "worker/egress/address_filter.hpp"

namespace boost::asio {
class io_context;
}

namespace kiln::worker {

// network.egress in the worker's config (docs/configuration.md).
struct EgressConfig {
  bool enabled = true;
  // Names the gateway resolves itself, before DNS (as /etc/hosts would):
  // name -> IPv4 or IPv6 address. Still subject to the AddressFilter.
  std::map<std::string, std::string> hosts;
  std::vector<std::string> allow_private;  // CIDRs (AddressFilter)
  uint64_t connect_timeout_ms = 10'000;    // resolving and connecting
  uint64_t request_timeout_ms = 10'000;    // the job's request head
  uint64_t idle_timeout_ms = 60'000;       // no byte either way: the connection is closed
  uint32_t max_open = 32;                  // connections one job holds at once
  // Tests only (not in the YAML): whether the host's own addresses are
  // refused, so a unit test can serve "destinations" on a dummy interface.
  bool deny_own_addresses = true;
};

struct EgressJob {
  std::string job_id;  // for the log
  std::vector<common::Destination> allow;
  uint64_t max_bytes = 0;        // in and out together
  uint64_t max_connections = 0;  // requests (allowed or refused)
};

class EgressLease;

class EgressGateway {
 public:
  // INVALID_REQUEST for a bad `hosts` address or `allow_private` range.
  static common::StatusOr<std::unique_ptr<EgressGateway>> Create(const EgressConfig& config);
  ~EgressGateway();  // every lease must be gone
  EgressGateway(const EgressGateway&) = delete;
  EgressGateway& operator=(const EgressGateway&) = delete;

  // Serves `listener` (a listening TCP socket) for `job` until the lease is
  // finished or destroyed.
  common::StatusOr<std::unique_ptr<EgressLease>> Open(common::UniqueFd listener, EgressJob job);

  struct State;  // the I/O thread's (egress_gateway.cpp)

 private:
  EgressGateway() = default;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

class EgressLease {
 public:
  struct Job;  // the I/O thread's (egress_gateway.cpp)
  EgressLease(std::shared_ptr<EgressGateway::State> gateway, std::shared_ptr<Job> job,
              common::UniqueFd limit_fd);
  ~EgressLease();  // Finish, if not yet done
  EgressLease(const EgressLease&) = delete;
  EgressLease& operator=(const EgressLease&) = delete;

  // Readable (an eventfd) once the job broke a cap; poll it, never read it.
  int limit_fd() const { return limit_fd_.get(); }
  // Stops listening, closes every connection and returns the account; the
  // second call returns it again. `limit` says which cap was broken.
  common::NetworkUsage Finish();
  // "bytes: ..." / "connections: ..." once a cap was broken, else "".
  std::string LimitMessage() const;

 private:
  std::shared_ptr<EgressGateway::State> gateway_;
  std::shared_ptr<Job> job_;
  common::UniqueFd limit_fd_;
  bool finished_ = false;
  common::NetworkUsage usage_;
  std::string limit_message_;
};

}  // namespace kiln::worker
