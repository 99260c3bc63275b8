// RedisConnection: one blocking hiredis connection with Status errors, and
// RedisPool: a fixed set of them shared by the broker's threads.
//
//   ASSIGN_OR_RETURN(auto pool, RedisPool::Create("redis://127.0.0.1:6379", 8));
//   auto conn = pool->Acquire();                       // RAII lease
//   ASSIGN_OR_RETURN(RedisReply r, conn->Command({"GET", key}));
//
// A connection that hits an I/O error reconnects on its next use, and one
// that Redis closed while it sat idle (a restart) reconnects before a
// command is sent on it, so a Redis restart costs the requests in flight
// (UNAVAILABLE) and nothing else. Every connect logs in (AUTH) and selects
// the database as the RedisEndpoint says; with Sentinel it first asks the
// sentinels where the master is and checks with ROLE that it is one, and a
// READONLY reply (the master was demoted under an open connection) drops
// the connection, so after a failover each connection follows the new
// master on its next use. With min_replicas, writes wait for replicas (WAIT).
// Pipeline() sends several commands in one round trip. A RedisConnection
// belongs to one thread at a time; RedisPool is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "broker/store/redis_endpoint.hpp"
#include "common/status.hpp"

struct redisContext;
struct redisReply;

namespace kiln::broker {

// How long a connection waits to connect, and for each reply.
inline constexpr int kRedisTimeoutMs = 2000;

struct RedisReply {
  enum class Type { kNil, kString, kInteger, kArray, kStatus, kError };
  Type type = Type::kNil;
  std::string str;  // string, status or error text
  long long integer = 0;
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Type::kNil; }
};

// A Lua script and its SHA-1: Eval() sends EVALSHA and falls back to EVAL
// once per connection when Redis has not seen the script (NOSCRIPT).
struct RedisScript {
  explicit RedisScript(std::string source);
  std::string text;
  std::string sha1;  // hex
};

class RedisConnection {
 public:
  static common::StatusOr<std::unique_ptr<RedisConnection>> Connect(const RedisEndpoint& ep);
  // Connects on first use.
  static std::unique_ptr<RedisConnection> Lazy(const RedisEndpoint& ep);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // I/O errors (unreachable, timed out, connection lost), no master found
  // through Sentinel, and the error replies of a Redis that will serve again
  // by itself (LOADING, BUSY, MASTERDOWN, NOREPLICAS, READONLY) are
  // UNAVAILABLE: retry later. Other error replies (a refused password, a bad
  // command) are INTERNAL.
  //
  // With the endpoint's min_replicas > 0, Pipeline(), Eval(), EvalMany() and
  // a Command() that may write (anything but a known read: GET, HGET, XREAD,
  // PING, ...) send `WAIT min_replicas replica_timeout_ms` in the same round
  // trip; fewer acknowledgements make the call UNAVAILABLE ("only k of N
  // replicas acknowledged the write") with unanswered() true: it ran on the
  // master, but may be lost in a failover.
  common::StatusOr<RedisReply> Command(const std::vector<std::string_view>& argv);
  common::StatusOr<std::vector<RedisReply>> Pipeline(
      const std::vector<std::vector<std::string>>& commands);
  // Runs a script with no declared keys (every key shares the {kiln} hash
  // tag); args are its ARGV.
  common::StatusOr<RedisReply> Eval(const RedisScript& script,
                                    const std::vector<std::string>& args);
  // Runs a script once per element of `args_list`, all in one round trip.
  // The outer error is the connection's (nothing is known to have run when
  // unanswered() is false); each inner one is that run's error reply.
  common::StatusOr<std::vector<common::StatusOr<RedisReply>>> EvalMany(
      const RedisScript& script, const std::vector<std::vector<std::string>>& args_list);
  // After a failed call: whether the command reached Redis whole and no
  // answer came (timed out, connection lost). It may have run.
  bool unanswered() const { return unanswered_; }
  // Connections made so far (each reconnect adds one): what Redis knows
  // this client by (CLIENT ID) changes with it.
  uint64_t connects() const { return connects_; }

  // Pub/sub: after Subscribe(), Receive() returns the next pushed message, or
  // nullopt when none arrives within timeout_ms.
  common::Status Subscribe(const std::vector<std::string>& channels);
  common::StatusOr<std::optional<RedisReply>> Receive(int timeout_ms);

 private:
  explicit RedisConnection(RedisEndpoint ep) : endpoint_(std::move(ep)) {}
  // Connects when not connected: through the sentinels if the endpoint
  // names them, then logs in and selects the database.
  common::Status EnsureConnected();
  // Connects to `at` (nullptr: the endpoint's own host or socket) and sends
  // AUTH, SELECT and (with Sentinel) ROLE in one round trip; *is_master says
  // what ROLE answered.
  common::Status Open(const RedisHostPort* at, bool* is_master);
  // The master's address from the first sentinel that gives it; that
  // sentinel is asked first next time.
  common::StatusOr<RedisHostPort> AskSentinels();
  // Sends `commands` in one round trip, with WAIT after them when `acked`
  // and the endpoint wants replica acknowledgements; the replies include
  // error replies; the Status is the connection's, or WAIT's shortfall.
  common::StatusOr<std::vector<RedisReply>> RoundTrip(
      const std::vector<std::vector<std::string_view>>& commands, bool acked);
  // Drops the connection when Redis closed it while idle (end of file or an
  // error on the socket): before a command, never with replies pending.
  void DropIfClosed();
  common::Status Append(const std::vector<std::string_view>& argv);
  // Writes what Append buffered; an error means Redis did not get it whole
  // (so ran none of it).
  common::Status Flush();
  common::StatusOr<RedisReply> ReadReply();
  void Drop();

  RedisEndpoint endpoint_;
  redisContext* ctx_ = nullptr;
  bool unanswered_ = false;
  uint64_t connects_ = 0;
};

class RedisPool {
 public:
  class Lease {
   public:
    Lease(RedisPool* pool, std::unique_ptr<RedisConnection> c) : pool_(pool), conn_(std::move(c)) {}
    Lease(Lease&&) = default;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      if (conn_) pool_->Release(std::move(conn_));
    }
    RedisConnection* operator->() { return conn_.get(); }

   private:
    RedisPool* pool_;
    std::unique_ptr<RedisConnection> conn_;
  };

  static common::StatusOr<std::unique_ptr<RedisPool>> Create(const std::string& url, size_t size);
  Lease Acquire();

 private:
  void Release(std::unique_ptr<RedisConnection> c);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<RedisConnection>> idle_;
};

}  // namespace kiln::broker
