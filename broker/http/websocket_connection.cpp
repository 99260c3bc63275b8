// One WebSocket connection of an HttpServer, after its HTTP upgrade request
// was accepted (websocket_channel.hpp says what it enforces): Boost.Beast's
// websocket::stream over the connection's socket, a read loop that hands
// whole messages to the handler, and a write queue with its own deadline.
// Every method but the WebSocketChannel ones runs on the connection's strand.
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>

#include "broker/http/http_server_impl.hpp"

namespace kiln::broker {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

class WsConnection : public WebSocketChannel, public std::enable_shared_from_this<WsConnection> {
 public:
  WsConnection(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, std::string address,
               ConnectionLimiter::Lane lane, WebSocketOptions options,
               std::shared_ptr<WebSocketHandler> handler)
      : server_(std::move(server)),
        ws_(std::move(socket)),
        write_timer_(ws_.get_executor()),
        address_(std::move(address)),
        lane_(lane),
        options_(options),
        handler_(std::move(handler)) {}

  ~WsConnection() override { server_->limiter.Release(address_, lane_); }

  void Accept(http::request<http::string_body> request) {
    websocket::stream_base::timeout t;
    t.handshake_timeout = server_->options.header_timeout;
    t.idle_timeout = options_.idle_timeout;
    t.keep_alive_pings = true;  // at idle_timeout / 2: a live peer answers with a pong
    ws_.set_option(t);
    ws_.read_message_max(options_.max_message_bytes);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, "kiln-broker"); }));
    auto req = std::make_shared<http::request<http::string_body>>(std::move(request));
    ws_.async_accept(*req, [self = shared_from_this(), req](beast::error_code ec) {
      if (ec) return self->Drop();
      self->open_ = true;
      self->handler_->OnOpen(self);
      self->Read();
      self->Pump();  // what was sent before the handshake ended
    });
  }

  void Send(std::string text, std::shared_ptr<const void> keep) override {
    if (text.empty()) return;
    pending_ += text.size();
    asio::post(ws_.get_executor(),
               [self = shared_from_this(), t = std::move(text), k = std::move(keep)]() mutable {
                 self->Queue({std::move(t), std::move(k)});
               });
  }
  size_t Pending() const override { return pending_.load(); }
  void Close() override {
    asio::post(ws_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      self->Pump();
    });
  }
  void ResumeReads() override {
    asio::post(ws_.get_executor(), [self = shared_from_this()] {
      self->held_ = false;
      self->Read();
    });
  }

 private:
  void Read() {
    if (closed_ || reading_ || held_) return;
    if (pending_ >= kPauseReadsAt) return;  // Pump() reads on once drained
    reading_ = true;
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->reading_ = false;
      if (self->closed_) return;
      if (ec) return self->Drop();
      const auto data = self->buffer_.cdata();
      std::string message(static_cast<const char*>(data.data()), data.size());
      self->buffer_.clear();
      // ResumeReads() is posted, so it cannot run before this is set.
      self->held_ = !self->handler_->OnMessage(std::move(message), self->ws_.got_binary());
      self->Read();
    });
  }

  struct Out {
    std::string text;
    std::shared_ptr<const void> keep;
  };

  void Queue(Out out) {
    if (closed_ || closing_) {
      pending_ -= std::min(pending_.load(), out.text.size());
      return;
    }
    out_.push_back(std::move(out));
    Pump();
  }

  // Writes the queue's head; when the queue is empty, closes if asked to.
  void Pump() {
    if (closed_ || writing_ || !open_) return;
    if (out_.empty()) {
      if (closing_) {
        writing_ = true;
        ArmWrite();
        ws_.async_close(websocket::close_code::normal,
                        [self = shared_from_this()](beast::error_code) { self->Drop(); });
      }
      return;
    }
    writing_ = true;
    auto data = std::make_shared<Out>(std::move(out_.front()));
    out_.pop_front();
    ws_.text(true);
    ArmWrite();
    ws_.async_write(asio::buffer(data->text),
                    [self = shared_from_this(), data](beast::error_code ec, size_t) {
                      self->writing_ = false;
                      ++self->write_gen_;
                      self->write_timer_.cancel();
                      self->pending_ -= std::min(self->pending_.load(), data->text.size());
                      if (self->closed_) return;
                      if (ec) return self->Drop();
                      if (!self->out_.empty() || self->closing_) return self->Pump();
                      self->handler_->OnDrained();
                      self->Read();  // reads may have paused on a full queue
                    });
  }

  // A write the peer takes none of within write_timeout closes the
  // connection (Beast's own timeout watches only reads).
  void ArmWrite() {
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(server_->options.write_timeout);
    write_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->write_gen_) return;
      self->Drop();
    });
  }

  // Closes the socket at once (an error, a deadline, or the end of a close).
  void Drop() {
    if (closed_) return;
    closed_ = true;
    ++write_gen_;
    write_timer_.cancel();
    beast::error_code ignored;
    ws_.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
    ws_.next_layer().close(ignored);
    out_.clear();
    pending_ = 0;
    // The handler goes with its last call: it may hold this channel.
    auto handler = std::move(handler_);
    handler->OnClosed();
  }

  std::shared_ptr<HttpServer::Impl> server_;
  websocket::stream<tcp::socket> ws_;
  asio::steady_timer write_timer_;
  beast::flat_buffer buffer_;
  std::string address_;
  ConnectionLimiter::Lane lane_;
  WebSocketOptions options_;
  std::shared_ptr<WebSocketHandler> handler_;  // null once closed
  std::atomic<size_t> pending_{0};
  std::deque<Out> out_;
  uint64_t write_gen_ = 0;
  bool open_ = false;
  bool reading_ = false;
  bool held_ = false;  // the handler asked for no message until ResumeReads()
  bool writing_ = false;
  bool closing_ = false;
  bool closed_ = false;
};

}  // namespace

void StartWebSocket(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket,
                    std::string address, ConnectionLimiter::Lane lane,
                    http::request<http::string_body> request, WebSocketOptions options,
                    std::shared_ptr<WebSocketHandler> handler) {
  std::make_shared<WsConnection>(std::move(server), std::move(socket), std::move(address), lane,
                                 options, std::move(handler))
      ->Accept(std::move(request));
}

}  // namespace kiln::broker
