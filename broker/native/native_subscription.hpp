// NativeSubscription: one native client's subscription to a job's output
// (docs/protocol.md, "Client protocol"), fed by the broker's shared
// OutputFollower; the Outbox through which its frames reach the NativeApi
// loop that owns the ROUTER socket; and OwnedFrame, the ZeroMQ message that
// tells when a frame has left the broker.
//
//   auto sub = std::make_shared<NativeSubscription>(outbox.get(), identity, tenant, request_id,
//                                                   id, 0, &unread, unread_limit);
//   sub->set_id(follower.Follow(id, "0", sub));
//   // loop: for (auto& item : outbox->Take()) router.send(OwnedFrame(std::move(item), ...));
//   //       for (auto& sub : outbox->TakeWakes()) follower.Wake(sub->id());
//
// Backpressure: a subscription holds at most kMaxBuffered bytes of frames
// its client has not taken — in the outbox, waiting for a full pipe, or in
// ZeroMQ's queue and not yet written to the connection (OwnedFrame's release
// calls Sent()); past it the follower skips it (its cursor stays, the rest
// waits in Redis) until Sent() brings it under half and the loop wakes the
// follower. The final frame, a result with the whole record, is charged to
// the tenant's UnreadBudget until it is written; while that is full, OnEnd
// declines and the follower offers it again later.
//
// Threads: Reader methods on the follower's thread; Sent() wherever ZeroMQ
// lets go of a frame (its I/O thread, or the loop); the accessors on the
// loop's; Outbox::Push and PushWake from any thread, Take and TakeWakes from
// the loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "broker/stream/output_follower.hpp"
#include "broker/stream/unread_budget.hpp"
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
    UnreadBudget::Charge charge;               // held until the frame is written
  };

  NativeOutbox();
  // Queues a frame and makes fd() readable.
  void Push(Item item);
  // `sub` took frames and is under half its buffer again: the loop should
  // wake the follower for it. Makes fd() readable.
  void PushWake(std::shared_ptr<NativeSubscription> sub);
  // Runs `task` on the loop thread at its next turn (not ordered with the
  // frames): how a request served on a pool thread touches the loop's state.
  void PushTask(std::function<void()> task);
  // Everything queued, in order; clears fd()'s readiness (call TakeWakes after).
  std::deque<Item> Take();
  std::vector<std::shared_ptr<NativeSubscription>> TakeWakes();
  std::vector<std::function<void()>> TakeTasks();
  // An eventfd for the loop's poll.
  int fd() const { return wake_.get(); }

 private:
  void Signal();

  std::mutex mu_;
  std::deque<Item> items_;                                  // guarded by mu_
  std::vector<std::shared_ptr<NativeSubscription>> wakes_;  // guarded by mu_
  std::vector<std::function<void()>> tasks_;                // guarded by mu_
  common::UniqueFd wake_;
};

// Bytes of frames ZeroMQ holds for one client connection and has not written
// to it yet, and when it last wrote some: a client holding some for longer
// than broker.clients.write_timeout_ms does not read, and is closed.
struct ClientBacklog {
  std::atomic<size_t> bytes{0};
  std::atomic<int64_t> last_taken_ms{0};  // steady clock; set when bytes fall or rise from 0
};

// A ZeroMQ message that owns `item`'s frame (no copy) and, when ZeroMQ lets
// go of it (written to the connection, or dropped with it), takes it off
// `backlog`, gives the subscription's share back through Sent() (waking it
// through `outbox` when that brings it under half) and releases the charge.
zmq::message_t OwnedFrame(NativeOutbox::Item item, std::shared_ptr<ClientBacklog> backlog,
                          std::shared_ptr<NativeOutbox> outbox);

class NativeSubscription : public OutputFollower::Reader,
                           public std::enable_shared_from_this<NativeSubscription> {
 public:
  static constexpr size_t kMaxBuffered = 256u << 10;

  // `unread` (not owned) outlives the subscription's follower entry.
  NativeSubscription(NativeOutbox* outbox, std::string identity, std::string tenant,
                     uint64_t request_id, std::string job_id, uint64_t from_seq,
                     UnreadBudget* unread, size_t unread_limit)
      : outbox_(outbox),
        identity_(std::move(identity)),
        tenant_(std::move(tenant)),
        request_id_(request_id),
        job_id_(std::move(job_id)),
        from_seq_(from_seq),
        unread_(unread),
        unread_limit_(unread_limit) {}

  size_t Buffered() override { return buffered_; }
  bool HasRoom() override { return closed_ || buffered_ < kMaxBuffered; }
  void OnChunks(std::vector<JobStore::StoredChunk>& chunks) override;
  bool OnEnd(const JobRecord& record) override;
  void OnError(const common::Status& status) override;

  // `bytes` of this subscription's frames were written to the client (or
  // dropped with it). True when that brought it back under half of
  // kMaxBuffered from above it (the follower should be woken). Any thread.
  bool Sent(size_t bytes);
  // Loop: its client has gone; nothing more is queued.
  void Close() { closed_ = true; }

  const std::string& identity() const { return identity_; }
  const std::string& tenant() const { return tenant_; }
  OutputFollower::Id id() const { return id_; }
  void set_id(OutputFollower::Id id) { id_ = id; }

 private:
  void Queue(std::string frame, bool last, UnreadBudget::Charge charge = nullptr);

  NativeOutbox* outbox_;
  const std::string identity_;
  const std::string tenant_;
  const uint64_t request_id_;
  const std::string job_id_;
  const uint64_t from_seq_;
  UnreadBudget* const unread_;
  const size_t unread_limit_;
  std::atomic<size_t> buffered_{0};
  std::atomic<bool> closed_{false};
  std::atomic<OutputFollower::Id> id_{0};
};

}  // namespace kiln::broker
