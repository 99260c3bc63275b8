// OutputBuffer: the output chunks a broker has received and not yet stored,
// per job, coalesced and bounded.
//
//   buffer.Add("w1", std::move(chunk));                 // WorkerGateway thread
//   store.AppendOutput(buffer.Take({"ex_1"}));          // dispatcher: before ex_1's end
//   store.AppendOutput(buffer.TakeSome(8 << 20));       // dispatcher: the rest, a budget at a time
//
// The gateway reads every chunk off the worker socket at once, so a flood
// never sits in front of another job's Result; what waits for Redis waits
// here. Contiguous chunks of one stream are merged up to kMaxChunkBytes, so
// Redis entries grow with bytes and time, not with a job's write() count.
// Past per_job_bytes (one job) or total_bytes (all) new chunks are dropped:
// the job's Result carries its whole output and the dispatcher completes the
// stored stream from it when the job ends (JobStore::AppendOutput).
// Chunks are kept apart by the worker that sent them: Redis stores a job's
// chunks only from the worker it runs on, so another worker's chunks for the
// same job never merge with (or crowd out) the real ones.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "broker/store/job_store.hpp"
#include "common/protocol/messages.hpp"

namespace kiln::broker {

class OutputBuffer {
 public:
  OutputBuffer(size_t per_job_bytes, size_t total_bytes)
      : per_job_bytes_(per_job_bytes), total_bytes_(total_bytes) {}

  // False when the chunk was dropped (a bound was reached).
  bool Add(const std::string& worker, common::protocol::OutputChunk chunk);
  // Everything pending for these jobs.
  std::vector<JobOutput> Take(const std::vector<std::string>& job_ids);
  // Whole jobs' pending output, oldest first, until about `budget` bytes.
  std::vector<JobOutput> TakeSome(size_t budget);

  size_t bytes() const;
  bool empty() const;
  uint64_t dropped() const;

 private:
  struct Pending {
    std::vector<common::protocol::OutputChunk> chunks;
    size_t bytes = 0;
  };
  using Key = std::pair<std::string, std::string>;  // job id, worker
  JobOutput Extract(std::map<Key, Pending>::iterator it);

  const size_t per_job_bytes_;
  const size_t total_bytes_;
  mutable std::mutex mu_;
  std::map<Key, Pending> jobs_;
  std::deque<Key> order_;  // in the order their first pending chunk came
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace kiln::broker
