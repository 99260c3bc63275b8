#include "broker/scheduler/worker_links.hpp"

namespace kiln::broker {

std::optional<std::string> WorkerLinks::Bind(const std::string& routing, const std::string& worker,
                                             const std::string& key, uint64_t generation) {
  std::optional<std::string> moved_from;
  if (auto it = by_worker_.find(worker); it != by_worker_.end() && it->second != routing) {
    moved_from = it->second;
    by_routing_.erase(it->second);
  }
  if (auto it = by_routing_.find(routing); it != by_routing_.end() && it->second.worker != worker) {
    by_worker_.erase(it->second.worker);
  }
  by_routing_[routing] = Link{worker, key, generation};
  by_worker_[worker] = routing;
  return moved_from;
}

const WorkerLinks::Link* WorkerLinks::Of(const std::string& routing) const {
  auto it = by_routing_.find(routing);
  return it == by_routing_.end() ? nullptr : &it->second;
}

WorkerLinks::Link* WorkerLinks::Of(const std::string& routing) {
  auto it = by_routing_.find(routing);
  return it == by_routing_.end() ? nullptr : &it->second;
}

std::optional<std::string> WorkerLinks::RoutingOf(const std::string& worker) const {
  auto it = by_worker_.find(worker);
  if (it == by_worker_.end()) return std::nullopt;
  return it->second;
}

void WorkerLinks::Remove(const std::string& worker) {
  auto it = by_worker_.find(worker);
  if (it == by_worker_.end()) return;
  by_routing_.erase(it->second);
  by_worker_.erase(it);
}

std::vector<std::string> WorkerLinks::Routings() const {
  std::vector<std::string> out;
  out.reserve(by_routing_.size());
  for (const auto& [routing, link] : by_routing_) out.push_back(routing);
  return out;
}

}  // namespace kiln::broker
