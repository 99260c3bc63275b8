// NetnsBed: several "hosts" on one machine, each a network namespace with
// its own address on one private /24, joined by a bridge that lives in a
// "switch" namespace of its own, so the root namespace's network is never
// touched. Links can be cut (partition) and restored (heal).
//
//   auto bed = NetnsBed::Create({"redis", "b1", "w1"});
//   ChildProcess p = bed->Start("redis", {"/usr/bin/redis-server", ...}, "redis.log");
//
// Namespaces are named kiln-h<pid>-<host> (the switch: kiln-h<pid>-sw). The
// destructor deletes them (their veths go with them); Create first deletes
// those of earlier runs whose process is gone. Processes started in a host
// run from the same file system; only the network is separate.
// One thread, except RunIn, which any thread may call.
#pragma once

#include <sys/types.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tests/support/process.hpp"

namespace kiln::testing {

class NetnsBed {
 public:
  // At most 9 hosts (10 namespaces with the switch). Throws std::runtime_error
  // (after removing what it made) when a namespace or link cannot be set up.
  static std::unique_ptr<NetnsBed> Create(const std::vector<std::string>& hosts);
  ~NetnsBed();
  NetnsBed(const NetnsBed&) = delete;
  NetnsBed& operator=(const NetnsBed&) = delete;

  // The host's address on the bed's /24, e.g. "10.213.0.3".
  std::string ip(const std::string& host) const;
  // The namespace's name and its bind mount (/run/netns/<name>).
  std::string ns(const std::string& host) const;
  std::string ns_path(const std::string& host) const { return "/run/netns/" + ns(host); }
  const std::string& prefix() const { return prefix_; }

  // Starts argv (argv[0] absolute) inside the host's network namespace:
  // nsenter --net joins it and execs argv (the pid is argv's own), without
  // the fresh /sys that `ip netns exec` mounts, so cgroups stay visible.
  ChildProcess Start(const std::string& host, const std::vector<std::string>& argv,
                     const std::string& log_file,
                     const std::vector<std::string>& extra_env = {}) const;

  // Sets the switch side of the host's link down (no frame in or out) / up.
  void Partition(const std::string& host) const;
  void Heal(const std::string& host) const;

  // Runs fn() on a fresh thread that has joined the host's network
  // namespace (setns changes only the calling thread) and returns its
  // result. Threads fn starts (ZeroMQ's I/O threads too) stay in it.
  template <typename F>
  auto RunIn(const std::string& host, F&& fn) const -> std::invoke_result_t<F&> {
    using R = std::invoke_result_t<F&>;
    const std::string path = ns_path(host);
    std::exception_ptr error;
    if constexpr (std::is_void_v<R>) {
      std::thread t([&] {
        try {
          EnterNetns(path);
          fn();
        } catch (...) {
          error = std::current_exception();
        }
      });
      t.join();
      if (error) std::rethrow_exception(error);
    } else {
      std::optional<R> out;
      std::thread t([&] {
        try {
          EnterNetns(path);
          out.emplace(fn());
        } catch (...) {
          error = std::current_exception();
        }
      });
      t.join();
      if (error) std::rethrow_exception(error);
      return std::move(*out);
    }
  }

  // Deletes namespaces named kiln-h<pid>-* whose creating process is gone
  // (killing the processes still inside them first); returns how many.
  static int RemoveStale();
  // The kiln-h* namespaces that exist now (for checks that nothing is left).
  static std::vector<std::string> ListBedNamespaces();

 private:
  NetnsBed() = default;
  static void EnterNetns(const std::string& path);
  void Teardown();

  std::string prefix_;  // "kiln-h<pid>-"
  std::vector<std::string> hosts_;
  std::vector<std::string> made_;  // namespaces created, for teardown
};

// Whether the process that made a bed (pid in its names) still runs it:
// alive and still a multihost* program (a reused pid names something else).
bool BedOwnerAlive(pid_t pid);

// Runs a shell command line; returns its exit status (-1 if it could not
// run) and, when `out` is given, what it printed (stdout and stderr).
int RunCommand(const std::string& command, std::string* out = nullptr);

}  // namespace kiln::testing
