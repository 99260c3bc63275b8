#include "broker/native/native_subscription.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "common/json/bounded_json.hpp"
#include "common/protocol/client_codec.hpp"

namespace kiln::broker {
namespace {

namespace client = common::protocol::client;

}  // namespace

NativeOutbox::NativeOutbox() : wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

void NativeOutbox::Push(Item item) {
  {
    std::lock_guard lock(mu_);
    items_.push_back(std::move(item));
  }
  Signal();
}

void NativeOutbox::PushWake(std::shared_ptr<NativeSubscription> sub) {
  {
    std::lock_guard lock(mu_);
    wakes_.push_back(std::move(sub));
  }
  Signal();
}

void NativeOutbox::PushTask(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  Signal();
}

void NativeOutbox::Signal() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof(one));
}

std::deque<NativeOutbox::Item> NativeOutbox::Take() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(wake_.get(), &count, sizeof(count));
  std::lock_guard lock(mu_);
  std::deque<Item> out;
  out.swap(items_);
  return out;
}

std::vector<std::function<void()>> NativeOutbox::TakeTasks() {
  std::lock_guard lock(mu_);
  std::vector<std::function<void()>> out;
  out.swap(tasks_);
  return out;
}

std::vector<std::shared_ptr<NativeSubscription>> NativeOutbox::TakeWakes() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<NativeSubscription>> out;
  out.swap(wakes_);
  return out;
}

namespace {

// What an OwnedFrame's message points into, until ZeroMQ lets go of it.
struct InFlight {
  NativeOutbox::Item item;
  std::shared_ptr<ClientBacklog> backlog;
  std::shared_ptr<NativeOutbox> outbox;
};

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ZeroMQ's free function: runs on its I/O thread once the frame is written
// (or dropped), or on the sending thread if the send fails.
void Release(void* /*data*/, void* hint) {
  std::unique_ptr<InFlight> f(static_cast<InFlight*>(hint));
  const size_t bytes = f->item.frame.size();
  f->backlog->last_taken_ms = SteadyMs();
  f->backlog->bytes -= bytes;
  if (f->item.from && f->item.from->Sent(bytes)) f->outbox->PushWake(std::move(f->item.from));
}

}  // namespace

zmq::message_t OwnedFrame(NativeOutbox::Item item, std::shared_ptr<ClientBacklog> backlog,
                          std::shared_ptr<NativeOutbox> outbox) {
  const size_t bytes = item.frame.size();
  if (backlog->bytes.fetch_add(bytes) == 0) backlog->last_taken_ms = SteadyMs();
  auto* f = new InFlight{std::move(item), std::move(backlog), std::move(outbox)};
  // libzmq copies nothing and calls Release exactly once, also on failure.
  return zmq::message_t(f->item.frame.data(), bytes, &Release, f);
}

void NativeSubscription::Queue(std::string frame, bool last, UnreadBudget::Charge charge) {
  if (closed_) return;
  buffered_ += frame.size();
  outbox_->Push({identity_, std::move(frame), shared_from_this(), last, std::move(charge)});
}

void NativeSubscription::OnChunks(std::vector<JobStore::StoredChunk>& chunks) {
  for (auto& c : chunks) {
    // Tool calls are shown; their answers' entries are not (the answer
    // came from a client). A resume skips what the client already has:
    // a chunk by its seq; a call of a job whose output resumed is shown
    // again (answering it twice gets TOOL_CALL_CLOSED).
    if (c.tool) {
      if (c.tool->answer) continue;
      Queue(client::Encode(client::ToolCall{request_id_, job_id_, c.tool->call_id, c.tool->name,
                                            std::move(c.tool->arguments_json)}),
            false);
      continue;
    }
    if (c.chunk.seq < from_seq_) continue;
    Queue(client::Encode(client::Output{request_id_, job_id_, c.chunk.stream, c.chunk.seq,
                                        std::move(c.chunk.data)}),
          false);
  }
}

bool NativeSubscription::OnEnd(const JobRecord& record) {
  if (closed_) return true;
  // Charged before it is made: a declined end costs no copy of the record.
  auto charge = unread_->TryCharge(tenant_, record.ApproxJsonBytes(), unread_limit_);
  if (!charge) return false;
  // As the HTTP API writes JSON: invalid UTF-8 in output becomes U+FFFD.
  const std::string json = common::DumpJson(record.ToJson());
  Queue(client::Encode(client::Result{request_id_, job_id_, json}), true, std::move(charge));
  return true;
}

void NativeSubscription::OnError(const common::Status& st) {
  Queue(client::Encode(client::Error{request_id_, std::string(common::CodeName(st.code())),
                                     st.message(), common::IsRetryable(st.code()), job_id_}),
        true);
}

bool NativeSubscription::Sent(size_t bytes) {
  const size_t before = buffered_.fetch_sub(std::min(bytes, buffered_.load()));
  const size_t after = before - std::min(bytes, before);
  return before >= kMaxBuffered / 2 && after < kMaxBuffered / 2;
}

}  // namespace kiln::broker
