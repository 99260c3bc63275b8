// HttpRequest, HttpResponse and HttpExchange: one request and the way to
// answer it, as the HTTP server (http_server.hpp) hands them to the API —
// plain types, so handlers do not see the transport library.
//
//   void Handle(std::shared_ptr<HttpExchange> ex) {
//     if (ex->request().method == "GET") return ex->Reply({200, R"({"ok":true})"});
//   }
//
// An exchange is answered exactly once: Reply(), or StartStream() followed by
// Send()* and End(), or AcceptWebSocket(). Each may be called from any thread, at any later time
// (a wait answers when its job ends); they post to the connection's own
// strand. Calls after the client has gone are ignored.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broker/http/websocket_channel.hpp"

namespace kiln::broker {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;                        // "GET", "POST", ... as sent
  std::string target;                        // path and query, as sent
  std::string path;                          // percent-decoded path, without the query
  std::map<std::string, std::string> query;  // decoded; a repeated key keeps its last value
  HttpHeaders headers;                       // names lower-cased, in order
  std::string body;
  std::string remote_address;  // the peer's IP address
  // Admitted on the reserve lane (the broker is at its connection limit):
  // only health and metrics are served.
  bool reserve_lane = false;
  // A WebSocket upgrade (GET with Upgrade: websocket and the handshake's
  // headers), which AcceptWebSocket() may take.
  bool websocket_upgrade = false;

  // The first header of that (lower-case) name, or "".
  std::string_view Header(std::string_view lower_name) const;
  bool HasHeader(std::string_view lower_name) const;
  // The query parameter, or "".
  std::string Param(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  HttpHeaders headers;
  // Held until the response is written or the connection is gone (an
  // UnreadBudget charge for a large body).
  std::shared_ptr<const void> keep;
};

// Splits a request target ("/v1/audit?after=1-0&count=5") into its path (as
// sent) and its query, percent-decoded ('+' is a space; a repeated key keeps
// its last value; a bad escape is kept as is). Pure; any thread.
void ParseTarget(std::string_view target, std::string* path,
                 std::map<std::string, std::string>* query);

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual const HttpRequest& request() const = 0;
  // Moves the body out (request().body is empty afterwards) and gives back
  // its share of the server's body budget: a handler that keeps the
  // exchange (a wait) takes the body first, so it is not held for the wait.
  virtual std::string TakeBody() = 0;
  virtual void Reply(HttpResponse response) = 0;

  // A streamed answer (Transfer-Encoding: chunked): the status line and
  // headers, then pieces as they come, then End().
  virtual void StartStream(int status, std::string content_type, HttpHeaders headers) = 0;
  virtual void Send(std::string piece) = 0;
  // `keep` is held until everything sent is written or the connection is
  // gone (an UnreadBudget charge for the last event).
  virtual void End(std::shared_ptr<const void> keep = nullptr) = 0;
  // Bytes given to Send() that the client has not taken yet.
  virtual size_t Pending() const = 0;
  // For a stream: `drained` runs each time Pending() falls to zero, `closed`
  // once when the client went away or the stream failed (then no more
  // Send()s are written). Both run on an I/O thread and must not block.
  virtual void OnStreamEvents(std::function<void()> drained, std::function<void()> closed) = 0;

  // Answers a request with request().websocket_upgrade by completing the
  // WebSocket handshake (101) and hands the connection to `handler`
  // (websocket_channel.hpp); it leaves HTTP for good.
  virtual void AcceptWebSocket(WebSocketOptions options,
                               std::shared_ptr<WebSocketHandler> handler) = 0;
};

}  // namespace kiln::broker
