#include "worker/link/outbox.hpp"

#include <algorithm>

#include "common/log/logging.hpp"
#include "worker/metrics/worker_metrics.hpp"

namespace kiln::worker {

namespace protocol = common::protocol;

namespace {
const common::SubsystemLog kLog("link");

// A Result unacknowledged after a resend waits twice as long for the next,
// up to 2^3 = 8 times `resend_after`: a broker that holds it while Redis is
// away is not sent the same megabytes every few seconds.
constexpr uint32_t kMaxResendDoublings = 3;
}  // namespace

size_t ApproxResultBytes(const protocol::Result& r) {
  size_t bytes = 256 + r.job_id.size() + r.stdout_data.size() + r.stderr_data.size() +
                 r.result_json.size() + r.worker_error.size();
  if (r.error) bytes += r.error->type.size() + r.error->message.size() + r.error->traceback.size();
  for (const auto& f : r.files) bytes += 16 + f.path.size() + f.content.size();
  for (const auto& o : r.outputs) bytes += 16 + o.mime.size() + o.data.size();
  return bytes;
}

Outbox::Outbox(Limits limits, WorkerMetrics* metrics) : limits_(limits), metrics_(metrics) {}

void Outbox::PostChunk(std::string broker, protocol::OutputChunk chunk) {
  auto [it, fresh] = chunks_.try_emplace(chunk.job_id);
  JobChunks& job = it->second;
  if (fresh) job.broker = std::move(broker);
  const size_t size = chunk.data.size();
  const char* bound = nullptr;
  if (job.dropping || job.bytes + size > limits_.job_chunk_bytes) {
    bound = "job";
  } else if (chunk_bytes_ + size > limits_.total_chunk_bytes) {
    bound = "total";
  }
  if (bound != nullptr) {
    job.dropping = true;
    ++stats_.chunks_dropped;
    if (metrics_) metrics_->OutputChunkDropped(bound);
    return;
  }
  if (job.chunks.empty()) rr_.push_back(chunk.job_id);
  job.bytes += size;
  chunk_bytes_ += size;
  job.chunks.push_back(std::move(chunk));
  Publish();
}

void Outbox::DropChunks(const std::string& job_id) {
  auto it = chunks_.find(job_id);
  if (it == chunks_.end()) return;
  chunk_bytes_ -= it->second.bytes;
  chunks_.erase(it);
  rr_.erase(std::remove(rr_.begin(), rr_.end(), job_id), rr_.end());
}

void Outbox::PostResult(std::string broker, protocol::Result result) {
  // The Result carries the whole output: chunks still unsent add nothing the
  // broker would store after the job's end.
  DropChunks(result.job_id);
  if (auto old = results_.find(result.job_id); old != results_.end()) Forget(old);
  const uint64_t order = next_order_++;
  const std::string job_id = result.job_id;
  Kept k;
  k.broker = std::move(broker);
  k.bytes = ApproxResultBytes(result);
  k.order = order;
  k.result = std::move(result);
  result_bytes_ += k.bytes;
  results_.emplace(job_id, std::move(k));
  order_.emplace(order, job_id);
  to_send_.insert(order);
  while (!order_.empty() &&
         (results_.size() > limits_.results || result_bytes_ > limits_.result_bytes)) {
    auto oldest = results_.find(order_.begin()->second);
    static common::LogLimiter limit(/*lines=*/10, std::chrono::seconds(10));
    kLog.Error(limit, {.job = oldest->first},
               "dropping an unacknowledged result: {} results ({} bytes) kept, the bound is {} "
               "({} bytes); its job ends WORKER_LOST or as the broker decides",
               results_.size(), result_bytes_, limits_.results, limits_.result_bytes);
    ++stats_.results_dropped;
    if (metrics_) metrics_->ResultDropped();
    Forget(oldest);
  }
  Publish();
}

void Outbox::Forget(std::map<std::string, Kept>::iterator it) {
  const Kept& k = it->second;
  to_send_.erase(k.order);
  if (k.sends > 0) resend_at_.erase({k.next_resend, k.order});
  order_.erase(k.order);
  result_bytes_ -= k.bytes;
  results_.erase(it);
}

bool Outbox::OnAck(const std::string& job_id) {
  auto it = results_.find(job_id);
  if (it == results_.end()) return false;
  Forget(it);
  Publish();
  return true;
}

void Outbox::OnRegistered(const std::string& broker, const Links& links, Resend which) {
  for (const auto& [order, job_id] : order_) {
    Kept& k = results_.at(job_id);
    if (to_send_.count(order) != 0) continue;
    const bool own = k.broker == broker && which == Resend::kOwnAndOrphaned;
    const bool orphaned = k.broker != broker && !links.Registered(k.broker);
    if (!own && !orphaned) continue;
    resend_at_.erase({k.next_resend, k.order});
    to_send_.insert(order);
  }
}

std::string Outbox::RouteResult(const Kept& k, const Links& links,
                                const std::set<std::string>& full) const {
  if (links.Registered(k.broker)) return full.count(k.broker) ? "" : k.broker;
  for (const auto& b : links.RegisteredBrokers()) {
    if (full.count(b) == 0) return b;
  }
  return "";
}

void Outbox::Pump(Links& links, Clock::time_point now) {
  // Unacknowledged too long: due again.
  while (!resend_at_.empty() && resend_at_.begin()->first <= now) {
    to_send_.insert(resend_at_.begin()->second);
    resend_at_.erase(resend_at_.begin());
  }
  std::set<std::string> full;  // links that took nothing more in this pump
  for (auto it = to_send_.begin(); it != to_send_.end();) {
    Kept& k = results_.at(order_.at(*it));
    bool sent = false;
    for (std::string to = RouteResult(k, links, full); !to.empty();
         to = RouteResult(k, links, full)) {
      if (links.Send(to, k.result)) {
        sent = true;
        break;
      }
      full.insert(to);
    }
    if (!sent) {
      ++it;
      continue;
    }
    ++stats_.results_sent;
    if (k.sends > 0) {
      ++stats_.results_resent;
      if (metrics_) metrics_->ResultResent();
    }
    const uint32_t factor = 1u << std::min(k.sends, kMaxResendDoublings);
    ++k.sends;
    k.next_resend = now + limits_.resend_after * factor;
    resend_at_.emplace(k.next_resend, k.order);
    it = to_send_.erase(it);
  }

  // Then chunks, one per job per turn, so every job's output moves.
  size_t stalled = 0;  // jobs in a row whose broker cannot take a chunk now
  while (!rr_.empty() && stalled < rr_.size()) {
    std::string job_id = std::move(rr_.front());
    rr_.pop_front();
    JobChunks& job = chunks_.at(job_id);
    if (!links.Registered(job.broker) || full.count(job.broker) != 0 ||
        !links.Send(job.broker, job.chunks.front())) {
      if (links.Registered(job.broker)) full.insert(job.broker);
      rr_.push_back(std::move(job_id));
      ++stalled;
      continue;
    }
    stalled = 0;
    const size_t size = job.chunks.front().data.size();
    job.chunks.pop_front();
    job.bytes -= size;
    chunk_bytes_ -= size;
    ++stats_.chunks_sent;
    stats_.chunk_bytes_sent += size;
    if (metrics_) metrics_->OutputChunkSent(size);
    if (!job.chunks.empty()) {
      rr_.push_back(std::move(job_id));
    } else if (!job.dropping) {
      chunks_.erase(job_id);  // a dropping job keeps its entry: it drops until its Result
    }
  }
  Publish();
}

std::optional<Outbox::Clock::time_point> Outbox::NextResend() const {
  if (resend_at_.empty()) return std::nullopt;
  return resend_at_.begin()->first;
}

std::vector<std::string> Outbox::UnackedJobs(const std::string& broker_first, size_t max) const {
  std::vector<std::string> ids;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [order, job_id] : order_) {
      if (ids.size() >= max) return ids;
      const bool mine = results_.at(job_id).broker == broker_first;
      if (mine == (pass == 0)) ids.push_back(job_id);
    }
  }
  return ids;
}

void Outbox::Publish() const {
  if (!metrics_) return;
  metrics_->SetOutputUnsentBytes(chunk_bytes_);
  metrics_->SetResultsUnacked(results_.size());
}

}  // namespace kiln::worker
