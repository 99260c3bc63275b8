#include "worker/worker_loop.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>

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
}  // namespace
using Clock = BrokerLink::Clock;

WorkerLoop::WorkerLoop(const WorkerConfig& config, zmq::context_t* ctx, Executor* executor,
                       EventQueue* events, std::vector<std::string> sandbox_layers)
    : config_(config), executor_(executor), events_(events) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  protocol::Register reg;
  reg.worker_id = config.id;
  reg.hostname = host;
  reg.runtimes = config.runtimes;
  reg.slots = config.slots;
  reg.sandbox_layers = std::move(sandbox_layers);
  reg.metrics_endpoint = config.metrics_endpoint;
  reg.heartbeat_interval_ms = config.heartbeat_interval_ms;
  for (const auto& ep : config.brokers) {
    links_.push_back(std::make_unique<BrokerLink>(
        ctx, ep, reg, std::chrono::milliseconds(config.heartbeat_interval_ms),
        config.heartbeat_liveness));
  }
  handlers_ = {
      {protocol::MessageType::kRegisterAck, &WorkerLoop::OnRegisterAck},
      {protocol::MessageType::kHeartbeat, &WorkerLoop::OnHeartbeat},
      {protocol::MessageType::kExecute, &WorkerLoop::OnExecute},
      {protocol::MessageType::kCancel, &WorkerLoop::OnCancel},
      {protocol::MessageType::kCloseSession, &WorkerLoop::OnCloseSession},
      {protocol::MessageType::kDisconnect, &WorkerLoop::OnDisconnect},
      {protocol::MessageType::kRegister, &WorkerLoop::OnUnexpected},
      {protocol::MessageType::kOutputChunk, &WorkerLoop::OnUnexpected},
      {protocol::MessageType::kResult, &WorkerLoop::OnUnexpected},
  };
}

void WorkerLoop::Run(int stop_fd) {
  auto now = Clock::now();
  for (auto& link : links_) link->Connect(now);
  Clock::time_point drain_deadline;
  while (true) {
    std::vector<zmq::pollitem_t> items;
    for (auto& link : links_) items.push_back({link->socket().handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, events_->fd(), ZMQ_POLLIN, 0});
    if (!draining_) items.push_back({nullptr, stop_fd, ZMQ_POLLIN, 0});
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) kLog.Error({}, "poll failed: {}", e.what());
      continue;
    }
    now = Clock::now();
    for (size_t i = 0; i < links_.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      BrokerLink& link = *links_[i];
      for (int n = 0; n < 256; ++n) {
        auto m = link.Receive();
        if (!m) break;
        link.OnHeard(now);
        auto h = handlers_.find(protocol::TypeOf(*m));
        if (h != handlers_.end()) (this->*h->second)(link, *m);
      }
    }
    if (items[links_.size()].revents & ZMQ_POLLIN) SendEvents();
    if (!draining_ && (items[links_.size() + 1].revents & ZMQ_POLLIN)) {
      draining_ = true;
      drain_deadline = now + std::chrono::milliseconds(config_.drain_timeout_ms);
      kLog.Info({}, "draining: {} jobs running, taking no new ones", executor_->Running());
      for (auto& link : links_) link->Send(MakeHeartbeat());
    }
    Tick();
    if (draining_ && (executor_->Running() == 0 || Clock::now() >= drain_deadline)) {
      if (executor_->Running() != 0) {
        kLog.Warn({}, "drain timeout: cancelling {} running jobs", executor_->Running());
        executor_->CancelAll();
      }
      break;
    }
  }
  // Let cancelled jobs report, then say goodbye.
  executor_->WaitIdle(std::chrono::milliseconds(5000));
  SendEvents();
  for (auto& link : links_) link->Send(protocol::Disconnect{"worker stopping"});
}

void WorkerLoop::OnRegisterAck(BrokerLink& link, protocol::Message& m) {
  auto& ack = std::get<protocol::RegisterAck>(m);
  if (!link.registered()) {
    static common::LogLimiter limit(kHostileLines, kLogWindow);
    kLog.Info(limit, {}, "registered with broker {} at {}", ack.broker_id, link.endpoint());
  }
  link.OnRegistered(ack, Clock::now());
  SendEvents();  // results kept while no broker was there
  if (draining_) link.Send(MakeHeartbeat());
}

void WorkerLoop::OnHeartbeat(BrokerLink&, protocol::Message&) {}

void WorkerLoop::OnExecute(BrokerLink& link, protocol::Message& m) {
  auto& exec = std::get<protocol::Execute>(m);
  std::string job_id = exec.job_id;
  std::string tenant = exec.tenant;
  common::Status st = draining_ ? common::Unavailable("the worker is draining")
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
    link.Send(r);
  }
}

void WorkerLoop::OnCancel(BrokerLink&, protocol::Message& m) {
  executor_->Cancel(std::get<protocol::Cancel>(m).job_id);
}

void WorkerLoop::OnCloseSession(BrokerLink&, protocol::Message& m) {
  executor_->CloseSession(std::get<protocol::CloseSession>(m).session_id);
}

void WorkerLoop::OnDisconnect(BrokerLink& link, protocol::Message& m) {
  static common::LogLimiter limit(kHostileLines, kLogWindow);
  kLog.Info(limit, {}, "broker at {} asked us to register again: {}", link.endpoint(),
            std::get<protocol::Disconnect>(m).reason);
  link.Reset(Clock::now());
}

void WorkerLoop::OnUnexpected(BrokerLink& link, protocol::Message& m) {
  static common::LogLimiter limit(kHostileLines, kLogWindow);
  kLog.Warn(limit, {}, "broker at {} sent a {} message, which only workers send", link.endpoint(),
            protocol::TypeName(protocol::TypeOf(m)));
}

void WorkerLoop::SendEvents() {
  for (auto& e : events_->Drain()) unsent_.push_back(std::move(e));
  while (!unsent_.empty()) {
    OutboundEvent& e = unsent_.front();
    BrokerLink* target = nullptr;
    for (auto& link : links_) {
      if (link->endpoint() == e.broker && link->registered()) target = link.get();
    }
    // The job's broker is gone: any live broker can store the result.
    for (auto& link : links_) {
      if (target == nullptr && link->registered()) target = link.get();
    }
    if (target == nullptr || !target->Send(e.message)) break;  // kept for the next broker
    unsent_.pop_front();
  }
  // No broker for a while: keep results (they end jobs), drop the oldest
  // output chunks first when the backlog is too long.
  while (unsent_.size() > kMaxUnsent) {
    auto chunk = std::find_if(unsent_.begin(), unsent_.end(), [](const OutboundEvent& e) {
      return std::holds_alternative<protocol::OutputChunk>(e.message);
    });
    if (chunk == unsent_.end()) break;
    unsent_.erase(chunk);
  }
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
      if (link->registered()) {
        kLog.Warn({}, "broker {} at {} went silent; reconnecting", link->broker_id(),
                  link->endpoint());
      }
      link->Connect(now);
      continue;
    }
    if (link->HeartbeatDue(now)) {
      link->Send(MakeHeartbeat());
      link->HeartbeatSent(now);
    }
  }
}

protocol::Heartbeat WorkerLoop::MakeHeartbeat() const {
  uint32_t running = executor_->Running();
  uint32_t slots = executor_->slots();
  return protocol::Heartbeat{config_.id, running, running < slots ? slots - running : 0, draining_};
}

}  // namespace kiln::worker
