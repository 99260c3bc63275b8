// Shared by the one-shot and the session runners: the output pump (secrets
// filter, cap, coalesced streaming, flood detection), the control-pipe
// reader, the job's secrets policy, and the helpers that shape a Result.
//
//   OutputPump pump(job, options, policy);
//   out_open = pump.ReadOutput(fd, Stream::kStdout, &result.stdout_data);
//   pump.FlushDue(SteadyClock::now());   // every turn; poll no longer than pump.NextFlush()
//
// Job threads only; an OutputPump belongs to one job.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.hpp"
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
// Streamed output leaves in chunks of up to protocol::kMaxChunkBytes, or
// earlier once its oldest byte has waited this long: messages (and the
// broker's Redis writes) grow with a job's run time and bytes, never with its
// count of write() calls.
inline constexpr auto kChunkFlushInterval = std::chrono::milliseconds(20);

namespace protocol = common::protocol;

// Reads stdout and stderr, passes every byte through the job's secrets filter
// before it is kept or streamed (nothing leaves the worker unmasked), and
// caps what is kept at max_output_bytes. When the job streams, the masked
// bytes wait in one buffer per stream and leave as one OutputChunk when the
// buffer holds kMaxChunkBytes or its oldest byte is kChunkFlushInterval old;
// a stream's end (EOF, FinishOpen) and FlushAll send the rest, so every kept
// byte is streamed before the Result is built. `seq` counts chunks from 0
// across both streams; `offset` counts the bytes of that stream before the
// chunk. The filter sits before the buffer, so a secret split across reads,
// flushes or chunks is still masked.
class OutputPump {
 public:
  OutputPump(const protocol::Execute& job, const RunOptions& options,
             const std::shared_ptr<const common::SecretsPolicy>& policy)
      : job_(job),
        options_(options),
        streaming_(options.on_chunk && job.stream_output),
        cap_(std::min(
            job.limits.max_output_bytes ? job.limits.max_output_bytes : options.max_output_bytes,
            options.max_output_bytes)),
        flood_(std::max<uint64_t>(cap_ * 8, kMinFloodBytes)),
        filters_{common::SecretsFilter(policy), common::SecretsFilter(policy)} {}

  // Reads what is available from an output pipe; false at end-of-file (the
  // stream's buffered output is sent then).
  bool ReadOutput(int fd, protocol::Stream stream, std::string* dest) {
    std::array<char, kReadSize> buf;
    common::SecretsFilter& filter = Filter(stream);
    // Bounded per call, so a flood cannot keep the loop from its deadlines.
    for (int reads = 0; reads < kMaxReadsPerWake; ++reads) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n == 0) {
        Keep(stream, filter.Finish(), dest);
        Flush(stream);
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

  // A stream that never reached EOF (the job was killed, or a session
  // execution ended): release what its filter still holds back, masked, and
  // send it.
  void FinishOpen(protocol::Stream stream, std::string* dest) {
    Keep(stream, Filter(stream).Finish(), dest);
    Flush(stream);
  }

  // Sends each stream's buffer whose oldest byte has waited kChunkFlushInterval.
  void FlushDue(common::SteadyClock::time_point now) {
    for (protocol::Stream s : {protocol::Stream::kStdout, protocol::Stream::kStderr}) {
      const Pending& p = pending_[Index(s)];
      if (!p.data.empty() && now >= p.since + kChunkFlushInterval) Flush(s);
    }
  }
  // Sends everything buffered: call before the Result is built.
  void FlushAll() {
    Flush(protocol::Stream::kStdout);
    Flush(protocol::Stream::kStderr);
  }
  // When FlushDue next has something to send; nullopt while nothing waits.
  // A runner polls no longer than this.
  std::optional<common::SteadyClock::time_point> NextFlush() const {
    std::optional<common::SteadyClock::time_point> next;
    for (const Pending& p : pending_) {
      if (p.data.empty()) continue;
      auto due = p.since + kChunkFlushInterval;
      if (!next || due < *next) next = due;
    }
    return next;
  }

  bool flooded() const { return total_ > flood_; }
  bool truncated() const { return truncated_; }
  uint32_t redactions() const { return filters_[0].redactions() + filters_[1].redactions(); }

 private:
  // Masked bytes of one stream waiting to leave as a chunk.
  struct Pending {
    std::string data;
    common::SteadyClock::time_point since;  // when its oldest byte arrived
    uint64_t offset = 0;                    // bytes of the stream sent before `data`
  };

  static size_t Index(protocol::Stream s) { return s == protocol::Stream::kStdout ? 0 : 1; }
  common::SecretsFilter& Filter(protocol::Stream s) { return filters_[Index(s)]; }

  void Keep(protocol::Stream stream, std::string masked, std::string* dest) {
    uint64_t room = kept_ < cap_ ? cap_ - kept_ : 0;
    if (masked.size() > room) {
      truncated_ = true;
      masked.resize(static_cast<size_t>(room));
    }
    if (masked.empty()) return;
    dest->append(masked);
    kept_ += masked.size();
    if (!streaming_) return;
    Pending& p = pending_[Index(stream)];
    std::string_view rest = masked;
    while (!rest.empty()) {
      if (p.data.empty()) p.since = common::SteadyClock::now();
      size_t take = std::min(rest.size(), protocol::kMaxChunkBytes - p.data.size());
      p.data.append(rest.substr(0, take));
      rest.remove_prefix(take);
      if (p.data.size() == protocol::kMaxChunkBytes) Flush(stream);
    }
  }

  void Flush(protocol::Stream stream) {
    Pending& p = pending_[Index(stream)];
    if (p.data.empty()) return;
    const uint64_t offset = p.offset;
    p.offset += p.data.size();
    protocol::OutputChunk chunk{job_.job_id, stream, seq_++, offset, std::move(p.data)};
    p.data = std::string();
    options_.on_chunk(std::move(chunk));
  }

  const protocol::Execute& job_;
  const RunOptions& options_;
  const bool streaming_;
  uint64_t cap_;
  uint64_t flood_;
  common::SecretsFilter filters_[2];
  Pending pending_[2];
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
// marks the list incomplete). The job's registered secrets are masked in
// the files' contents too (counted in r->redactions); the built-in
// credential patterns are not, as they could corrupt binary files.
void ApplyCollected(common::StatusOr<sandbox::CollectedFiles> collected,
                    const protocol::Execute& job, protocol::Result* r);

}  // namespace kiln::worker
