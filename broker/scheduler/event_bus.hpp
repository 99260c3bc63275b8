// EventBus: what brokers tell each other through Redis pub/sub on
// {kiln}:events — "done <job id>" when a job ends (so a client waiting on
// broker A learns that broker B stored its end) and "cancel <job id>" (so
// the broker that owns a running job tells its worker).
//
//   EventBus bus(endpoint, &waiters, &jobs, [&](const std::string& id) { d->Cancel(id); });
//   std::jthread t([&](std::stop_token st) { bus.Run(st); });
//
// Pub/sub may drop messages while a connection is down; waiters also poll
// the record (HttpApi), so a lost "done" costs latency, never a wrong answer.
// Run() owns its own Redis connection and reconnects by itself.
#pragma once

#include <functional>
#include <stop_token>
#include <string>

#include "broker/scheduler/job_waiters.hpp"
#include "broker/store/job_store.hpp"
#include "broker/store/redis_connection.hpp"

namespace kiln::broker {

class EventBus {
 public:
  using CancelFn = std::function<void(const std::string& job_id)>;
  EventBus(RedisEndpoint endpoint, JobWaiters* waiters, JobStore* jobs, CancelFn cancel)
      : endpoint_(std::move(endpoint)),
        waiters_(waiters),
        jobs_(jobs),
        cancel_(std::move(cancel)) {}

  void Run(std::stop_token stop);

 private:
  void Handle(const std::string& payload);

  RedisEndpoint endpoint_;
  JobWaiters* waiters_;
  JobStore* jobs_;
  CancelFn cancel_;
};

}  // namespace kiln::broker
