#include "broker/store/redis_connection.hpp"

#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <charconv>

namespace kiln::broker {
namespace {

constexpr timeval kTimeout{kRedisTimeoutMs / 1000, (kRedisTimeoutMs % 1000) * 1000};

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
// for a write), so callers retry and clients get 503; INTERNAL for the rest
// (a refused password or permission, a bad command), which waiting does not fix.
common::Status ReplyError(const std::string& error) {
  const std::string_view word = std::string_view(error).substr(0, error.find(' '));
  const bool transient =
      word == "LOADING" || word == "BUSY" || word == "MASTERDOWN" || word == "NOREPLICAS";
  return transient ? common::Unavailable("redis: " + error) : common::Internal("redis: " + error);
}

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

common::StatusOr<RedisEndpoint> RedisEndpoint::Parse(const std::string& url) {
  RedisEndpoint ep;
  if (url.rfind("unix://", 0) == 0) {
    ep.unix_path = url.substr(7);
    if (ep.unix_path.empty()) return common::InvalidRequest("redis url: empty unix socket path");
    return ep;
  }
  if (url.rfind("redis://", 0) != 0) {
    return common::InvalidRequest("redis url must start with redis:// or unix://: " + url);
  }
  std::string rest = url.substr(8);
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), ep.db);
      if (ec != std::errc() || p != db.data() + db.size()) {
        return common::InvalidRequest("redis url: bad database number: " + url);
      }
    }
  }
  if (auto colon = rest.rfind(':'); colon != std::string::npos) {
    std::string port = rest.substr(colon + 1);
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), ep.port);
    if (ec != std::errc() || p != port.data() + port.size() || ep.port <= 0 || ep.port > 65535) {
      return common::InvalidRequest("redis url: bad port: " + url);
    }
    rest = rest.substr(0, colon);
  }
  ep.host = rest.empty() ? "127.0.0.1" : rest;
  return ep;
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
  redisContext* c = endpoint_.unix_path.empty()
                        ? redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, kTimeout)
                        : redisConnectUnixWithTimeout(endpoint_.unix_path.c_str(), kTimeout);
  if (c == nullptr) return common::Unavailable("redis: cannot allocate a connection");
  if (c->err != 0) {
    std::string err = c->errstr;
    redisFree(c);
    return common::Unavailable("redis unreachable: " + err);
  }
  redisSetTimeout(c, kTimeout);
  ctx_ = c;
  if (endpoint_.db != 0) {
    std::string db = std::to_string(endpoint_.db);
    auto r = Command({"SELECT", db});
    if (!r.ok()) {
      Drop();  // never left connected to database 0
      return r.status().WithContext("selecting database " + db);
    }
  }
  ++connects_;
  return common::Status::Ok();
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

common::StatusOr<RedisReply> RedisConnection::Command(const std::vector<std::string_view>& argv) {
  unanswered_ = false;
  DropIfClosed();
  RETURN_IF_ERROR(EnsureConnected());
  RETURN_IF_ERROR(Append(argv));
  RETURN_IF_ERROR(Flush());
  auto r = ReadReply();
  if (!r.ok()) {
    unanswered_ = true;
    return r.status();
  }
  if (r->type == RedisReply::Type::kError) return ReplyError(r->str);
  return r;
}

common::StatusOr<std::vector<RedisReply>> RedisConnection::Pipeline(
    const std::vector<std::vector<std::string>>& commands) {
  unanswered_ = false;
  DropIfClosed();
  RETURN_IF_ERROR(EnsureConnected());
  for (const auto& cmd : commands) {
    std::vector<std::string_view> argv(cmd.begin(), cmd.end());
    RETURN_IF_ERROR(Append(argv));
  }
  RETURN_IF_ERROR(Flush());
  std::vector<RedisReply> replies;
  replies.reserve(commands.size());
  common::Status first_error;
  for (size_t i = 0; i < commands.size(); ++i) {
    auto r = ReadReply();
    if (!r.ok()) {
      unanswered_ = true;
      return r.status();
    }
    if (r->type == RedisReply::Type::kError && first_error.ok()) first_error = ReplyError(r->str);
    replies.push_back(std::move(*r));
  }
  if (!first_error.ok()) return first_error;
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
  auto r = Command(argv);
  if (r.ok() || r.status().message().find("NOSCRIPT") == std::string::npos) return r;
  argv[0] = "EVAL";
  argv[1] = script.text;
  return Command(argv);
}

common::StatusOr<std::vector<common::StatusOr<RedisReply>>> RedisConnection::EvalMany(
    const RedisScript& script, const std::vector<std::vector<std::string>>& args_list) {
  std::vector<common::StatusOr<RedisReply>> out(args_list.size(),
                                                common::Internal("redis: no reply"));
  // Sends the runs in `todo` (indexes into args_list) as one pipeline.
  auto run = [&](const std::vector<size_t>& todo) -> common::Status {
    unanswered_ = false;
    DropIfClosed();
    RETURN_IF_ERROR(EnsureConnected());
    for (size_t i : todo) {
      std::vector<std::string_view> argv = {"EVALSHA", script.sha1, "0"};
      argv.insert(argv.end(), args_list[i].begin(), args_list[i].end());
      RETURN_IF_ERROR(Append(argv));
    }
    RETURN_IF_ERROR(Flush());
    for (size_t i : todo) {
      auto r = ReadReply();
      if (!r.ok()) {
        unanswered_ = true;
        return r.status();
      }
      out[i] = r->type == RedisReply::Type::kError
                   ? common::StatusOr<RedisReply>(ReplyError(r->str))
                   : std::move(*r);
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
