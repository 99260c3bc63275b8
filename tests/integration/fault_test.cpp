// Fault injection through a real cluster (issue 12; Jepsen-style, bounded in
// time): under a steady mixed load — python and shell one-shot jobs, session
// executions, jobs flooding output — Redis, a broker or a worker is paused
// (SIGSTOP/SIGCONT) below or above the liveness window, or killed (SIGKILL)
// and restarted, at a seeded random moment. Afterwards every accepted job is
// checked against the rule of issue 12:
//   - every submit gets an answer, and a refused one (503, 429, 410) stored
//     nothing (its Idempotency-Key names no job); an answer lost on the way is
//     recovered by retrying the same Idempotency-Key;
//   - it has exactly one terminal state (the record stops changing, one audit entry);
//   - a job whose code ran to its end carries its real output and result;
//   - none is WORKER_LOST (SESSION_LOST) unless its worker was killed, or paused
//     past the window, while it ran (or before it ended, for its session):
//     its worker is the victim, it started before the victim registered
//     again after the fault, and it ended after the fault began;
//   - its stored output chunks are in order (seq, offset), complete (they
//     concatenate to the record's stdout/stderr unless it is truncated) and
//     none was stored after its terminal record was first read;
//   - after the fault, every worker runs fresh jobs within seconds.
// Plus targeted tests: a deep JSON control frame (one-shot and session), an
// output flood on a one-worker cluster, and the Redis commands one-byte
// writes cost.
//
// The seed of the fault moments is printed; KILN_FAULT_SEED=<n> replays it.
// KILN_FAULT_NO_FLOOD=1 leaves the flooding jobs out of the mixed load (to
// tell their effect from the fault's when diagnosing).
//
// TestCluster runs heartbeats every 200 ms with liveness 5: the liveness
// window is 1 s. Each test starts its own cluster and only signals
// processes it started.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/cluster.hpp"

namespace kiln::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double Seconds(int64_t ms) { return static_cast<double>(ms) / 1000.0; }

bool IsTerminal(const json& record) {
  static const std::set<std::string> kTerminal = {
      "succeeded", "failed", "timed_out", "memory_exceeded", "cancelled", "rejected", "error"};
  return record.is_object() && record.contains("status") && record["status"].is_string() &&
         kTerminal.count(record["status"].get<std::string>()) != 0;
}

std::string Str(const json& record, const char* field) {
  if (!record.is_object() || !record.contains(field) || !record[field].is_string()) return "";
  return record[field].get<std::string>();
}

int64_t Ms(const json& record, const char* field) {
  if (!record.is_object() || !record.contains(field) || !record[field].is_number()) return 0;
  return record[field].get<int64_t>();
}

json Field(const json& record, const char* field) {
  if (!record.is_object() || !record.contains(field)) return json();
  return record[field];
}

bool Bool(const json& record, const char* field, bool otherwise) {
  if (!record.is_object() || !record.contains(field) || !record[field].is_boolean()) {
    return otherwise;
  }
  return record[field].get<bool>();
}

std::string ErrorCode(const json& record) {
  if (!record.is_object() || !record.contains("error") || !record["error"].is_object()) return "";
  return Str(record["error"], "code");
}

// "succeeded", "failed/OUTPUT_LIMIT", "error/WORKER_LOST", ...
std::string Outcome(const json& record) {
  if (!IsTerminal(record)) return "not terminal";
  std::string code = ErrorCode(record);
  return Str(record, "status") + (code.empty() ? "" : "/" + code);
}

// The record without its (possibly megabytes of) output, for messages.
std::string Brief(const json& record) {
  if (!record.is_object()) return record.dump();
  json r = record;
  for (const char* f : {"stdout", "stderr"}) {
    if (r.contains(f) && r[f].is_string() && r[f].get<std::string>().size() > 300) {
      r[f] = r[f].get<std::string>().substr(0, 300) + "...(" +
             std::to_string(record[f].get<std::string>().size()) + " bytes)";
    }
  }
  return r.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One HTTP call on a fresh connection; safe from any thread.
HttpReply Call(int port, const std::string& method, const std::string& path,
               const std::string& body = "", const std::string& token = TestCluster::kToken,
               const httplib::Headers& extra = {}, int read_timeout_s = 4) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(read_timeout_s, 0);
  cli.set_write_timeout(2, 0);
  cli.set_connection_timeout(1, 0);
  httplib::Headers headers = extra;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  httplib::Result r = method == "GET" ? cli.Get(path.c_str(), headers)
                                      : cli.Post(path.c_str(), headers, body, "application/json");
  HttpReply reply;
  if (!r) return reply;
  reply.status = r->status;
  reply.raw = r->body;
  reply.headers = r->headers;
  reply.body = json::parse(r->body, nullptr, false);
  return reply;
}

uint64_t Seed() {
  if (const char* env = std::getenv("KILN_FAULT_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  return std::random_device{}() ^ (static_cast<uint64_t>(WallMs()) << 12);
}

bool FloodDisabled() {
  const char* env = std::getenv("KILN_FAULT_NO_FLOOD");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

const std::string kFloodLine = "line of output text 0123456789\n";

std::string FloodCode() { return "while True:\n    print('line of output text 0123456789')\n"; }

// Whether `text` is whole or partial repetitions of kFloodLine, from the start.
bool IsFloodPrefix(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != kFloodLine[i % kFloodLine.size()]) return false;
  }
  return true;
}

// Where a fault hits and how.
enum class Target { kRedis, kBroker, kWorker };
enum class Action { kPause, kKill };

const char* TargetName(Target t) {
  return t == Target::kRedis ? "redis" : t == Target::kBroker ? "broker" : "worker";
}

struct Fault {
  Target target = Target::kRedis;
  Action action = Action::kPause;
  int index = 0;          // broker or worker index
  std::string worker_id;  // for a worker
  int64_t start_ms = 0;   // wall clock: SIGSTOP / SIGKILL sent
  int64_t end_ms = 0;     // SIGCONT sent / the process started again
  // For a worker that loses work: when every broker had it registered again
  // (until then a broker may still send it jobs for the process that is gone).
  int64_t back_ms = 0;
  // Whether the rule lets jobs on this worker end WORKER_LOST: a kill, or a
  // pause longer than the liveness window.
  bool loses_work = false;
};

enum class Kind { kPython, kShell, kSession, kFlood, kProbe };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kPython:
      return "python";
    case Kind::kShell:
      return "shell";
    case Kind::kSession:
      return "session";
    case Kind::kFlood:
      return "flood";
    case Kind::kProbe:
      return "probe";
  }
  return "?";
}

// One job of the load, from its first submit attempt to its terminal record.
struct Job {
  Kind kind = Kind::kPython;
  int index = 0;
  std::string key;  // Idempotency-Key: a retry after a lost answer finds the same job
  json request;
  std::string expected_stdout;
  json expected_result;  // null: none (shell)
  uint64_t max_output_bytes = 0;
  int timeout_ms = 0;
  std::string session;         // session id, for session executions
  std::string session_worker;  // the worker its session was last seen on ("" unknown)
  int64_t submit_ms = 0;       // first attempt
  std::string id;              // set once accepted
  bool ambiguous = false;      // an attempt got no answer
  bool replayed = false;       // an answer said Idempotent-Replay
  int refused_status = 0;      // the definitive refusal, if refused
  int unknown_answers = 0;     // 503s saying the outcome is unknown
  json record;                 // the terminal record, as last read
  json first_record;           // the terminal record, as first read
  // The last stored chunk's entry id ("" none) when the terminal record was
  // first read; end_seen once that is known.
  std::string last_chunk_at_end;
  bool end_seen = false;
};

// "<ms>-<n>" as a pair that orders like Redis stream ids.
std::pair<uint64_t, uint64_t> EntryId(const std::string& id) {
  char* end = nullptr;
  const uint64_t ms = std::strtoull(id.c_str(), &end, 10);
  const uint64_t n = (end != nullptr && *end == '-') ? std::strtoull(end + 1, nullptr, 10) : 0;
  return {ms, n};
}

enum class SubmitResult { kAccepted, kRefused, kUnresolved };

class FaultTest : public ::testing::Test {
 protected:
  void StartCluster(ClusterOptions options) {
    options_ = options;
    cluster_ = TestCluster::Start(options);
    for (int i = 0; i < options.workers; ++i) worker_ids_.push_back(cluster_->worker_id(i));
  }

  void TearDown() override {
    if (HasFailure() && cluster_ && std::getenv("KILN_FAULT_QUIET_LOGS") == nullptr) {
      std::cerr << cluster_->DumpLogs();
    }
    cluster_.reset();
  }

  int window_ms() const { return cluster_->liveness_window_ms(); }
  int port(int broker) const { return cluster_->http_port(broker % cluster_->brokers()); }

  // ---------------------------------------------------------------- clients

  // Submits (wait:false) until a definitive answer: 202 (accepted), or a
  // refusal (4xx/503: nothing stored, per docs/api.md). An attempt without
  // an answer (broker paused, killed, slow) is retried with the same
  // Idempotency-Key on the next broker until `deadline`.
  // Once `stop` is set, an unanswered submit is left to CheckEverything.
  SubmitResult Submit(Job& job, int broker, Clock::time_point deadline,
                      const std::atomic<bool>* stop = nullptr) {
    if (job.submit_ms == 0) job.submit_ms = WallMs();
    json body = job.request;
    body["wait"] = false;
    const std::string text = body.dump();
    for (int attempt = 0;; ++attempt) {
      HttpReply r = Call(port(broker + attempt), "POST", "/v1/executions", text,
                         TestCluster::kToken, {{"Idempotency-Key", job.key}});
      if (r.status == 202 && r.body.is_object() && r.body.contains("id") &&
          r.body["id"].is_string()) {
        job.id = r.body["id"].get<std::string>();
        job.replayed = r.headers.count("Idempotent-Replay") != 0;
        return SubmitResult::kAccepted;
      }
      // A 503 saying the outcome is unknown (Redis got the submit, its
      // answer was lost) is as ambiguous as no answer at all.
      const bool unknown = r.status == 503 && r.body.is_object() && r.body.contains("outcome") &&
                           r.body["outcome"] == "unknown";
      if (r.status != 0 && !unknown && !(job.ambiguous && r.status >= 500)) {
        // Definitive. (After a lost answer, a 5xx does not tell whether the
        // first attempt was stored: keep asking.)
        job.refused_status = r.status;
        return SubmitResult::kRefused;
      }
      if (r.status == 0 || unknown) job.ambiguous = true;
      if (unknown) ++job.unknown_answers;
      if (Clock::now() >= deadline || (stop != nullptr && *stop)) return SubmitResult::kUnresolved;
      std::this_thread::sleep_for(150ms);
    }
  }

  // GET of the record from `broker`, else from the others; null when none answers 200.
  json Read(const std::string& id, int broker, int read_timeout_s = 4) {
    for (int i = 0; i < cluster_->brokers(); ++i) {
      HttpReply r = Call(port(broker + i), "GET", "/v1/executions/" + id, "", TestCluster::kToken,
                         {}, read_timeout_s);
      if (r.status == 200) return r.body;
    }
    return json();
  }

  json AwaitTerminal(const std::string& id, int broker, Clock::time_point deadline,
                     const std::atomic<bool>* stop = nullptr) {
    json rec;
    while (true) {
      rec = Read(id, broker);
      if (IsTerminal(rec) || Clock::now() >= deadline || (stop != nullptr && *stop)) return rec;
      std::this_thread::sleep_for(100ms);
    }
  }

  // Called by whoever first reads the job's terminal record: notes the
  // last chunk stored by then, so that CheckChunks can tell chunks stored
  // after the job ended.
  void NoteEnd(Job& job, const json& record) {
    job.record = record;
    if (job.first_record.is_null()) job.first_record = record;
    if (job.end_seen) return;
    RedisValue r = cluster_->RedisCommand(
        {"XREVRANGE", "{kiln}:out:" + job.id, "+", "-", "COUNT", "1"}, 1000ms);
    if (r.type != RedisValue::Type::kArray) return;
    job.end_seen = true;
    if (!r.elements.empty() && !r.elements[0].elements.empty()) {
      job.last_chunk_at_end = r.elements[0].elements[0].str;
    }
  }

  std::shared_ptr<Job> NewJob(Kind kind) {
    auto job = std::make_shared<Job>();
    job->kind = kind;
    job->index = next_index_++;
    job->key = "fault-" + std::to_string(seed_) + "-" + std::to_string(job->index);
    const std::string idx = std::to_string(job->index);
    job->timeout_ms = 10000;
    job->max_output_bytes = 65536;
    switch (kind) {
      case Kind::kPython:
        job->request = {{"language", "python"},
                        {"code", "import time\nfor i in range(4):\n    print('tok-" + idx +
                                     "-%d' % i)\n    time.sleep(0.08)\nresult = {'idx': " + idx +
                                     ", 'sq': " + idx + " * " + idx + "}\n"}};
        for (int i = 0; i < 4; ++i)
          job->expected_stdout += "tok-" + idx + "-" + std::to_string(i) + "\n";
        job->expected_result = {{"idx", job->index}, {"sq", job->index * job->index}};
        break;
      case Kind::kShell:
        job->request = {
            {"language", "shell"},
            {"code", "for i in 0 1 2 3; do echo \"tok-" + idx + "-$i\"; sleep 0.08; done\n"}};
        for (int i = 0; i < 4; ++i)
          job->expected_stdout += "tok-" + idx + "-" + std::to_string(i) + "\n";
        break;
      case Kind::kSession:  // the caller sets session and the expected result
        job->request = {
            {"language", "python"},
            {"code",
             "import time\ntry:\n    _n += 1\nexcept NameError:\n    _n = 1\n"
             "for i in range(3):\n    print('sess-" +
                 idx + "-%d' % i)\n    time.sleep(0.05)\nresult = [_n, " + idx + "]\n"}};
        for (int i = 0; i < 3; ++i)
          job->expected_stdout += "sess-" + idx + "-" + std::to_string(i) + "\n";
        break;
      case Kind::kFlood:
        job->timeout_ms = 3000;
        job->request = {{"language", "python"}, {"code", FloodCode()}};
        break;
      case Kind::kProbe:
        job->request = {{"language", "python"},
                        {"code", "import time\ntime.sleep(0.2)\nprint('probe-" + idx +
                                     "')\nresult = " + idx + "\n"}};
        job->expected_stdout = "probe-" + idx + "\n";
        job->expected_result = job->index;
        break;
    }
    job->request["limits"] = {{"timeout_ms", job->timeout_ms}};
    if (kind == Kind::kFlood) {
      job->request["limits"]["max_output_bytes"] = job->max_output_bytes;
    }
    return job;
  }

  void Track(const std::shared_ptr<Job>& job) {
    std::lock_guard lock(mu_);
    jobs_.push_back(job);
  }

  // A client of one-shot jobs: up to 3 in flight, python and shell in turn.
  void OneShotClient(int client, const std::atomic<bool>& stop, Clock::time_point hard_stop) {
    std::vector<std::shared_ptr<Job>> in_flight;
    for (int n = 0; !stop; ++n) {
      if (in_flight.size() < 3) {
        std::shared_ptr<Job> job;
        {
          std::lock_guard lock(mu_);
          job = NewJob((n + client) % 2 == 0 ? Kind::kPython : Kind::kShell);
        }
        Track(job);
        switch (Submit(*job, client, hard_stop, &stop)) {
          case SubmitResult::kAccepted:
            in_flight.push_back(job);
            break;
          case SubmitResult::kRefused:
            std::this_thread::sleep_for(150ms);
            break;
          case SubmitResult::kUnresolved:
            break;
        }
      }
      for (auto it = in_flight.begin(); it != in_flight.end();) {
        json rec = Read((*it)->id, client);
        if (IsTerminal(rec)) {
          NoteEnd(**it, rec);
          it = in_flight.erase(it);
        } else {
          ++it;
        }
      }
      std::this_thread::sleep_for(80ms);
    }
  }

  // Session executions one after another; a new session after any execution
  // that did not succeed with the state it expected, or a refusal.
  void SessionClient(int broker, const std::atomic<bool>& stop, Clock::time_point hard_stop) {
    int sessions = 0;
    std::string session;
    std::string worker;
    int count = 0;
    auto fresh = [&] {
      session = "fs-" + std::to_string(seed_ % 100000) + "-" + std::to_string(++sessions);
      worker.clear();
      count = 0;
    };
    fresh();
    while (!stop) {
      std::shared_ptr<Job> job;
      {
        std::lock_guard lock(mu_);
        job = NewJob(Kind::kSession);
      }
      job->session = session;
      job->session_worker = worker;
      job->request["session_id"] = session;
      job->expected_result = json::array({count + 1, job->index});
      Track(job);
      SubmitResult s = Submit(*job, broker, hard_stop, &stop);
      if (s != SubmitResult::kAccepted) {
        // Lost (410) or busy (409): a new session. Unresolved: whether it ran
        // is unknown, so the count is too. Otherwise (503, 429) nothing ran.
        if (s == SubmitResult::kUnresolved || job->refused_status == 410 ||
            job->refused_status == 409) {
          if (job->refused_status == 410) {
            std::lock_guard lock(mu_);
            session_lost_refusals_.push_back(job);
          }
          fresh();
        }
        std::this_thread::sleep_for(150ms);
        continue;
      }
      json rec = AwaitTerminal(job->id, broker, hard_stop, &stop);
      if (IsTerminal(rec)) NoteEnd(*job, rec);
      if (!Str(rec, "worker").empty()) worker = Str(rec, "worker");
      if (Str(rec, "status") == "succeeded" && Field(rec, "result") == job->expected_result) {
        ++count;
      } else {
        fresh();
      }
      std::this_thread::sleep_for(50ms);
    }
  }

  // ---------------------------------------------------------------- one job

  // Submits with wait:false to broker 0; the id, or "" (with a failure).
  std::string SubmitOne(json request) {
    request["wait"] = false;
    HttpReply r = Call(port(0), "POST", "/v1/executions", request.dump());
    EXPECT_EQ(r.status, 202) << r.raw;
    if (r.status != 202 || !r.body.is_object() || !r.body.contains("id") ||
        !r.body["id"].is_string()) {
      return "";
    }
    return r.body["id"].get<std::string>();
  }

  struct Timed {
    json record;
    int64_t ms = 0;  // from the submit to the terminal record read (50 ms polls)
  };
  Timed RunTimed(const json& request, std::chrono::milliseconds timeout = 15s) {
    const auto t0 = Clock::now();
    Timed t;
    const std::string id = SubmitOne(request);
    if (id.empty()) return t;
    WaitFor(
        [&] {
          t.record = Read(id, 0);
          return IsTerminal(t.record);
        },
        timeout);
    t.ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    return t;
  }

  json WaitRunning(const std::string& id) {
    json rec;
    WaitFor(
        [&] {
          rec = Read(id, 0);
          return IsTerminal(rec) || Str(rec, "status") == "running";
        },
        10s);
    return rec;
  }

  // A job of a targeted test, its end noted now (see NoteEnd).
  Job Ended(const std::string& id, Kind kind, const json& rec) {
    Job job;
    job.id = id;
    job.kind = kind;
    NoteEnd(job, rec);
    return job;
  }

  // The chunk checks of the scenarios on one job.
  void ExpectChunksMatch(const Job& job) {
    Failures fails;
    size_t entries = 0;
    CheckChunks(job, job.record, &fails, &entries);
    std::cerr << "[fault] " << job.id << ": " << entries << " stored chunk entries\n";
    fails.Report();
  }

  // Whether every broker lists `worker` as registered at or after `since_ms`.
  bool RegisteredSince(const std::string& worker, int64_t since_ms) {
    for (int b = 0; b < cluster_->brokers(); ++b) {
      HttpReply r = Call(port(b), "GET", "/v1/workers", "", TestCluster::kAdminToken, {}, 2);
      if (r.status != 200 || !r.body.is_object() || !r.body["workers"].is_array()) return false;
      bool found = false;
      for (const auto& w : r.body["workers"]) {
        if (Str(w, "id") == worker && Ms(w, "registered_at_ms") >= since_ms) found = true;
      }
      if (!found) return false;
    }
    return true;
  }

  // ---------------------------------------------------------------- scenario

  struct Scenario {
    std::string name;
    Target target = Target::kRedis;
    Action action = Action::kPause;
    int duration_ms = 0;  // pause length, or how long the killed process stays down
  };

  void RunScenario(const Scenario& s) {
    seed_ = Seed();
    std::mt19937_64 rng(seed_);
    std::uniform_int_distribution<int> delay(2000, 3500);
    const int fault_after_ms = delay(rng);
    const int index = std::uniform_int_distribution<int>(0, 1)(rng);
    const bool flood = !FloodDisabled();

    ClusterOptions options{.brokers = 2, .workers = 2, .slots = 3};
    options.max_output_bytes = 10u << 20;
    if (s.target == Target::kRedis && s.action == Action::kKill)
      options.redis_appendfsync = "always";
    StartCluster(options);

    Fault fault;
    fault.target = s.target;
    fault.action = s.action;
    fault.index = index;
    if (s.target == Target::kWorker) fault.worker_id = worker_ids_.at(index);
    fault.loses_work =
        s.target == Target::kWorker && (s.action == Action::kKill || s.duration_ms > window_ms());
    std::cerr << "[fault] " << s.name << ": seed " << seed_ << " (KILN_FAULT_SEED to replay); "
              << TargetName(s.target)
              << (s.target == Target::kRedis ? "" : " " + std::to_string(index))
              << (s.action == Action::kPause ? " SIGSTOP for " : " SIGKILL, down for ")
              << s.duration_ms << " ms at +" << fault_after_ms << " ms; liveness window "
              << window_ms() << " ms; flood jobs " << (flood ? "on" : "off") << "; cluster in "
              << cluster_->dir() << "\n";

    std::atomic<bool> stop{false};
    const auto load_start = Clock::now();
    const auto fault_at = load_start + std::chrono::milliseconds(fault_after_ms);
    const auto fault_until = fault_at + std::chrono::milliseconds(s.duration_ms);
    const auto tail = 4s;
    const auto hard_stop = fault_until + tail + 12s;  // submits retry until then at the latest

    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] { OneShotClient(t, stop, hard_stop); });
    }
    threads.emplace_back([&] { SessionClient(1, stop, hard_stop); });
    if (flood) {
      // One flood from the start, one (with a larger cap) running into the fault.
      threads.emplace_back([&] {
        std::this_thread::sleep_until(load_start + 300ms);
        for (uint64_t cap : {1u << 20, 4u << 20}) {
          std::shared_ptr<Job> job;
          {
            std::lock_guard lock(mu_);
            job = NewJob(Kind::kFlood);
          }
          job->max_output_bytes = cap;
          job->request["limits"]["max_output_bytes"] = cap;
          Track(job);
          Submit(*job, 0, hard_stop, &stop);
          if (cap == (1u << 20)) std::this_thread::sleep_until(fault_at - 700ms);
        }
      });
    }
    // Probes: after the fault, bursts of short jobs so that every worker gets some.
    threads.emplace_back([&] {
      std::this_thread::sleep_until(fault_until);
      const auto until = Clock::now() + tail;
      for (int n = 0; Clock::now() < until && !stop; ++n) {
        for (int b = 0; b < 2; ++b) {
          std::shared_ptr<Job> job;
          {
            std::lock_guard lock(mu_);
            job = NewJob(Kind::kProbe);
          }
          Track(job);
          Submit(*job, n + b, hard_stop, &stop);
        }
        std::this_thread::sleep_for(300ms);
      }
    });
    struct Joiner {
      std::atomic<bool>& stop;
      std::vector<std::thread>& threads;
      ~Joiner() {
        stop = true;
        for (auto& th : threads) {
          if (th.joinable()) th.join();
        }
      }
    } joiner{stop, threads};

    // The fault.
    std::this_thread::sleep_until(fault_at);
    ChildProcess& victim = s.target == Target::kRedis    ? cluster_->redis()
                           : s.target == Target::kBroker ? cluster_->broker(index)
                                                         : cluster_->worker(index);
    struct Thaw {  // never leave a process frozen, whatever fails
      ChildProcess& p;
      bool armed;
      ~Thaw() {
        if (armed) p.Resume();
      }
    } thaw{victim, s.action == Action::kPause};
    fault.start_ms = WallMs();
    if (s.action == Action::kPause) {
      victim.Pause();
      std::this_thread::sleep_until(fault_until);
      victim.Resume();
      thaw.armed = false;
    } else {
      victim.Kill();
      std::this_thread::sleep_until(fault_until);
      if (s.target == Target::kRedis) {
        ASSERT_TRUE(cluster_->RestartRedis(10s)) << "redis did not come back with its data";
      } else if (s.target == Target::kBroker) {
        cluster_->RestartBroker(index);
      } else {
        cluster_->StartWorker(index);
      }
    }
    fault.end_ms = WallMs();
    fault.back_ms = fault.end_ms;
    if (fault.loses_work) {
      const bool back =
          WaitFor([&] { return RegisteredSince(fault.worker_id, fault.start_ms); }, 10s);
      fault.back_ms = WallMs();
      EXPECT_TRUE(back) << "worker " << index << " did not register again within 10 s";
    }
    faults_.push_back(fault);
    std::cerr << "[fault] fault from " << fault.start_ms << " to " << fault.end_ms << " ms ("
              << Seconds(fault.end_ms - fault.start_ms) << " s)";
    if (fault.loses_work) {
      std::cerr << "; the worker registered again " << fault.back_ms - fault.end_ms
                << " ms after its end";
    }
    std::cerr << "\n";

    std::this_thread::sleep_until(fault_until + tail);
    stop = true;
    for (auto& th : threads) th.join();
    std::cerr << "[fault] load stopped "
              << std::chrono::duration<double>(Clock::now() - load_start).count()
              << " s after it started\n";

    CheckEverything(fault);
  }

  // ---------------------------------------------------------------- checks

  // Whether the rule lets this job end WORKER_LOST (or, for a session
  // execution, SESSION_LOST): its worker was killed, or paused past the
  // window, between the job's start and its end.
  bool LossExcused(const Job& job, const json& rec) const {
    const std::string code = ErrorCode(rec);
    const int64_t started = Ms(rec, "started_at_ms") > 0   ? Ms(rec, "started_at_ms")
                            : Ms(rec, "created_at_ms") > 0 ? Ms(rec, "created_at_ms")
                                                           : job.submit_ms;
    const int64_t ended = Ms(rec, "finished_at_ms") > 0 ? Ms(rec, "finished_at_ms") : WallMs();
    for (const Fault& f : faults_) {
      if (!f.loses_work) continue;
      if (code == "WORKER_LOST") {
        if (f.worker_id == Str(rec, "worker") && started <= f.back_ms + 50 && ended >= f.start_ms) {
          return true;
        }
      } else if (code == "SESSION_LOST") {
        const std::string w = !Str(rec, "worker").empty() ? Str(rec, "worker") : job.session_worker;
        if ((w.empty() || w == f.worker_id) && ended >= f.start_ms) return true;
      }
    }
    return false;
  }

  bool SessionRefusalExcused(const Job& job) const {
    for (const Fault& f : faults_) {
      if (f.loses_work && (job.session_worker.empty() || job.session_worker == f.worker_id) &&
          job.submit_ms + 15000 >= f.start_ms) {
        return true;
      }
    }
    return false;
  }

  // Failures of one kind, counted, the first few with details.
  struct Failures {
    std::map<std::string, std::vector<std::string>> by_kind;
    void Add(const std::string& kind, const std::string& detail) {
      by_kind[kind].push_back(detail);
    }
    void Report() const {
      for (const auto& [kind, details] : by_kind) {
        std::ostringstream msg;
        msg << details.size() << " job(s): " << kind;
        for (size_t i = 0; i < details.size() && i < 5; ++i) msg << "\n    " << details[i];
        if (details.size() > 5) msg << "\n    ...";
        ADD_FAILURE() << msg.str();
      }
    }
  };

  void CheckChunks(const Job& job, const json& rec, Failures* fails, size_t* entries) {
    const std::vector<StoredChunk> chunks = cluster_->OutputChunks(job.id);
    *entries += chunks.size();
    const std::string tag =
        std::string(KindName(job.kind)) + " " + job.id + " (" + Outcome(rec) + ")";
    std::map<std::string, std::string> text;
    long long last_seq = -1;
    bool in_order = true, offsets_ok = true, data_matches = true, late = false;
    std::string order_detail, late_detail, offset_detail;
    const bool truncated = Bool(rec, "truncated", false);
    for (const StoredChunk& c : chunks) {
      if (c.seq <= last_seq && in_order) {
        in_order = false;
        order_detail = "seq " + std::to_string(c.seq) + " after " + std::to_string(last_seq);
      }
      last_seq = std::max(last_seq, c.seq);
      std::string& so_far = text[c.stream];
      if (c.offset >= 0) {
        // Without truncation, nothing may be missing before a chunk; with it,
        // chunks may be dropped, but each sits where the record says.
        const bool ok = truncated ? c.offset >= static_cast<long long>(so_far.size())
                                  : c.offset == static_cast<long long>(so_far.size());
        if (!ok && offsets_ok) {
          offsets_ok = false;
          offset_detail = c.stream + " offset " + std::to_string(c.offset) + " after " +
                          std::to_string(so_far.size()) + " bytes";
        }
        const std::string whole = Str(rec, c.stream.c_str());
        const size_t at = static_cast<size_t>(c.offset);
        if (truncated && at + c.data.size() <= whole.size() &&
            whole.compare(at, c.data.size(), c.data) != 0) {
          data_matches = false;
        }
      }
      so_far += c.data;
      if (job.end_seen && !late &&
          (job.last_chunk_at_end.empty() || EntryId(c.entry_id) > EntryId(job.last_chunk_at_end))) {
        late = true;
        late_detail = "chunk seq " + std::to_string(c.seq) + " (entry " + c.entry_id +
                      ") stored after the terminal record was read (last entry then: " +
                      (job.last_chunk_at_end.empty() ? "none" : job.last_chunk_at_end) + ")";
      }
    }
    if (!in_order) fails->Add("stored chunks out of order", tag + ": " + order_detail);
    if (!offsets_ok) fails->Add("stored chunk offsets leave gaps", tag + ": " + offset_detail);
    if (!data_matches) fails->Add("a stored chunk differs from the record", tag);
    if (late) fails->Add("chunks stored after the job ended", tag + ": " + late_detail);
    const std::string code = ErrorCode(rec);
    if (!truncated && code != "WORKER_LOST" && code != "SESSION_LOST" && code != "INTERNAL") {
      // The stream keeps about kMaxChunksKept (10,000) entries: past that its
      // head is trimmed, which only uncoalesced output reaches.
      const bool trimmed = chunks.size() >= 9000 && !chunks.empty() && chunks.front().seq > 0;
      for (const char* stream : {"stdout", "stderr"}) {
        if (text[stream] != Str(rec, stream)) {
          fails->Add(trimmed ? "stored chunks trimmed (the stream hit its 10,000-entry cap)"
                             : "stored chunks do not add up to the record's output",
                     tag + ": " + stream + " chunks " + std::to_string(text[stream].size()) +
                         " bytes in " + std::to_string(chunks.size()) + " entries, record " +
                         std::to_string(Str(rec, stream).size()) + " bytes");
        }
      }
    }
  }

  // The audit trail: job id -> statuses of its entries.
  std::map<std::string, std::vector<std::string>> AuditEntries() {
    std::map<std::string, std::vector<std::string>> out;
    std::string after;
    for (int page = 0; page < 100; ++page) {
      std::string path = "/v1/audit?count=10000" + (after.empty() ? "" : "&after=" + after);
      HttpReply r = Call(port(0), "GET", path, "", TestCluster::kAdminToken, {}, 10);
      if (r.status != 200 || !r.body.is_object()) break;
      const json& entries = r.body["entries"];
      for (const auto& e : entries) {
        const json& entry = e.is_object() && e.contains("entry") ? e["entry"] : json();
        out[Str(entry, "job_id")].push_back(Str(entry, "status"));
      }
      if (entries.empty() || !r.body.contains("next") || !r.body["next"].is_string()) break;
      std::string next = r.body["next"].get<std::string>();
      if (next.empty() || next == after) break;
      after = next;
    }
    return out;
  }

  void CheckEverything(const Fault& fault) {
    std::vector<std::shared_ptr<Job>> jobs;
    std::vector<std::shared_ptr<Job>> session_refusals;
    {
      std::lock_guard lock(mu_);
      jobs = jobs_;
      session_refusals = session_lost_refusals_;
    }
    Failures fails;

    // 1. Submits left without an answer are asked once more, now that every
    //    process is back: a replay names the job the first attempt created.
    int unresolved = 0, resolved_later = 0;
    const auto resolve_deadline = Clock::now() + 15s;
    for (auto& job : jobs) {
      if (!job->id.empty() || job->refused_status != 0 || job->submit_ms == 0) continue;
      if (Submit(*job, 0, resolve_deadline) == SubmitResult::kAccepted) {
        ++resolved_later;
      } else if (job->refused_status == 0) {
        ++unresolved;
        fails.Add("a submit never got an answer", job->key);
      }
    }

    //    A refusal means nothing was stored (docs/api.md): the submit
    //    script keeps each Idempotency-Key ({kiln}:idem:<tenant>:<key>) with
    //    the job it created, so a refused submit must have none.
    int stored_refusals = 0;
    for (auto& job : jobs) {
      if (!job->id.empty() || job->refused_status == 0) continue;
      RedisValue v = cluster_->RedisCommand({"GET", "{kiln}:idem:tenant-a:" + job->key});
      if (v.type != RedisValue::Type::kString) continue;
      ++stored_refusals;
      fails.Add("a submit answered as refused was stored (and runs) anyway",
                std::string(KindName(job->kind)) + " key " + job->key + ": answered " +
                    std::to_string(job->refused_status) + ", job " + v.str + " is " +
                    Outcome(Read(v.str, 0)));
    }

    // 2. Every accepted job reaches a terminal state.
    std::vector<std::shared_ptr<Job>> accepted;
    for (auto& job : jobs) {
      if (!job->id.empty()) accepted.push_back(job);
    }
    const auto settle_deadline = Clock::now() + 20s;
    const auto settle_start = Clock::now();
    std::vector<std::shared_ptr<Job>> pending = accepted;
    while (!pending.empty()) {
      std::vector<std::shared_ptr<Job>> still;
      for (auto& job : pending) {
        json rec = Read(job->id, 0);
        if (IsTerminal(rec)) {
          NoteEnd(*job, rec);
        } else {
          if (!rec.is_null()) job->record = rec;
          still.push_back(job);
        }
      }
      pending.swap(still);
      if (pending.empty() || Clock::now() >= settle_deadline) break;
      std::this_thread::sleep_for(250ms);
    }
    std::cerr << "[fault] settled in "
              << std::chrono::duration<double>(Clock::now() - settle_start).count() << " s; "
              << pending.size() << " job(s) not terminal\n";
    for (auto& job : pending) {
      HttpReply now = Call(port(0), "GET", "/v1/executions/" + job->id);
      fails.Add("no terminal state 20 s after the load stopped",
                std::string(KindName(job->kind)) + " " + job->id + ": GET answers " +
                    std::to_string(now.status) + " " + now.raw.substr(0, 600));
    }

    // 3. Exactly one terminal state: the record no longer changes (a late
    //    result must not overwrite it) ...
    std::this_thread::sleep_for(1500ms);
    for (auto& job : accepted) {
      if (!IsTerminal(job->record)) continue;
      json again = Read(job->id, 1);
      for (const char* field :
           {"status", "error", "worker", "stdout", "result", "finished_at_ms"}) {
        if (Field(again, field) != Field(job->first_record, field)) {
          fails.Add(
              "the terminal record changed",
              job->id + " (" + field + "): " + Brief(job->first_record) + " then " + Brief(again));
          break;
        }
      }
    }
    // ... and the audit trail holds one entry for it, with the record's
    // status, or it is still pending there (docs/audit.md: the entry a broker
    // did not write is written by a sweep 30-35 s after the job ended).
    std::map<std::string, std::vector<std::string>> audit;
    auto audit_pending = [&](const std::string& id) {
      return cluster_->RedisCommand({"ZSCORE", "{kiln}:audit:pending", id}).type ==
             RedisValue::Type::kString;
    };
    WaitFor(
        [&] {
          audit = AuditEntries();
          for (auto& job : accepted) {
            if (IsTerminal(job->record) && audit[job->id].empty() && !audit_pending(job->id)) {
              return false;
            }
          }
          return true;
        },
        8s);
    int pending_audit = 0;
    for (auto& job : accepted) {
      if (!IsTerminal(job->record)) continue;
      const auto& entries = audit[job->id];
      if (entries.empty() && audit_pending(job->id)) {
        ++pending_audit;
      } else if (entries.size() != 1) {
        fails.Add(
            entries.empty() ? "no audit entry, and none pending" : "more than one audit entry",
            job->id + ": " + std::to_string(entries.size()) + " entries for " +
                Outcome(job->record));
      } else if (entries[0] != Str(job->record, "status")) {
        fails.Add("the audit entry disagrees with the record",
                  job->id + ": audit " + entries[0] + ", record " + Outcome(job->record));
      }
    }

    // 4. Each job's outcome is the truth.
    std::map<std::string, int> outcomes;
    int excused_losses = 0;
    size_t chunk_entries = 0;
    for (auto& job : accepted) {
      const json& rec = job->record;
      if (!IsTerminal(rec)) continue;
      ++outcomes[std::string(KindName(job->kind)) + " " + Outcome(rec)];
      const std::string code = ErrorCode(rec);
      const std::string tag = std::string(KindName(job->kind)) + " " + job->id;
      if (code == "WORKER_LOST" || code == "SESSION_LOST") {
        if (LossExcused(*job, rec)) {
          ++excused_losses;
        } else {
          fails.Add(code + " without its worker dying or staying away past the window",
                    tag + ": " + Brief(rec));
        }
      } else if (job->kind == Kind::kFlood) {
        const std::string status = Str(rec, "status");
        const bool truthful = (status == "failed" && code == "OUTPUT_LIMIT") ||
                              (status == "timed_out" && code == "TIMEOUT");
        if (!truthful) fails.Add("a flood job ended with a wrong state", tag + ": " + Brief(rec));
        // Capped at max_output_bytes, `truncated` once the cap is reached (an
        // OUTPUT_LIMIT kill comes far past it; a timeout may come before it).
        const std::string out = Str(rec, "stdout");
        const uint64_t size = out.size() + Str(rec, "stderr").size();
        const bool truncated = Bool(rec, "truncated", false);
        if (size > job->max_output_bytes || !IsFloodPrefix(out) ||
            (code == "OUTPUT_LIMIT" && !truncated) ||
            (!truncated && size >= job->max_output_bytes)) {
          fails.Add("a flood job's output is not its capped output",
                    tag + ": truncated " + std::to_string(Bool(rec, "truncated", false)) +
                        ", stdout " + std::to_string(out.size()) + " bytes, cap " +
                        std::to_string(job->max_output_bytes) + ": " + Brief(rec));
        }
      } else if (Str(rec, "status") != "succeeded") {
        fails.Add("a job whose code runs to its end did not succeed", tag + ": " + Brief(rec));
      } else {
        const bool output_ok = Str(rec, "stdout") == job->expected_stdout &&
                               Str(rec, "stderr").empty() && !Bool(rec, "truncated", true);
        if (!output_ok) fails.Add("a succeeded job lacks its real output", tag + ": " + Brief(rec));
        if (Field(rec, "result") != job->expected_result) {
          fails.Add(job->kind == Kind::kSession
                        ? "a session execution saw other session state than its client knows"
                        : "a succeeded job lacks its real result",
                    tag + ": expected " + job->expected_result.dump() + ": " + Brief(rec));
        }
      }
      CheckChunks(*job, rec, &fails, &chunk_entries);
    }
    for (const auto& job : session_refusals) {
      if (!SessionRefusalExcused(*job)) {
        fails.Add("a session was refused as lost though its worker never died", job->session);
      }
    }

    // 5. Every worker runs fresh jobs within seconds of the fault's end.
    std::map<std::string, int64_t> recovered;  // worker -> ms after the fault's end
    for (auto& job : accepted) {
      const json& rec = job->record;
      if (Str(rec, "status") != "succeeded" || Ms(rec, "created_at_ms") < fault.end_ms) continue;
      const int64_t after = Ms(rec, "finished_at_ms") - fault.end_ms;
      auto [it, inserted] = recovered.emplace(Str(rec, "worker"), after);
      if (!inserted) it->second = std::min(it->second, after);
    }
    std::ostringstream recovery;
    for (const auto& w : worker_ids_) {
      auto it = recovered.find(w);
      if (it == recovered.end()) {
        recovery << " " << w << " never";
        fails.Add("a worker ran no job successfully after the fault", w);
        continue;
      }
      recovery << " " << w << " " << Seconds(it->second) << " s";
      if (it->second > kRecoveryMs) {
        fails.Add("a worker took too long to run a fresh job after the fault",
                  w + ": " + std::to_string(it->second) + " ms");
      }
    }

    // Takeovers: a figure, not a check (with a 1 s window a broker starved
    // of CPU is taken for dead; the outcomes above must hold either way).
    int brokers_taking_over = 0;
    for (int b = 0; b < cluster_->brokers(); ++b) {
      HttpReply m = Call(port(b), "GET", "/metrics", "", "");
      if (m.status == 200 &&
          m.raw.find("kiln_executions_taken_over_total 0") == std::string::npos) {
        ++brokers_taking_over;
      }
    }

    // How hard the fault hit: jobs running when it began (on its worker, for
    // a worker), results that came in while it lasted.
    int hit = 0, ended_during = 0;
    for (auto& job : accepted) {
      const int64_t started = Ms(job->record, "started_at_ms");
      const int64_t finished = Ms(job->record, "finished_at_ms");
      if (started > 0 && started <= fault.start_ms &&
          (finished == 0 || finished >= fault.start_ms) &&
          (fault.target != Target::kWorker || Str(job->record, "worker") == fault.worker_id)) {
        ++hit;
      }
      if (finished >= fault.start_ms && finished <= fault.end_ms) ++ended_during;
    }
    EXPECT_GT(hit, 0) << "no job was running when the fault hit: the scenario tested nothing";

    // Figures for the lead.
    int refused503 = 0, refused429 = 0, refused410 = 0, refused_other = 0, replays = 0;
    int ambiguous = 0, unknown = 0;
    for (auto& job : jobs) {
      if (job->replayed) ++replays;
      if (job->ambiguous) ++ambiguous;
      unknown += job->unknown_answers;
      if (!job->id.empty()) continue;
      (job->refused_status == 503   ? refused503
       : job->refused_status == 429 ? refused429
       : job->refused_status == 410 ? refused410
                                    : refused_other) += job->refused_status != 0 ? 1 : 0;
    }
    std::cerr << "[fault] submits " << jobs.size() << ": accepted " << accepted.size()
              << " (submits without an answer or answered 503 'outcome unknown' (" << unknown
              << "), retried with their key: " << ambiguous << ", answered as replays: " << replays
              << ", resolved after the load: " << resolved_later << "), refused 503 " << refused503
              << ", 429 " << refused429 << ", 410 " << refused410 << ", other " << refused_other
              << ", unresolved " << unresolved << "; refused but stored " << stored_refusals
              << "\n[fault] outcomes:";
    for (const auto& [o, n] : outcomes) std::cerr << " [" << o << "] " << n << ";";
    std::cerr << "\n[fault] brokers that took over jobs: " << brokers_taking_over
              << "\n[fault] jobs running when the fault hit: " << hit
              << "; jobs that ended while it lasted: " << ended_during
              << "\n[fault] WORKER_LOST/SESSION_LOST excused by the fault: " << excused_losses
              << "; stored chunk entries read: " << chunk_entries
              << "; audit entries still pending (written by the 30 s sweep): " << pending_audit
              << "\n[fault] first success after the fault's end:" << recovery.str() << "\n";
    size_t failed_checks = 0;
    for (const auto& [kind, details] : fails.by_kind) failed_checks += details.size();
    std::cerr << "[fault] failed checks: " << failed_checks << "\n";
    fails.Report();
    EXPECT_GT(accepted.size(), 10u) << "too little load to tell anything";
  }

  static constexpr int64_t kRecoveryMs = 5000;

  ClusterOptions options_;
  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::string> worker_ids_;
  uint64_t seed_ = 0;
  std::mutex mu_;  // guards jobs_, next_index_, session_lost_refusals_
  std::vector<std::shared_ptr<Job>> jobs_;
  std::vector<std::shared_ptr<Job>> session_lost_refusals_;
  int next_index_ = 1;
  std::vector<Fault> faults_;  // written by the test thread only while the load runs
};

// ------------------------------------------------------------- scenarios

TEST_F(FaultTest, RedisPausedBelowTheWindowLosesNothing) {
  RunScenario({"redis-pause-1.5s", Target::kRedis, Action::kPause, 1500});
}

TEST_F(FaultTest, RedisPausedFiveSecondsLosesNothing) {
  RunScenario({"redis-pause-5s", Target::kRedis, Action::kPause, 5000});
}

TEST_F(FaultTest, RedisKilledAndRestartedLosesNothing) {
  RunScenario({"redis-kill-restart", Target::kRedis, Action::kKill, 1000});
}

TEST_F(FaultTest, BrokerPausedBelowTheWindowLosesNothing) {
  RunScenario({"broker-pause-0.5s", Target::kBroker, Action::kPause, 500});
}

TEST_F(FaultTest, BrokerPausedFiveSecondsLosesNoResult) {
  RunScenario({"broker-pause-5s", Target::kBroker, Action::kPause, 5000});
}

TEST_F(FaultTest, BrokerKilledAndRestartedLosesNoResult) {
  RunScenario({"broker-kill-restart", Target::kBroker, Action::kKill, 1000});
}

TEST_F(FaultTest, WorkerPausedBelowTheWindowLosesNothing) {
  RunScenario({"worker-pause-0.5s", Target::kWorker, Action::kPause, 500});
}

TEST_F(FaultTest, WorkerPausedFiveSecondsEndsItsJobsTruthfully) {
  RunScenario({"worker-pause-5s", Target::kWorker, Action::kPause, 5000});
}

TEST_F(FaultTest, WorkerKilledAndRestartedEndsItsJobsTruthfully) {
  RunScenario({"worker-kill-restart", Target::kWorker, Action::kKill, 1000});
}

// ------------------------------------------------------- targeted tests

// The python code that lists the write-only pipes above fd 2 (a session
// driver's control pipe is one of them), as a JSON list.
const char* kFindControlPipes =
    "import fcntl, json, os, stat\n"
    "fds = []\n"
    "for fd in range(3, 256):\n"
    "    try:\n"
    "        st = os.fstat(fd)\n"
    "    except OSError:\n"
    "        continue\n"
    "    if stat.S_ISFIFO(st.st_mode) and (fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE) == "
    "os.O_WRONLY:\n"
    "        fds.append(fd)\n"
    "print(json.dumps(fds))\n";

// Item 1: a deep JSON document written as the control frame (fd 3 of a
// one-shot job; a session driver's control pipe) fails that job only.
class DeepFrameTest : public FaultTest {
 protected:
  // Starts a one-worker cluster with session A holding x = 41 and a
  // bystander job running; `hostile` is then run, and everything around it
  // is checked.
  void Run(const std::function<json()>& hostile) {
    StartCluster({.brokers = 1, .workers = 1, .slots = 4});
    const pid_t worker_pid = cluster_->worker(0).pid();
    Timed a1 = RunTimed({{"language", "python"},
                         {"session_id", "deep-bystander"},
                         {"code", "x = 41\nresult = x\n"}});
    ASSERT_EQ(Str(a1.record, "status"), "succeeded") << Brief(a1.record);
    const std::string bystander =
        SubmitOne({{"language", "python"},
                   {"code", "import time\ntime.sleep(2.5)\nprint('bystander')\nresult = 7\n"},
                   {"limits", {{"timeout_ms", 10000}}}});
    ASSERT_FALSE(bystander.empty());
    ASSERT_EQ(Str(WaitRunning(bystander), "status"), "running");
    std::this_thread::sleep_for(300ms);  // its code runs

    const auto t0 = Clock::now();
    json bad = hostile();
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    std::cerr << "[fault] the hostile job ended " << Outcome(bad) << " after " << took
              << " s: " << Brief(bad) << "\n";
    EXPECT_TRUE(IsTerminal(bad)) << "no terminal state within 10 s: " << Brief(bad);
    EXPECT_NE(Str(bad, "status"), "succeeded") << Brief(bad);
    EXPECT_TRUE(Field(bad, "error").is_object()) << "no error says why: " << Brief(bad);
    EXPECT_NE(ErrorCode(bad), "WORKER_LOST") << "the whole worker went down: " << Brief(bad);

    EXPECT_TRUE(cluster_->worker(0).running() && cluster_->worker(0).pid() == worker_pid)
        << "the worker process died";
    json by = AwaitTerminal(bystander, 0, Clock::now() + 10s);
    EXPECT_EQ(Outcome(by), "succeeded") << "the bystander paid for it: " << Brief(by);
    EXPECT_EQ(Str(by, "stdout"), "bystander\n") << Brief(by);
    EXPECT_EQ(Field(by, "result"), json(7)) << Brief(by);
    Timed a2 = RunTimed({{"language", "python"},
                         {"session_id", "deep-bystander"},
                         {"code", "x += 1\nresult = x\n"}});
    EXPECT_EQ(Outcome(a2.record), "succeeded") << "session A: " << Brief(a2.record);
    EXPECT_EQ(Field(a2.record, "result"), json(42))
        << "session A lost its state: " << Brief(a2.record);
    Timed fresh = RunTimed({{"language", "python"}, {"code", "print(6 * 7)\n"}});
    EXPECT_EQ(Outcome(fresh.record), "succeeded") << Brief(fresh.record);
    EXPECT_EQ(Str(fresh.record, "stdout"), "42\n") << Brief(fresh.record);
    std::cerr << "[fault] after it: session A " << Outcome(a2.record) << " in " << a2.ms
              << " ms, a fresh job " << Outcome(fresh.record) << " in " << fresh.ms << " ms\n";
  }
};

TEST_F(DeepFrameTest, DeepControlFrameFailsOnlyItsOneShotJob) {
  Run([&] {
    return RunTimed({{"language", "python"},
                     {"code", "import os\nos.write(3, b'[' * 200000)\nprint('wrote')\n"},
                     {"limits", {{"timeout_ms", 5000}}}},
                    10s)
        .record;
  });
}

TEST_F(DeepFrameTest, DeepControlFrameFailsOnlyItsSessionExecution) {
  Run([&] {
    Timed probe = RunTimed(
        {{"language", "python"}, {"session_id", "deep-hostile"}, {"code", kFindControlPipes}});
    json fds = json::parse(Str(probe.record, "stdout"), nullptr, false);
    if (Outcome(probe.record) != "succeeded" || !fds.is_array() || fds.size() != 1) {
      ADD_FAILURE() << "cannot find the session driver's control pipe: " << Brief(probe.record);
      return json();
    }
    const std::string fd = std::to_string(fds[0].get<int>());
    json bad = RunTimed({{"language", "python"},
                         {"session_id", "deep-hostile"},
                         {"code",
                          "import os\nbody = b'[' * 200000\nframe = b'%d\\n' % len(body) "
                          "+ body\nwhile frame:\n    frame = frame[os.write(" +
                              fd + ", frame):]\nprint('wrote')\n"},
                         {"limits", {{"timeout_ms", 5000}}}},
                        10s)
                   .record;
    Timed next = RunTimed(
        {{"language", "python"}, {"session_id", "deep-hostile"}, {"code", "print('again')\n"}});
    std::cerr << "[fault] the hostile session's next execution: " << Brief(next.record) << "\n";
    return bad;
  });
}

// Items 2 and 3: a job flooding its output on a one-worker cluster costs the
// worker's other jobs nothing, and ends with the truth within its timeout.
TEST_F(FaultTest, FloodingJobsDoNotStallTheWorkersOtherJobs) {
  ClusterOptions options{.brokers = 1, .workers = 1, .slots = 5};
  options.max_output_bytes = 10u << 20;
  StartCluster(options);
  constexpr int kFloods = 3;
  constexpr int kFloodTimeoutMs = 10000;
  constexpr uint64_t kCap = 10u << 20;
  const auto flood_at = Clock::now();
  std::vector<std::string> floods;
  for (int i = 0; i < kFloods; ++i) {
    floods.push_back(
        SubmitOne({{"language", "python"},
                   {"code", FloodCode()},
                   {"limits", {{"timeout_ms", kFloodTimeoutMs}, {"max_output_bytes", kCap}}}}));
    ASSERT_FALSE(floods.back().empty());
  }
  for (const auto& id : floods) ASSERT_EQ(Str(WaitRunning(id), "status"), "running");
  std::this_thread::sleep_for(700ms);  // flooding

  // Short jobs one after another while the floods run.
  std::vector<int64_t> during;
  for (int i = 0; i < 6 && Clock::now() < flood_at + std::chrono::milliseconds(kFloodTimeoutMs);
       ++i) {
    Timed t = RunTimed({{"language", i % 2 ? "shell" : "python"},
                        {"code", i % 2 ? "echo $((" + std::to_string(i) + " * 3))"
                                       : "print(" + std::to_string(i) + " * 3)"}},
                       10s);
    during.push_back(t.ms);
    EXPECT_EQ(Outcome(t.record), "succeeded") << "a job during the floods: " << Brief(t.record);
    EXPECT_EQ(Str(t.record, "stdout"), std::to_string(i * 3) + "\n") << Brief(t.record);
    EXPECT_LT(t.ms, 2000) << "a short job took " << t.ms << " ms during the floods";
  }
  std::cerr << "[fault] short jobs during " << kFloods << " floods took (ms):";
  for (int64_t ms : during) std::cerr << " " << ms;
  std::cerr << "\n";

  // Each flood ends with the truth, within its timeout.
  std::vector<Job> ended;
  for (const auto& id : floods) {
    json rec = AwaitTerminal(id, 0, flood_at + std::chrono::milliseconds(kFloodTimeoutMs) + 8s);
    ended.push_back(Ended(id, Kind::kFlood, rec));
    const std::string out = Str(rec, "stdout");
    const int64_t ran = Ms(rec, "finished_at_ms") - Ms(rec, "started_at_ms");
    if (IsTerminal(rec)) {
      std::cerr << "[fault] flood " << id << " ended " << Outcome(rec) << " (end_reason "
                << Str(rec, "end_reason") << ") " << ran << " ms after it started; stdout "
                << out.size() << " bytes, truncated " << Bool(rec, "truncated", false) << "\n";
    } else {
      std::cerr << "[fault] flood " << id << " had not ended "
                << std::chrono::duration<double>(Clock::now() - flood_at).count()
                << " s after it was submitted: " << Brief(rec) << "\n";
    }
    EXPECT_TRUE(IsTerminal(rec)) << "a flood did not end within its timeout + 8 s: " << Brief(rec);
    const std::string status = Str(rec, "status"), code = ErrorCode(rec);
    EXPECT_TRUE((status == "failed" && code == "OUTPUT_LIMIT") ||
                (status == "timed_out" && code == "TIMEOUT"))
        << Brief(rec);
    // Seconds, not the minutes a backlog of its own chunks once cost (the
    // slack covers a sandbox's start and end on a loaded 2-core host).
    EXPECT_LE(ran, kFloodTimeoutMs + 4000)
        << "the flood's end was recorded " << ran << " ms after it started: " << Brief(rec);
    const uint64_t size = out.size() + Str(rec, "stderr").size();
    const bool truncated = Bool(rec, "truncated", false);
    EXPECT_LE(size, kCap) << Brief(rec);
    EXPECT_TRUE(truncated || size < kCap) << "the cap was reached but not reported: " << Brief(rec);
    EXPECT_TRUE(!(code == "OUTPUT_LIMIT") || truncated) << Brief(rec);
    EXPECT_TRUE(IsFloodPrefix(out)) << "the flood's stored stdout is not what it printed";
  }

  // Afterwards the worker runs jobs as before.
  std::vector<int64_t> after;
  for (int i = 0; i < 3; ++i) {
    Timed t =
        RunTimed({{"language", "python"}, {"code", "print(" + std::to_string(i) + " + 100)"}}, 10s);
    after.push_back(t.ms);
    EXPECT_EQ(Outcome(t.record), "succeeded") << "a job after the floods: " << Brief(t.record);
    EXPECT_EQ(Str(t.record, "stdout"), std::to_string(i + 100) + "\n") << Brief(t.record);
    EXPECT_LT(t.ms, 2000) << "a job after the floods took " << t.ms << " ms";
  }
  std::cerr << "[fault] jobs after the floods took (ms):";
  for (int64_t ms : after) std::cerr << " " << ms;
  std::cerr << "\n";
  for (const Job& job : ended) ExpectChunksMatch(job);
}

// Item 2: the Redis commands a job's output costs grow with its run time,
// not with its count of write() calls.
TEST_F(FaultTest, OneByteWritesCostBoundedRedisCommands) {
  ClusterOptions options{.brokers = 1, .workers = 1, .slots = 2};
  options.max_output_bytes = 10u << 20;
  StartCluster(options);
  Timed warm = RunTimed({{"language", "python"}, {"code", "print(1)"}});
  ASSERT_EQ(Outcome(warm.record), "succeeded") << Brief(warm.record);
  std::this_thread::sleep_for(1s);

  // Commands Redis processed, in all and per command (scripts' inner calls included).
  struct Counts {
    long long total = -1;
    std::map<std::string, long long> calls;
    Clock::time_point at;
  };
  auto counts = [&] {
    Counts c;
    c.at = Clock::now();
    const std::string stats = cluster_->RedisCommand({"INFO", "stats"}).str;
    const std::string key = "total_commands_processed:";
    if (auto at = stats.find(key); at != std::string::npos) {
      c.total = std::strtoll(stats.c_str() + at + key.size(), nullptr, 10);
    }
    std::istringstream lines(cluster_->RedisCommand({"INFO", "commandstats"}).str);
    for (std::string line; std::getline(lines, line);) {
      // cmdstat_xadd:calls=130,usec=...
      auto colon = line.find(":calls=");
      if (line.rfind("cmdstat_", 0) != 0 || colon == std::string::npos) continue;
      c.calls[line.substr(8, colon - 8)] = std::strtoll(line.c_str() + colon + 7, nullptr, 10);
    }
    return c;
  };
  const Counts idle0 = counts();
  std::this_thread::sleep_for(3s);
  const Counts idle1 = counts();
  ASSERT_GE(idle0.total, 0) << "no total_commands_processed in INFO stats";
  const double idle_s = std::chrono::duration<double>(idle1.at - idle0.at).count();
  const double idle_per_s = static_cast<double>(idle1.total - idle0.total) / idle_s;

  // One wait:true request: no polling of our own adds commands.
  const Counts before = counts();
  HttpReply reply = Call(port(0), "POST", "/v1/executions",
                         json({{"language", "python"},
                               {"code",
                                "import os, time\nend = time.time() + 3\nn = 0\n"
                                "while time.time() < end:\n    os.write(1, b'x')\n    n += 1\n"
                                "result = n\n"},
                               {"limits", {{"timeout_ms", 20000}, {"max_output_bytes", 10u << 20}}},
                               {"wait", true}})
                             .dump(),
                         TestCluster::kToken, {}, 60);
  const Counts after = counts();
  Timed t;
  t.record = reply.body;
  const Job job = Ended(Str(t.record, "id"), Kind::kPython, t.record);
  const double seconds = std::chrono::duration<double>(after.at - before.at).count();
  const double caused = static_cast<double>(after.total - before.total) - idle_per_s * seconds;
  const long long writes =
      Field(t.record, "result").is_number() ? Field(t.record, "result").get<long long>() : -1;
  std::cerr << "[fault] one-byte writes: the submit answered " << reply.status << " "
            << Outcome(t.record) << "; " << writes << " write() calls in 3 s, stdout "
            << Str(t.record, "stdout").size()
            << " bytes; Redis commands caused: " << static_cast<long long>(caused) << " ("
            << (after.total - before.total) << " in " << seconds << " s, less " << idle_per_s
            << "/s idle)\n[fault] by command (job less idle):";
  std::vector<std::pair<double, std::string>> by;
  for (const auto& [name, n] : after.calls) {
    const double idle =
        static_cast<double>(idle1.calls.count(name)
                                ? idle1.calls.at(name) -
                                      (idle0.calls.count(name) ? idle0.calls.at(name) : 0)
                                : 0) /
        idle_s * seconds;
    const double job =
        static_cast<double>(n - (before.calls.count(name) ? before.calls.at(name) : 0)) - idle;
    if (job >= 1) by.emplace_back(job, name);
  }
  std::sort(by.rbegin(), by.rend());
  for (const auto& [n, name] : by) std::cerr << " " << name << " " << static_cast<long long>(n);
  std::cerr << "\n";
  ASSERT_EQ(Outcome(t.record), "succeeded") << Brief(t.record);
  EXPECT_GT(writes, 1000) << "the job did not write much: the test tests nothing";
  EXPECT_EQ(Str(t.record, "stdout"), std::string(writes > 0 ? writes : 0, 'x'))
      << "the job's output is not complete";
  EXPECT_LT(caused, 1000) << "Redis commands grow with the count of writes";
  std::this_thread::sleep_for(500ms);  // nothing may be stored after the end
  ExpectChunksMatch(job);
}

}  // namespace
}  // namespace kiln::testing
