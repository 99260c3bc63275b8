#include "broker/api/event_stream.hpp"

#include "common/json/bounded_json.hpp"

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
    stream->Send(
        SseEvent("execution_start", "start",
                 {{"id", record.id},
                  {"language", record.language},
                  // null for a one-shot job, as in the record
                  {"session_id", record.session_id.empty() ? nlohmann::json(nullptr)
                                                           : nlohmann::json(record.session_id)},
                  {"status", JobStatusName(record.status)}}));
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

// tool_call / tool_result (docs/api.md, "Tool callbacks"): the arguments
// were checked when the call was opened; stored text that no longer parses
// is shown as null rather than passed on unparsed.
std::string EventStream::ToolEvent(const JobStore::StoredChunk& c) {
  const JobStore::StoredTool& t = *c.tool;
  if (t.answer) return SseEvent("tool_result", c.event_id, {{"call_id", t.call_id}, {"ok", t.ok}});
  auto args = common::ParseJson(t.arguments_json, {.max_depth = 64, .max_values = 1u << 16});
  return SseEvent("tool_call", c.event_id,
                  {{"call_id", t.call_id},
                   {"name", t.name},
                   {"arguments", args.ok() ? *std::move(args) : nlohmann::json()}});
}

void EventStream::OnChunks(std::vector<JobStore::StoredChunk>& chunks) {
  std::string out;
  for (const auto& c : chunks) {
    if (c.tool) {
      out += ToolEvent(c);
      continue;
    }
    out += SseEvent(
        "output_chunk", c.event_id,
        {{"stream", c.chunk.stream == common::protocol::Stream::kStdout ? "stdout" : "stderr"},
         {"seq", c.chunk.seq},
         {"data", c.chunk.data}});
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
  const bool error = record.status == JobStatus::kError || record.status == JobStatus::kRejected;
  Finish(SseEvent(error ? "execution_error" : "execution_end", "end", record.ToJson()),
         std::move(charge));
  return true;
}

void EventStream::OnError(const common::Status& status) {
  Finish(SseEvent("execution_error", "", ErrorJson(status)));
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
