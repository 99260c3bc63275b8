#include "worker/egress/address_filter.hpp"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace kiln::worker {
namespace {

namespace ip = boost::asio::ip;

bool In(const ip::address_v4& a, const char* cidr) {
  const ip::network_v4 n = ip::make_network_v4(cidr);
  return (a.to_uint() & n.netmask().to_uint()) == n.network().to_uint();
}

bool In(const ip::address_v6& a, const ip::network_v6& n) {
  const auto bytes = a.to_bytes();
  const auto net = n.network().to_bytes();
  unsigned bits = n.prefix_length();
  for (size_t i = 0; i < 16 && bits > 0; ++i) {
    const unsigned take = std::min(bits, 8u);
    const uint8_t mask = static_cast<uint8_t>(0xff << (8 - take));
    if ((bytes[i] & mask) != (net[i] & mask)) return false;
    bits -= take;
  }
  return true;
}

bool In(const ip::address_v6& a, const char* cidr) { return In(a, ip::make_network_v6(cidr)); }

// Never reachable, whatever the operator allows.
bool ForbiddenV4(const ip::address_v4& a) {
  for (const char* c :
       {"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"}) {
    if (In(a, c)) return true;
  }
  return false;
}

// Someone's own network: reachable only when listed in allow_private.
bool PrivateV4(const ip::address_v4& a) {
  for (const char* c :
       {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "192.0.0.0/24",
        "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24"}) {
    if (In(a, c)) return true;
  }
  return false;
}

std::vector<ip::address> OwnAddresses() {
  std::vector<ip::address> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      out.push_back(ip::address_v4(ntohl(in->sin_addr.s_addr)));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &in6->sin6_addr, 16);
      out.push_back(ip::address_v6(b));
    }
  }
  ::freeifaddrs(list);
  return out;
}

}  // namespace

common::StatusOr<AddressFilter> AddressFilter::Create(const std::vector<std::string>& allow_private,
                                                      bool deny_own_addresses) {
  AddressFilter f;
  for (const auto& cidr : allow_private) {
    boost::system::error_code ec;
    if (cidr.find(':') == std::string::npos) {
      auto n = ip::make_network_v4(cidr, ec);
      if (!ec) {
        f.private_v4_.push_back(n);
        continue;
      }
    } else {
      auto n = ip::make_network_v6(cidr, ec);
      if (!ec) {
        f.private_v6_.push_back(n);
        continue;
      }
    }
    return common::InvalidRequest("'" + cidr + "' is not a CIDR range (e.g. 10.1.0.0/16)");
  }
  if (deny_own_addresses) f.own_ = OwnAddresses();
  return f;
}

bool AddressFilter::AllowedV4(const ip::address_v4& a) const {
  if (ForbiddenV4(a)) return false;
  if (std::find(own_.begin(), own_.end(), ip::address(a)) != own_.end()) return false;
  if (!PrivateV4(a)) return true;
  return std::any_of(private_v4_.begin(), private_v4_.end(), [&](const ip::network_v4& n) {
    return (a.to_uint() & n.netmask().to_uint()) == n.network().to_uint();
  });
}

bool AddressFilter::Allowed(const ip::address& address) const {
  if (address.is_v4()) return AllowedV4(address.to_v4());
  const ip::address_v6 a = address.to_v6();
  if (a.is_v4_mapped()) return AllowedV4(ip::make_address_v4(ip::v4_mapped, a));
  if (In(a, "64:ff9b::/96")) {  // NAT64: the IPv4 address is the last 32 bits
    const auto b = a.to_bytes();
    return AllowedV4(ip::address_v4({b[12], b[13], b[14], b[15]}));
  }
  for (const char* c : {"::/128", "::1/128", "fe80::/10", "ff00::/8", "::/96", "2002::/16",
                        "2001::/32", "100::/64"}) {
    if (In(a, c)) return false;
  }
  if (std::find(own_.begin(), own_.end(), address) != own_.end()) return false;
  if (In(a, "fc00::/7") || In(a, "2001:db8::/32")) {
    return std::any_of(private_v6_.begin(), private_v6_.end(),
                       [&](const ip::network_v6& n) { return In(a, n); });
  }
  return true;
}

}  // namespace kiln::worker
