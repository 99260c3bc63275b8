// Outbox: what the worker has to send to its brokers, in the order that keeps
// results first, and every Result kept until a broker acknowledges it.
//
//   outbox.PostResult(broker, std::move(result), now);   // also drops the job's unsent chunks
//   outbox.Pump(links, now);                             // sends what the links take now
//
// Results go first, in the order they were posted, to the job's broker if it
// is registered, else to any registered broker. Output chunks wait in one
// queue per job and go after the Results, round-robin across jobs, only to
// their job's broker, so one flooding job delays neither Results nor other
// jobs' output. Unsent chunks are bounded per job and in all; past a bound
// the job's new chunks are dropped (all later ones too: the broker stores a
// stream only contiguously) and a job's Result drops its unsent chunks (the
// Result carries the whole output, and the broker completes the stored
// stream from it). A Result stays kept until a ResultAck for its job arrives
// from any broker; it is sent again after a broker registers (if that broker
// is the job's or the job's broker is not registered; after silence without a
// new registration only the latter) and when it has been
// unacknowledged for `resend_after` (doubling per resend, up to 8 x).
// Kept Results are bounded by bytes and count; past either the oldest is
// dropped with an error line.
//
// No I/O of its own: the Links interface sends and says which brokers are
// registered, so the ordering and bookkeeping are unit-tested without sockets.
// Belongs to the worker's event loop thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/messages.hpp"

namespace kiln::worker {

class WorkerMetrics;

class Outbox {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    // Unsent chunk bytes of one job: at 64 KiB per chunk, 64 chunks, more
    // than a slow broker link drains in a second, far less than a job's
    // output cap (its Result carries the rest).
    size_t job_chunk_bytes = 4u << 20;
    // Unsent chunk bytes of all jobs: 16 jobs at their bound.
    size_t total_chunk_bytes = 64u << 20;
    // Kept Results: a Result is at most kMaxMessageBytes (64 MiB), so 16 of
    // the largest, or 10000 ordinary ones (about 10 minutes of a busy
    // worker's results while no broker acknowledges).
    size_t result_bytes = 1u << 30;
    size_t results = 10000;
    // First resend of an unacknowledged Result (heartbeat_interval x liveness).
    std::chrono::milliseconds resend_after{3000};
  };

  // The broker links, as the Outbox sees them.
  class Links {
   public:
    virtual ~Links() = default;
    virtual bool Registered(const std::string& broker) const = 0;
    // Registered brokers, in the order to try them.
    virtual std::vector<std::string> RegisteredBrokers() const = 0;
    // Hands `m` to the broker's link without blocking; false when the link
    // takes nothing more now (its queue is full): try again later.
    virtual bool Send(const std::string& broker, const common::protocol::Message& m) = 0;
  };

  // `metrics` is optional and outlives the Outbox.
  explicit Outbox(Limits limits, WorkerMetrics* metrics = nullptr);

  // A chunk of a running job from `broker`; dropped (and counted) past a bound.
  void PostChunk(std::string broker, common::protocol::OutputChunk chunk);
  // A job's end, from `broker` (its endpoint): kept until acknowledged.
  void PostResult(std::string broker, common::protocol::Result result);
  // A broker acknowledged the job's Result; false when none was kept.
  bool OnAck(const std::string& job_id);
  // Which unacknowledged Results a broker that registered gets again.
  enum class Resend {
    kOwnAndOrphaned,  // after a RegisterAck: it may have lost what it was sent
    kOrphaned,        // it speaks again after silence: what it was sent is arriving
  };
  // `broker` (re)registered: its own unacknowledged Results (kOwnAndOrphaned)
  // and those whose broker is not registered are sent again at the next Pump.
  void OnRegistered(const std::string& broker, const Links& links, Resend which);
  // Sends Results first, then chunks, as far as the links take them.
  void Pump(Links& links, Clock::time_point now);
  // When the next unacknowledged Result is due to be sent again.
  std::optional<Clock::time_point> NextResend() const;

  // Jobs whose Results are kept, those sent to `broker_first` first, then
  // oldest first; at most `max` ids.
  std::vector<std::string> UnackedJobs(const std::string& broker_first, size_t max) const;
  size_t unacked() const { return results_.size(); }
  size_t unacked_bytes() const { return result_bytes_; }
  size_t unsent_chunk_bytes() const { return chunk_bytes_; }
  bool has_chunks() const { return !rr_.empty(); }

  struct Stats {
    uint64_t chunks_sent = 0;
    uint64_t chunk_bytes_sent = 0;
    uint64_t chunks_dropped = 0;
    uint64_t results_sent = 0;  // first sends and resends
    uint64_t results_resent = 0;
    uint64_t results_dropped = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Kept {
    std::string broker;  // the broker the job came from
    common::protocol::Result result;
    size_t bytes = 0;
    uint64_t order = 0;  // posting order
    uint32_t sends = 0;
    Clock::time_point next_resend;  // valid once sent
  };
  struct JobChunks {
    std::string broker;
    std::deque<common::protocol::OutputChunk> chunks;
    size_t bytes = 0;
    bool dropping = false;  // a chunk was dropped: the rest would leave a gap
  };

  // Where a Result goes now: its broker if registered, else any registered
  // one whose link is not full; empty when none.
  std::string RouteResult(const Kept& k, const Links& links,
                          const std::set<std::string>& full) const;
  void Forget(std::map<std::string, Kept>::iterator it);
  void DropChunks(const std::string& job_id);
  void Publish() const;

  Limits limits_;
  WorkerMetrics* metrics_;
  Stats stats_;

  std::map<std::string, Kept> results_;    // job id -> kept Result
  std::map<uint64_t, std::string> order_;  // posting order -> job id
  std::set<uint64_t> to_send_;             // orders of Results due to be sent
  // Results sent and not yet due again, by when they are: (time, order).
  // Every kept Result is in exactly one of to_send_ and resend_at_.
  std::set<std::pair<Clock::time_point, uint64_t>> resend_at_;
  uint64_t next_order_ = 0;
  size_t result_bytes_ = 0;

  std::map<std::string, JobChunks> chunks_;  // job id -> its unsent chunks
  std::deque<std::string> rr_;               // jobs with unsent chunks, round-robin
  size_t chunk_bytes_ = 0;
};

// About the bytes a Result takes on the wire and in memory (its variable
// fields; the rest is small).
size_t ApproxResultBytes(const common::protocol::Result& r);

}  // namespace kiln::worker
