#include "worker/egress/egress_gateway.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <future>
#include <set>

#include "common/log/logging.hpp"
#include "common/protocol/messages.hpp"
#include "common/thread_name.hpp"

namespace kiln::worker {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

const common::SubsystemLog kLog("egress");

constexpr size_t kMaxHeadBytes = 16 * 1024;
constexpr size_t kRelayBuffer = 16 * 1024;

std::string Reply(int code, const char* reason, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(code) + " " + reason +
         "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
         "X-Kiln-Egress: refused\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string_view View(beast::string_view s) { return {s.data(), s.size()}; }

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Hop-by-hop and proxy-only fields, not passed on to the destination.
bool HopByHop(std::string_view name) {
  for (const char* h : {"connection", "proxy-connection", "keep-alive", "proxy-authorization",
                        "proxy-authenticate", "te", "trailer", "upgrade"}) {
    if (IEquals(name, h)) return true;
  }
  return false;
}

}  // namespace

struct EgressGateway::State {
  explicit State(const EgressConfig& c, AddressFilter f) : config(c), filter(std::move(f)) {}
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  const EgressConfig config;
  const AddressFilter filter;
  std::map<std::string, asio::ip::address> hosts;
};

class Conn;

struct EgressLease::Job {
  Job(asio::io_context& io, EgressJob s, int fd) : acceptor(io), spec(std::move(s)), limit_fd(fd) {}

  tcp::acceptor acceptor;
  const EgressJob spec;
  const int limit_fd;  // the lease's; written only while !closed
  bool closed = false;
  uint64_t requests = 0;
  common::NetworkUsage usage;
  std::map<std::string, size_t> index;  // "host:port" -> usage.destinations
  std::set<std::shared_ptr<Conn>> conns;
  std::string limit_message;

  void Record(const std::string& host, uint16_t port, bool allowed, const char* reason) {
    if (allowed) {
      ++usage.connections;
    } else {
      ++usage.refused;
    }
    const std::string key = host + ":" + std::to_string(port) + (allowed ? "" : "!");
    auto it = index.find(key);
    if (it == index.end()) {
      if (usage.destinations.size() >= common::protocol::kMaxNetworkDestinations) {
        usage.destinations_truncated = true;
        return;
      }
      it = index.emplace(key, usage.destinations.size()).first;
      usage.destinations.push_back({host, port, allowed, 0, allowed ? "" : reason});
    }
    ++usage.destinations[it->second].count;
  }
  // Counts `n` bytes; false (and every connection closed) past the cap.
  bool Account(size_t n, bool in);
  // Counts one request; false (and every connection closed) past the cap.
  bool CountRequest();
  void Trip(const char* limit, std::string message);
  void CloseAll();
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(EgressGateway::State& gw, std::shared_ptr<EgressLease::Job> job, tcp::socket client)
      : gw_(gw),
        job_(std::move(job)),
        client_(std::move(client)),
        upstream_(gw.io),
        timer_(gw.io),
        resolver_(gw.io) {
    parser_.header_limit(kMaxHeadBytes);
  }

  void Start() {
    Arm(gw_.config.request_timeout_ms);
    http::async_read_header(client_, buf_, parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (self->closed_) return;
                              if (ec) return self->Close();
                              self->OnHead();
                            });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ig;
    timer_.cancel();
    resolver_.cancel();
    client_.close(ig);
    upstream_.close(ig);
    job_->conns.erase(shared_from_this());
  }

 private:
  // Closes the connection unless something happened within `ms` (re-armed
  // by every relayed byte through last_).
  void Arm(uint64_t ms) {
    deadline_ms_ = ms;
    last_ = Clock::now();
    timer_.expires_after(std::chrono::milliseconds(ms));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) { self->OnTimer(ec); });
  }
  void OnTimer(beast::error_code ec) {
    if (ec || closed_) return;
    const auto due = last_ + std::chrono::milliseconds(deadline_ms_);
    if (Clock::now() < due) {
      timer_.expires_at(due);
      timer_.async_wait([self = shared_from_this()](beast::error_code e) { self->OnTimer(e); });
      return;
    }
    if (phase_ == Phase::kConnecting)
      return Refuse(504, "Gateway Timeout", "connect_failed",
                    "the destination did not answer in time");
    Close();
  }

  void OnHead() {
    const auto& req = parser_.get();
    const bool connect = req.method() == http::verb::connect;
    const std::string_view target = View(req.target());
    std::string_view authority;
    if (connect) {
      authority = target;
    } else if (target.size() > 7 && IEquals(target.substr(0, 7), "http://")) {
      std::string_view rest = target.substr(7);
      const size_t end = rest.find_first_of("/?#");
      authority = rest.substr(0, end);
      path_ = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
      if (path_[0] != '/') path_ = "/" + path_;
    } else {
      return BadRequest(
          "send requests through the proxy: CONNECT host:port, or an absolute "
          "http:// URL");
    }
    if (authority.find('@') != std::string_view::npos) return BadRequest("no user info in URLs");
    uint16_t port = connect ? 0 : 80;
    std::string_view host = authority;
    if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      unsigned p = 0;
      std::string_view digits = authority.substr(colon + 1);
      auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
      if (err != std::errc() || end != digits.data() + digits.size() || p == 0 || p > 65535) {
        return BadRequest("a bad port");
      }
      port = static_cast<uint16_t>(p);
    }
    if (port == 0) return BadRequest("CONNECT needs host:port");
    auto normal = common::NormalizeHost(host);
    if (!normal.ok()) return BadRequest("the host must be a DNS name or an IPv4 address");
    host_ = *std::move(normal);
    port_ = port;
    connect_ = connect;
    if (!job_->CountRequest()) return job_->Record(host_, port_, false, "limit");
    if (!common::Matches(job_->spec.allow, host_, port_)) {
      return Refuse(
          403, "Forbidden", "not_allowed",
          host_ + ":" + std::to_string(port_) + " is not on this job's network allowlist");
    }
    if (!connect_) head_ = ForwardHead(req);
    phase_ = Phase::kConnecting;
    Arm(gw_.config.connect_timeout_ms);
    boost::system::error_code ec;
    if (auto it = gw_.hosts.find(host_); it != gw_.hosts.end()) {
      return ConnectTo({tcp::endpoint(it->second, port_)});
    }
    if (common::IsIpv4Literal(host_)) {
      return ConnectTo({tcp::endpoint(asio::ip::make_address_v4(host_, ec), port_)});
    }
    resolver_.async_resolve(
        host_, std::to_string(port_),
        [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type r) {
          // Closed, or already answered (the connect timeout's 504).
          if (self->closed_ || self->phase_ != Phase::kConnecting) return;
          if (ec) {
            return self->Refuse(502, "Bad Gateway", "resolve_failed",
                                self->host_ + " does not resolve");
          }
          std::vector<tcp::endpoint> eps;
          for (const auto& e : r) eps.push_back(e.endpoint());
          self->ConnectTo(std::move(eps));
        });
  }

  std::string ForwardHead(const http::request_parser<http::empty_body>::value_type& req) {
    std::string h;
    h.append(View(req.method_string())).append(" ").append(path_).append(" HTTP/1.1\r\n");
    bool has_host = false;
    for (const auto& f : req) {
      const std::string_view name = View(f.name_string());
      if (HopByHop(name)) continue;
      if (IEquals(name, "host")) has_host = true;
      h.append(name).append(": ").append(View(f.value())).append("\r\n");
    }
    if (!has_host)
      h += "Host: " + host_ + (port_ == 80 ? "" : ":" + std::to_string(port_)) + "\r\n";
    h += "Connection: close\r\n\r\n";
    return h;
  }

  void ConnectTo(std::vector<tcp::endpoint> eps) {
    std::vector<tcp::endpoint> ok;
    for (const auto& e : eps) {
      if (gw_.filter.Allowed(e.address())) ok.push_back(e);
    }
    if (ok.empty()) {
      return Refuse(403, "Forbidden", "address_refused",
                    host_ +
                        " resolves only to addresses jobs may not reach (loopback, "
                        "link-local, private, or this host's own)");
    }
    asio::async_connect(
        upstream_, ok, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
          if (self->closed_ || self->phase_ != Phase::kConnecting) return;
          if (ec) {
            return self->Refuse(
                502, "Bad Gateway", "connect_failed",
                self->host_ + ":" + std::to_string(self->port_) + " refused the connection");
          }
          self->OnConnected();
        });
  }

  void OnConnected() {
    job_->Record(host_, port_, true, "");
    phase_ = Phase::kRelaying;
    Arm(gw_.config.idle_timeout_ms);
    // What the client sent past its head goes first (a request body, or a
    // TLS hello sent without waiting for the 200).
    auto data = buf_.data();
    std::string first = connect_ ? std::string() : std::move(head_);
    first.append(static_cast<const char*>(data.data()), data.size());
    buf_.consume(buf_.size());
    if (!first.empty() && !job_->Account(first.size(), false)) return;
    auto start = [self = shared_from_this(), first = std::move(first)]() mutable {
      auto pending = std::make_shared<std::string>(std::move(first));
      asio::async_write(self->upstream_, asio::buffer(*pending),
                        [self, pending](beast::error_code ec, size_t) {
                          if (self->closed_) return;
                          if (ec) return self->Close();
                          self->Pump(true);
                          self->Pump(false);
                        });
    };
    if (!connect_) return start();
    auto ok = std::make_shared<std::string>("HTTP/1.1 200 Connection established\r\n\r\n");
    asio::async_write(client_, asio::buffer(*ok),
                      [self = shared_from_this(), ok, start = std::move(start)](
                          beast::error_code ec, size_t) mutable {
                        if (self->closed_) return;
                        if (ec) return self->Close();
                        start();
                      });
  }

  // One direction of the relay: `in` is destination -> job.
  void Pump(bool in) {
    tcp::socket& from = in ? upstream_ : client_;
    auto& b = in ? down_ : up_;
    from.async_read_some(asio::buffer(b), [self = shared_from_this(), in](beast::error_code ec,
                                                                          size_t n) {
      if (self->closed_) return;
      tcp::socket& to = in ? self->client_ : self->upstream_;
      if (ec) {
        boost::system::error_code ig;
        to.shutdown(tcp::socket::shutdown_send, ig);
        (in ? self->down_done_ : self->up_done_) = true;
        if (self->down_done_ && self->up_done_) self->Close();
        return;
      }
      if (!self->job_->Account(n, in)) return;
      self->last_ = Clock::now();
      auto& buf = in ? self->down_ : self->up_;
      asio::async_write(to, asio::buffer(buf.data(), n), [self, in](beast::error_code e, size_t) {
        if (self->closed_) return;
        if (e) return self->Close();
        self->Pump(in);
      });
    });
  }

  void BadRequest(const std::string& why) {
    ++job_->usage.refused;
    if (!job_->CountRequest()) return;
    Answer(Reply(400, "Bad Request", "kiln egress gateway: " + why + "\n"));
  }

  void Refuse(int code, const char* reason, const char* why, const std::string& message) {
    job_->Record(host_, port_, false, why);
    kLog.Debug({.job = job_->spec.job_id}, "refused {}:{}: {}", host_, port_, message);
    Answer(Reply(code, reason, "kiln egress gateway: " + message + "\n"));
  }

  void Answer(std::string text) {
    phase_ = Phase::kAnswering;
    boost::system::error_code ig;
    resolver_.cancel();
    upstream_.close(ig);
    auto msg = std::make_shared<std::string>(std::move(text));
    asio::async_write(
        client_, asio::buffer(*msg),
        [self = shared_from_this(), msg](beast::error_code, size_t) { self->Close(); });
  }

  enum class Phase { kHead, kConnecting, kRelaying, kAnswering };

  EgressGateway::State& gw_;
  std::shared_ptr<EgressLease::Job> job_;
  tcp::socket client_;
  tcp::socket upstream_;
  asio::steady_timer timer_;
  tcp::resolver resolver_;
  beast::flat_buffer buf_;
  http::request_parser<http::empty_body> parser_;
  Phase phase_ = Phase::kHead;
  std::string host_;
  uint16_t port_ = 0;
  bool connect_ = false;
  std::string path_;
  std::string head_;
  std::array<char, kRelayBuffer> up_{};
  std::array<char, kRelayBuffer> down_{};
  bool up_done_ = false;
  bool down_done_ = false;
  bool closed_ = false;
  uint64_t deadline_ms_ = 0;
  Clock::time_point last_;
};

bool EgressLease::Job::Account(size_t n, bool in) {
  (in ? usage.bytes_in : usage.bytes_out) += n;
  if (usage.bytes_in + usage.bytes_out <= spec.max_bytes) return true;
  Trip("bytes", "bytes: the job moved more than " + std::to_string(spec.max_bytes) +
                    " bytes through the network (its cap)");
  return false;
}

bool EgressLease::Job::CountRequest() {
  if (++requests <= spec.max_connections) return true;
  Trip("connections", "connections: the job asked for more than " +
                          std::to_string(spec.max_connections) + " connections (its cap)");
  return false;
}

void EgressLease::Job::Trip(const char* limit, std::string message) {
  if (closed) return;
  if (usage.limit.empty()) {
    usage.limit = limit;
    limit_message = std::move(message);
    kLog.Info({.job = spec.job_id}, "network cap broken: {}", limit_message);
  }
  uint64_t one = 1;
  ssize_t w = ::write(limit_fd, &one, sizeof one);
  (void)w;
  CloseAll();
}

void EgressLease::Job::CloseAll() {
  boost::system::error_code ig;
  acceptor.close(ig);
  auto all = conns;  // Close erases from conns
  for (const auto& c : all) c->Close();
}

namespace {

void Accept(EgressGateway::State& gw, std::shared_ptr<EgressLease::Job> job) {
  job->acceptor.async_accept([&gw, job](beast::error_code ec, tcp::socket s) {
    if (job->closed || !job->acceptor.is_open()) return;
    if (!ec) {
      if (job->conns.size() >= gw.config.max_open) {
        boost::system::error_code ig;
        s.close(ig);  // the job holds enough at once; it may retry
      } else {
        auto c = std::make_shared<Conn>(gw, job, std::move(s));
        job->conns.insert(c);
        c->Start();
      }
    }
    Accept(gw, job);
  });
}

// Runs fn on the gateway's thread and waits for it.
template <typename F>
auto OnThread(EgressGateway::State& gw, F fn) -> decltype(fn()) {
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto done = task.get_future();
  asio::post(gw.io, [&task] { task(); });
  return done.get();
}

}  // namespace

common::StatusOr<std::unique_ptr<EgressGateway>> EgressGateway::Create(const EgressConfig& config) {
  ASSIGN_OR_RETURN(AddressFilter filter,
                   AddressFilter::Create(config.allow_private, config.deny_own_addresses));
  auto state = std::make_shared<State>(config, std::move(filter));
  for (const auto& [name, address] : config.hosts) {
    auto host = common::NormalizeHost(name);
    boost::system::error_code ec;
    auto a = asio::ip::make_address(address, ec);
    if (!host.ok() || ec) {
      return common::InvalidRequest("hosts: '" + name + ": " + address +
                                    "' needs a DNS name and an IP address");
    }
    state->hosts[*host] = a;
  }
  std::unique_ptr<EgressGateway> g(new EgressGateway());
  g->state_ = state;
  g->thread_ = std::thread([state] {
    common::NameThisThread("kiln-egress");
    state->io.run();
  });
  return g;
}

EgressGateway::~EgressGateway() {
  state_->work.reset();
  state_->io.stop();
  if (thread_.joinable()) thread_.join();
}

common::StatusOr<std::unique_ptr<EgressLease>> EgressGateway::Open(common::UniqueFd listener,
                                                                   EgressJob job) {
  common::UniqueFd limit(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!limit.valid()) return common::ErrnoStatus("eventfd", errno);
  auto j = std::make_shared<EgressLease::Job>(state_->io, std::move(job), limit.get());
  State& gw = *state_;
  const int fd = listener.Release();
  common::Status st = OnThread(gw, [&]() -> common::Status {
    boost::system::error_code ec;
    j->acceptor.assign(tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      return common::Internal("egress listener: " + ec.message());
    }
    Accept(gw, j);
    return common::Status::Ok();
  });
  RETURN_IF_ERROR(st);
  return std::make_unique<EgressLease>(state_, std::move(j), std::move(limit));
}

EgressLease::EgressLease(std::shared_ptr<EgressGateway::State> gateway, std::shared_ptr<Job> job,
                         common::UniqueFd limit_fd)
    : gateway_(std::move(gateway)), job_(std::move(job)), limit_fd_(std::move(limit_fd)) {}

EgressLease::~EgressLease() { Finish(); }

common::NetworkUsage EgressLease::Finish() {
  if (finished_) return usage_;
  finished_ = true;
  auto job = job_;
  std::tie(usage_, limit_message_) = OnThread(*gateway_, [job] {
    job->CloseAll();
    job->closed = true;
    return std::make_pair(job->usage, job->limit_message);
  });
  return usage_;
}

std::string EgressLease::LimitMessage() const {
  if (finished_) return limit_message_;
  auto job = job_;
  return OnThread(*gateway_, [job] { return job->limit_message; });
}

}  // namespace kiln::worker
