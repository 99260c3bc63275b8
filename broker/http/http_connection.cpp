// One HTTP connection of an HttpServer: its state machine (read the head,
// then the body, within their deadlines and limits; dispatch; write the
// answer or the stream; next request or close) and the HttpExchange handed
// to the handler. Every method of a Connection runs on its strand.
#include <sys/socket.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <cctype>
#include <charconv>
#include <deque>
#include <mutex>
#include <optional>

#include "broker/http/http_server_impl.hpp"

namespace kiln::broker {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using common::Code;
using common::Status;

// The reason phrase of a status line, from Beast's table of every status
// (a 204 read "Status" when this file kept its own short list).
std::string Reason(int status) {
  const http::status st = http::int_to_status(static_cast<unsigned>(status));
  if (st == http::status::unknown) return "Status";
  const beast::string_view r = http::obsolete_reason(st);
  return std::string(r.data(), r.size());
}

class Connection;

// A request body's share of the server's body budget, given back when
// destroyed.
class BodyHold {
 public:
  BodyHold() = default;
  BodyHold(HttpServer::Impl* server, uint64_t bytes) : server_(server), bytes_(bytes) {}
  BodyHold(BodyHold&& o) noexcept : server_(o.server_), bytes_(o.bytes_) { o.server_ = nullptr; }
  BodyHold& operator=(BodyHold&& o) noexcept {
    if (this != &o) {
      Release();
      server_ = o.server_;
      bytes_ = o.bytes_;
      o.server_ = nullptr;
    }
    return *this;
  }
  BodyHold(const BodyHold&) = delete;
  BodyHold& operator=(const BodyHold&) = delete;
  ~BodyHold() { Release(); }
  void Release() {
    if (server_) server_->body_bytes -= bytes_;
    server_ = nullptr;
  }
  // Keeps only `bytes` (a chunked body that turned out smaller).
  void ShrinkTo(uint64_t bytes) {
    if (server_ && bytes < bytes_) {
      server_->body_bytes -= bytes_ - bytes;
      bytes_ = bytes;
    }
  }

 private:
  HttpServer::Impl* server_ = nullptr;
  uint64_t bytes_ = 0;
};

// The handler's side of one request on a Connection.
class Exchange : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Connection> conn, HttpRequest request, BodyHold hold)
      : conn_(std::move(conn)), request_(std::move(request)), hold_(std::move(hold)) {}
  const HttpRequest& request() const override { return request_; }
  std::string TakeBody() override {
    std::string body = std::move(request_.body);
    request_.body.clear();
    hold_.Release();
    return body;
  }
  void Reply(HttpResponse response) override;
  void StartStream(int status, std::string content_type, HttpHeaders headers) override;
  void Send(std::string piece) override;
  void End(std::shared_ptr<const void> keep) override;
  size_t Pending() const override;
  void OnStreamEvents(std::function<void()> drained, std::function<void()> closed) override;
  void AcceptWebSocket(WebSocketOptions options,
                       std::shared_ptr<WebSocketHandler> handler) override;

 private:
  std::shared_ptr<Connection> conn_;
  HttpRequest request_;
  BodyHold hold_;
  std::atomic<bool> answered_{false};
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, std::string address,
             ConnectionLimiter::Lane lane)
      : server_(std::move(server)),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        // Bytes read and not yet parsed: never more than a head. A chunked
        // body's size lines and trailers must fit too (Beast waits for their
        // CRLF without a limit of its own); body bytes pass through it.
        buffer_(server_->options.max_header_bytes),
        address_(std::move(address)),
        lane_(lane) {}

  ~Connection() {
    beast::error_code ignored;
    socket_.close(ignored);
    Release();
  }

  void Start() { ReadHeader(); }

  // Strand-bound entry points for Exchange (any thread).
  template <typename F>
  void Post(F&& f) {
    asio::post(socket_.get_executor(), std::forward<F>(f));
  }
  void WriteResponse(HttpResponse response);
  void BeginStream(int status, std::string content_type, HttpHeaders headers);
  void QueuePiece(std::string piece, bool last, std::shared_ptr<const void> keep = nullptr);
  // Hands the socket to a WebSocket connection (the request was an upgrade).
  void Upgrade(WebSocketOptions options, std::shared_ptr<WebSocketHandler> handler);
  std::atomic<size_t> pending{0};
  std::mutex callbacks_mu;
  std::function<void()> on_drained;  // guarded by callbacks_mu
  std::function<void()> on_closed;   // guarded by callbacks_mu

 private:
  bool reserve() const { return lane_ == ConnectionLimiter::Lane::kReserve; }
  void Arm(std::chrono::milliseconds d, bool reading);
  void ReadHeader();
  void OnHeader(beast::error_code ec, size_t head_bytes);
  void ReadBody();
  void OnBody(beast::error_code ec);
  void ReadFailed(beast::error_code ec, bool in_header);
  void Dispatch();
  void WatchPeer();
  void PumpWrites();
  void AfterAnswer();
  // Writes the server's own error answer, then closes.
  void Fail(const Status& st, int http_status);
  void Close();
  void NotifyClosed();
  void Release() {
    if (released_) return;
    released_ = true;
    server_->limiter.Release(address_, lane_);
  }

  std::shared_ptr<HttpServer::Impl> server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::request<http::string_body>> upgrade_;  // the upgrade request, if it is one
  std::string address_;
  ConnectionLimiter::Lane lane_;
  bool first_ = true;
  bool timed_out_ = false;
  bool closed_ = false;
  bool released_ = false;
  uint64_t timer_gen_ = 0;  // which Arm() a firing timer belongs to
  bool keep_alive_ = true;
  // The request being answered (for the observer), and the stream's state.
  std::optional<HttpRequest> current_;
  bool busy_ = false;       // a request was dispatched and is not fully answered
  bool streaming_ = false;  // the stream's head was written or queued
  bool stream_end_ = false;
  bool writing_ = false;
  bool watching_ = false;
  std::deque<std::string> out_;
  size_t out_payload_ = 0;                          // payload bytes in out_ (what `pending` counts)
  std::vector<std::shared_ptr<const void>> keeps_;  // held until out_ is written
  BodyHold body_hold_;                              // the body being read
};

void Exchange::Reply(HttpResponse response) {
  if (answered_.exchange(true)) return;
  conn_->Post([c = conn_, r = std::move(response)]() mutable { c->WriteResponse(std::move(r)); });
}

void Exchange::StartStream(int status, std::string content_type, HttpHeaders headers) {
  if (answered_.exchange(true)) return;
  conn_->Post([c = conn_, status, t = std::move(content_type), h = std::move(headers)]() mutable {
    c->BeginStream(status, std::move(t), std::move(h));
  });
}

void Exchange::Send(std::string piece) {
  if (piece.empty()) return;
  conn_->pending += piece.size();
  conn_->Post([c = conn_, p = std::move(piece)]() mutable { c->QueuePiece(std::move(p), false); });
}

void Exchange::End(std::shared_ptr<const void> keep) {
  conn_->Post(
      [c = conn_, k = std::move(keep)]() mutable { c->QueuePiece({}, true, std::move(k)); });
}

size_t Exchange::Pending() const { return conn_->pending.load(); }

void Exchange::OnStreamEvents(std::function<void()> drained, std::function<void()> closed) {
  std::lock_guard lock(conn_->callbacks_mu);
  conn_->on_drained = std::move(drained);
  conn_->on_closed = std::move(closed);
}

void Exchange::AcceptWebSocket(WebSocketOptions options,
                               std::shared_ptr<WebSocketHandler> handler) {
  if (answered_.exchange(true)) return;
  conn_->Post([c = conn_, options, h = std::move(handler)]() mutable {
    c->Upgrade(options, std::move(h));
  });
}

void Connection::Arm(std::chrono::milliseconds d, bool reading) {
  if (reserve()) d = std::min(d, server_->options.reserve_timeout);
  timed_out_ = false;
  const uint64_t gen = ++timer_gen_;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), reading, gen](beast::error_code ec) {
    // Cancelled, or re-armed since: the operation finished in time.
    if (ec || gen != self->timer_gen_) return;
    self->timed_out_ = true;
    beast::error_code ignored;
    if (reading) {
      self->socket_.cancel(ignored);  // the read fails; ReadFailed answers 408
    } else {
      self->Close();  // a client that does not take what it is sent
    }
  });
}

void Connection::ReadHeader() {
  if (closed_) return;
  parser_.emplace();
  parser_->header_limit(server_->options.max_header_bytes);
  parser_->body_limit(server_->options.max_body_bytes);
  Arm(first_ ? server_->options.header_timeout : server_->options.idle_timeout, true);
  http::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->OnHeader(ec, n); });
}

void Connection::OnHeader(beast::error_code ec, size_t head_bytes) {
  if (ec) return ReadFailed(ec, true);
  first_ = false;
  // Beast applies its header limit to a window that moves with the reads;
  // the head as a whole is checked here.
  if (head_bytes > server_->options.max_header_bytes) {
    return ReadFailed(http::error::header_limit, true);
  }
  // The body's share of the budget before a byte of it is read: its length,
  // or the most a chunked one may grow to.
  const auto length = parser_->content_length();
  const uint64_t need =
      length ? *length : (parser_->chunked() ? server_->options.max_body_bytes : 0);
  if (need > 0) {
    if (!server_->ReserveBody(need)) {
      return Fail(common::Unavailable("the broker is receiving too many request bodies (" +
                                      std::to_string(server_->options.max_body_buffer_bytes) +
                                      " bytes); retry"),
                  503);
    }
    body_hold_ = BodyHold(server_.get(), need);
  }
  const auto& req = parser_->get();
  auto expect = req[http::field::expect];
  if (!parser_->is_done() && beast::iequals(expect, "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(kContinue),
                      [self = shared_from_this()](beast::error_code wec, size_t) {
                        if (wec) return self->Close();
                        self->ReadBody();
                      });
    return;
  }
  ReadBody();
}

void Connection::ReadBody() {
  Arm(server_->options.body_timeout, true);
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void Connection::OnBody(beast::error_code ec) {
  timer_.cancel();
  if (ec) {
    body_hold_.Release();
    return ReadFailed(ec, false);
  }
  Dispatch();
}

void Connection::ReadFailed(beast::error_code ec, bool in_header) {
  timer_.cancel();
  if (closed_) return;
  const auto& o = server_->options;
  if (timed_out_) {
    // Nothing at all on a kept-alive connection is not an error: just close.
    if (in_header && buffer_.size() == 0 && !first_) return Close();
    if (in_header && buffer_.size() == 0 && first_ && parser_ && !parser_->got_some()) {
      return Fail(Status(Code::kRequestTimeout, "no request within " +
                                                    std::to_string(o.header_timeout.count()) +
                                                    " ms of connecting"),
                  408);
    }
    return Fail(Status(Code::kRequestTimeout,
                       in_header ? "the request head did not arrive within " +
                                       std::to_string(o.header_timeout.count()) + " ms"
                                 : "the request body did not arrive within " +
                                       std::to_string(o.body_timeout.count()) + " ms"),
                408);
  }
  if (ec == http::error::end_of_stream || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == http::error::partial_message ||
      ec == asio::error::operation_aborted || ec == asio::error::broken_pipe) {
    return Close();
  }
  if (ec == http::error::body_limit) {
    return Fail(Status(Code::kPayloadTooLarge,
                       "request body larger than " + std::to_string(o.max_body_bytes) + " bytes"),
                413);
  }
  if (ec == http::error::header_limit || (in_header && ec == http::error::buffer_overflow)) {
    return Fail(Status(Code::kInvalidRequest,
                       "request head larger than " + std::to_string(o.max_header_bytes) + " bytes"),
                431);
  }
  std::string what = ec.message();
  if (ec == http::error::bad_content_length) what = "bad Content-Length";
  if (ec == http::error::bad_transfer_encoding) what = "bad Transfer-Encoding";
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension) {
    what = "bad chunked encoding";
  }
  if (ec == http::error::buffer_overflow) {
    what =
        "a chunk-size line or trailer longer than " + std::to_string(o.max_header_bytes) + " bytes";
  }
  return Fail(Status(Code::kInvalidRequest, "malformed HTTP request: " + what), 400);
}

void Connection::Dispatch() {
  auto msg = parser_->release();
  HttpRequest req;
  req.websocket_upgrade = beast::websocket::is_upgrade(msg);
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  ParseTarget(req.target, &req.path, &req.query);
  for (const auto& field : msg) {
    const auto name = field.name_string();
    std::string lower(name.data(), name.size());
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    req.headers.emplace_back(std::move(lower), std::string(field.value()));
  }
  req.body = std::move(msg.body());
  req.remote_address = address_;
  req.reserve_lane = reserve();
  keep_alive_ = msg.keep_alive() && !reserve();
  upgrade_.reset();
  if (req.websocket_upgrade) upgrade_ = std::move(msg);  // (msg is not used after this)
  current_ = req;
  busy_ = true;
  streaming_ = false;
  stream_end_ = false;
  body_hold_.ShrinkTo(req.body.size());
  auto ex = std::make_shared<Exchange>(shared_from_this(), std::move(req), std::move(body_hold_));
  // The answer may take long (a wait, a stream): meanwhile, learn at once if
  // the client leaves.
  WatchPeer();
  server_->handler(std::move(ex));
}

void Connection::WatchPeer() {
  if (watching_ || closed_) return;
  watching_ = true;
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    self->watching_ = false;
    if (ec || self->closed_) return;
    char byte;
    const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      self->Close();  // the client has gone
    }
    // Data (a pipelined request): read after this answer; stop watching.
  });
}

void Connection::WriteResponse(HttpResponse r) {
  if (closed_) return;
  if (server_->observer)
    server_->observer(current_ ? &*current_ : nullptr, r.status, r.body.size());
  auto res = std::make_shared<http::response<http::string_body>>();
  res->version(11);
  res->result(static_cast<unsigned>(r.status));
  res->reason(Reason(r.status));
  res->set(http::field::content_type, r.content_type);
  for (auto& [k, v] : r.headers) res->set(k, v);
  res->keep_alive(keep_alive_);
  res->body() = std::move(r.body);
  res->prepare_payload();
  Arm(server_->options.write_timeout, false);
  writing_ = true;
  http::async_write(
      socket_, *res,
      [self = shared_from_this(), res, keep = std::move(r.keep)](beast::error_code ec, size_t) {
        self->writing_ = false;
        self->timer_.cancel();
        if (ec) return self->Close();
        self->AfterAnswer();
      });
}

void Connection::AfterAnswer() {
  busy_ = false;
  current_.reset();
  if (!keep_alive_ || closed_) return Close();
  ReadHeader();
}

void Connection::BeginStream(int status, std::string content_type, HttpHeaders headers) {
  if (closed_) return;
  if (server_->observer) server_->observer(current_ ? &*current_ : nullptr, status, 0);
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
  head += "Content-Type: " + content_type + "\r\nTransfer-Encoding: chunked\r\n";
  for (const auto& [k, v] : headers) head += k + ": " + v + "\r\n";
  head += keep_alive_ ? "\r\n" : "Connection: close\r\n\r\n";
  streaming_ = true;
  out_.push_front(std::move(head));
  PumpWrites();
}

void Connection::QueuePiece(std::string piece, bool last, std::shared_ptr<const void> keep) {
  if (closed_ || stream_end_) {
    pending -= std::min(pending.load(), piece.size());
    return;  // `keep` goes now: nothing more is written
  }
  if (keep) keeps_.push_back(std::move(keep));
  if (!piece.empty()) {
    char size[20];
    auto [p, ec] = std::to_chars(size, size + sizeof(size), piece.size(), 16);
    std::string framed(size, p);
    framed += "\r\n";
    out_payload_ += piece.size();
    framed += piece;
    framed += "\r\n";
    out_.push_back(std::move(framed));
  }
  if (last) {
    stream_end_ = true;
    out_.push_back("0\r\n\r\n");
  }
  PumpWrites();
}

void Connection::PumpWrites() {
  if (writing_ || closed_ || !streaming_ || out_.empty()) return;
  // Everything queued goes in one write (a single piece, such as a large
  // last event, without a copy).
  auto data = std::make_shared<std::string>();
  if (out_.size() == 1) {
    *data = std::move(out_.front());
  } else {
    for (auto& s : out_) *data += s;
  }
  out_.clear();
  // Charges for what this write carries go with it (rarely any).
  std::shared_ptr<std::vector<std::shared_ptr<const void>>> keeps;
  if (!keeps_.empty()) {
    keeps = std::make_shared<std::vector<std::shared_ptr<const void>>>(std::move(keeps_));
    keeps_.clear();
  }
  const size_t payload = out_payload_;
  out_payload_ = 0;
  writing_ = true;
  Arm(server_->options.write_timeout, false);
  asio::async_write(
      socket_, asio::buffer(*data),
      [self = shared_from_this(), data, payload, keeps](beast::error_code ec, size_t) {
        self->writing_ = false;
        self->timer_.cancel();
        if (ec) return self->Close();
        self->pending -= std::min(self->pending.load(), payload);
        if (!self->out_.empty()) return self->PumpWrites();
        if (self->stream_end_) {
          {
            std::lock_guard lock(self->callbacks_mu);
            self->on_drained = nullptr;
            self->on_closed = nullptr;
          }
          return self->AfterAnswer();
        }
        std::function<void()> drained;
        {
          std::lock_guard lock(self->callbacks_mu);
          drained = self->on_drained;
        }
        if (drained) drained();
      });
}

void Connection::Upgrade(WebSocketOptions options, std::shared_ptr<WebSocketHandler> handler) {
  if (closed_ || !upgrade_) {
    // The client left first (or the handler took a plain request).
    if (!closed_) Fail(common::Internal("not a WebSocket upgrade"), 500);
    return handler->OnClosed();
  }
  if (server_->observer) server_->observer(current_ ? &*current_ : nullptr, 101, 0);
  // The socket leaves this connection: nothing of its HTTP life stays armed
  // (the watch and the timer end with operation_aborted), and its place in
  // the limiter goes with it.
  closed_ = true;
  released_ = true;
  ++timer_gen_;
  timer_.cancel();
  beast::error_code ignored;
  socket_.cancel(ignored);
  {
    std::lock_guard lock(callbacks_mu);
    on_drained = nullptr;
    on_closed = nullptr;
  }
  // Bytes read past the request head would be the client's frames sent
  // before our answer, which RFC 6455 forbids: they are dropped.
  StartWebSocket(server_, std::move(socket_), address_, lane_, std::move(*upgrade_), options,
                 std::move(handler));
  upgrade_.reset();
}

void Connection::Fail(const Status& st, int http_status) {
  if (closed_) return;
  HttpResponse r = server_->errors(st);
  r.status = http_status;
  if (st.code() == Code::kRateLimited || st.code() == Code::kUnavailable) {
    r.headers.emplace_back("Retry-After", "1");
  }
  keep_alive_ = false;
  WriteResponse(std::move(r));
}

void Connection::NotifyClosed() {
  std::function<void()> closed;
  {
    std::lock_guard lock(callbacks_mu);
    closed = std::move(on_closed);
    on_drained = nullptr;
    on_closed = nullptr;
  }
  if (closed) closed();
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  ++timer_gen_;
  timer_.cancel();
  beast::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  out_.clear();
  keeps_.clear();
  pending = 0;
  Release();
  NotifyClosed();
}

}  // namespace

void StartConnection(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket,
                     std::string address, ConnectionLimiter::Lane lane) {
  std::make_shared<Connection>(std::move(server), std::move(socket), std::move(address), lane)
      ->Start();
}

}  // namespace kiln::broker
