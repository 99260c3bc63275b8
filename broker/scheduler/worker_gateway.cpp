#include "broker/scheduler/worker_gateway.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "broker/job/isolation.hpp"
#include "broker/metrics/broker_metrics.hpp"
#include "common/curve/curve_keys.hpp"
#include "common/log/logging.hpp"
#include "common/protocol/codec.hpp"

namespace kiln::broker {
namespace {

namespace protocol = common::protocol;
using Clock = WorkerLiveness::Clock;

constexpr int kMaxMessagesPerTurn = 256;

const common::SubsystemLog kLog("scheduler");

// Lines a worker (or anyone who can reach the worker endpoint) can trigger at
// will go through a LogLimiter: this many per window at each call site.
constexpr uint32_t kHostileLines = 10;
// Registrations and disconnects are routine: a roomier budget, so a
// cluster's start is logged in full.
constexpr uint32_t kRoutineLines = 100;
constexpr auto kLogWindow = std::chrono::seconds(10);

size_t Weight(const protocol::Result& r) {
  size_t n = r.stdout_data.size() + r.stderr_data.size() + r.result_json.size() + 1024;
  for (const auto& f : r.files) n += f.path.size() + f.content.size();
  return n;
}

}  // namespace

common::StatusOr<std::unique_ptr<WorkerGateway>> WorkerGateway::Create(GatewayOptions options,
                                                                       zmq::context_t* ctx,
                                                                       OutputBuffer* output,
                                                                       std::function<void()> wake) {
  common::UniqueFd wake_fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd.valid()) return common::ErrnoStatus("eventfd", errno);
  const bool curve = options.keyring != nullptr;
  if (curve != !options.curve_secret_key.empty()) {
    return common::InvalidRequest(
        "worker endpoint: CURVE needs both the secret key and the keyring");
  }
  std::unique_ptr<ZapHandler> zap;
  if (curve) {
    // Before the bind: without a handler libzmq lets every CURVE client in.
    options.keyring->Refresh();
    ASSIGN_OR_RETURN(zap, ZapHandler::Create(ctx, options.keyring, options.metrics));
  }
  try {
    zmq::socket_t router(*ctx, zmq::socket_type::router);
    // Sends to a gone worker fail rather than vanish. No ROUTER_HANDOVER: a
    // peer announcing a live connection's routing id is refused by libzmq
    // instead of taking its messages (workers set no routing id).
    router.set(zmq::sockopt::router_mandatory, 1);
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kMaxMessageBytes));
    if (curve) {
      router.set(zmq::sockopt::curve_server, true);
      router.set(zmq::sockopt::curve_secretkey, options.curve_secret_key);
      router.set(zmq::sockopt::zap_domain, kWorkerZapDomain);
    }
    router.bind(options.endpoint);
    std::string bound = router.get(zmq::sockopt::last_endpoint);
    auto gw = std::unique_ptr<WorkerGateway>(
        new WorkerGateway(std::move(options), std::move(zap), std::move(router), std::move(wake_fd),
                          output, std::move(wake)));
    gw->bound_endpoint_ = std::move(bound);
    return gw;
  } catch (const zmq::error_t& e) {
    return common::InvalidRequest("cannot bind worker endpoint " + options.endpoint + ": " +
                                  e.what());
  }
}

WorkerGateway::WorkerGateway(GatewayOptions options, std::unique_ptr<ZapHandler> zap,
                             zmq::socket_t router, common::UniqueFd wake_fd, OutputBuffer* output,
                             std::function<void()> wake)
    : options_(std::move(options)),
      zap_(std::move(zap)),
      router_(std::move(router)),
      wake_fd_(std::move(wake_fd)),
      output_(output),
      wake_dispatcher_(std::move(wake)),
      liveness_(options_.heartbeat_interval, options_.liveness) {
  handlers_ = {
      {protocol::MessageType::kHeartbeat, &WorkerGateway::OnHeartbeat},
      {protocol::MessageType::kOutputChunk, &WorkerGateway::OnOutputChunk},
      {protocol::MessageType::kResult, &WorkerGateway::OnResult},
      {protocol::MessageType::kToolCall, &WorkerGateway::OnToolCall},
      {protocol::MessageType::kToolResult, &WorkerGateway::OnUnexpected},
      {protocol::MessageType::kDisconnect, &WorkerGateway::OnDisconnect},
      {protocol::MessageType::kRegisterAck, &WorkerGateway::OnUnexpected},
      {protocol::MessageType::kExecute, &WorkerGateway::OnUnexpected},
      {protocol::MessageType::kCancel, &WorkerGateway::OnUnexpected},
      {protocol::MessageType::kCloseSession, &WorkerGateway::OnUnexpected},
      {protocol::MessageType::kResultAck, &WorkerGateway::OnUnexpected},
  };
}

WorkerGateway::~WorkerGateway() = default;

void WorkerGateway::Send(std::string worker, protocol::Message message) {
  {
    std::lock_guard lock(mu_);
    outbox_.emplace_back(std::move(worker), std::move(message));
  }
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)n;  // EAGAIN: the counter is already non-zero, the loop wakes anyway
}

std::deque<GatewayEvent> WorkerGateway::TakeEvents() {
  std::deque<GatewayEvent> out;
  std::lock_guard lock(mu_);
  out.swap(events_);
  event_bytes_ = 0;
  return out;
}

void WorkerGateway::Post(GatewayEvent event, size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (event_bytes_ + bytes > options_.max_event_bytes &&
        std::holds_alternative<WorkerResult>(event)) {
      // The dispatcher is far behind (Redis is away): the worker keeps the
      // Result until it is acknowledged and sends it again.
      static common::LogLimiter limit(kHostileLines, kLogWindow);
      kLog.Warn(limit, {.job = std::get<WorkerResult>(event).result.job_id},
                "{} bytes of results wait for the dispatcher: this one is dropped unacknowledged",
                event_bytes_);
      return;
    }
    events_.push_back(std::move(event));
    event_bytes_ += bytes;
  }
  wake_dispatcher_();
}

void WorkerGateway::Run(std::stop_token stop) {
  next_beat_ = Clock::now();
  while (!stop.stop_requested()) {
    now_ = Clock::now();
    if (liveness_.Turn(now_)) {
      kLog.Warn({},
                "the worker loop was away for more than a heartbeat interval (the broker was "
                "paused or starved): every worker gets a fresh liveness window");
    }
    if (now_ >= next_beat_) Beat(now_);
    if (zap_) CheckKeys(now_);
    zmq::pollitem_t items[] = {
        {router_.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, wake_fd_.get(), ZMQ_POLLIN, 0},
        {zap_ ? zap_->socket().handle() : nullptr, zap_ ? 0 : -1, ZMQ_POLLIN, 0},
    };
    // Wake at least every 100 ms to notice a stop request.
    auto wait =
        std::min<Clock::duration>(next_beat_ - Clock::now(), std::chrono::milliseconds(100));
    try {
      zmq::poll(items, zap_ ? 3 : 2,
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::max<Clock::duration>(wait, Clock::duration::zero())));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) kLog.Error({}, "poll failed: {}", e.what());
      continue;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      ssize_t n = ::read(wake_fd_.get(), &count, sizeof(count));
      (void)n;
    }
    if (zap_ && (items[2].revents & ZMQ_POLLIN)) zap_->Serve();
    SendQueued();
    if (items[0].revents & ZMQ_POLLIN) ReceiveAll(Clock::now());
  }
  SendQueued();
  // Tell workers we are going, so they fail over at once instead of after
  // their liveness timeout.
  for (const auto& id : liveness_.Ids()) SendNow(id, protocol::Disconnect{"broker stopping"});
}

void WorkerGateway::Beat(Clock::time_point now) {
  next_beat_ = now + options_.heartbeat_interval;
  for (const auto& id : liveness_.Ids()) {
    SendNow(id, protocol::Heartbeat{options_.broker_id, 0, 0, false});
  }
  if (size_t late = liveness_.Late(now); late > 0 && options_.metrics) {
    options_.metrics->HeartbeatsMissed(late);
  }
  for (auto& id : liveness_.Expire(now)) {
    // Anyone may register under many ids and fall silent.
    static common::LogLimiter limit(kRoutineLines, kLogWindow);
    kLog.Warn(limit, {.worker = id}, "worker missed {} heartbeats: declared dead",
              options_.liveness);
    Drop(id, "the worker stopped answering heartbeats", true);
  }
}

void WorkerGateway::CheckKeys(Clock::time_point now) {
  if (now < next_key_check_) return;
  next_key_check_ = now + std::chrono::seconds(1);
  options_.keyring->Refresh();
  const uint64_t generation = options_.keyring->generation();
  if (generation == keys_checked_) return;
  keys_checked_ = generation;
  for (const auto& routing : links_.Routings()) {
    WorkerLinks::Link* link = links_.Of(routing);
    auto named = options_.keyring->WorkerOf(link->key);
    if (named && *named == link->worker) {
      link->generation = generation;
      continue;
    }
    std::string worker = link->worker;
    kLog.Warn({.worker = worker}, "the worker's key is no longer accepted: dropping it");
    Refuse("revoked");
    SendTo(routing, protocol::Disconnect{"your key is no longer accepted"});
    Drop(worker, "the worker's key is no longer accepted", false);
  }
}

void WorkerGateway::Drop(const std::string& worker, std::string why, bool expired) {
  liveness_.Remove(worker);
  links_.Remove(worker);
  Post(WorkerGone{worker, std::move(why), expired}, 64);
}

void WorkerGateway::Refuse(const std::string& reason) {
  if (options_.metrics) options_.metrics->WorkerRefused(reason);
}

void WorkerGateway::SendQueued() {
  std::deque<std::pair<std::string, protocol::Message>> batch;
  {
    std::lock_guard lock(mu_);
    batch.swap(outbox_);
  }
  for (auto& [worker, m] : batch) {
    if (SendNow(worker, m)) continue;
    if (auto* e = std::get_if<protocol::Execute>(&m)) {
      Post(Undeliverable{worker, e->job_id}, 64);
    }
  }
}

bool WorkerGateway::SendNow(const std::string& worker, const protocol::Message& m) {
  auto routing = links_.RoutingOf(worker);
  return routing && SendTo(*routing, m);
}

bool WorkerGateway::SendTo(const std::string& routing, const protocol::Message& m) {
  std::string bytes = protocol::Encode(m);
  try {
    if (!router_.send(zmq::buffer(routing), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return false;
    }
    return router_.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    if (e.num() != EHOSTUNREACH) kLog.Warn(limit, {}, "send failed: {}", e.what());
    return false;
  }
}

void WorkerGateway::ReceiveAll(Clock::time_point now) {
  for (int i = 0; i < kMaxMessagesPerTurn; ++i) {
    zmq::message_t identity_frame;
    zmq::message_t payload;
    try {
      if (!router_.recv(identity_frame, zmq::recv_flags::dontwait)) return;
      if (!identity_frame.more()) continue;
      if (!router_.recv(payload, zmq::recv_flags::none)) return;
      // Drop any extra frames: a well-behaved worker sends exactly one.
      bool extra = payload.more();
      while (extra) {
        zmq::message_t junk;
        if (!router_.recv(junk, zmq::recv_flags::none)) break;
        extra = junk.more();
      }
      if (payload.more() || extra) continue;
    } catch (const zmq::error_t& e) {
      kLog.Error({}, "receive failed: {}", e.what());
      return;
    }
    std::string routing = identity_frame.to_string();
    // With CURVE, the key the connection authenticated with (the ZAP
    // handler's User-Id); libzmq attaches it to every message.
    const char* user_id = zap_ ? ::zmq_msg_gets(payload.handle(), "User-Id") : nullptr;
    const std::string key = user_id != nullptr ? user_id : "";
    if (zap_ && key.empty()) continue;  // not authenticated: cannot happen with a ZAP handler
    auto decoded = protocol::Decode(
        std::string_view(static_cast<const char*>(payload.data()), payload.size()));
    const WorkerLinks::Link* link = links_.Of(routing);
    if (!decoded.ok()) {
      static common::LogLimiter limit(kHostileLines, kLogWindow);
      kLog.Warn(limit, {.worker = link ? link->worker : ""},
                "dropping a bad message from a worker connection: {}", decoded.status().message());
      continue;
    }
    const protocol::MessageType type = protocol::TypeOf(*decoded);
    if (type == protocol::MessageType::kRegister) {
      OnRegister(routing, key, std::get<protocol::Register>(*decoded));
      continue;
    }
    // Only a registered connection speaks for a worker, and (CURVE) only
    // with the key it registered with: a peer that picked a dead
    // connection's routing id is not that worker.
    if (link == nullptr || link->key != key) {
      OnUnregistered(routing, type);
      continue;
    }
    const std::string worker = link->worker;
    liveness_.Heard(worker, now);  // anything from a known worker proves it alive
    auto handler = handlers_.find(type);
    if (handler != handlers_.end()) (this->*handler->second)(worker, *decoded);
  }
}

void WorkerGateway::OnRegister(const std::string& routing, const std::string& key,
                               protocol::Register& reg) {
  static common::LogLimiter limit(kHostileLines, kLogWindow);
  auto refuse = [&](std::string_view why, const std::string& told) {
    kLog.Warn(limit, {.worker = reg.worker_id}, "refusing registration as '{}': {}",
              reg.worker_id.substr(0, 128), why);
    Refuse("registration");
    SendTo(routing, protocol::Disconnect{told});
  };
  if (!common::IsCurveKeyName(reg.worker_id) || reg.slots == 0 || reg.runtimes.empty()) {
    refuse("needs an id ([A-Za-z0-9._-], up to 128), slots and runtimes",
           "registration needs worker_id ([A-Za-z0-9._-]), slots and runtimes");
    return;
  }
  if (!IsIsolationLevel(NormalizeIsolation(reg.isolation))) {
    // A level this broker does not know: it could place no job there
    // correctly, so it takes none rather than treat the worker as another.
    refuse("unknown isolation level", "unknown isolation level: standard or gvisor");
    return;
  }
  if (zap_) {
    auto named = options_.keyring->WorkerOf(key);
    if (!named || *named != reg.worker_id) {
      refuse(named ? "its key belongs to worker '" + *named + "'" : "its key is not accepted",
             "this key may not register as " + reg.worker_id);
      return;
    }
  }
  if (const WorkerLinks::Link* here = links_.Of(routing);
      here != nullptr && here->worker != reg.worker_id) {
    refuse("the connection already speaks for '" + here->worker + "'",
           "this connection is already registered as another worker");
    return;
  }
  const uint64_t generation = zap_ ? options_.keyring->generation() : 0;
  if (links_.Bind(routing, reg.worker_id, key, generation)) {
    static common::LogLimiter moved(kRoutineLines, kLogWindow);
    kLog.Info(moved, {.worker = reg.worker_id}, "worker registered again from a new connection");
  }
  liveness_.Register(reg.worker_id, now_);
  SendTo(routing, protocol::RegisterAck{options_.broker_id,
                                        static_cast<uint32_t>(options_.heartbeat_interval.count()),
                                        options_.liveness});
  std::string worker = reg.worker_id;
  Post(WorkerRegistered{std::move(worker), std::move(reg)}, 4096);
}

void WorkerGateway::OnUnregistered(const std::string& routing, protocol::MessageType type) {
  // We do not know this connection (we restarted, declared its worker dead,
  // or it reconnected): make it register. Anything but a heartbeat from it
  // is refused — a Result or output must come from the job's worker.
  if (type != protocol::MessageType::kHeartbeat) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kLog.Warn(limit, {}, "refused a {} from a connection that has not registered",
              protocol::TypeName(type));
    Refuse("unregistered");
  }
  if (type != protocol::MessageType::kDisconnect) {
    SendTo(routing, protocol::Disconnect{"unknown worker: register again"});
  }
}

void WorkerGateway::OnHeartbeat(const std::string& worker, protocol::Message& m) {
  Post(WorkerBeat{worker, std::get<protocol::Heartbeat>(m)}, 64);
}

void WorkerGateway::OnOutputChunk(const std::string& worker, protocol::Message& m) {
  // Chunks of jobs another broker dispatched are stored as well: subscribers
  // read them from Redis, wherever they are connected. Redis stores them
  // only while the job runs on this worker (scripts::AppendOutput).
  auto& chunk = std::get<protocol::OutputChunk>(m);
  if (!output_->Add(worker, std::move(chunk))) {
    if (options_.metrics) options_.metrics->OutputChunkDropped();
  }
  wake_dispatcher_();
}

void WorkerGateway::OnResult(const std::string& worker, protocol::Message& m) {
  auto& res = std::get<protocol::Result>(m);
  const size_t bytes = Weight(res);
  Post(WorkerResult{worker, std::move(res)}, bytes);
}

void WorkerGateway::OnToolCall(const std::string& worker, protocol::Message& m) {
  auto& call = std::get<protocol::ToolCall>(m);
  if (options_.on_tool_call) return options_.on_tool_call(worker, std::move(call));
  SendNow(worker, protocol::ToolResult{.job_id = call.job_id,
                                       .call = call.call,
                                       .error_type = "ToolUnavailable",
                                       .error_message = "this broker relays no tool calls"});
}

void WorkerGateway::OnDisconnect(const std::string& worker, protocol::Message& m) {
  auto& d = std::get<protocol::Disconnect>(m);
  static common::LogLimiter limit(kRoutineLines, kLogWindow);
  kLog.Info(limit, {.worker = worker}, "worker disconnected: {}", d.reason);
  Drop(worker, "the worker disconnected: " + d.reason, false);
}

void WorkerGateway::OnUnexpected(const std::string& worker, protocol::Message& m) {
  static common::LogLimiter limit(kHostileLines, kLogWindow);
  kLog.Warn(limit, {.worker = worker}, "worker sent a {} message, which only brokers send",
            protocol::TypeName(protocol::TypeOf(m)));
}

}  // namespace kiln::broker
