// Shared by the one-shot and the session runners: the output pump (secrets
// filter, cap, streaming, flood detection), the control-pipe reader, the
// job's secrets policy, and the helpers that shape a Result.
//
//   OutputPump pump(job, options, policy);
//   out_open = pump.ReadOutput(fd, Stream::kStdout, &result.stdout_data);
//
// Job threads only; an OutputPump belongs to one job.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>

#include "common/protocol/messages.hpp"
#include "common/secrets/secrets_filter.hpp"
#include "common/status.hpp"
#include "worker/executor/job_runner.hpp"
#include "worker/sandbox/workspace.hpp"

namespace kiln::worker {

inline constexpr size_t kReadSize = 64 << 10;
inline constexpr int kMaxReadsPerWake = 16;
// Output kept flowing this far past the cap before the job is killed.
inline constexpr uint64_t kMinFloodBytes = 8u << 20;

namespace protocol = common::protocol;

// Reads stdout and stderr, passes every byte through the job's secrets filter
// before it is kept or streamed (nothing leaves the worker unmasked), and
// caps what is kept at max_output_bytes.
class OutputPump {
 public:
  OutputPump(const protocol::Execute& job, const RunOptions& options,
             const std::shared_ptr<const common::SecretsPolicy>& policy)
      : job_(job),
        options_(options),
        cap_(std::min(
            job.limits.max_output_bytes ? job.limits.max_output_bytes : options.max_output_bytes,
            options.max_output_bytes)),
        flood_(std::max<uint64_t>(cap_ * 8, kMinFloodBytes)),
        filters_{common::SecretsFilter(policy), common::SecretsFilter(policy)} {}

  // Reads what is available from an output pipe; false at end-of-file.
  bool ReadOutput(int fd, protocol::Stream stream, std::string* dest) {
    std::array<char, kReadSize> buf;
    common::SecretsFilter& filter = Filter(stream);
    // Bounded per call, so a flood cannot keep the loop from its deadlines.
    for (int reads = 0; reads < kMaxReadsPerWake; ++reads) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n == 0) {
        Keep(stream, filter.Finish(), dest);
        return false;
      }
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      total_ += static_cast<uint64_t>(n);
      if (kept_ >= cap_) {
        truncated_ = true;  // past the cap: dropped unseen, so nothing to mask
        continue;
      }
      Keep(stream, filter.Push(std::string_view(buf.data(), static_cast<size_t>(n))), dest);
    }
    return true;
  }

  // A stream that never reached EOF (the job was killed): release what its
  // filter still holds back, masked.
  void FinishOpen(protocol::Stream stream, std::string* dest) {
    Keep(stream, Filter(stream).Finish(), dest);
  }

  bool flooded() const { return total_ > flood_; }
  bool truncated() const { return truncated_; }
  uint32_t redactions() const { return filters_[0].redactions() + filters_[1].redactions(); }

 private:
  common::SecretsFilter& Filter(protocol::Stream s) {
    return filters_[s == protocol::Stream::kStdout ? 0 : 1];
  }

  void Keep(protocol::Stream stream, std::string masked, std::string* dest) {
    uint64_t room = kept_ < cap_ ? cap_ - kept_ : 0;
    if (masked.size() > room) {
      truncated_ = true;
      masked.resize(static_cast<size_t>(room));
    }
    if (masked.empty()) return;
    dest->append(masked);
    kept_ += masked.size();
    if (options_.on_chunk && job_.stream_output) {
      options_.on_chunk(protocol::OutputChunk{job_.job_id, stream, seq_++, 0, std::move(masked)});
    }
  }

  const protocol::Execute& job_;
  const RunOptions& options_;
  uint64_t cap_;
  uint64_t flood_;
  common::SecretsFilter filters_[2];
  uint64_t total_ = 0;
  uint64_t kept_ = 0;
  uint64_t seq_ = 0;
  bool truncated_ = false;
};

// A Result with reason `error` and why.
protocol::Result ErrorResult(const protocol::Execute& job, const common::Status& st);

// Reads the control pipe; false at end-of-file. Stops keeping bytes past
// Runtime::kMaxControlBytes + 1.
bool ReadControl(int fd, std::string* dest);

// The job's secrets policy: the tenant's registered secrets plus the built-in
// credential patterns. Jobs without registered secrets share one policy.
common::StatusOr<std::shared_ptr<const common::SecretsPolicy>> PolicyFor(
    const protocol::Execute& job);

// Keeps a Result inside the wire protocol's limits (messages.hpp), so the
// broker can always decode it: an undecodable Result would leave the job
// without an end. Collected files it drops count as omitted.
void FitToWire(protocol::Result* r);

// Puts what `collect` found into the Result: the files, how many were left
// out and whether the list is incomplete (a failure is noted on stderr and
// marks the list incomplete).
void ApplyCollected(common::StatusOr<sandbox::CollectedFiles> collected, protocol::Result* r);

}  // namespace kiln::worker
