#include "broker/scheduler/output_buffer.hpp"

#include <algorithm>

namespace kiln::broker {

namespace protocol = common::protocol;

bool OutputBuffer::Add(const std::string& worker, protocol::OutputChunk chunk) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = jobs_.try_emplace(Key{chunk.job_id, worker});
  Pending& p = it->second;
  const size_t n = chunk.data.size();
  if (p.bytes + n > per_job_bytes_ || bytes_ + n > total_bytes_) {
    ++dropped_;
    if (fresh) jobs_.erase(it);
    return false;
  }
  if (fresh) order_.push_back(it->first);
  p.bytes += n;
  bytes_ += n;
  if (!p.chunks.empty()) {
    protocol::OutputChunk& last = p.chunks.back();
    if (last.stream == chunk.stream && last.offset + last.data.size() == chunk.offset &&
        last.data.size() + n <= protocol::kMaxChunkBytes) {
      last.data += chunk.data;  // keeps the first chunk's seq: seq stays increasing
      return true;
    }
  }
  p.chunks.push_back(std::move(chunk));
  return true;
}

JobOutput OutputBuffer::Extract(std::map<Key, Pending>::iterator it) {
  JobOutput out{it->first.first, std::move(it->second.chunks), it->first.second};
  bytes_ -= it->second.bytes;
  jobs_.erase(it);
  return out;
}

std::vector<JobOutput> OutputBuffer::Take(const std::vector<std::string>& job_ids) {
  std::vector<JobOutput> out;
  std::lock_guard lock(mu_);
  for (const auto& id : job_ids) {
    for (auto it = jobs_.lower_bound(Key{id, ""}); it != jobs_.end() && it->first.first == id;) {
      order_.erase(std::find(order_.begin(), order_.end(), it->first));
      auto next = std::next(it);
      out.push_back(Extract(it));
      it = next;
    }
  }
  return out;
}

std::vector<JobOutput> OutputBuffer::TakeSome(size_t budget) {
  std::vector<JobOutput> out;
  size_t taken = 0;
  std::lock_guard lock(mu_);
  while (!order_.empty() && taken < budget) {
    auto it = jobs_.find(order_.front());
    order_.pop_front();
    if (it == jobs_.end()) continue;
    taken += it->second.bytes;
    out.push_back(Extract(it));
  }
  return out;
}

size_t OutputBuffer::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

bool OutputBuffer::empty() const {
  std::lock_guard lock(mu_);
  return jobs_.empty();
}

uint64_t OutputBuffer::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

}  // namespace kiln::broker
