#include "broker/store/redis_connection.hpp"

#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <thread>

namespace kiln::broker {
namespace {

constexpr timeval kTimeout{kRedisTimeoutMs / 1000, (kRedisTimeoutMs % 1000) * 1000};
// How long one sentinel may take to connect and to answer.
constexpr timeval kSentinelTimeout{0, 500 * 1000};
// Discoveries per connect when a sentinel names a replica (mid-failover).
constexpr int kDiscoveries = 3;
constexpr auto kRediscoverPause = std::chrono::milliseconds(100);

RedisReply Convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Convert(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

// An error reply as a Status: UNAVAILABLE when Redis says it cannot serve
// now but will by itself (LOADING its dataset, BUSY running a script,
// MASTERDOWN: a replica that lost its primary, NOREPLICAS: too few replicas
// for a write, READONLY: a master demoted to a replica, whose connection the
// caller drops), so callers retry and clients get 503; INTERNAL for the rest
// (a refused password or permission, a bad command), which waiting does not fix.
common::Status ReplyError(const std::string& error) {
  const std::string_view word = std::string_view(error).substr(0, error.find(' '));
  const bool transient = word == "LOADING" || word == "BUSY" || word == "MASTERDOWN" ||
                         word == "NOREPLICAS" || word == "READONLY";
  return transient ? common::Unavailable("redis: " + error) : common::Internal("redis: " + error);
}

bool IsReadOnlyError(const RedisReply& r) {
  return r.type == RedisReply::Type::kError && r.str.starts_with("READONLY");
}

// Commands that never write data: Command() sends no WAIT after them.
bool IsRead(std::string_view name) {
  static constexpr std::string_view kReads[] = {
      "GET",    "MGET",      "HGET",   "HMGET",  "HGETALL", "HEXISTS", "EXISTS", "TTL",
      "PTTL",   "TYPE",      "ZRANGE", "ZSCORE", "ZCARD",   "ZCOUNT",  "ZRANK",  "XREAD",
      "XRANGE", "XREVRANGE", "XLEN",   "XINFO",  "LRANGE",  "LLEN",    "LPOS",   "SMEMBERS",
      "SCARD",  "SISMEMBER", "SCAN",   "KEYS",   "DBSIZE",  "PING",    "ECHO",   "INFO",
      "TIME",   "ROLE",      "CLIENT", "SCRIPT", "CONFIG",  "PUBLISH", "WAIT",   "SUBSCRIBE"};
  for (std::string_view r : kReads) {
    if (r.size() == name.size() && std::equal(r.begin(), r.end(), name.begin(), [](char a, char b) {
          return a == std::toupper(static_cast<unsigned char>(b));
        })) {
      return true;
    }
  }
  return false;
}

// A hiredis context freed when it goes out of scope.
struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextFree>;

// One command on a short-lived context; an error reply is INTERNAL.
common::StatusOr<RedisReply> Ask(redisContext* c, const std::vector<std::string_view>& argv) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (auto a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  void* raw = redisCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data());
  if (raw == nullptr) return common::Unavailable(c->errstr);
  RedisReply r = Convert(static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  if (r.type == RedisReply::Type::kError) return common::Internal(r.str);
  return r;
}

std::string Describe(const RedisHostPort& hp) { return hp.host + ":" + std::to_string(hp.port); }

}  // namespace

RedisScript::RedisScript(std::string source) : text(std::move(source)) {
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : digest) {
    sha1.push_back(kHex[b >> 4]);
    sha1.push_back(kHex[b & 15]);
  }
}

common::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Connect(
    const RedisEndpoint& ep) {
  std::unique_ptr<RedisConnection> c(new RedisConnection(ep));
  RETURN_IF_ERROR(c->EnsureConnected());
  return c;
}

std::unique_ptr<RedisConnection> RedisConnection::Lazy(const RedisEndpoint& ep) {
  return std::unique_ptr<RedisConnection>(new RedisConnection(ep));
}

RedisConnection::~RedisConnection() { Drop(); }

void RedisConnection::Drop() {
  if (ctx_ != nullptr) redisFree(ctx_);
  ctx_ = nullptr;
}

common::Status RedisConnection::EnsureConnected() {
  if (ctx_ != nullptr) return common::Status::Ok();
  bool is_master = true;
  if (!endpoint_.uses_sentinel()) {
    RETURN_IF_ERROR(Open(nullptr, &is_master));
    ++connects_;
    return common::Status::Ok();
  }
  common::Status st;
  for (int i = 0; i < kDiscoveries; ++i) {
    if (i > 0) std::this_thread::sleep_for(kRediscoverPause);
    ASSIGN_OR_RETURN(RedisHostPort master, AskSentinels());
    RETURN_IF_ERROR(Open(&master, &is_master));
    if (is_master) {
      ++connects_;
      return common::Status::Ok();
    }
    Drop();  // a demoted master the sentinels have not caught up with: never written to
    st = common::Unavailable("redis: the sentinels name " + Describe(master) + " as master '" +
                             endpoint_.master_name + "', but it is a replica (a failover?)");
  }
  return st;
}

common::Status RedisConnection::Open(const RedisHostPort* at, bool* is_master) {
  const bool tcp = at != nullptr || endpoint_.unix_path.empty();
  const RedisHostPort own{endpoint_.host, endpoint_.port};
  const RedisHostPort& hp = at != nullptr ? *at : own;
  const std::string where = tcp ? Describe(hp) : endpoint_.unix_path;
  redisContext* c = tcp ? redisConnectWithTimeout(hp.host.c_str(), hp.port, kTimeout)
                        : redisConnectUnixWithTimeout(endpoint_.unix_path.c_str(), kTimeout);
  if (c == nullptr) return common::Unavailable("redis: cannot allocate a connection");
  if (c->err != 0) {
    std::string err = c->errstr;
    redisFree(c);
    return common::Unavailable("redis unreachable: " +
                               (at != nullptr ? "master '" + endpoint_.master_name + "' at " +
                                                    where + " (from a sentinel): "
                                              : std::string()) +
                               err);
  }
  redisSetTimeout(c, kTimeout);
  ctx_ = c;
  // Log in, select the database and (with Sentinel) ask the role, in one round trip.
  std::vector<std::vector<std::string_view>> hello;
  std::vector<std::string> what;
  if (!endpoint_.password.empty()) {
    hello.push_back({"AUTH"});
    if (!endpoint_.user.empty()) hello.back().push_back(endpoint_.user);
    hello.back().push_back(endpoint_.password);
    what.push_back(endpoint_.user.empty()
                       ? "logging in to redis at " + where
                       : "logging in to redis at " + where + " as user '" + endpoint_.user + "'");
  }
  const std::string db = std::to_string(endpoint_.db);
  if (endpoint_.db != 0) {
    hello.push_back({"SELECT", db});
    what.push_back("selecting database " + db);
  }
  if (at != nullptr) {
    hello.push_back({"ROLE"});
    what.push_back("asking the role of " + where);
  }
  for (const auto& argv : hello) RETURN_IF_ERROR(Append(argv));
  if (!hello.empty()) RETURN_IF_ERROR(Flush());
  common::Status first;
  for (size_t i = 0; i < hello.size(); ++i) {
    ASSIGN_OR_RETURN(RedisReply r, ReadReply());
    if (r.type == RedisReply::Type::kError) {
      if (first.ok()) first = ReplyError(r.str).WithContext(what[i]);
    } else if (hello[i][0] == "ROLE") {
      *is_master = !r.elements.empty() && r.elements[0].str == "master";
    }
  }
  if (!first.ok()) {
    Drop();  // never left connected without its log-in, or to database 0
    return first;
  }
  return common::Status::Ok();
}

common::StatusOr<RedisHostPort> RedisConnection::AskSentinels() {
  std::vector<RedisHostPort>& sentinels = endpoint_.sentinels;
  std::string errors;
  bool all_refused = true;  // every sentinel answered, none with an address
  for (size_t i = 0; i < sentinels.size(); ++i) {
    const RedisHostPort& s = sentinels[i];
    auto answer = [&]() -> common::StatusOr<RedisHostPort> {
      ContextPtr c(redisConnectWithTimeout(s.host.c_str(), s.port, kSentinelTimeout));
      if (c == nullptr) return common::Unavailable("cannot allocate a connection");
      if (c->err != 0) return common::Unavailable(c->errstr);
      redisSetTimeout(c.get(), kSentinelTimeout);
      if (!endpoint_.sentinel_password.empty()) {
        std::vector<std::string_view> auth = {"AUTH"};
        if (!endpoint_.sentinel_user.empty()) auth.push_back(endpoint_.sentinel_user);
        auth.push_back(endpoint_.sentinel_password);
        RETURN_IF_ERROR(Ask(c.get(), auth).status().WithContext("logging in"));
      }
      ASSIGN_OR_RETURN(RedisReply r, Ask(c.get(), {"SENTINEL", "get-master-addr-by-name",
                                                   endpoint_.master_name}));
      if (r.is_nil()) return common::Internal("does not know a master of that name");
      RedisHostPort hp;
      if (r.elements.size() != 2) return common::Internal("unexpected reply");
      hp.host = r.elements[0].str;
      const std::string& port = r.elements[1].str;
      auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), hp.port);
      if (ec != std::errc() || p != port.data() + port.size()) {
        return common::Internal("unexpected port '" + port + "'");
      }
      return hp;
    }();
    if (answer.ok()) {
      // The sentinel that answered is asked first next time.
      std::rotate(sentinels.begin(), sentinels.begin() + static_cast<std::ptrdiff_t>(i),
                  sentinels.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return answer;
    }
    if (answer.status().code() != common::Code::kInternal) all_refused = false;
    errors += (errors.empty() ? "" : "; ") + Describe(s) + ": " + answer.status().message();
  }
  std::string message = "redis: no sentinel gave the address of master '" + endpoint_.master_name +
                        "' (" + errors + ")";
  // Sentinels that all answer without an address are misconfigured (a
  // wrong name or password): waiting does not fix that.
  return all_refused ? common::Internal(std::move(message))
                     : common::Unavailable(std::move(message));
}

void RedisConnection::DropIfClosed() {
  if (ctx_ == nullptr) return;
  pollfd p{ctx_->fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return;  // nothing to read: open as far as anyone can tell
  bool closed = (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) != 0;
  if (!closed && (p.revents & POLLIN) != 0) {
    char c;
    closed = ::recv(ctx_->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  if (closed) Drop();
}

common::Status RedisConnection::Append(const std::vector<std::string_view>& argv) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ptrs.reserve(argv.size());
  lens.reserve(argv.size());
  for (auto a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), ptrs.data(), lens.data()) !=
      REDIS_OK) {
    std::string err = ctx_->errstr;
    Drop();
    return common::Unavailable("redis: " + err);
  }
  return common::Status::Ok();
}

common::Status RedisConnection::Flush() {
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(ctx_, &done) != REDIS_OK) {
      std::string err = ctx_->errstr;
      Drop();
      return common::Unavailable("redis: " + err);
    }
  }
  return common::Status::Ok();
}

common::StatusOr<RedisReply> RedisConnection::ReadReply() {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || raw == nullptr) {
    std::string err = ctx_->errstr;
    Drop();
    return common::Unavailable("redis: " + err);
  }
  RedisReply r = Convert(static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  return r;
}

common::StatusOr<std::vector<RedisReply>> RedisConnection::RoundTrip(
    const std::vector<std::vector<std::string_view>>& commands, bool acked) {
  unanswered_ = false;
  DropIfClosed();
  RETURN_IF_ERROR(EnsureConnected());
  const bool wait = acked && endpoint_.min_replicas > 0;
  const std::string want = std::to_string(endpoint_.min_replicas);
  const std::string within = std::to_string(endpoint_.replica_timeout_ms);
  for (const auto& argv : commands) RETURN_IF_ERROR(Append(argv));
  if (wait) RETURN_IF_ERROR(Append({"WAIT", want, within}));
  RETURN_IF_ERROR(Flush());
  const size_t expected = commands.size() + (wait ? 1 : 0);
  std::vector<RedisReply> replies;
  replies.reserve(expected);
  bool demoted = false;
  for (size_t i = 0; i < expected; ++i) {
    auto r = ReadReply();
    if (!r.ok()) {
      unanswered_ = true;
      return r.status();
    }
    demoted = demoted || IsReadOnlyError(*r);
    replies.push_back(std::move(*r));
  }
  // A master demoted under this connection: the next use finds the master again.
  if (demoted) Drop();
  if (!wait) return replies;
  const RedisReply acks = std::move(replies.back());
  replies.pop_back();
  if (demoted) return replies;  // READONLY says more than WAIT's refusal on a replica
  // Scripts Redis has not seen ran nothing: the caller loads them and goes again.
  if (std::all_of(replies.begin(), replies.end(), [](const RedisReply& r) {
        return r.type == RedisReply::Type::kError && r.str.starts_with("NOSCRIPT");
      })) {
    return replies;
  }
  if (acks.type == RedisReply::Type::kError) {
    unanswered_ = true;
    return ReplyError(acks.str).WithContext("waiting for replicas");
  }
  if (acks.integer < endpoint_.min_replicas) {
    unanswered_ = true;  // it ran on the master, but may not survive a failover
    return common::Unavailable("redis: only " + std::to_string(acks.integer) + " of " + want +
                               " replicas acknowledged the write within " + within + " ms");
  }
  return replies;
}

common::StatusOr<RedisReply> RedisConnection::Command(const std::vector<std::string_view>& argv) {
  const bool acked = !argv.empty() && !IsRead(argv[0]);
  ASSIGN_OR_RETURN(auto replies, RoundTrip({argv}, acked));
  if (replies[0].type == RedisReply::Type::kError) return ReplyError(replies[0].str);
  return std::move(replies[0]);
}

common::StatusOr<std::vector<RedisReply>> RedisConnection::Pipeline(
    const std::vector<std::vector<std::string>>& commands) {
  std::vector<std::vector<std::string_view>> argvs;
  argvs.reserve(commands.size());
  for (const auto& cmd : commands) argvs.emplace_back(cmd.begin(), cmd.end());
  ASSIGN_OR_RETURN(auto replies, RoundTrip(argvs, true));
  for (const RedisReply& r : replies) {
    if (r.type == RedisReply::Type::kError) return ReplyError(r.str);
  }
  return replies;
}

common::StatusOr<RedisReply> RedisConnection::Eval(const RedisScript& script,
                                                   const std::vector<std::string>& args) {
  std::vector<std::string_view> argv;
  argv.reserve(args.size() + 3);
  argv.push_back("EVALSHA");
  argv.push_back(script.sha1);
  argv.push_back("0");
  for (const auto& a : args) argv.push_back(a);
  const auto run = [&]() -> common::StatusOr<RedisReply> {
    ASSIGN_OR_RETURN(auto replies, RoundTrip({argv}, true));
    if (replies[0].type == RedisReply::Type::kError) return ReplyError(replies[0].str);
    return std::move(replies[0]);
  };
  auto r = run();
  if (r.ok() || r.status().message().find("NOSCRIPT") == std::string::npos) return r;
  argv[0] = "EVAL";
  argv[1] = script.text;
  return run();
}

common::StatusOr<std::vector<common::StatusOr<RedisReply>>> RedisConnection::EvalMany(
    const RedisScript& script, const std::vector<std::vector<std::string>>& args_list) {
  std::vector<common::StatusOr<RedisReply>> out(args_list.size(),
                                                common::Internal("redis: no reply"));
  // Sends the runs in `todo` (indexes into args_list) as one pipeline.
  auto run = [&](const std::vector<size_t>& todo) -> common::Status {
    std::vector<std::vector<std::string_view>> argvs;
    argvs.reserve(todo.size());
    for (size_t i : todo) {
      argvs.push_back({"EVALSHA", script.sha1, "0"});
      argvs.back().insert(argvs.back().end(), args_list[i].begin(), args_list[i].end());
    }
    ASSIGN_OR_RETURN(auto replies, RoundTrip(argvs, true));
    for (size_t k = 0; k < todo.size(); ++k) {
      RedisReply& r = replies[k];
      out[todo[k]] = r.type == RedisReply::Type::kError
                         ? common::StatusOr<RedisReply>(ReplyError(r.str))
                         : std::move(r);
    }
    return common::Status::Ok();
  };
  std::vector<size_t> all(args_list.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (all.empty()) return out;
  RETURN_IF_ERROR(run(all));
  // A Redis that has not seen the script (a restart) ran none of those:
  // it learns the script and they go again.
  std::vector<size_t> again;
  for (size_t i : all) {
    if (!out[i].ok() && out[i].status().message().find("NOSCRIPT") != std::string::npos) {
      again.push_back(i);
    }
  }
  if (again.empty()) return out;
  RETURN_IF_ERROR(Command({"SCRIPT", "LOAD", script.text}).status());
  RETURN_IF_ERROR(run(again));
  return out;
}

common::Status RedisConnection::Subscribe(const std::vector<std::string>& channels) {
  DropIfClosed();
  RETURN_IF_ERROR(EnsureConnected());
  std::vector<std::string_view> argv = {"SUBSCRIBE"};
  for (const auto& c : channels) argv.push_back(c);
  RETURN_IF_ERROR(Append(argv));
  for (size_t i = 0; i < channels.size(); ++i) {
    ASSIGN_OR_RETURN(RedisReply r, ReadReply());
    if (r.type == RedisReply::Type::kError) return ReplyError(r.str);
  }
  return common::Status::Ok();
}

common::StatusOr<std::optional<RedisReply>> RedisConnection::Receive(int timeout_ms) {
  RETURN_IF_ERROR(EnsureConnected());
  void* raw = nullptr;
  // A reply may already sit in hiredis's buffer; only wait on the socket if not.
  if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK) {
    std::string err = ctx_->errstr;
    Drop();
    return common::Unavailable("redis: " + err);
  }
  if (raw == nullptr) {
    pollfd pfd{ctx_->fd, POLLIN, 0};
    int n = ::poll(&pfd, 1, timeout_ms);
    if (n == 0) return std::optional<RedisReply>();
    if (n < 0) return std::optional<RedisReply>();  // EINTR: the caller loops
    ASSIGN_OR_RETURN(RedisReply r, ReadReply());
    return std::optional<RedisReply>(std::move(r));
  }
  RedisReply r = Convert(static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  return std::optional<RedisReply>(std::move(r));
}

common::StatusOr<std::unique_ptr<RedisPool>> RedisPool::Create(const std::string& url,
                                                               size_t size) {
  ASSIGN_OR_RETURN(RedisEndpoint ep, RedisEndpoint::Parse(url));
  auto pool = std::make_unique<RedisPool>();
  for (size_t i = 0; i < size; ++i) {
    pool->idle_.push_back(RedisConnection::Lazy(ep));
  }
  return pool;
}

RedisPool::Lease RedisPool::Acquire() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !idle_.empty(); });
  auto c = std::move(idle_.back());
  idle_.pop_back();
  return Lease(this, std::move(c));
}

void RedisPool::Release(std::unique_ptr<RedisConnection> c) {
  {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(c));
  }
  cv_.notify_one();
}

}  // namespace kiln::broker
