#include "broker/api/ws_follow.hpp"

#include "broker/api/ws_session.hpp"
#include "common/json/bounded_json.hpp"

namespace kiln::broker {

std::string WsFollow::Message(const std::string& execution_id, const StreamEvent& e) {
  // As the HTTP API writes JSON: invalid UTF-8 in output becomes U+FFFD.
  return common::DumpJson({{"type", "event"},
                           {"execution_id", execution_id},
                           {"event", e.event},
                           {"id", e.id},
                           {"data", e.data}});
}

size_t WsFollow::Buffered() {
  auto s = session_.lock();
  return s ? s->Pending() : 0;
}

bool WsFollow::HasRoom() {
  if (stopped_) return true;  // read on, so the follower drops it at once
  auto s = session_.lock();
  return !s || s->Pending() < kMaxBuffered;
}

void WsFollow::OnChunks(std::vector<JobStore::StoredChunk>& chunks) {
  if (stopped_) return;
  auto s = session_.lock();
  if (!s) return;
  for (const auto& c : chunks) s->Send(Message(execution_id_, ChunkEvent(c)));
}

bool WsFollow::OnEnd(const JobRecord& record) {
  if (stopped_) return true;  // unfollowed, or the client left: nothing to send
  // Charged before it is made: a declined end costs no copy of the record.
  auto charge = unread_.budget->TryCharge(unread_.tenant, record.ApproxJsonBytes(), unread_.limit);
  if (!charge) return false;
  Finish(Message(execution_id_, EndEvent(record)), std::move(charge));
  return true;
}

void WsFollow::OnError(const common::Status& status) {
  Finish(Message(execution_id_, ErrorEvent(status)), nullptr);
}

void WsFollow::Finish(std::string message, UnreadBudget::Charge charge) {
  auto s = session_.lock();
  if (!s || stopped_) return;
  s->Send(std::move(message), std::move(charge));
  Stop();
  s->Ended(execution_id_, this);
}

void WsFollow::Stop() {
  if (stopped_.exchange(true)) return;
  QuotaCounter::Hold released = std::move(hold_);
}

}  // namespace kiln::broker
