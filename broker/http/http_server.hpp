// HttpServer: the broker's HTTP/1.1 transport (Boost.Beast on Asio), built
// so that no client can starve it: every connection is an asynchronous state
// machine on a few I/O threads, so a slow, idle or waiting client holds a
// socket and a few kilobytes, never a thread.
//
//   ASSIGN_OR_RETURN(auto server, HttpServer::Create(options, handler, errors, observe));
//   server->Start();   // I/O threads run until Stop()
//
// What it enforces before a request reaches the handler:
//  - connections: ConnectionLimiter at accept (global and per address, plus
//    a small reserve lane for health and metrics); over both, a 503 or 429
//    is written at once and the connection closed;
//  - deadlines: the request head within header_timeout (a client trickling
//    bytes is cut off), the body within body_timeout, the next request on a
//    kept-alive connection within idle_timeout, each write within
//    write_timeout; a late request is answered 408;
//  - sizes: the head up to max_header_bytes (431), the body up to
//    max_body_bytes whether chunked or not (413, without reading the rest);
//    a malformed request (bad Content-Length, bad chunking) is a 400 at once;
//  - memory: the bodies being read or held by handlers together stay within
//    max_body_buffer_bytes (a body's share is its Content-Length, or
//    max_body_bytes while a chunked one is read); past it, 503 before the
//    body is read.
// The connection is closed after any of these answers. `Expect:
// 100-continue` is honoured.
//
// Threads: Create/Start/Stop from one thread; the handler and observer run
// on I/O threads (the handler must not block: it answers at once or hands the
// exchange to other threads); HttpExchange methods from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "broker/http/connection_limiter.hpp"
#include "broker/http/http_exchange.hpp"
#include "common/status.hpp"

namespace kiln::broker {

struct HttpServerOptions {
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks a free one
  uint32_t io_threads = 2;
  uint64_t max_body_bytes = 16u << 20;
  uint64_t max_body_buffer_bytes = 256u << 20;
  uint32_t max_header_bytes = 16u << 10;
  ConnectionLimiter::Limits connections;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{60000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds write_timeout{30000};
  // Everything of a reserve-lane connection (read and answer) within this.
  std::chrono::milliseconds reserve_timeout{2000};
};

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;
  // The body of the server's own error answers (the API's error object).
  using ErrorResponse = std::function<HttpResponse(const common::Status&)>;
  // Every answer, when it is written: the request (null when none was read)
  // and the status. For metrics and the access log.
  using Observer = std::function<void(const HttpRequest* request, int status, size_t bytes)>;

  static common::StatusOr<std::unique_ptr<HttpServer>> Create(HttpServerOptions options,
                                                              Handler handler, ErrorResponse errors,
                                                              Observer observer = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  void Start();
  // Stops accepting, closes every connection and joins the I/O threads.
  void Stop();
  // Bytes of request bodies held now (the budget's use).
  uint64_t body_bytes() const;
  // Connections open now (both lanes), and of them on the reserve lane.
  size_t connections() const;
  size_t reserve_connections() const;
  // Runs `fn` on an I/O thread after `delay` (unless stopped first): timers
  // for waits and streams. `fn` must not block. Any thread.
  void After(std::chrono::milliseconds delay, std::function<void()> fn);

  struct Impl;

 private:
  explicit HttpServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln::broker
