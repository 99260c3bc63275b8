#include "broker/api/ws_session.hpp"

#include <chrono>

#include "broker/api/sse_events.hpp"
#include "broker/tools/tool_relay.hpp"
#include "common/json/bounded_json.hpp"

namespace kiln::broker {

using common::Code;
using common::Status;
using nlohmann::json;

namespace {

constexpr size_t kMaxExecutionIdBytes = 128;

// The fields each message type may carry (anything else is refused, as
// unknown fields of a request body are).
bool Allowed(const std::string& type, const std::string& key) {
  if (key == "type" || key == "execution_id" || key == "ref") return true;
  if (type == "follow") return key == "last_event_id";
  if (type == "tool_result") return key == "call_id" || key == "result" || key == "error";
  return false;
}

}  // namespace

WsSession::WsSession(Caller caller, QuotaCounter::Hold connection, Deps deps, Limits limits)
    : caller_(std::move(caller)),
      deps_(std::move(deps)),
      limits_(std::move(limits)),
      connection_(std::move(connection)),
      bucket_(limits_.rate, limits_.burst, TokenBucket::Clock::now()) {}

void WsSession::OnOpen(std::shared_ptr<WebSocketChannel> channel) {
  std::lock_guard lock(mu_);
  if (!closed_) channel_ = std::move(channel);
}

bool WsSession::OnMessage(std::string message, bool binary) {
  bool post = false;
  bool keep_reading;
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    // Counted whatever it holds: a flood of garbage is a flood too. Judged
    // now, refused on the pool (the refusal carries the message's ref).
    const bool over =
        bucket_.Take(TokenBucket::Clock::now()) != TokenBucket::Clock::duration::zero();
    inbox_bytes_ += message.size();
    inbox_.push_back({std::move(message), binary, over});
    post = !handling_;
    handling_ = true;
    held_ = QueueFull();
    keep_reading = !held_;
  }
  if (post && !deps_.post([self = shared_from_this()] { self->HandleNext(); })) {
    return false;  // the pool stopped: the broker is going away
  }
  return keep_reading;
}

bool WsSession::QueueFull() const {
  return inbox_.size() >= kMaxQueued || inbox_bytes_ >= kMaxQueuedBytes;
}

void WsSession::HandleNext() {
  Inbound in;
  std::shared_ptr<WebSocketChannel> resume;
  {
    std::lock_guard lock(mu_);
    if (closed_ || inbox_.empty()) {
      handling_ = false;
      return;
    }
    in = std::move(inbox_.front());
    inbox_.pop_front();
    inbox_bytes_ -= in.text.size();
    if (held_ && !QueueFull()) {
      held_ = false;
      resume = channel_;
    }
  }
  if (resume) resume->ResumeReads();
  Handle(in);
  bool more;
  {
    std::lock_guard lock(mu_);
    more = !closed_ && !inbox_.empty();
    handling_ = more;
  }
  // One message per task: the pool's other work takes turns with this
  // connection's.
  if (more && !deps_.post([self = shared_from_this()] { self->HandleNext(); })) {
    std::lock_guard lock(mu_);
    handling_ = false;
  }
}

void WsSession::Handle(const Inbound& in) {
  json ref;
  auto parsed = in.binary ? common::StatusOr<Request>(common::InvalidRequest(
                                "binary messages are not part of the protocol: send each message "
                                "as JSON text"))
                          : Parse(in.text, &ref);
  const std::string id = parsed.ok() ? parsed->execution_id : "";
  if (in.over_rate) {
    return Error(Status(Code::kRateLimited,
                        "more than " + std::to_string(static_cast<uint64_t>(limits_.rate)) +
                            " messages a second (bursts of " + std::to_string(limits_.burst) +
                            ") on this connection; slow down"),
                 id, ref);
  }
  if (!parsed.ok()) return Error(parsed.status(), "", ref);
  // One of the tenant's requests in progress, as an HTTP request is.
  QuotaCounter::Hold request = deps_.requests->TryAcquire(limits_.who, limits_.max_requests);
  if (!request) {
    return Error(
        Status(Code::kRateLimited, limits_.who + " has " + std::to_string(limits_.max_requests) +
                                       " requests in progress on this broker"),
        id, ref);
  }
  if (parsed->type == "follow") return Follow(*parsed);
  if (parsed->type == "unfollow") return Unfollow(*parsed);
  AnswerTool(*parsed);
}

common::StatusOr<WsSession::Request> WsSession::Parse(std::string_view message, json* ref) const {
  // A tool answer nests as deep as any JSON the code gets (ToolRelay's bound).
  ASSIGN_OR_RETURN(json body, common::ParseJson(message, {.max_depth = 64}, "message"));
  if (!body.is_object()) return common::InvalidRequest("message: expected a JSON object");
  // The ref first, so that every later refusal can carry it.
  if (auto r = body.find("ref"); r != body.end()) {
    const bool ok = (r->is_string() && r->get_ref<const std::string&>().size() <= kMaxRefBytes) ||
                    r->is_number_integer();
    if (!ok) {
      return common::InvalidRequest("ref: expected a string of at most " +
                                    std::to_string(kMaxRefBytes) + " bytes or an integer");
    }
    *ref = *r;
  }
  Request req;
  auto type = body.find("type");
  if (type == body.end() || !type->is_string()) {
    return common::InvalidRequest("type: expected \"follow\", \"unfollow\" or \"tool_result\"");
  }
  req.type = type->get<std::string>();
  if (req.type != "follow" && req.type != "unfollow" && req.type != "tool_result") {
    return common::InvalidRequest("type: unknown message type \"" + req.type.substr(0, 64) +
                                  "\" (expected follow, unfollow or tool_result)");
  }
  for (const auto& [key, value] : body.items()) {
    if (!Allowed(req.type, key)) {
      return common::InvalidRequest(req.type + ": unknown field: " + key.substr(0, 64));
    }
  }
  auto id = body.find("execution_id");
  if (id == body.end() || !id->is_string() || id->get_ref<const std::string&>().empty() ||
      id->get_ref<const std::string&>().size() > kMaxExecutionIdBytes) {
    return common::InvalidRequest(req.type + ": execution_id: expected an execution's id");
  }
  req.execution_id = id->get<std::string>();
  req.ref = *ref;
  req.body = std::move(body);
  return req;
}

void WsSession::Follow(const Request& r) {
  LastEventId last;
  if (auto l = r.body.find("last_event_id"); l != r.body.end()) {
    auto parsed = l->is_string() ? ParseLastEventId(l->get_ref<const std::string&>())
                                 : common::StatusOr<LastEventId>(common::InvalidRequest(""));
    if (!parsed.ok()) {
      return Error(common::InvalidRequest("follow: last_event_id: expected an event id the "
                                          "stream sent (start, end or <ms>-<seq>)"),
                   r.execution_id, r.ref);
    }
    last = *parsed;
  }
  // The limits first, in memory: a refused follow costs no Redis call.
  std::shared_ptr<WsFollow> follow;
  Status refused;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    if (follows_.count(r.execution_id)) {
      refused =
          common::InvalidRequest("follow: this connection follows " + r.execution_id + " already");
    } else if (follows_.size() >= limits_.max_follows) {
      refused = Status(Code::kLimitExceeded, "follow: this connection follows " +
                                                 std::to_string(limits_.max_follows) +
                                                 " executions already (the most)");
    } else if (QuotaCounter::Hold hold =
                   deps_.streams->TryAcquire(limits_.who, limits_.max_streams);
               !hold) {
      refused =
          Status(Code::kRateLimited, limits_.who + " has " + std::to_string(limits_.max_streams) +
                                         " event streams open on this broker");
    } else {
      follow = std::make_shared<WsFollow>(weak_from_this(), r.execution_id, std::move(hold),
                                          limits_.unread);
      follows_[r.execution_id] = follow;
    }
  }
  if (!refused.ok()) return Error(refused, r.execution_id, r.ref);
  auto record = deps_.service->Load(caller_, r.execution_id);
  if (!record.ok() || last.kind == LastEventId::Kind::kEnd) {
    follow->Stop();
    Ended(r.execution_id, follow.get());
    if (!record.ok()) return Error(record.status(), r.execution_id, r.ref);
    // The client saw the end: nothing more will come.
    return Reply({{"type", "unfollowed"}, {"execution_id", r.execution_id}}, r.ref);
  }
  {
    std::lock_guard lock(mu_);
    auto it = follows_.find(r.execution_id);
    // The client left meanwhile.
    if (closed_ || it == follows_.end() || it->second != follow) return;
    if (last.kind == LastEventId::Kind::kNone && channel_) {
      channel_->Send(WsFollow::Message(r.execution_id, StartEvent(*record)));
    }
  }
  const std::string after = last.kind == LastEventId::Kind::kEntry ? last.entry : "0";
  const OutputFollower::Id id = deps_.follower->Follow(r.execution_id, after, follow);
  follow->set_id(id);
  // Stopped (the client left) before the follower's id was known.
  if (follow->stopped()) deps_.follower->Unfollow(id);
}

void WsSession::Unfollow(const Request& r) {
  std::shared_ptr<WsFollow> follow;
  {
    std::lock_guard lock(mu_);
    auto it = follows_.find(r.execution_id);
    if (it != follows_.end()) {
      follow = std::move(it->second);
      follows_.erase(it);
    }
  }
  if (follow) {
    follow->Stop();
    if (follow->id() != 0) deps_.follower->Unfollow(follow->id());
  }
  // Whether it was followed or not: afterwards it is not.
  Reply({{"type", "unfollowed"}, {"execution_id", r.execution_id}}, r.ref);
}

void WsSession::AnswerTool(const Request& r) {
  if (!deps_.tools) {
    return Error(common::Unavailable("this broker relays no tool calls"), r.execution_id, r.ref);
  }
  json answer = r.body;
  answer.erase("type");
  answer.erase("execution_id");
  answer.erase("ref");
  auto out = deps_.tools->AnswerParsed(caller_, r.execution_id, answer);
  if (!out.ok()) return Error(out.status(), r.execution_id, r.ref);
  Reply({{"type", "tool_result_accepted"},
         {"execution_id", r.execution_id},
         {"call_id", (*out)["call_id"]}},
        r.ref);
}

void WsSession::OnDrained() {
  std::vector<OutputFollower::Id> ids;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, f] : follows_) {
      if (f->id() != 0) ids.push_back(f->id());
    }
  }
  for (auto id : ids) deps_.follower->Wake(id);
}

void WsSession::OnClosed() {
  std::map<std::string, std::shared_ptr<WsFollow>> follows;
  std::shared_ptr<WebSocketChannel> channel;
  QuotaCounter::Hold connection;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    inbox_.clear();
    inbox_bytes_ = 0;
    follows.swap(follows_);
    channel = std::move(channel_);
    connection = std::move(connection_);
  }
  for (auto& [id, f] : follows) {
    f->Stop();
    if (f->id() != 0) deps_.follower->Unfollow(f->id());
  }
}

void WsSession::Send(std::string text, std::shared_ptr<const void> keep) {
  std::shared_ptr<WebSocketChannel> channel;
  {
    std::lock_guard lock(mu_);
    channel = channel_;
  }
  if (channel) channel->Send(std::move(text), std::move(keep));
}

size_t WsSession::Pending() {
  std::lock_guard lock(mu_);
  return channel_ ? channel_->Pending() : 0;
}

void WsSession::Ended(const std::string& execution_id, const WsFollow* follow) {
  std::lock_guard lock(mu_);
  auto it = follows_.find(execution_id);
  if (it != follows_.end() && it->second.get() == follow) follows_.erase(it);
}

void WsSession::Reply(json message, const json& ref) {
  if (!ref.is_null()) message["ref"] = ref;
  Send(common::DumpJson(message));
}

void WsSession::Error(const Status& st, const std::string& execution_id, const json& ref) {
  json message = ErrorJson(st);
  message["type"] = "error";
  if (!execution_id.empty()) message["execution_id"] = execution_id;
  Reply(std::move(message), ref);
}

}  // namespace kiln::broker
