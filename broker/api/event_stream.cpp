#include "broker/api/event_stream.hpp"

#include "broker/api/stream_events.hpp"

namespace kiln::broker {

using nlohmann::json;

void EventStream::Start(std::shared_ptr<HttpExchange> exchange, OutputFollower* follower,
                        HttpServer* timers, const JobRecord& record, const LastEventId& last,
                        QuotaCounter::Hold hold, Unread unread) {
  auto stream =
      std::make_shared<EventStream>(exchange, follower, timers, std::move(hold), std::move(unread));
  std::weak_ptr<EventStream> weak = stream;
  exchange->OnStreamEvents(
      [weak, follower] {
        auto s = weak.lock();
        if (!s) return;
        std::lock_guard lock(s->mu_);
        if (!s->done_) follower->Wake(s->id_);
      },
      [weak] {
        if (auto s = weak.lock()) s->OnClosed();
      });
  exchange->StartStream(200, "text/event-stream",
                        {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
  if (last.kind == LastEventId::Kind::kNone) {
    const StreamEvent e = StartEvent(record);
    stream->Send(SseEvent(e.event, e.id, e.data));
  }
  const std::string after = last.kind == LastEventId::Kind::kEntry ? last.entry : "0";
  // The follower owns the stream from here; this function's reference goes.
  const OutputFollower::Id id = follower->Follow(record.id, after, stream);
  bool gone;
  {
    std::lock_guard lock(stream->mu_);
    stream->id_ = id;
    gone = stream->done_;
    stream->last_send_ = std::chrono::steady_clock::now();
  }
  if (gone) follower->Unfollow(id);  // the client left before we knew the id
  timers->After(std::chrono::duration_cast<std::chrono::milliseconds>(kKeepAlive),
                [stream] { stream->KeepAlive(); });
}

size_t EventStream::Buffered() { return exchange_->Pending(); }

bool EventStream::HasRoom() {
  {
    std::lock_guard lock(mu_);
    if (done_) return true;  // read on, so the follower drops it at once
  }
  return exchange_->Pending() < kMaxBuffered;
}

void EventStream::Send(std::string text) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    last_send_ = std::chrono::steady_clock::now();
  }
  exchange_->Send(std::move(text));
}

void EventStream::OnChunks(std::vector<JobStore::StoredChunk>& chunks) {
  std::string out;
  for (const auto& c : chunks) {
    const StreamEvent e = ChunkEvent(c);
    out += SseEvent(e.event, e.id, e.data);
  }
  Send(std::move(out));
}

bool EventStream::OnEnd(const JobRecord& record) {
  {
    std::lock_guard lock(mu_);
    if (done_) return true;  // the client left: nothing to send
  }
  // Charged before it is made: a declined end costs no copy of the record.
  auto charge = unread_.budget->TryCharge(unread_.tenant, record.ApproxJsonBytes(), unread_.limit);
  if (!charge) return false;
  const StreamEvent e = EndEvent(record);
  Finish(SseEvent(e.event, e.id, e.data), std::move(charge));
  return true;
}

void EventStream::OnError(const common::Status& status) {
  const StreamEvent e = ErrorEvent(status);
  Finish(SseEvent(e.event, e.id, e.data));
}

void EventStream::Finish(std::string last_event, UnreadBudget::Charge charge) {
  Send(std::move(last_event));
  QuotaCounter::Hold hold;
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    hold = std::move(hold_);
  }
  exchange_->End(std::move(charge));
}

void EventStream::OnClosed() {
  OutputFollower::Id id;
  QuotaCounter::Hold hold;
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    id = id_;
    hold = std::move(hold_);
  }
  if (id != 0) follower_->Unfollow(id);
}

void EventStream::KeepAlive() {
  bool due;
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    due = std::chrono::steady_clock::now() - last_send_ >= kKeepAlive;
  }
  // A comment line: keeps proxies from timing the stream out, and finds
  // clients that left without closing.
  if (due) Send(": keepalive\n\n");
  timers_->After(std::chrono::duration_cast<std::chrono::milliseconds>(kKeepAlive),
                 [self = shared_from_this()] { self->KeepAlive(); });
}

}  // namespace kiln::broker
