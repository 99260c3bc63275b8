// EventQueue: carries messages from job threads to the worker's event loop.
//
//   queue.Post({origin_broker, protocol::Result{...}});    // any thread
//   for (auto& e : queue.Drain()) outbox.PostResult(...);   // loop thread (WorkerLoop)
//
// The loop polls fd() (an eventfd) next to its ZeroMQ sockets, so a job
// thread never touches a socket. Post() and Drain() are thread-safe.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <mutex>
#include <string>

#include "common/protocol/messages.hpp"
#include "common/unique_fd.hpp"

namespace kiln::worker {

struct OutboundEvent {
  std::string broker;  // the broker the job came from
  common::protocol::Message message;
};

class EventQueue {
 public:
  EventQueue() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

  int fd() const { return fd_.get(); }

  void Post(OutboundEvent event) {
    {
      std::lock_guard lock(mu_);
      events_.push_back(std::move(event));
    }
    uint64_t one = 1;
    ssize_t n = ::write(fd_.get(), &one, sizeof(one));
    (void)n;  // EAGAIN: already signalled
  }

  std::deque<OutboundEvent> Drain() {
    uint64_t count = 0;
    ssize_t n = ::read(fd_.get(), &count, sizeof(count));
    (void)n;
    std::deque<OutboundEvent> out;
    std::lock_guard lock(mu_);
    out.swap(events_);
    return out;
  }

 private:
  common::UniqueFd fd_;
  std::mutex mu_;
  std::deque<OutboundEvent> events_;
};

}  // namespace kiln::worker
