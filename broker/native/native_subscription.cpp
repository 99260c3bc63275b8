#include "broker/native/native_subscription.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

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

void NativeSubscription::Queue(std::string frame, bool last) {
  if (closed_) return;
  buffered_ += frame.size();
  outbox_->Push({identity_, std::move(frame), shared_from_this(), last});
}

void NativeSubscription::OnChunks(std::vector<JobStore::StoredChunk>& chunks) {
  for (auto& c : chunks) {
    // A resume skips what the client already has.
    if (c.chunk.seq < from_seq_) continue;
    Queue(client::Encode(client::Output{request_id_, job_id_, c.chunk.stream, c.chunk.seq,
                                        std::move(c.chunk.data)}),
          false);
  }
}

void NativeSubscription::OnEnd(const JobRecord& record) {
  // As the HTTP API writes JSON: invalid UTF-8 in output becomes U+FFFD.
  const std::string json =
      record.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  Queue(client::Encode(client::Result{request_id_, job_id_, json}), true);
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
