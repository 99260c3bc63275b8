// AddressFilter: which IP addresses the egress gateway may connect a job to,
// after it resolved an allowed name (network on request, docs/security.md).
//
//   ASSIGN_OR_RETURN(AddressFilter f, AddressFilter::Create({"10.213.0.9/32"}));
//   if (!f.Allowed(address)) refuse;   // loopback, link-local, the host's own, ...
//
// Never allowed: unspecified, loopback, link-local (169.254.0.0/16 holds the
// clouds' metadata endpoints), multicast, reserved and broadcast addresses,
// and the worker host's own interface addresses (read at Create). Private
// ranges (RFC 1918, carrier-grade NAT, IPv6 unique-local, benchmarking and
// documentation nets) only when the operator lists them in `allow_private`:
// a job's allowed name must not lead into the operator's own network. IPv6
// forms of IPv4 addresses (mapped, NAT64) are judged as the IPv4 address.
// Immutable after Create; any thread.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/network_v4.hpp>
#include <boost/asio/ip/network_v6.hpp>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace kiln::worker {

class AddressFilter {
 public:
  // INVALID_REQUEST naming a CIDR that does not parse (e.g. "10.0.0.0/33").
  static common::StatusOr<AddressFilter> Create(const std::vector<std::string>& allow_private,
                                                bool deny_own_addresses = true);

  bool Allowed(const boost::asio::ip::address& address) const;

 private:
  bool AllowedV4(const boost::asio::ip::address_v4& a) const;

  std::vector<boost::asio::ip::network_v4> private_v4_;  // allowed private ranges
  std::vector<boost::asio::ip::network_v6> private_v6_;
  std::vector<boost::asio::ip::address> own_;  // the host's interface addresses
};

}  // namespace kiln::worker
