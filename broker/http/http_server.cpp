#include "broker/http/http_server.hpp"

#include <boost/beast/core.hpp>
#include <charconv>

#include "broker/http/http_server_impl.hpp"
#include "common/log/logging.hpp"
#include "common/thread_name.hpp"

namespace kiln::broker {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using common::Code;
using common::Status;

const common::SubsystemLog kLog("http");

}  // namespace

void HttpServer::Impl::Refuse(tcp::socket socket, const std::string& address) {
  // Written without reading the request: a client reads an early answer.
  const bool per_address = limiter.open() < options.connections.max_total;
  const Status st = per_address
                        ? Status(Code::kRateLimited, "too many connections from " + address)
                        : Status(Code::kUnavailable, "the broker is at its connection limit");
  HttpResponse r = errors(st);
  if (observer) observer(nullptr, per_address ? 429 : 503, r.body.size());
  auto text = std::make_shared<std::string>(
      "HTTP/1.1 " + std::string(per_address ? "429 Too Many Requests" : "503 Service Unavailable") +
      "\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(r.body.size()) + "\r\n\r\n" + r.body);
  auto sock = std::make_shared<tcp::socket>(std::move(socket));
  auto timer = std::make_shared<asio::steady_timer>(sock->get_executor());
  timer->expires_after(std::chrono::seconds(1));
  timer->async_wait([sock](beast::error_code ec) {
    if (!ec) {
      beast::error_code ignored;
      sock->close(ignored);
    }
  });
  asio::async_write(*sock, asio::buffer(*text), [sock, timer, text](beast::error_code, size_t) {
    beast::error_code ignored;
    timer->cancel();
    sock->shutdown(tcp::socket::shutdown_both, ignored);
    sock->close(ignored);
  });
}

void HttpServer::Impl::Accept() {
  acceptor.async_accept(
      asio::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
        if (self->stopping) return;
        if (ec) {
          // EMFILE and friends: back off a little instead of spinning.
          kLog.Warn({}, "accept failed: {}", ec.message());
          auto t = std::make_shared<asio::steady_timer>(self->ioc, std::chrono::milliseconds(50));
          t->async_wait([self, t](beast::error_code) { self->Accept(); });
          return;
        }
        beast::error_code aec;
        auto peer = s.remote_endpoint(aec);
        const std::string address = aec ? std::string("?") : peer.address().to_string();
        s.set_option(tcp::no_delay(true), aec);
        const auto lane = self->limiter.Admit(address);
        if (lane == ConnectionLimiter::Lane::kRefused) {
          self->Refuse(std::move(s), address);
        } else {
          StartConnection(self, std::move(s), address, lane);
        }
        self->Accept();
      });
}

common::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(HttpServerOptions options,
                                                                 Handler handler,
                                                                 ErrorResponse errors,
                                                                 Observer observer) {
  const std::string listen = options.listen;
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return common::InvalidRequest("broker.http.listen: expected host:port, got " + listen);
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  auto [p, ec] = std::from_chars(listen.data() + colon + 1, listen.data() + listen.size(), port);
  if (ec != std::errc() || p != listen.data() + listen.size() || port < 0 || port > 65535) {
    return common::InvalidRequest("broker.http.listen: bad port in " + listen);
  }
  auto impl = std::make_shared<Impl>(std::move(options), std::move(handler), std::move(errors),
                                     std::move(observer));
  try {
    tcp::resolver resolver(impl->ioc);
    auto results = resolver.resolve(host.empty() ? "0.0.0.0" : host, std::to_string(port),
                                    tcp::resolver::passive);
    const tcp::endpoint ep = *results.begin();
    impl->acceptor.open(ep.protocol());
    impl->acceptor.set_option(asio::socket_base::reuse_address(true));
    impl->acceptor.bind(ep);
    impl->acceptor.listen(asio::socket_base::max_listen_connections);
    impl->port = impl->acceptor.local_endpoint().port();
  } catch (const std::exception& e) {
    return common::InvalidRequest("broker.http.listen: cannot listen on " + listen + ": " +
                                  e.what());
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return impl_->port; }

size_t HttpServer::connections() const { return impl_->limiter.open(); }

uint64_t HttpServer::body_bytes() const { return impl_->body_bytes.load(); }

size_t HttpServer::reserve_connections() const { return impl_->limiter.open_reserve(); }

void HttpServer::After(std::chrono::milliseconds delay, std::function<void()> fn) {
  auto t = std::make_shared<asio::steady_timer>(impl_->ioc, delay);
  t->async_wait([t, fn = std::move(fn)](beast::error_code ec) {
    if (!ec) fn();
  });
}

void HttpServer::Start() {
  impl_->Accept();
  const uint32_t n = std::max<uint32_t>(1, impl_->options.io_threads);
  for (uint32_t i = 0; i < n; ++i) {
    impl_->threads.emplace_back([impl = impl_] {
      common::NameThisThread("kiln-http-io");
      for (;;) {
        try {
          impl->ioc.run();
          return;
        } catch (const std::exception& e) {
          kLog.Error({}, "HTTP I/O thread: {}", e.what());
        }
      }
    });
  }
}

void HttpServer::Stop() {
  if (impl_->stopping.exchange(true)) return;
  impl_->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

}  // namespace kiln::broker