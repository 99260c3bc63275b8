#include "worker/worker_loop.hpp"

#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <random>
#include <set>

#include "common/log/logging.hpp"

namespace kiln::worker {

namespace protocol = common::protocol;

namespace {
// Links to brokers and draining; refused jobs under "jobs".
const common::SubsystemLog kLog("link");
const common::SubsystemLog kJobsLog("jobs");

// Lines a broker (or whoever answers on a broker endpoint) can trigger at will
// go through a LogLimiter: this many per window at each call site.
constexpr uint32_t kHostileLines = 10;
constexpr auto kLogWindow = std::chrono::seconds(10);
// After cancelling what still runs at the drain deadline, wait this long for
// the cancelled jobs to end and their Results to be acknowledged.
constexpr auto kCancelGrace = std::chrono::seconds(5);
// A stopping worker gives ZeroMQ this long to deliver its last messages.
constexpr auto kGoodbyeLinger = std::chrono::milliseconds(1000);

Outbox::Limits OutboxLimits(const WorkerConfig& config) {
  Outbox::Limits limits;
  limits.resend_after =
      std::chrono::milliseconds(uint64_t{config.heartbeat_interval_ms} * config.heartbeat_liveness);
  return limits;
}
}  // namespace
using Clock = BrokerLink::Clock;

std::string NewIncarnation() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(bytes)) {
    std::random_device rd;  // getrandom is missing (pre-3.17 kernel): the same pool
    for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 0xf]);
  }
  return hex;
}

WorkerLoop::WorkerLoop(const WorkerConfig& config, zmq::context_t* ctx, Executor* executor,
                       EventQueue* events, std::vector<std::string> sandbox_layers,
                       runtimes::RuntimeOffer offer, WorkerMetrics* metrics)
    : config_(config),
      executor_(executor),
      events_(events),
      incarnation_(NewIncarnation()),
      outbox_(OutboxLimits(config), metrics) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  register_base_.worker_id = config.id;
  register_base_.hostname = host;
  register_base_.runtimes = config.runtimes;
  register_base_.slots = config.slots;
  register_base_.sandbox_layers = std::move(sandbox_layers);
  register_base_.metrics_endpoint = config.metrics_endpoint;
  register_base_.heartbeat_interval_ms = config.heartbeat_interval_ms;
  register_base_.incarnation = incarnation_;
  register_base_.isolation = config.sandbox.isolation;
  register_base_.runtime_versions = std::move(offer.versions);
  register_base_.packages = std::move(offer.packages);
  const LinkKeys keys{config.curve_broker_public, config.curve_public, config.curve_secret};
  for (const auto& ep : config.brokers) {
    links_.push_back(std::make_unique<BrokerLink>(
        ctx, ep, keys, [this, ep] { return MakeRegister(ep); },
        std::chrono::milliseconds(config.heartbeat_interval_ms), config.heartbeat_liveness));
  }
  handlers_ = {
      {protocol::MessageType::kRegisterAck, &WorkerLoop::OnRegisterAck},
      {protocol::MessageType::kHeartbeat, &WorkerLoop::OnHeartbeat},
      {protocol::MessageType::kExecute, &WorkerLoop::OnExecute},
      {protocol::MessageType::kCancel, &WorkerLoop::OnCancel},
      {protocol::MessageType::kCloseSession, &WorkerLoop::OnCloseSession},
      {protocol::MessageType::kDisconnect, &WorkerLoop::OnDisconnect},
      {protocol::MessageType::kResultAck, &WorkerLoop::OnResultAck},
      {protocol::MessageType::kToolResult, &WorkerLoop::OnToolResult},
      {protocol::MessageType::kToolCall, &WorkerLoop::OnUnexpected},
      {protocol::MessageType::kRegister, &WorkerLoop::OnUnexpected},
      {protocol::MessageType::kOutputChunk, &WorkerLoop::OnUnexpected},
      {protocol::MessageType::kResult, &WorkerLoop::OnUnexpected},
  };
}

void WorkerLoop::Run(int stop_fd) {
  auto now = Clock::now();
  kLog.Info({}, "worker incarnation {}", incarnation_);
  for (auto& link : links_) link->Connect(now);
  Clock::time_point drain_deadline;
  std::optional<Clock::time_point> cancelled_at;  // the drain deadline passed with jobs running
  while (true) {
    std::vector<zmq::pollitem_t> items;
    for (auto& link : links_) {
      // Writability only matters while a send found the queue full.
      short want = ZMQ_POLLIN | (link->blocked() ? ZMQ_POLLOUT : 0);
      items.push_back({link->socket().handle(), 0, want, 0});
    }
    items.push_back({nullptr, events_->fd(), ZMQ_POLLIN, 0});
    if (!draining_) items.push_back({nullptr, stop_fd, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) kLog.Error({}, "poll failed: {}", e.what());
      continue;
    }
    now = Clock::now();
    // The stop first: an Execute that arrived in the same turn is refused
    // (and requeued by its broker) rather than started.
    if (!draining_ && (items[links_.size() + 1].revents & ZMQ_POLLIN)) {
      draining_ = true;
      drain_deadline = now + std::chrono::milliseconds(config_.drain_timeout_ms);
      kLog.Info({}, "draining: {} jobs running, taking no new ones", executor_->Running());
      for (auto& link : links_) link->Send(MakeHeartbeat());
    }
    for (size_t i = 0; i < links_.size(); ++i) {
      BrokerLink& link = *links_[i];
      if (items[i].revents & ZMQ_POLLOUT) link.Unblock();
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      for (int n = 0; n < 256; ++n) {
        auto m = link.Receive();
        if (!m) break;
        if (link.OnHeard(now, protocol::TypeOf(*m))) {
          // It was paused or cut off and still knows us: what was queued for
          // it is arriving in order; Results that went nowhere go to it.
          static common::LogLimiter limit(kHostileLines, kLogWindow);
          kLog.Info(limit, {}, "broker {} at {} answers again", link.broker_id(), link.endpoint());
          outbox_.OnRegistered(link.endpoint(), outbox_links_, Outbox::Resend::kOrphaned);
        }
        auto h = handlers_.find(protocol::TypeOf(*m));
        if (h != handlers_.end()) (this->*h->second)(link, *m);
      }
    }
    Tick();  // also sends what job threads posted
    if (!draining_) continue;
    now = Clock::now();
    const bool idle = executor_->Running() == 0;
    if (!idle && !cancelled_at && now >= drain_deadline) {
      kLog.Warn({}, "drain timeout: cancelling {} running jobs", executor_->Running());
      executor_->CancelAll();
      cancelled_at = now;
    }
    // Done when nothing runs and every Result is acknowledged, or time is up.
    const Clock::time_point give_up = cancelled_at ? *cancelled_at + kCancelGrace : drain_deadline;
    if ((idle && outbox_.unacked() == 0) || (now >= give_up && (idle || cancelled_at))) break;
  }
  SendEvents();
  if (executor_->Running() != 0 || outbox_.unacked() != 0) {
    kLog.Warn({}, "stopping with {} jobs running and {} results unacknowledged",
              executor_->Running(), outbox_.unacked());
  }
  for (auto& link : links_) {
    link->Unblock();  // one last try, whatever the queue said
    link->Send(protocol::Disconnect{"worker stopping"});
    link->Close(kGoodbyeLinger);
  }
}

void WorkerLoop::OnRegisterAck(BrokerLink& link, protocol::Message& m) {
  auto& ack = std::get<protocol::RegisterAck>(m);
  if (!link.registered()) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kLog.Info(limit, {}, "registered with broker {} at {}", ack.broker_id, link.endpoint());
  }
  link.OnRegistered(ack, Clock::now());
  // The broker may have missed Results sent before (it restarted, or they
  // were on a connection that broke): its own again, and those whose broker
  // is away.
  outbox_.OnRegistered(link.endpoint(), outbox_links_, Outbox::Resend::kOwnAndOrphaned);
  SendEvents();
  if (draining_) link.Send(MakeHeartbeat());
}

void WorkerLoop::OnHeartbeat(BrokerLink&, protocol::Message&) {}

void WorkerLoop::OnExecute(BrokerLink& link, protocol::Message& m) {
  auto& exec = std::get<protocol::Execute>(m);
  std::string job_id = exec.job_id;
  std::string tenant = exec.tenant;
  // A job for another isolation level is never run weaker (or stronger)
  // than asked: refused, so the broker places it on a worker of its level.
  const std::string level = exec.isolation.empty() ? "standard" : exec.isolation;
  common::Status st =
      level != config_.sandbox.isolation
          ? common::Unavailable("the job needs isolation level " + level.substr(0, 32) +
                                "; this worker offers " + config_.sandbox.isolation)
      : draining_ ? common::Unavailable("the worker is draining")
                  : executor_->Start(std::move(exec), link.endpoint());
  if (!st.ok()) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kJobsLog.Warn(limit, {.job = job_id, .tenant = tenant}, "refusing the job: {}", st.ToString());
    protocol::Result r;
    r.job_id = job_id;
    // Busy or draining: the code never ran, so the broker may send it elsewhere.
    r.reason = st.code() == common::Code::kUnavailable ? protocol::EndReason::kRefused
                                                       : protocol::EndReason::kError;
    r.worker_error = st.ToString();
    r.worker_error_code = common::CodeName(st.code());
    outbox_.PostResult(link.endpoint(), std::move(r));  // kept until acknowledged, like any
    SendEvents();
  }
}

void WorkerLoop::OnCancel(BrokerLink&, protocol::Message& m) {
  executor_->Cancel(std::get<protocol::Cancel>(m).job_id);
}

void WorkerLoop::OnCloseSession(BrokerLink&, protocol::Message& m) {
  executor_->CloseSession(std::get<protocol::CloseSession>(m).session_id);
}

void WorkerLoop::OnDisconnect(BrokerLink& link, protocol::Message& m) {
  // Sent again only when none is on its way (BrokerLink::Reset says why).
  if (!link.Reset(Clock::now())) return;
  static common::LogLimiter limit(kHostileLines, kLogWindow);
  kLog.Info(limit, {}, "broker at {} asked us to register again: {}", link.endpoint(),
            std::get<protocol::Disconnect>(m).reason);
}

void WorkerLoop::OnResultAck(BrokerLink&, protocol::Message& m) {
  outbox_.OnAck(std::get<protocol::ResultAck>(m).job_id);  // from any broker
}

void WorkerLoop::OnToolResult(BrokerLink&, protocol::Message& m) {
  // From any broker: the answer reaches the broker the client asked, which
  // need not be the job's. The job's ToolChannel ignores answers to calls
  // that are not waiting.
  executor_->DeliverToolResult(std::move(std::get<protocol::ToolResult>(m)));
}

void WorkerLoop::OnUnexpected(BrokerLink& link, protocol::Message& m) {
  static common::LogLimiter limit(kHostileLines, kLogWindow);
  kLog.Warn(limit, {}, "broker at {} sent a {} message, which only workers send", link.endpoint(),
            protocol::TypeName(protocol::TypeOf(m)));
}

void WorkerLoop::TakeEvents() {
  for (auto& e : events_->Drain()) {
    if (auto* chunk = std::get_if<protocol::OutputChunk>(&e.message)) {
      outbox_.PostChunk(std::move(e.broker), std::move(*chunk));
    } else if (auto* result = std::get_if<protocol::Result>(&e.message)) {
      outbox_.PostResult(std::move(e.broker), std::move(*result));
    } else if (std::holds_alternative<protocol::ToolCall>(e.message)) {
      // To the job's broker, else any: every broker can check a call (the
      // job's tools are in Redis). None registered: the call times out.
      std::vector<std::string> any = outbox_links_.RegisteredBrokers();
      const bool own = outbox_links_.Registered(e.broker);
      if (own || !any.empty()) outbox_links_.Send(own ? e.broker : any.front(), e.message);
    } else {
      kLog.Error({}, "a job thread posted a {} message; only chunks, results and calls are sent",
                 protocol::TypeName(protocol::TypeOf(e.message)));
    }
  }
}

void WorkerLoop::SendEvents() {
  TakeEvents();
  outbox_.Pump(outbox_links_, Clock::now());
}

void WorkerLoop::Tick() {
  auto now = Clock::now();
  if (now >= next_housekeeping_) {
    // Idle sessions past their TTL lose their sandboxes.
    executor_->ExpireSessions();
    executor_->RefreshCgroupUsage();
    next_housekeeping_ = now + std::chrono::seconds(1);
  }
  for (auto& link : links_) {
    if (link->Silent(now)) {
      // No new Register (see BrokerLink): the socket and what is queued stay,
      // heartbeats go on; a broker that forgot us answers them with
      // Disconnect, one that was only paused speaks again.
      kLog.Warn({}, "broker {} at {} went silent; its results go to other brokers meanwhile",
                link->broker_id(), link->endpoint());
      link->OnSilence();
    }
    link->RetryRegister();
    // A heartbeat the full queue refused is due again at the next turn.
    if (link->HeartbeatDue(now) && link->Send(MakeHeartbeat())) link->HeartbeatSent(now);
  }
  SendEvents();
}

protocol::Heartbeat WorkerLoop::MakeHeartbeat() const {
  uint32_t running = executor_->Running();
  uint32_t slots = executor_->slots();
  return protocol::Heartbeat{config_.id, running, running < slots ? slots - running : 0, draining_};
}

protocol::Register WorkerLoop::MakeRegister(const std::string& endpoint) {
  protocol::Register reg = register_base_;
  // Running jobs first, then the queue: a job leaves the executor's list in
  // the step that posts its Result (Executor::RunningJobs), so it is in one.
  std::vector<std::string> held = executor_->RunningJobs();
  TakeEvents();
  std::set<std::string> seen(held.begin(), held.end());
  for (auto& id : outbox_.UnackedJobs(endpoint, protocol::kMaxHeldJobs)) {
    if (held.size() >= protocol::kMaxHeldJobs) break;
    if (seen.insert(id).second) held.push_back(std::move(id));
  }
  if (executor_->Running() + outbox_.unacked() > protocol::kMaxHeldJobs) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kLog.Warn(limit, {},
              "{} jobs held ({} running, {} results unacknowledged): the Register lists {}; the "
              "broker may end the others as lost before their results arrive",
              executor_->Running() + outbox_.unacked(), executor_->Running(), outbox_.unacked(),
              protocol::kMaxHeldJobs);
  }
  held.resize(std::min(held.size(), protocol::kMaxHeldJobs));
  reg.held_jobs = std::move(held);
  return reg;
}

// --- OutboxLinks ---

BrokerLink* WorkerLoop::OutboxLinks::Find(const std::string& endpoint) const {
  for (const auto& link : *links_) {
    if (link->endpoint() == endpoint) return link.get();
  }
  return nullptr;
}

bool WorkerLoop::OutboxLinks::Registered(const std::string& broker) const {
  const BrokerLink* link = Find(broker);
  return link != nullptr && link->registered();
}

std::vector<std::string> WorkerLoop::OutboxLinks::RegisteredBrokers() const {
  std::vector<std::string> out;
  for (const auto& link : *links_) {
    if (link->registered()) out.push_back(link->endpoint());
  }
  return out;
}

bool WorkerLoop::OutboxLinks::Send(const std::string& broker, const protocol::Message& m) {
  BrokerLink* link = Find(broker);
  return link != nullptr && link->Send(m);
}

}  // namespace kiln::worker
