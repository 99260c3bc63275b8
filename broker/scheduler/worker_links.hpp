// WorkerLinks: which connection of the worker endpoint speaks for which
// worker, without I/O. Belongs to the WorkerGateway's thread.
//
//   links.Bind(routing_id, "w1", key_z85, generation);   // a registration was accepted
//   const WorkerLinks::Link* l = links.Of(routing_id);  // every later message
//   std::optional<std::string> to = links.RoutingOf("w1");  // sending to w1
//
// Routing ids are the broker ROUTER's own, one per connection (workers set
// none), so a worker is known by the connection it registered on, never by
// a name a peer announces. A worker that registers again from a new
// connection (it reconnected) moves there: the old connection then speaks
// for no one. `key` is the CURVE public key the connection authenticated
// with ("" without CURVE), and `generation` the WorkerKeyring generation it
// was last checked against.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::broker {

class WorkerLinks {
 public:
  struct Link {
    std::string worker;
    std::string key;
    uint64_t generation = 0;
  };

  // The connection now speaks for `worker`; returns the routing id it spoke
  // from before, if it was another.
  std::optional<std::string> Bind(const std::string& routing, const std::string& worker,
                                  const std::string& key, uint64_t generation);
  const Link* Of(const std::string& routing) const;
  Link* Of(const std::string& routing);
  std::optional<std::string> RoutingOf(const std::string& worker) const;
  // Forgets the worker and its connection.
  void Remove(const std::string& worker);
  // Routing ids of every bound connection.
  std::vector<std::string> Routings() const;
  size_t size() const { return by_routing_.size(); }

 private:
  std::map<std::string, Link> by_routing_;
  std::map<std::string, std::string> by_worker_;  // worker -> routing id
};

}  // namespace kiln::broker
