#include "broker/native/native_api.hpp"

#include <chrono>
#include <thread>
#include <zmq_addon.hpp>

#include "broker/auth/zap_handler.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "broker/tools/tool_relay.hpp"
#include "common/clock.hpp"
#include "common/curve/curve_keys.hpp"
#include "common/json/bounded_json.hpp"
#include "common/log/logging.hpp"
#include "common/protocol/client_codec.hpp"

namespace kiln::broker {
namespace {

namespace client = common::protocol::client;
using common::Code;
using common::Status;
using nlohmann::json;

const common::SubsystemLog kLog("native");

// How long the loop waits for a frame before it checks for a stop.
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// Frames handled per poll from each socket, so neither starves the other.
constexpr int kBurst = 256;
using Clock = std::chrono::steady_clock;
// How soon frames waiting for a full client pipe are tried again.
constexpr auto kRetryFull = std::chrono::milliseconds(10);

}  // namespace

common::StatusOr<std::unique_ptr<NativeApi>> NativeApi::Create(
    const BrokerConfig& config, zmq::context_t* ctx, ExecutionService* service,
    OutputFollower* follower, UnreadBudget* unread, BrokerMetrics* metrics) {
  if (config.native.endpoint.empty()) {
    return common::InvalidRequest("broker.clients.endpoint is empty: the native API is off");
  }
  std::unique_ptr<NativeApi> api(new NativeApi(config, ctx, service, follower, unread, metrics));
  try {
    api->router_ = zmq::socket_t(*ctx, zmq::socket_type::router);
    api->router_.set(zmq::sockopt::router_mandatory, 1);  // a full pipe is seen, not hidden
    api->router_.set(zmq::sockopt::linger, 0);
    api->router_.set(zmq::sockopt::sndhwm, kClientHwm);
    // A submit carries at most a request body: one up to twice that still
    // gets a clear error; a bigger frame is dropped by libzmq with its
    // connection, before it is held in memory.
    api->router_.set(zmq::sockopt::maxmsgsize,
                     static_cast<int64_t>(2 * config.http.max_body_bytes + kFrameOverhead));
    // Frames read from one client and not yet handled: past this libzmq stops
    // reading that connection (TCP pushes back on the client).
    api->router_.set(zmq::sockopt::rcvhwm, kClientRcvHwm);
    // Watched from before the bind, so no connection goes unseen.
    const ConnectionLimits limits{
        config.native.max_connections, config.native.max_connections_per_address,
        std::chrono::milliseconds(config.native.auth_timeout_ms), kMaxBadFrames};
    ASSIGN_OR_RETURN(api->connections_,
                     ClientConnections::Create(ctx, api->router_, limits, metrics));
    if (!config.native.secret_key_file.empty()) {
      // Encryption only: any client key is let in (ZapHandler answers this
      // domain with yes when the worker endpoint has one), tokens decide.
      ASSIGN_OR_RETURN(common::CurveKeyPair own,
                       common::ReadCurveSecretKeyFile(config.native.secret_key_file));
      api->router_.set(zmq::sockopt::curve_server, true);
      api->router_.set(zmq::sockopt::curve_secretkey, own.secret_z85);
      api->router_.set(zmq::sockopt::zap_domain, kClientZapDomain);
    }
    api->router_.bind(config.native.endpoint);
    api->endpoint_ = api->router_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return common::InvalidRequest("cannot bind client endpoint " + config.native.endpoint + ": " +
                                  e.what());
  }
  return api;
}

NativeApi::NativeApi(const BrokerConfig& config, zmq::context_t* ctx, ExecutionService* service,
                     OutputFollower* follower, UnreadBudget* unread, BrokerMetrics* metrics)
    : config_(config),
      ctx_(ctx),
      service_(service),
      metrics_(metrics),
      follower_(follower),
      unread_(unread),
      pool_(std::make_unique<WorkPool>(config.native.threads, kMaxQueuedRequests,
                                       "kiln-native-run")) {}

NativeApi::~NativeApi() {
  pool_->Stop();  // its tasks use what follows
  // The follower outlives this: its readers must not reach a gone outbox.
  for (auto& [identity, sub] : subs_) {
    sub->Close();
    follower_->Unfollow(sub->id());
  }
}

void NativeApi::Run(std::stop_token stop) {
  loop_thread_ = std::this_thread::get_id();
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                             {nullptr, outbox_->fd(), ZMQ_POLLIN, 0},
                             {connections_->monitor().handle(), 0, ZMQ_POLLIN, 0}};
  while (!stop.stop_requested()) {
    try {
      auto wait = connections_->UntilDue(Clock::now(), kPollInterval);
      if (!pending_.empty()) wait = std::min<std::chrono::milliseconds>(wait, kRetryFull);
      zmq::poll(items, 3, wait);
      // Connection events first: a request's connection is then known.
      if (items[2].revents & ZMQ_POLLIN) connections_->DrainEvents();
      // Subscription frames next, after what already waits for their clients.
      FlushPending();
      if (items[1].revents & ZMQ_POLLIN) {
        for (auto& item : outbox_->Take()) Deliver(std::move(item));
        for (auto& task : outbox_->TakeTasks()) task();
        for (auto& sub : outbox_->TakeWakes()) follower_->Wake(sub->id());
      }
      for (int i = 0; i < kBurst && (items[0].revents & ZMQ_POLLIN); ++i) {
        std::vector<zmq::message_t> parts;
        if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
          break;
        }
        if (parts.empty()) continue;
        const std::string identity = parts[0].to_string();
        const int fd = connections_->SourceOf(parts.back());
        if (parts.size() != 2) {
          SendError(identity, 0,
                    common::InvalidRequest("a message is exactly one frame, got " +
                                           std::to_string(parts.size() - 1)));
          connections_->BadFrame(fd);
          continue;
        }
        clients_[identity].fd = fd;
        HandleFrame(identity, fd, parts[1].to_string_view());
      }
      const auto now = Clock::now();
      connections_->Tick(now);
      if (now >= next_client_sweep_) SweepClients(now);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
      kLog.Warn(limit, {}, "{}", e.what());
    }
  }
}

void NativeApi::HandleFrame(const std::string& identity, int fd, std::string_view frame) {
  auto message = client::Decode(frame);
  if (metrics_) {
    metrics_->NativeRequest(message.ok() ? client::TypeName(client::TypeOf(*message))
                                         : "malformed");
  }
  if (!message.ok()) {
    SendError(identity, client::PeekRequestId(frame), message.status());
    return connections_->BadFrame(fd);
  }
  // Every request is authenticated here, once; its handler gets the caller.
  auto serve = [&](const auto& m, auto handler) {
    auto caller = AuthenticateToken(config_, m.token);
    if (!caller.ok()) {
      SendError(identity, m.request_id, caller.status());
      return connections_->BadFrame(fd);
    }
    connections_->Authenticated(fd);
    handler(*caller);
  };
  // The requests that only call Redis run on the pool as they are.
  auto pooled = [this, &identity, &frame](const Caller& caller, const auto& m, auto handler) {
    Post({identity, m.request_id, caller, frame.size(),
          [this, identity, caller, m, handler] { (this->*handler)(identity, caller, m); },
          nullptr});
  };
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, client::Submit>) {
          serve(m, [&](const Caller& c) { OnSubmit(identity, c, m); });
        } else if constexpr (std::is_same_v<T, client::Subscribe>) {
          serve(m, [&](const Caller& c) { OnSubscribe(identity, c, m); });
        } else if constexpr (std::is_same_v<T, client::Cancel>) {
          serve(m, [&](const Caller& c) { pooled(c, m, &NativeApi::OnCancel); });
        } else if constexpr (std::is_same_v<T, client::Get>) {
          serve(m, [&](const Caller& c) { pooled(c, m, &NativeApi::OnGet); });
        } else if constexpr (std::is_same_v<T, client::ToolAnswer>) {
          serve(m, [&](const Caller& c) { pooled(c, m, &NativeApi::OnToolAnswer); });
        } else {
          SendError(identity, m.request_id,
                    common::InvalidRequest(std::string(client::TypeName(client::TypeOf(*message))) +
                                           " is a reply, not a request"));
          connections_->BadFrame(fd);
        }
      },
      *message);
}

void NativeApi::OnSubmit(const std::string& identity, const Caller& caller,
                         const client::Submit& m) {
  if (m.request_json.size() > config_.http.max_body_bytes) {
    return SendError(
        identity, m.request_id,
        common::InvalidRequest("request_json: " + std::to_string(m.request_json.size()) +
                               " bytes, more than the request body limit of " +
                               std::to_string(config_.http.max_body_bytes)));
  }
  // A subscription is counted before the job exists: over a limit, the
  // submit changes nothing.
  if (m.subscribe) {
    if (auto st = Reserve(caller); !st.ok()) return SendError(identity, m.request_id, st);
  }
  std::function<void()> refused;
  if (m.subscribe) refused = [this, tenant = caller.tenant] { Release(tenant); };
  Post({identity, m.request_id, caller, m.request_json.size(),
        [this, identity, caller, m] { ServeSubmit(identity, caller, m); }, std::move(refused)});
}

void NativeApi::ServeSubmit(const std::string& identity, const Caller& caller,
                            const client::Submit& m) {
  client::Accepted accepted{m.request_id, "", ""};
  if (auto st = Admit(caller, m, &accepted); !st.ok()) {
    if (m.subscribe) outbox_->PushTask([this, tenant = caller.tenant] { Release(tenant); });
    return SendError(identity, m.request_id, st, accepted.id);
  }
  Send(identity, accepted);
  if (m.subscribe) {
    // The Accepted is in the outbox already: the subscription's frames,
    // queued there by the follower, come after it.
    outbox_->PushTask([this, identity, tenant = caller.tenant, request_id = m.request_id,
                       id = accepted.id] { Follow(identity, tenant, request_id, id, 0); });
  }
}

Status NativeApi::Admit(const Caller& caller, const client::Submit& m, client::Accepted* accepted) {
  ASSIGN_OR_RETURN(SubmitResult out, service_->Submit(caller, m.request_json, m.idempotency_key,
                                                      /*register_waiter=*/false));
  accepted->id = out.id;
  accepted->status = out.status;
  switch (out.kind) {
    case SubmitResult::Kind::kBlocked:
    case SubmitResult::Kind::kUnconfirmed:  // the error carries the id
      return out.blocked;
    case SubmitResult::Kind::kReplay: {
      auto record = service_->LoadOwned(out.id);
      if (!record.ok()) {
        accepted->id.clear();
        return record.status();
      }
      accepted->status = JobStatusName(record->status);
      break;
    }
    case SubmitResult::Kind::kAccepted:
      break;
  }
  return Status::Ok();
}

void NativeApi::OnSubscribe(const std::string& identity, const Caller& caller,
                            const client::Subscribe& m) {
  // Counted first: a request over the limit costs no Redis call.
  if (auto st = Reserve(caller); !st.ok()) return SendError(identity, m.request_id, st, m.id);
  Post({identity, m.request_id, caller, m.id.size(),
        [this, identity, caller, m] { ServeSubscribe(identity, caller, m); },
        [this, tenant = caller.tenant] { Release(tenant); }});
}

void NativeApi::ServeSubscribe(const std::string& identity, const Caller& caller,
                               const client::Subscribe& m) {
  auto record = service_->Load(caller, m.id);
  if (!record.ok()) {
    outbox_->PushTask([this, tenant = caller.tenant] { Release(tenant); });
    return SendError(identity, m.request_id, record.status(), m.id);
  }
  outbox_->PushTask([this, identity, tenant = caller.tenant, m] {
    Follow(identity, tenant, m.request_id, m.id, m.from_seq);
  });
}

void NativeApi::Post(Request r) {
  // Admins share one count; a tenant has its own, as over HTTP.
  const TenantConfig* tenant = r.caller.admin ? nullptr : FindTenant(config_, r.caller.tenant);
  const uint32_t limit =
      tenant ? TenantMaxRequests(config_, *tenant) : config_.quotas.tenant_max_requests;
  const std::string who = r.caller.admin ? std::string("admin") : r.caller.tenant;
  TenantRequests& t = requests_[who];
  if (t.running < limit) {
    Start(t, std::move(r));
    if (t.running == 0) requests_.erase(who);  // refused: the pool is full
    return;
  }
  if (t.waiting.size() >= kMaxWaitingRequests || t.waiting_bytes + r.bytes > kMaxWaitingBytes) {
    SendError(r.identity, r.request_id,
              Status(Code::kRateLimited, who + " has " + std::to_string(t.waiting.size()) +
                                             " requests waiting on this broker (" +
                                             std::to_string(t.waiting_bytes) + " bytes)"));
    if (r.refused) r.refused();
    return;
  }
  t.waiting_bytes += r.bytes;
  t.waiting.push_back(std::move(r));
}

void NativeApi::Start(TenantRequests& t, Request r) {
  const std::string who = r.caller.admin ? std::string("admin") : r.caller.tenant;
  ++t.running;
  if (pool_->TryPost([this, who, serve = std::move(r.serve)] {
        serve();
        outbox_->PushTask([this, who] { Done(who); });
      })) {
    return;
  }
  --t.running;
  SendError(r.identity, r.request_id,
            common::Unavailable("the broker is busy (" + std::to_string(kMaxQueuedRequests) +
                                " native requests queued); retry"));
  if (r.refused) r.refused();
}

void NativeApi::Done(const std::string& who) {
  auto it = requests_.find(who);
  if (it == requests_.end()) return;
  TenantRequests& t = it->second;
  --t.running;
  if (!t.waiting.empty()) {
    Request next = std::move(t.waiting.front());
    t.waiting.pop_front();
    t.waiting_bytes -= next.bytes;
    Start(t, std::move(next));
  }
  if (t.running == 0 && t.waiting.empty()) requests_.erase(it);
}

void NativeApi::OnCancel(const std::string& identity, const Caller& caller,
                         const client::Cancel& m) {
  auto out = service_->Cancel(caller, m.id);
  if (!out.ok()) return SendError(identity, m.request_id, out.status(), m.id);
  if (IsTerminal(out->record.status))
    return SendRecord(identity, caller, m.request_id, out->record);
  // Its worker was told: the record may already say it ended.
  auto now = service_->LoadOwned(m.id);
  if (!now.ok()) return SendError(identity, m.request_id, now.status(), m.id);
  if (IsTerminal(now->status)) return SendRecord(identity, caller, m.request_id, *now);
  // Still ending: the worker's result will say (a subscriber sees it).
  Send(identity, client::Accepted{m.request_id, m.id, JobStatusName(now->status)});
}

void NativeApi::OnGet(const std::string& identity, const Caller& caller, const client::Get& m) {
  auto answer = service_->Read(caller, m.id);
  if (!answer.ok()) return SendError(identity, m.request_id, answer.status(), m.id);
  Deliver({identity, client::Encode(client::Result{m.request_id, m.id, std::move(answer->json)}),
           nullptr, false, std::move(answer->charge)});
}

void NativeApi::OnToolAnswer(const std::string& identity, const Caller& caller,
                             const client::ToolAnswer& m) {
  if (!tools_) {
    return SendError(identity, m.request_id, common::Unavailable("no tool relay"), m.id);
  }
  // The HTTP body the answer stands for: one set of checks for both.
  nlohmann::json body{{"call_id", m.call_id}};
  if (m.is_error) {
    body["error"] = m.error;
  } else {
    auto result = common::ParseJson(m.result_json, {.max_depth = 63}, "result_json");
    if (!result.ok()) return SendError(identity, m.request_id, result.status(), m.id);
    body["result"] = *std::move(result);
  }
  auto out = tools_->Answer(caller, m.id, common::DumpJson(body));
  if (!out.ok()) return SendError(identity, m.request_id, out.status(), m.id);
  Send(identity, client::ToolAnswered{m.request_id, m.id, m.call_id});
}

size_t NativeApi::UnreadLimit(const std::string& tenant) const {
  const TenantConfig* t = FindTenant(config_, tenant);
  return t ? TenantMaxUnreadBytes(config_, *t) : config_.quotas.tenant_max_unread_bytes;
}

void NativeApi::SendRecord(const std::string& identity, const Caller& caller, uint64_t request_id,
                           const JobRecord& record) {
  auto answer = service_->Answer(caller, record);
  if (!answer.ok()) return SendError(identity, request_id, answer.status(), record.id);
  Deliver({identity, client::Encode(client::Result{request_id, record.id, std::move(answer->json)}),
           nullptr, false, std::move(answer->charge)});
}

void NativeApi::Send(const std::string& identity, const client::Message& m) {
  SendFrame(identity, client::Encode(m));
}

void NativeApi::SendFrame(const std::string& identity, std::string_view frame) {
  Deliver({identity, std::string(frame), nullptr, false, nullptr});
}

NativeApi::SendResult NativeApi::TrySend(NativeOutbox::Item& item) {
  try {
    // ROUTER_MANDATORY: a full pipe fails the first part with EAGAIN, an
    // unknown identity with EHOSTUNREACH; a sent first part means the
    // second goes too.
    if (!router_.send(zmq::buffer(item.identity),
                      zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return SendResult::kFull;
    }
    auto& backlog = clients_[item.identity].backlog;
    router_.send(OwnedFrame(std::move(item), backlog, outbox_), zmq::send_flags::none);
    return SendResult::kSent;
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return SendResult::kGone;
    static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
    kLog.Warn(limit, {}, "send failed: {}", e.what());
    return SendResult::kGone;
  }
}

void NativeApi::Deliver(NativeOutbox::Item item) {
  if (std::this_thread::get_id() != loop_thread_) return outbox_->Push(std::move(item));
  auto it = pending_.find(item.identity);
  if (it == pending_.end()) {
    const auto from = item.from;
    const bool last = item.last;
    const std::string identity = item.identity;
    switch (TrySend(item)) {
      case SendResult::kSent:
        if (last) Delivered(identity, from);
        return;
      case SendResult::kGone:
        if (from) ClientGone(identity);
        return;  // a reply to a client that left: nothing to tell it
      case SendResult::kFull:
        it = pending_.try_emplace(item.identity).first;
        break;
    }
  }
  Pending& p = it->second;
  if (!item.from) {
    // A client that sends requests and never reads answers: its replies
    // are bounded here (a subscription's frames are bounded by its buffer),
    // one reply of any size at least.
    if (p.reply_bytes > 0 && p.reply_bytes + item.frame.size() > kMaxPendingReplyBytes) {
      static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
      kLog.Warn(limit, {},
                "a client that does not read its replies: dropped one ({} bytes waiting)",
                p.reply_bytes);
      return;
    }
    p.reply_bytes += item.frame.size();
  }
  p.items.push_back(std::move(item));
}

void NativeApi::FlushPending() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    bool gone = false;
    while (!p.items.empty()) {
      NativeOutbox::Item& front = p.items.front();
      const auto from = front.from;
      const bool last = front.last;
      const size_t bytes = front.frame.size();
      const SendResult r = TrySend(front);
      if (r == SendResult::kFull) break;
      if (r == SendResult::kGone) {
        gone = true;
        break;
      }
      p.items.pop_front();
      if (!from) p.reply_bytes -= bytes;
      if (last) Delivered(it->first, from);
    }
    if (gone) {
      const std::string identity = it->first;
      ++it;
      ClientGone(identity);  // erases its entry
      continue;
    }
    it = p.items.empty() ? pending_.erase(it) : std::next(it);
  }
}

void NativeApi::Delivered(const std::string& identity,
                          const std::shared_ptr<NativeSubscription>& from) {
  if (!from) return;
  auto range = subs_.equal_range(identity);
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == from) {
      subs_.erase(it);
      Release(from->tenant());
      break;
    }
  }
}

void NativeApi::SweepClients(Clock::time_point now) {
  next_client_sweep_ = now + std::chrono::seconds(1);
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const int64_t timeout = config_.native.write_timeout_ms;
  for (auto it = clients_.begin(); it != clients_.end();) {
    const ClientBacklog& b = *it->second.backlog;
    const size_t bytes = b.bytes.load();
    if (bytes == 0) {
      // Nothing of it in ZeroMQ, nothing waiting, nothing followed: forgotten
      // until it sends again.
      const bool idle = !pending_.contains(it->first) && !subs_.contains(it->first);
      it = idle ? clients_.erase(it) : std::next(it);
      continue;
    }
    if (now_ms - b.last_taken_ms.load() > timeout && it->second.fd >= 0) {
      static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
      kLog.Info(limit, {}, "a client took none of its {} unread bytes for {} ms: closing it", bytes,
                timeout);
      connections_->CloseStalled(it->second.fd);
      it->second.fd = -1;  // ZeroMQ drops its frames once the connection is gone
    }
    ++it;
  }
}

void NativeApi::ClientGone(const std::string& identity) {
  pending_.erase(identity);
  clients_.erase(identity);  // frames still in ZeroMQ keep their backlog alive
  auto range = subs_.equal_range(identity);
  for (auto it = range.first; it != range.second; ++it) {
    it->second->Close();
    follower_->Unfollow(it->second->id());
    Release(it->second->tenant());
  }
  subs_.erase(range.first, range.second);
}

void NativeApi::SendError(const std::string& identity, uint64_t request_id, const Status& st,
                          const std::string& id) {
  if (metrics_) metrics_->NativeError(std::string(common::CodeName(st.code())));
  Send(identity, client::Error{request_id, std::string(common::CodeName(st.code())), st.message(),
                               common::IsRetryable(st.code()), id});
}

Status NativeApi::Reserve(const Caller& caller) {
  const TenantConfig* tenant = caller.admin ? nullptr : FindTenant(config_, caller.tenant);
  const size_t tenant_limit = tenant ? TenantMaxSubscriptions(config_, *tenant) : 0;
  if (active_ >= kMaxSubscriptions) {
    return Status(Code::kLimitExceeded, "too many open subscriptions on this broker (" +
                                            std::to_string(kMaxSubscriptions) + ")");
  }
  if (tenant != nullptr) {
    auto it = tenant_active_.find(caller.tenant);
    if (it != tenant_active_.end() && it->second >= tenant_limit) {
      return Status(Code::kRateLimited, "tenant " + caller.tenant + " has " +
                                            std::to_string(it->second) +
                                            " open subscriptions on this broker, its limit");
    }
    ++tenant_active_[caller.tenant];
  }
  ++active_;
  if (metrics_) metrics_->SetNativeSubscriptions(active_);
  return Status::Ok();
}

void NativeApi::Release(const std::string& tenant) {
  --active_;
  if (auto it = tenant_active_.find(tenant); it != tenant_active_.end() && --it->second == 0) {
    tenant_active_.erase(it);
  }
  if (metrics_) metrics_->SetNativeSubscriptions(active_);
}

void NativeApi::Follow(const std::string& identity, const std::string& tenant, uint64_t request_id,
                       const std::string& job_id, uint64_t from_seq) {
  auto sub = std::make_shared<NativeSubscription>(outbox_.get(), identity, tenant, request_id,
                                                  job_id, from_seq, unread_, UnreadLimit(tenant));
  subs_.emplace(identity, sub);
  sub->set_id(follower_->Follow(job_id, "0", sub));
}

}  // namespace kiln::broker
