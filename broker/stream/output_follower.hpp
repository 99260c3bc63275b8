// OutputFollower: follows the stored output of many jobs for many readers
// (SSE streams, native subscriptions) on one thread and one Redis
// connection, at the pace each reader can take.
//
//   OutputFollower follower(endpoint, &jobs, &waiters);
//   std::jthread t([&](std::stop_token st) { follower.Run(st); });
//   auto id = follower.Follow(job_id, /*after=*/"0", reader);   // any thread
//   follower.Wake(id);       // the reader drained its buffer: read on
//
// Every turn, one XREAD over the streams of the readers that have room
// fetches at most kReadCount entries per stream; a reader without room is
// skipped with its cursor where it was, so a slow or absent reader costs its
// own bounded buffer and nothing else (the rest stays in Redis). A reader
// gets its chunks in order, then OnEnd() with the terminal record once the
// job has ended and no chunk is left, or OnError() — exactly one of the two,
// last. A reader may decline OnEnd (its tenant's UnreadBudget is full): it is
// offered the end again every turn, and costs nothing meanwhile (the record
// is one copy per job, shared by its readers). Ends come from JobWaiters
// (this broker's dispatcher, or the EventBus for another broker's) and from
// a status check once per kCheckInterval, in case a notice was lost.
//
// A blocking XREAD waits only for new output: an end, a new follow or a
// wake arriving meanwhile cuts it short (CLIENT UNBLOCK, sent by a second
// thread on its own connection), so a job's end reaches its readers as soon
// as it is known rather than when the block times out.
//
// Threads: Run() on one thread (it starts the unblocking one);
// Follow/Unfollow/Wake from any thread. Reader methods are called on the
// follower's thread, may still be called once after Unfollow() returns, and
// must not block.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "broker/job/job.hpp"
#include "broker/scheduler/job_waiters.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/redis_connection.hpp"
#include "common/status.hpp"

namespace kiln::broker {

class OutputFollower {
 public:
  class Reader {
   public:
    virtual ~Reader() = default;
    // Bytes the reader holds that its client has not taken yet.
    virtual size_t Buffered() = 0;
    // Whether it takes more now; a reader that says no is skipped until Wake().
    virtual bool HasRoom() = 0;
    virtual void OnChunks(std::vector<JobStore::StoredChunk>& chunks) = 0;
    // False: not now (the reader keeps nothing of `record`); asked again later.
    virtual bool OnEnd(const JobRecord& record) = 0;
    virtual void OnError(const common::Status& status) = 0;
  };
  using Id = uint64_t;

  static constexpr size_t kReadCount = 16;  // entries per stream per turn (<= 1 MiB)
  static constexpr auto kCheckInterval = std::chrono::seconds(1);
  // How long Redis may fail before every reader is told UNAVAILABLE.
  static constexpr auto kRedisGrace = std::chrono::seconds(10);

  struct Options {
    // Bytes all readers may hold together; past it only empty readers are read for.
    size_t buffer_budget = 64u << 20;
    // How long one XREAD waits for new output when nothing else is due.
    std::chrono::milliseconds block{50};
  };

  OutputFollower(RedisEndpoint endpoint, JobStore* jobs, JobWaiters* waiters, Options options);
  OutputFollower(RedisEndpoint endpoint, JobStore* jobs, JobWaiters* waiters)
      : OutputFollower(std::move(endpoint), jobs, waiters, Options{}) {}
  ~OutputFollower();
  OutputFollower(const OutputFollower&) = delete;
  OutputFollower& operator=(const OutputFollower&) = delete;

  // Follows job `job_id`'s output after stream entry `after` ("0": from the
  // start).
  Id Follow(const std::string& job_id, const std::string& after, std::shared_ptr<Reader> reader);
  void Unfollow(Id id);
  void Wake(Id id);
  // Readers followed now.
  size_t size() const;

  // Until `stop`; on the way out it releases every reader, while what
  // they hold is still alive (the front ends, whose quota counters their
  // holds count in, are destroyed before the follower).
  void Run(std::stop_token stop);

 private:
  struct Entry {
    std::string job;
    std::string cursor;  // last stream entry id delivered ("0": none)
    std::shared_ptr<Reader> reader;
    JobWaiters::Handle watch;
    bool checked = false;  // status read once since Follow
    // The terminal record, once known: one copy per job, shared by all its
    // readers (a record holds up to max_output_bytes of output).
    std::shared_ptr<const JobRecord> end;
    bool read_since_end = false;  // a read that began after `end` was known
    bool asleep = false;          // said it had no room; waits for Wake
    bool end_declined = false;    // OnEnd said not now: offered again each turn
  };
  struct Inbox {
    std::vector<std::pair<Id, Entry>> follows;
    std::vector<Id> unfollows;
    std::vector<Id> wakes;
    std::vector<std::pair<Id, std::shared_ptr<const JobRecord>>> ends;
  };

  // The copy of job `id`'s terminal record its readers share, if they hold
  // one; `make` makes it when not. mu_ held.
  std::shared_ptr<const JobRecord> SharedEndLocked(const std::string& id,
                                                   std::shared_ptr<const JobRecord> make = nullptr);

  // mu_ held: wakes the follower, and cuts its blocking read short.
  void NotifyLocked();
  // The unblocking thread: CLIENT UNBLOCK for the follower's connection
  // whenever NotifyLocked() asks while a read blocks.
  void UnblockLoop(std::stop_token stop);
  // Reads the connection's CLIENT ID after each (re)connect.
  common::Status RefreshClientId();
  void DrainInbox();
  // Run's last step: unwatches and releases every reader.
  void DropReaders();
  // Offers the end to `it`'s reader; true when taken (the entry is gone).
  bool TryEnd(std::map<Id, Entry>::iterator it);
  // Offers the end again to the readers that declined it.
  void RetryDeclinedEnds();
  // Reads the status of entries never checked, and of all every kCheckInterval.
  common::Status CheckEnds(bool all);
  // One XREAD for every reader with room (blocking up to options_.block
  // for new output when no reader drains and the inbox is empty); delivers;
  // ends the drained. False when no reader had room (nothing was read).
  common::StatusOr<bool> ReadOnce();
  // Ends `it`'s reader with `error` (the entry is gone).
  void Fail(std::map<Id, Entry>::iterator it, const common::Status& error);
  // Takes `it` out of the follower.
  Entry Remove(std::map<Id, Entry>::iterator it);

  RedisEndpoint endpoint_;
  JobStore* jobs_;
  JobWaiters* waiters_;
  Options options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Inbox inbox_;     // guarded by mu_
  Id next_id_ = 1;  // guarded by mu_
  // Terminal records in use, by job id (expired ones are swept each turn).
  std::map<std::string, std::weak_ptr<const JobRecord>> ends_;  // guarded by mu_
  size_t count_ = 0;  // guarded by mu_: followed, inbox included
  // The follower's XREAD blocks (set just before it, cleared when it returns).
  bool blocking_ = false;    // guarded by mu_
  bool unblock_ = false;     // guarded by mu_: NotifyLocked() came meanwhile
  long long client_id_ = 0;  // guarded by mu_: the follower connection's CLIENT ID
  std::condition_variable_any unblock_cv_;

  // Follower thread only.
  std::unique_ptr<RedisConnection> conn_;
  uint64_t client_id_connects_ = 0;  // conn_->connects() when client_id_ was read
  std::map<Id, Entry> entries_;
};

// Orders two Redis stream entry ids ("<ms>-<seq>", or "0"): negative, zero
// or positive as a < b, a == b, a > b. Malformed ids order first.
int CompareStreamIds(std::string_view a, std::string_view b);

}  // namespace kiln::broker
