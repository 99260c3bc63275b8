// HttpServer::Impl: the state every connection of an HttpServer shares —
// options, handler, limiter, body budget, the io_context. Private to
// broker/http (http_server.cpp, http_connection.cpp, websocket_connection.cpp);
// nothing else includes it.
// Thread-safe where it is shared: the limiter, the atomics; the rest is
// fixed after Create().
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "broker/http/http_server.hpp"

namespace kiln::broker {

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  HttpServerOptions options;
  Handler handler;
  ErrorResponse errors;
  Observer observer;
  ConnectionLimiter limiter;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> body_bytes{0};  // reserved by request bodies

  bool ReserveBody(uint64_t n) {
    uint64_t cur = body_bytes.load();
    do {
      if (cur + n > options.max_body_buffer_bytes) return false;
    } while (!body_bytes.compare_exchange_weak(cur, cur + n));
    return true;
  }

  Impl(HttpServerOptions o, Handler h, ErrorResponse e, Observer obs)
      : options(std::move(o)),
        handler(std::move(h)),
        errors(std::move(e)),
        observer(std::move(obs)),
        limiter(options.connections) {}

  void Accept();
  void Refuse(boost::asio::ip::tcp::socket socket, const std::string& address);
};

// Serves one accepted connection (admitted on `lane`) until it closes.
void StartConnection(std::shared_ptr<HttpServer::Impl> server, boost::asio::ip::tcp::socket socket,
                     std::string address, ConnectionLimiter::Lane lane);

// Completes the WebSocket handshake of `request` (an upgrade read on
// `socket`) and serves the connection to `handler` until it closes
// (websocket_connection.cpp); the connection keeps its place in the limiter.
void StartWebSocket(std::shared_ptr<HttpServer::Impl> server, boost::asio::ip::tcp::socket socket,
                    std::string address, ConnectionLimiter::Lane lane,
                    boost::beast::http::request<boost::beast::http::string_body> request,
                    WebSocketOptions options, std::shared_ptr<WebSocketHandler> handler);

}  // namespace kiln::broker
