// WebSocketChannel and WebSocketHandler: one WebSocket connection (RFC 6455)
// that an HttpExchange was upgraded to, as the API sees it — plain types, so
// handlers do not see the transport library (Boost.Beast's websocket::stream
// in websocket_connection.cpp).
//
//   if (!ex->request().websocket_upgrade) return ex->Reply(...426...);
//   ex->AcceptWebSocket({.max_message_bytes = 2 << 20, ...}, std::make_shared<MyHandler>());
//   // MyHandler::OnOpen(channel): channel->Send(R"({"type":"hello"})");
//
// What the transport enforces before a message reaches the handler: a
// message over max_message_bytes closes the connection (1009), invalid UTF-8
// in a text message closes it (1007), compression is off (no inflate bombs);
// a quiet connection is pinged every idle_timeout/2 and closed after
// idle_timeout without a byte from the peer; a write the peer takes none of
// for write_timeout closes it. While the handler's unsent bytes (Pending())
// exceed kPauseReadsAt, no further message is read (a client that floods
// requests and reads no answers stalls only itself); nor while the handler,
// having returned false from OnMessage, has not called ResumeReads() (so a
// handler that works off the I/O thread bounds what waits for it, and TCP
// slows the client down).
//
// Threads: the handler's methods run on the connection's I/O strand, one at
// a time, and must not block; the channel's methods from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kiln::broker {

struct WebSocketOptions {
  uint64_t max_message_bytes = 2u << 20;
  std::chrono::milliseconds idle_timeout{60000};
};

class WebSocketChannel {
 public:
  static constexpr size_t kPauseReadsAt = 1u << 20;

  virtual ~WebSocketChannel() = default;
  // Queues one text message; `keep` is held until it is written or the
  // connection is gone (an UnreadBudget charge). Ignored once closing.
  virtual void Send(std::string text, std::shared_ptr<const void> keep = nullptr) = 0;
  // Bytes given to Send() that the peer has not taken yet.
  virtual size_t Pending() const = 0;
  // A normal close (1000) after what is queued is written.
  virtual void Close() = 0;
  // Reads the next message again after OnMessage returned false.
  virtual void ResumeReads() = 0;
};

class WebSocketHandler {
 public:
  virtual ~WebSocketHandler() = default;
  // The handshake is done; messages may be sent. The handler may keep
  // `channel` until OnClosed().
  virtual void OnOpen(std::shared_ptr<WebSocketChannel> channel) = 0;
  // One whole message (`binary`: a binary one, which the handler may refuse).
  // False: read no further message until the channel's ResumeReads().
  virtual bool OnMessage(std::string message, bool binary) = 0;
  // Pending() fell to zero.
  virtual void OnDrained() = 0;
  // Once, last: the connection is gone (also when the handshake failed,
  // then without OnOpen). Nothing sent from now on is written.
  virtual void OnClosed() = 0;
};

}  // namespace kiln::broker
