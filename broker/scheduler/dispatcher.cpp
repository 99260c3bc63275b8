#include "broker/scheduler/dispatcher.hpp"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>

#include <algorithm>

#include "broker/metrics/broker_metrics.hpp"
#include "common/clock.hpp"
#include "common/protocol/codec.hpp"

namespace kiln::broker {
namespace {

namespace protocol = common::protocol;
using common::Code;

constexpr int kMaxMessagesPerPoll = 256;
// A job whose worker is alive but sends no result this long after the job's
// timeout is ended by the broker (exactly one terminal state, always).
constexpr int64_t kResultGraceMs = 30'000;

}  // namespace

common::StatusOr<std::unique_ptr<Dispatcher>> Dispatcher::Create(DispatcherOptions options,
                                                                 zmq::context_t* ctx,
                                                                 JobStore* store,
                                                                 JobWaiters* waiters) {
  common::UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return common::ErrnoStatus("eventfd", errno);
  try {
    zmq::socket_t router(*ctx, zmq::socket_type::router);
    router.set(zmq::sockopt::router_mandatory, 1);  // sends to a gone worker fail, not vanish
    router.set(zmq::sockopt::router_handover, 1);   // a reconnecting worker takes its id back
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kMaxMessageBytes));
    router.bind(options.endpoint);
    std::string bound = router.get(zmq::sockopt::last_endpoint);
    auto d = std::unique_ptr<Dispatcher>(
        new Dispatcher(std::move(options), std::move(router), std::move(wake), store, waiters));
    d->bound_endpoint_ = std::move(bound);
    return d;
  } catch (const zmq::error_t& e) {
    return common::InvalidRequest("cannot bind worker endpoint " + options.endpoint + ": " +
                                  e.what());
  }
}

Dispatcher::Dispatcher(DispatcherOptions options, zmq::socket_t router, common::UniqueFd wake,
                       JobStore* store, JobWaiters* waiters)
    : options_(std::move(options)),
      router_(std::move(router)),
      wake_(std::move(wake)),
      store_(store),
      waiters_(waiters),
      table_(options_.heartbeat_interval * options_.liveness) {
  handlers_ = {
      {protocol::MessageType::kRegister, &Dispatcher::HandleRegister},
      {protocol::MessageType::kHeartbeat, &Dispatcher::HandleHeartbeat},
      {protocol::MessageType::kOutputChunk, &Dispatcher::HandleOutputChunk},
      {protocol::MessageType::kResult, &Dispatcher::HandleResult},
      {protocol::MessageType::kDisconnect, &Dispatcher::HandleDisconnect},
      {protocol::MessageType::kRegisterAck, &Dispatcher::HandleUnexpected},
      {protocol::MessageType::kExecute, &Dispatcher::HandleUnexpected},
      {protocol::MessageType::kCancel, &Dispatcher::HandleUnexpected},
  };
}

Dispatcher::~Dispatcher() = default;

common::Status Dispatcher::Submit(JobSpec spec) {
  {
    std::lock_guard lock(mu_);
    if (queued_total_ >= options_.max_queue) {
      return {Code::kQueueFull,
              "the queue holds " + std::to_string(queued_total_) + " jobs; retry later"};
    }
    ++queued_total_;
    inbox_.push_back(std::move(spec));
  }
  Wake();
  return common::Status::Ok();
}

void Dispatcher::Cancel(const std::string& job_id) {
  {
    std::lock_guard lock(mu_);
    cancels_.push_back(job_id);
  }
  Wake();
}

void Dispatcher::Wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  (void)n;  // EAGAIN means the counter is already non-zero: the loop wakes anyway
}

size_t Dispatcher::QueueDepth() const {
  std::lock_guard lock(mu_);
  return queued_total_;
}

std::vector<WorkerView> Dispatcher::Workers() const {
  std::lock_guard lock(mu_);
  return worker_views_;
}

void Dispatcher::Run(std::stop_token stop) {
  next_tick_ = Clock::now();
  while (!stop.stop_requested()) {
    auto now = Clock::now();
    if (now >= next_tick_) {
      Tick();
      next_tick_ = now + options_.heartbeat_interval;
    }
    // Wake at least every 100 ms to notice a stop request.
    auto wait =
        std::min<Clock::duration>(next_tick_ - Clock::now(), std::chrono::milliseconds(100));
    zmq::pollitem_t items[] = {
        {router_.handle(), 0, ZMQ_POLLIN, 0},
        {nullptr, wake_.get(), ZMQ_POLLIN, 0},
    };
    try {
      zmq::poll(items, 2,
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::max<Clock::duration>(wait, Clock::duration::zero())));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("dispatcher poll failed: {}", e.what());
      continue;
    }
    if (items[1].revents & ZMQ_POLLIN) DrainInbox();
    if (items[0].revents & ZMQ_POLLIN) ReceiveAll();
    DispatchQueued();
  }
  // Tell workers we are going, so they fail over at once instead of after
  // their liveness timeout.
  for (const auto& [id, w] : table_.workers()) Send(id, protocol::Disconnect{"broker stopping"});
}

void Dispatcher::DrainInbox() {
  uint64_t count = 0;
  ssize_t n = ::read(wake_.get(), &count, sizeof(count));
  (void)n;
  std::deque<JobSpec> batch;
  std::deque<std::string> cancels;
  {
    std::lock_guard lock(mu_);
    batch.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& spec : batch) queue_.push_back(std::move(spec));
  for (const auto& id : cancels) CancelNow(id);
}

void Dispatcher::CancelNow(const std::string& job_id) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->id != job_id) continue;
    JobRecord r = JobRecord::Ended(*it, JobStatus::kCancelled, Code::kCancelled,
                                   "cancelled before it started");
    r.finished_ms = common::NowMs();
    queue_.erase(it);
    {
      std::lock_guard lock(mu_);
      --queued_total_;
    }
    Finish(std::move(r));
    return;
  }
  auto it = in_flight_.find(job_id);
  if (it != in_flight_.end()) Send(it->second.worker, protocol::Cancel{job_id});
}

void Dispatcher::ReceiveAll() {
  for (int i = 0; i < kMaxMessagesPerPoll; ++i) {
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
      spdlog::error("dispatcher receive failed: {}", e.what());
      return;
    }
    std::string identity = identity_frame.to_string();
    auto decoded = protocol::Decode(
        std::string_view(static_cast<const char*>(payload.data()), payload.size()));
    if (!decoded.ok()) {
      spdlog::warn("dropping a bad message from worker '{}': {}", identity,
                   decoded.status().message());
      continue;
    }
    table_.Touch(identity, Clock::now(), common::NowMs());
    auto handler = handlers_.find(protocol::TypeOf(*decoded));
    if (handler != handlers_.end()) (this->*handler->second)(identity, *decoded);
  }
}

void Dispatcher::HandleRegister(const std::string& identity, protocol::Message& m) {
  auto& reg = std::get<protocol::Register>(m);
  if (reg.worker_id.empty() || reg.slots == 0 || reg.runtimes.empty()) {
    spdlog::warn("refusing registration from '{}': needs an id, slots and runtimes", identity);
    Send(identity, protocol::Disconnect{"registration needs worker_id, slots and runtimes"});
    return;
  }
  auto lost = table_.OnRegister(identity, reg, Clock::now(), common::NowMs());
  if (!lost.empty() && LoseJobs(identity, lost, "the worker restarted") > 0 && options_.metrics) {
    options_.metrics->WorkerLost();
  }
  spdlog::info("worker {} registered: {} slots, runtimes [{}], layers [{}]", reg.worker_id,
               reg.slots, fmt::join(reg.runtimes, ","), fmt::join(reg.sandbox_layers, ","));
  Send(identity, protocol::RegisterAck{options_.broker_id,
                                       static_cast<uint32_t>(options_.heartbeat_interval.count()),
                                       options_.liveness});
  PublishWorkers();
}

void Dispatcher::HandleHeartbeat(const std::string& identity, protocol::Message& m) {
  auto& hb = std::get<protocol::Heartbeat>(m);
  if (!table_.OnHeartbeat(identity, hb, Clock::now(), common::NowMs())) {
    // We do not know this worker (we restarted, or declared it dead): make it
    // register again.
    Send(identity, protocol::Disconnect{"unknown worker: register again"});
  }
}

void Dispatcher::HandleOutputChunk(const std::string&, protocol::Message& m) {
  auto& chunk = std::get<protocol::OutputChunk>(m);
  // Chunks of jobs another broker dispatched are stored as well: subscribers
  // read them from Redis, wherever they are connected.
  // Stored before the Result is: a subscriber sees every chunk, then the end.
  if (auto st = store_->AppendChunk(chunk); !st.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    spdlog::warn("{} (live output lost; the final record keeps it)", st.ToString());
  }
}

void Dispatcher::HandleResult(const std::string& identity, protocol::Message& m) {
  auto& res = std::get<protocol::Result>(m);
  auto it = in_flight_.find(res.job_id);
  if (it == in_flight_.end() || it->second.worker != identity) {
    FinishForeign(identity, res);
    return;
  }
  if (res.reason == protocol::EndReason::kRefused) {
    // It never ran (the worker's slots went to other brokers' jobs, or it is
    // draining): back to the front of the queue. Believe the worker's count
    // until its next heartbeat.
    spdlog::debug("worker {} refused {}: {}", identity, res.job_id, res.worker_error);
    JobSpec spec = std::move(it->second.spec);
    in_flight_.erase(it);
    table_.Release(identity, res.job_id);
    table_.MarkFull(identity);
    queue_.push_front(std::move(spec));
    {
      std::lock_guard lock(mu_);
      ++queued_total_;
    }
    return;
  }
  JobRecord record = std::move(it->second.record);
  in_flight_.erase(it);
  table_.Release(identity, res.job_id);
  record.ApplyResult(res, common::NowMs());
  Finish(std::move(record));
}

void Dispatcher::FinishForeign(const std::string& identity, const protocol::Result& res) {
  // A job this broker did not dispatch (its broker died or restarted, and the
  // worker sends results to any live broker): the ledger in Redis decides.
  // A job that already ended (e.g. WORKER_LOST while the worker was frozen)
  // keeps its one terminal state.
  auto record = store_->Load(res.job_id);
  if (!record.ok() && record.status().code() != Code::kNotFound && options_.metrics) {
    options_.metrics->RedisError();
  }
  if (!record.ok() || IsTerminal(record->status) || res.reason == protocol::EndReason::kRefused) {
    spdlog::warn("result for job {} from worker {} ignored: {}", res.job_id, identity,
                 record.ok() ? "it has already ended" : record.status().ToString());
    return;
  }
  record->ApplyResult(res, common::NowMs());
  spdlog::info("stored the result of job {} dispatched by another broker", res.job_id);
  Finish(std::move(*record));
}

void Dispatcher::HandleDisconnect(const std::string& identity, protocol::Message& m) {
  auto& d = std::get<protocol::Disconnect>(m);
  spdlog::info("worker {} disconnected: {}", identity, d.reason);
  auto jobs = table_.Remove(identity);
  if (LoseJobs(identity, jobs, "the worker disconnected: " + d.reason) > 0 && options_.metrics) {
    options_.metrics->WorkerLost();
  }
  PublishWorkers();
}

void Dispatcher::HandleUnexpected(const std::string& identity, protocol::Message& m) {
  spdlog::warn("worker {} sent a {} message, which only brokers send", identity,
               protocol::TypeName(protocol::TypeOf(m)));
}

void Dispatcher::Tick() {
  for (const auto& [id, w] : table_.workers()) {
    Send(id, protocol::Heartbeat{options_.broker_id, 0, 0, false});
  }
  for (auto& [id, jobs] : table_.Expire(Clock::now())) {
    spdlog::warn("worker {} missed {} heartbeats: declared dead", id, options_.liveness);
    if (options_.metrics) options_.metrics->WorkerLost();
    LoseJobs(id, jobs, "the worker stopped answering heartbeats");
  }
  FailQueuedWithoutRuntime();
  FailOverdue();
  // Retry terminal records Redis refused earlier.
  std::vector<JobRecord> retry;
  retry.swap(unsaved_);
  for (auto& r : retry) Save(std::move(r));
  PublishWorkers();
}

void Dispatcher::DispatchQueued() {
  bool any_free = false;
  for (const auto& [id, w] : table_.workers()) {
    any_free = any_free || (!w.draining && WorkerTable::Busy(w) < w.reg.slots);
  }
  if (!any_free) return;  // nothing can move: skip the walk over the queue
  for (auto it = queue_.begin(); it != queue_.end();) {
    auto worker = table_.Pick(it->language);
    if (!worker) {
      ++it;
      continue;
    }
    JobSpec spec = std::move(*it);
    it = queue_.erase(it);
    {
      std::lock_guard lock(mu_);
      --queued_total_;
    }
    protocol::Execute execute = spec.ToExecute();
    // Output is streamed for every job: a subscriber may arrive at any time.
    execute.stream_output = true;
    if (auto s = options_.tenant_secrets.find(spec.tenant); s != options_.tenant_secrets.end()) {
      execute.secrets = s->second;
    }
    protocol::Message exec = std::move(execute);
    if (!Send(*worker, exec)) {
      // The worker vanished between Pick and Send: put the job back in front.
      it = queue_.insert(queue_.begin(), std::move(spec));
      {
        std::lock_guard lock(mu_);
        ++queued_total_;
      }
      auto jobs = table_.Remove(*worker);
      if (LoseJobs(*worker, jobs, "the worker is unreachable") > 0 && options_.metrics) {
        options_.metrics->WorkerLost();
      }
      it = queue_.begin();
      continue;
    }
    table_.Assign(*worker, spec.id);
    JobRecord record = JobRecord::Queued(spec);
    record.status = JobStatus::kRunning;
    record.worker = table_.workers().at(*worker).reg.worker_id;
    record.started_ms = common::NowMs();
    record.queued_ms = static_cast<double>(record.started_ms - spec.created_ms);
    if (auto st = store_->Update(record); !st.ok()) {
      // Not fatal: the terminal record is what matters and is retried.
      if (options_.metrics) options_.metrics->RedisError();
      spdlog::warn("could not mark {} running: {}", spec.id, st.ToString());
    }
    std::string id = spec.id;
    in_flight_.emplace(id, InFlight{std::move(spec), std::move(record), *worker});
  }
}

void Dispatcher::FailQueuedWithoutRuntime() {
  const int64_t now = common::NowMs();
  for (auto it = queue_.begin(); it != queue_.end();) {
    bool offered = false;
    for (const auto& [id, w] : table_.workers()) {
      const auto& rts = w.reg.runtimes;
      offered = offered || std::find(rts.begin(), rts.end(), it->language) != rts.end();
    }
    if (offered || now - it->created_ms < options_.runtime_wait.count()) {
      ++it;
      continue;
    }
    JobRecord r = JobRecord::Ended(*it, JobStatus::kError, Code::kRuntimeUnavailable,
                                   "no live worker offers " + it->language);
    r.finished_ms = now;
    it = queue_.erase(it);
    {
      std::lock_guard lock(mu_);
      --queued_total_;
    }
    Finish(std::move(r));
  }
}

void Dispatcher::FailOverdue() {
  const int64_t now = common::NowMs();
  std::vector<std::string> overdue;
  for (const auto& [id, f] : in_flight_) {
    const int64_t limit = static_cast<int64_t>(f.spec.limits.timeout_ms) + kResultGraceMs;
    if (now - f.record.started_ms > limit) overdue.push_back(id);
  }
  for (const auto& id : overdue) {
    auto it = in_flight_.find(id);
    InFlight f = std::move(it->second);
    in_flight_.erase(it);
    table_.Release(f.worker, id);
    Send(f.worker, protocol::Cancel{id});
    spdlog::error("job {} on worker {} sent no result {} ms after its timeout: ending it", id,
                  f.record.worker, kResultGraceMs);
    f.record.status = JobStatus::kError;
    f.record.error = JobError{"INTERNAL", "the worker sent no result for this job", true, "", ""};
    f.record.finished_ms = now;
    Finish(std::move(f.record));
  }
}

size_t Dispatcher::LoseJobs(const std::string& worker, const std::vector<std::string>& job_ids,
                            const std::string& why) {
  size_t lost = 0;
  for (const auto& id : job_ids) {
    auto it = in_flight_.find(id);
    if (it == in_flight_.end()) continue;
    JobRecord r = std::move(it->second.record);
    in_flight_.erase(it);
    r.status = JobStatus::kError;
    r.error = JobError{"WORKER_LOST", why + "; the job may have partly run and is not retried",
                       true, "", ""};
    r.finished_ms = common::NowMs();
    spdlog::warn("job {} lost with worker {}", id, worker);
    Finish(std::move(r));
    ++lost;
  }
  if (lost > 0 && options_.metrics) options_.metrics->JobsWorkerLost(lost);
  return lost;
}

void Dispatcher::Finish(JobRecord record) {
  if (options_.metrics) options_.metrics->Finished(record);
  Save(std::move(record));
}

void Dispatcher::Save(JobRecord record) {
  if (auto st = store_->Update(record); !st.ok()) {
    if (options_.metrics) options_.metrics->RedisError();
    spdlog::error("could not store the result of {}: {} (retrying)", record.id, st.ToString());
    waiters_->Notify(record);
    unsaved_.push_back(std::move(record));
    return;
  }
  waiters_->Notify(record);
}

bool Dispatcher::Send(const std::string& identity, const protocol::Message& m) {
  std::string bytes = protocol::Encode(m);
  try {
    if (!router_.send(zmq::buffer(identity),
                      zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return false;
    }
    return router_.send(zmq::buffer(bytes), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    if (e.num() != EHOSTUNREACH) spdlog::warn("send to {} failed: {}", identity, e.what());
    return false;
  }
}

void Dispatcher::PublishWorkers() {
  std::vector<WorkerView> views;
  uint64_t slots = 0, busy = 0;
  for (const auto& [id, w] : table_.workers()) {
    slots += w.reg.slots;
    busy += WorkerTable::Busy(w);
    views.push_back(WorkerView{w.reg.worker_id, w.reg.hostname, w.reg.runtimes,
                               w.reg.sandbox_layers, w.reg.slots,
                               static_cast<uint32_t>(WorkerTable::Busy(w)), w.draining,
                               w.registered_at_ms, w.last_seen_ms, w.reg.metrics_endpoint});
  }
  std::lock_guard lock(mu_);
  if (options_.metrics) {
    options_.metrics->SetWorkers(views.size(), slots, busy);
    options_.metrics->SetQueueLength(queued_total_);
  }
  worker_views_ = std::move(views);
}

}  // namespace kiln::broker
