#include "broker/scheduler/spec_cache.hpp"

#include <utility>

namespace kiln::broker {

// Every part a submission sizes: what a tenant's queued jobs may hold here
// is bounded by what they sent, tools' schemas (up to 1 MiB a job) included.
size_t SpecCache::BytesOf(const JobSpec& spec) {
  size_t n = 512 + spec.id.size() + spec.tenant.size() + spec.session_id.size() +
             spec.conversation_id.size() + spec.code.size() + spec.input_json.size() +
             spec.stdin_data.size() + spec.callback_url.size();
  for (const auto& f : spec.files) n += 32 + f.path.size() + f.content.size();
  for (const auto& [k, v] : spec.env) n += 64 + k.size() + v.size();
  for (const auto* list : {&spec.warnings, &spec.collect, &spec.packages, &spec.network_allow}) {
    for (const auto& item : *list) n += 32 + item.size();
  }
  for (const auto& t : spec.tools) {
    n += 96 + t.name.size() + t.description.size() + t.parameters_json.size();
  }
  return n;
}

void SpecCache::Put(JobSpec spec) {
  const size_t n = BytesOf(spec);
  if (n > kMaxBytes) return;
  std::lock_guard lock(mu_);
  std::string id = spec.id;
  auto [it, inserted] = specs_.try_emplace(id, std::move(spec));
  if (!inserted) return;  // the same job twice: the first copy stands
  bytes_ += n;
  order_.push_back(std::move(id));
  EvictLocked();
}

std::optional<JobSpec> SpecCache::Take(const std::string& job_id) {
  std::lock_guard lock(mu_);
  auto it = specs_.find(job_id);
  if (it == specs_.end()) return std::nullopt;
  JobSpec spec = std::move(it->second);
  specs_.erase(it);
  bytes_ -= BytesOf(spec);
  // Its id stays in order_ (skipped when it reaches the front, or dropped
  // when order_ is compacted), so taking costs no search.
  EvictLocked();
  return spec;
}

void SpecCache::EvictLocked() {
  if (order_.size() > 2 * kMaxEntries) {
    // Mostly ids taken already, behind an old entry never taken: compact.
    std::deque<std::string> live;
    for (auto& id : order_) {
      if (specs_.count(id) != 0) live.push_back(std::move(id));
    }
    order_.swap(live);
  }
  while (!order_.empty() &&
         (specs_.size() > kMaxEntries || bytes_ > kMaxBytes || specs_.count(order_.front()) == 0)) {
    auto it = specs_.find(order_.front());
    order_.pop_front();
    if (it == specs_.end()) continue;  // taken already
    bytes_ -= BytesOf(it->second);
    specs_.erase(it);
  }
}

size_t SpecCache::size() const {
  std::lock_guard lock(mu_);
  return specs_.size();
}

size_t SpecCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace kiln::broker
