// Test support for the Redis client's tests: redis-server and sentinel
// processes on free loopback ports in a test's temp dir, and a plain admin
// connection to any of them.
//
//   RedisServer m = RedisServer::Start(dir, "master", {"--requirepass", "pw"});
//   auto admin = Admin(m.port, "pw");
//
// A RedisServer ends its process when destroyed (ChildProcess); only the
// pids a test started are signalled. One thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "broker/store/redis_connection.hpp"
#include "tests/support/process.hpp"

namespace kiln::broker {

struct RedisServer {
  int port = 0;
  std::string name;
  testing::ChildProcess process;

  // redis-server on a free port with no persistence; waits until it accepts.
  static RedisServer Start(const std::string& dir, const std::string& name,
                           const std::vector<std::string>& extra = {}) {
    RedisServer s;
    s.port = testing::FreePort();
    s.name = name;
    std::vector<std::string> argv = {"/usr/bin/redis-server",
                                     "--port",
                                     std::to_string(s.port),
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     dir,
                                     "--dbfilename",
                                     name + ".rdb",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--repl-diskless-sync-delay",
                                     "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    s.process = testing::ChildProcess::Start(argv, dir + "/" + name + ".log");
    testing::WaitFor([&] { return testing::CanConnect(s.port); }, std::chrono::seconds(10));
    return s;
  }

  // A sentinel monitoring `master_port` as "m" (quorum 2), failing over
  // after 1 s without an answer.
  static RedisServer StartSentinel(const std::string& dir, const std::string& name, int master_port,
                                   const std::string& master_name = "m", int quorum = 2,
                                   int down_after_ms = 1000) {
    RedisServer s;
    s.port = testing::FreePort();
    s.name = name;
    const std::string conf = dir + "/" + name + ".conf";
    testing::WriteFile(conf, "port " + std::to_string(s.port) +
                                 "\nbind 127.0.0.1\n"
                                 "dir " +
                                 dir + "\nsentinel monitor " + master_name + " 127.0.0.1 " +
                                 std::to_string(master_port) + " " + std::to_string(quorum) +
                                 "\nsentinel down-after-milliseconds " + master_name + " " +
                                 std::to_string(down_after_ms) + "\nsentinel failover-timeout " +
                                 master_name + " 4000\nsentinel parallel-syncs " + master_name +
                                 " 1\n");
    s.process = testing::ChildProcess::Start({"/usr/bin/redis-server", conf, "--sentinel"},
                                             dir + "/" + name + ".log");
    testing::WaitFor([&] { return testing::CanConnect(s.port); }, std::chrono::seconds(10));
    return s;
  }
};

// A direct connection to 127.0.0.1:port (logged in with `password`), for
// the test's own questions; nullptr when it cannot connect.
inline std::unique_ptr<RedisConnection> Admin(int port, const std::string& password = "") {
  auto ep = RedisEndpoint::Parse("redis://127.0.0.1:" + std::to_string(port));
  if (!ep.ok()) return nullptr;
  ep->password = password;
  auto c = RedisConnection::Connect(*ep);
  return c.ok() ? std::move(*c) : nullptr;
}

// The value of `field` in an INFO reply; empty when absent.
inline std::string InfoField(const std::string& info, const std::string& field) {
  const std::string key = field + ":";
  size_t pos = info.find("\n" + key);
  if (pos == std::string::npos) {
    if (info.rfind(key, 0) != 0) return "";
    pos = 0;
  } else {
    pos += 1;
  }
  pos += key.size();
  const size_t end = info.find_first_of("\r\n", pos);
  return info.substr(pos, end - pos);
}

}  // namespace kiln::broker
