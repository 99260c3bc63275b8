#include "broker/stream/output_follower.hpp"

#include <charconv>
#include <thread>

#include "common/log/logging.hpp"
#include "common/thread_name.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("events");

using Clock = std::chrono::steady_clock;

// "<ms>-<seq>" -> (ms, seq); "0" -> (0, 0). False when malformed.
bool SplitStreamId(std::string_view s, uint64_t* ms, uint64_t* seq) {
  *ms = 0;
  *seq = 0;
  auto dash = s.find('-');
  std::string_view a = s.substr(0, dash);
  auto [p, ec] = std::from_chars(a.data(), a.data() + a.size(), *ms);
  if (a.empty() || ec != std::errc() || p != a.data() + a.size()) return false;
  if (dash == std::string_view::npos) return true;
  std::string_view b = s.substr(dash + 1);
  auto [q, ec2] = std::from_chars(b.data(), b.data() + b.size(), *seq);
  return !b.empty() && ec2 == std::errc() && q == b.data() + b.size();
}

}  // namespace

int CompareStreamIds(std::string_view a, std::string_view b) {
  uint64_t am, as, bm, bs;
  const bool aok = SplitStreamId(a, &am, &as);
  const bool bok = SplitStreamId(b, &bm, &bs);
  if (!aok || !bok) return aok == bok ? 0 : (aok ? 1 : -1);
  if (am != bm) return am < bm ? -1 : 1;
  if (as != bs) return as < bs ? -1 : 1;
  return 0;
}

OutputFollower::OutputFollower(RedisEndpoint endpoint, JobStore* jobs, JobWaiters* waiters,
                               Options options)
    : endpoint_(std::move(endpoint)), jobs_(jobs), waiters_(waiters), options_(options) {}

OutputFollower::~OutputFollower() {
  // Watches capture `this`: none may fire once it is gone.
  for (auto& [id, e] : entries_) waiters_->Unwatch(e.watch);
  std::lock_guard lock(mu_);
  for (auto& [id, e] : inbox_.follows) waiters_->Unwatch(e.watch);
}

OutputFollower::Id OutputFollower::Follow(const std::string& job_id, const std::string& after,
                                          std::shared_ptr<Reader> reader) {
  Id id;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
    ++count_;
  }
  Entry e;
  e.job = job_id;
  e.cursor = after.empty() ? "0" : after;
  e.reader = std::move(reader);
  // Registered before the first status check, so no end falls between.
  e.watch = waiters_->Watch(job_id, [this, id](const JobRecord& record, const std::string*) {
    std::lock_guard lock(mu_);
    auto end = SharedEndLocked(record.id);
    if (!end) end = SharedEndLocked(record.id, std::make_shared<const JobRecord>(record));
    inbox_.ends.emplace_back(id, std::move(end));
    NotifyLocked();
  });
  std::lock_guard lock(mu_);
  inbox_.follows.emplace_back(id, std::move(e));
  NotifyLocked();
  return id;
}

void OutputFollower::Unfollow(Id id) {
  std::lock_guard lock(mu_);
  inbox_.unfollows.push_back(id);
  NotifyLocked();
}

void OutputFollower::Wake(Id id) {
  std::lock_guard lock(mu_);
  inbox_.wakes.push_back(id);
  NotifyLocked();
}

void OutputFollower::NotifyLocked() {
  cv_.notify_one();
  if (blocking_ && !unblock_) {
    unblock_ = true;
    unblock_cv_.notify_one();
  }
}

void OutputFollower::UnblockLoop(std::stop_token stop) {
  auto conn = RedisConnection::Lazy(endpoint_);
  std::unique_lock lock(mu_);
  while (unblock_cv_.wait(lock, stop, [&] { return unblock_ && blocking_ && client_id_ != 0; })) {
    const std::string id = std::to_string(client_id_);
    lock.unlock();
    auto r = conn->Command({"CLIENT", "UNBLOCK", id});
    lock.lock();
    // 1: cut short. An error: Redis is in trouble, the block ends by itself.
    if (!r.ok() || r->integer == 1) {
      unblock_ = false;
      continue;
    }
    // 0: the XREAD has not reached Redis yet, or has just returned; ask
    // again shortly while the follower still says it blocks.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lock.lock();
  }
}

size_t OutputFollower::size() const {
  std::lock_guard lock(mu_);
  return count_;
}

std::shared_ptr<const JobRecord> OutputFollower::SharedEndLocked(
    const std::string& id, std::shared_ptr<const JobRecord> make) {
  auto it = ends_.find(id);
  if (it != ends_.end()) {
    if (auto known = it->second.lock()) return known;
  }
  if (make) ends_[id] = make;
  return make;
}

common::Status OutputFollower::RefreshClientId() {
  if (conn_->connects() != 0 && conn_->connects() == client_id_connects_) {
    return common::Status::Ok();
  }
  auto id = conn_->Command({"CLIENT", "ID"});
  if (!id.ok() && id.status().code() == common::Code::kUnavailable) return id.status();
  std::lock_guard lock(mu_);
  client_id_ = id.ok() ? id->integer : 0;  // 0: no CLIENT ID; blocks run their course
  client_id_connects_ = conn_->connects();
  return common::Status::Ok();
}

void OutputFollower::DrainInbox() {
  Inbox in;
  {
    std::lock_guard lock(mu_);
    std::swap(in, inbox_);
    std::erase_if(ends_, [](const auto& kv) { return kv.second.expired(); });
  }
  for (auto& [id, e] : in.follows) entries_.emplace(id, std::move(e));
  for (auto& [id, record] : in.ends) {
    auto it = entries_.find(id);
    if (it != entries_.end() && !it->second.end) it->second.end = std::move(record);
  }
  for (Id id : in.wakes) {
    auto it = entries_.find(id);
    if (it != entries_.end()) it->second.asleep = false;
  }
  size_t gone = 0;
  for (Id id : in.unfollows) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    waiters_->Unwatch(it->second.watch);
    entries_.erase(it);
    ++gone;
  }
  if (gone > 0) {
    std::lock_guard lock(mu_);
    count_ -= gone;
  }
}

OutputFollower::Entry OutputFollower::Remove(std::map<Id, Entry>::iterator it) {
  Entry e = std::move(it->second);
  entries_.erase(it);
  waiters_->Unwatch(e.watch);
  std::lock_guard lock(mu_);
  --count_;
  return e;
}

void OutputFollower::Fail(std::map<Id, Entry>::iterator it, const common::Status& error) {
  Remove(it).reader->OnError(error);
}

bool OutputFollower::TryEnd(std::map<Id, Entry>::iterator it) {
  if (!it->second.reader->OnEnd(*it->second.end)) {
    it->second.end_declined = true;
    return false;
  }
  Remove(it);
  return true;
}

void OutputFollower::RetryDeclinedEnds() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.end_declined) TryEnd(it);
    it = next;
  }
}

common::Status OutputFollower::CheckEnds(bool all) {
  std::vector<Id> ids;
  std::vector<std::vector<std::string>> commands;
  for (auto& [id, e] : entries_) {
    if (e.end || (e.checked && !all)) continue;
    ids.push_back(id);
    commands.push_back({"HGET", JobStore::JobKey(e.job), "status"});
  }
  if (ids.empty()) return common::Status::Ok();
  ASSIGN_OR_RETURN(auto replies, conn_->Pipeline(commands));
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = entries_.find(ids[i]);
    it->second.checked = true;
    if (replies[i].is_nil()) {
      const common::Status gone = common::NotFound("no execution with id " + it->second.job);
      Fail(it, gone);
      continue;
    }
    auto status = ParseJobStatus(replies[i].str);
    if (!status.ok() || !IsTerminal(*status)) continue;
    // Another reader of the job may hold its record already.
    std::shared_ptr<const JobRecord> end;
    {
      std::lock_guard lock(mu_);
      end = SharedEndLocked(it->second.job);
    }
    if (!end) {
      auto record = jobs_->Load(it->second.job);
      if (!record.ok()) return record.status();
      auto loaded = std::make_shared<const JobRecord>(std::move(*record));
      std::lock_guard lock(mu_);
      end = SharedEndLocked(it->second.job, std::move(loaded));
    }
    it->second.end = std::move(end);
  }
  return common::Status::Ok();
}

common::StatusOr<bool> OutputFollower::ReadOnce() {
  size_t buffered = 0;
  for (auto& [id, e] : entries_) buffered += e.reader->Buffered();
  // Jobs to read, from the earliest cursor among their readers with room.
  std::map<std::string, std::pair<std::string, std::vector<Id>>> jobs;
  bool draining = false;
  for (auto& [id, e] : entries_) {
    if (e.asleep || e.end_declined) continue;
    if (!e.reader->HasRoom()) {
      e.asleep = true;
      continue;
    }
    if (buffered > options_.buffer_budget && e.reader->Buffered() > 0) continue;
    auto [it, fresh] = jobs.try_emplace(e.job, e.cursor, std::vector<Id>{});
    if (!fresh && CompareStreamIds(e.cursor, it->second.first) < 0) it->second.first = e.cursor;
    it->second.second.push_back(id);
    if (e.end) {
      e.read_since_end = true;
      draining = true;
    }
  }
  if (jobs.empty()) return false;

  // Blocks only with nothing in the inbox, decided under the lock that
  // NotifyLocked() takes: whatever arrives later cuts the block short.
  // Marked as blocking for the XREAD alone, so the unblocking thread never
  // asks while this thread delivers.
  bool block = false;
  if (!draining) {
    std::lock_guard lock(mu_);
    block = inbox_.follows.empty() && inbox_.wakes.empty() && inbox_.ends.empty() &&
            inbox_.unfollows.empty();
    blocking_ = block;
    unblock_ = false;
  }
  std::vector<std::string> args = {"XREAD", "COUNT", std::to_string(kReadCount)};
  if (block) {
    args.push_back("BLOCK");
    args.push_back(std::to_string(options_.block.count()));
  }
  args.push_back("STREAMS");
  for (const auto& [job, from] : jobs) args.push_back(JobStore::OutputKey(job));
  for (const auto& [job, from] : jobs) args.push_back(from.first);
  std::vector<std::string_view> argv(args.begin(), args.end());
  auto replied = conn_->Command(argv);
  if (block) {
    std::lock_guard lock(mu_);
    blocking_ = false;
  }
  ASSIGN_OR_RETURN(RedisReply reply, std::move(replied));

  // [[key, [[entry-id, [field, value, ...]], ...]], ...]; nil when nothing came.
  std::map<std::string, std::vector<JobStore::StoredChunk>> read;
  for (const RedisReply& stream : reply.elements) {
    if (stream.elements.size() != 2) continue;
    const std::string& key = stream.elements[0].str;
    const std::string prefix = JobStore::OutputKey("");
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    std::string job = key.substr(prefix.size());
    read[job] = JobStore::ParseEntries(job, stream.elements[1]);
  }
  for (auto& [job, from] : jobs) {
    auto got = read.find(job);
    const size_t n = got == read.end() ? 0 : got->second.size();
    const bool exhausted = n < kReadCount;
    for (Id id : from.second) {
      auto it = entries_.find(id);
      if (it == entries_.end()) continue;
      Entry& e = it->second;
      std::vector<JobStore::StoredChunk> mine;
      if (n > 0) {
        for (const auto& c : got->second) {
          if (CompareStreamIds(c.event_id, e.cursor) > 0) mine.push_back(c);
        }
      }
      if (!mine.empty()) {
        e.cursor = mine.back().event_id;
        e.reader->OnChunks(mine);
      } else if (e.end && e.read_since_end && exhausted) {
        TryEnd(it);
      }
    }
  }
  return true;
}

void OutputFollower::Run(std::stop_token stop) {
  std::stop_callback wake(stop, [this] {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  });
  conn_ = RedisConnection::Lazy(endpoint_);
  std::jthread unblocker([this](std::stop_token st) {
    common::NameThisThread("kiln-unblocker");
    UnblockLoop(st);
  });
  auto next_check = Clock::now() + kCheckInterval;
  Clock::time_point failing_since{};  // epoch: Redis answers
  while (!stop.stop_requested()) {
    DrainInbox();
    if (entries_.empty()) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200),
                   [&] { return stop.stop_requested() || !inbox_.follows.empty(); });
      continue;
    }
    const auto now = Clock::now();
    const bool all = now >= next_check;
    if (all) next_check = now + kCheckInterval;
    RetryDeclinedEnds();
    common::Status st = CheckEnds(all);
    bool idle = false;
    if (st.ok()) st = RefreshClientId();
    if (st.ok()) {
      auto read = ReadOnce();
      if (read.ok()) {
        idle = !*read;  // no reader with room
      } else {
        st = read.status();
      }
    }
    if (!st.ok()) {
      if (failing_since == Clock::time_point{}) failing_since = Clock::now();
      kLog.Debug({}, "output follower: {}", st.ToString());
      if (Clock::now() - failing_since > kRedisGrace) {
        const common::Status gone(common::Code::kUnavailable, "redis: " + st.message());
        while (!entries_.empty()) Fail(entries_.begin(), gone);
        failing_since = {};
      }
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop.stop_requested(); });
      continue;
    }
    failing_since = {};
    if (idle) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.block, [&] {
        return stop.stop_requested() || !inbox_.follows.empty() || !inbox_.wakes.empty() ||
               !inbox_.ends.empty() || !inbox_.unfollows.empty();
      });
    }
  }
  DropReaders();
}

void OutputFollower::DropReaders() {
  for (auto& [id, e] : entries_) waiters_->Unwatch(e.watch);
  auto entries = std::move(entries_);
  entries_.clear();
  std::vector<std::pair<Id, Entry>> follows;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, e] : inbox_.follows) waiters_->Unwatch(e.watch);
    follows.swap(inbox_.follows);
    count_ = 0;
  }
  // `entries` and `follows` release their readers here, outside mu_.
}

}  // namespace kiln::broker
