// NativeSubscription: one native client's subscription to a job's output
// (docs/protocol.md, "Client protocol"), fed by the broker's shared
// OutputFollower, and the Outbox through which its frames reach the
// NativeApi loop that owns the ROUTER socket.
//
//   auto sub = std::make_shared<NativeSubscription>(&outbox, identity, tenant, request_id, id, 0);
//   sub->set_id(follower.Follow(id, "0", sub));
//   // loop: for (auto& item : outbox.Take()) { send; item.from->Sent(item.frame.size()); }
//
// Backpressure: a subscription holds at most kMaxBuffered bytes of frames
// its client has not taken (in the outbox, or waiting because the client's
// pipe is full); past it the follower skips it (its cursor stays, the rest
// waits in Redis) until Sent() brings it under half and the loop wakes the
// follower. Reader methods run on the follower's thread; Sent() and the
// accessors on the loop's; Outbox::Push from any thread, Take from the loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "broker/stream/output_follower.hpp"
#include "common/unique_fd.hpp"

namespace kiln::broker {

class NativeSubscription;

class NativeOutbox {
 public:
  struct Item {
    std::string identity;
    std::string frame;
    std::shared_ptr<NativeSubscription> from;  // null for a plain reply
    bool last = false;                         // the subscription's final frame
  };

  NativeOutbox();
  // Queues a frame and makes fd() readable.
  void Push(Item item);
  // Everything queued, in order; clears fd()'s readiness.
  std::deque<Item> Take();
  // An eventfd for the loop's poll.
  int fd() const { return wake_.get(); }

 private:
  std::mutex mu_;
  std::deque<Item> items_;  // guarded by mu_
  common::UniqueFd wake_;
};

class NativeSubscription : public OutputFollower::Reader,
                           public std::enable_shared_from_this<NativeSubscription> {
 public:
  static constexpr size_t kMaxBuffered = 256u << 10;

  NativeSubscription(NativeOutbox* outbox, std::string identity, std::string tenant,
                     uint64_t request_id, std::string job_id, uint64_t from_seq)
      : outbox_(outbox),
        identity_(std::move(identity)),
        tenant_(std::move(tenant)),
        request_id_(request_id),
        job_id_(std::move(job_id)),
        from_seq_(from_seq) {}

  size_t Buffered() override { return buffered_; }
  bool HasRoom() override { return closed_ || buffered_ < kMaxBuffered; }
  void OnChunks(std::vector<JobStore::StoredChunk>& chunks) override;
  void OnEnd(const JobRecord& record) override;
  void OnError(const common::Status& status) override;

  // Loop: `bytes` of this subscription's frames left for the client. True
  // when that brought it back under half of kMaxBuffered from above it (the
  // follower should be woken).
  bool Sent(size_t bytes);
  // Loop: its client has gone; nothing more is queued.
  void Close() { closed_ = true; }

  const std::string& identity() const { return identity_; }
  const std::string& tenant() const { return tenant_; }
  OutputFollower::Id id() const { return id_; }
  void set_id(OutputFollower::Id id) { id_ = id; }

 private:
  void Queue(std::string frame, bool last);

  NativeOutbox* outbox_;
  const std::string identity_;
  const std::string tenant_;
  const uint64_t request_id_;
  const std::string job_id_;
  const uint64_t from_seq_;
  std::atomic<size_t> buffered_{0};
  std::atomic<bool> closed_{false};
  std::atomic<OutputFollower::Id> id_{0};
};

}  // namespace kiln::broker
