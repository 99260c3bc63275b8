// WorkPool: a fixed set of threads running short blocking tasks (the API's
// Redis calls) from a bounded queue, so the I/O threads never block and a
// flood is refused at once instead of queued without end.
//
//   WorkPool pool(/*threads=*/16, /*max_queued=*/1024, "kiln-http-work");
//   if (!pool.TryPost([=] { Handle(ex); })) ReplyBusy(ex);   // full: 503
//
// Tasks run in arrival order; Stop() (and the destructor) drops what has
// not started and joins. TryPost from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::broker {

class WorkPool {
 public:
  // `name`: its threads' name (top -H), at most 15 bytes.
  WorkPool(size_t threads, size_t max_queued, std::string name);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // False when max_queued tasks are already waiting (or the pool stopped).
  bool TryPost(std::function<void()> task);
  // Queues even past max_queued: only for tasks whose number is bounded
  // elsewhere (a WebSocket connection has at most one queued at a time).
  // False once stopped.
  bool Post(std::function<void()> task);
  void Stop();
  size_t queued() const;

 private:
  void Loop();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::broker
