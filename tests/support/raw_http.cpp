#include "tests/support/raw_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

namespace kiln::testing {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return std::string(s);
}

int MillisUntil(RawClock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - RawClock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

}  // namespace

std::string RawResponse::Describe() const {
  if (status == 0) return "(no response)";
  auto j = json();
  std::string out = std::to_string(status);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    out += " " + j["error"].value("code", std::string()) + ": " +
           j["error"].value("message", std::string());
  } else {
    out += " " + body.substr(0, 200);
  }
  return out;
}

std::string RawRequest(const std::string& method, const std::string& target,
                       const std::string& token, const std::string& body,
                       const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!token.empty()) out += "Authorization: Bearer " + token + "\r\n";
  bool framed = false;
  for (const auto& [k, v] : headers) {
    out += k + ": " + v + "\r\n";
    const std::string l = Lower(k);
    if (l == "content-length" || l == "transfer-encoding") framed = true;
  }
  if (!framed && (!body.empty() || method == "POST" || method == "PUT")) {
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  out += "\r\n";
  out += body;
  return out;
}

bool ChunkedDecoder::Feed(std::string* in, std::string* out) {
  while (true) {
    switch (state_) {
      case State::kSize: {
        auto eol = in->find("\r\n");
        if (eol == std::string::npos) return true;
        std::string_view line(in->data(), eol);
        line = line.substr(0, line.find(';'));
        uint64_t size = 0;
        auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
        if (ec != std::errc() || line.empty()) return false;
        in->erase(0, eol + 2);
        left_ = size;
        state_ = size == 0 ? State::kTrailer : State::kData;
        break;
      }
      case State::kData: {
        if (in->empty()) return true;
        const size_t n = std::min<uint64_t>(left_, in->size());
        out->append(*in, 0, n);
        in->erase(0, n);
        left_ -= n;
        if (left_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd:
        if (in->size() < 2) return true;
        if (in->compare(0, 2, "\r\n") != 0) return false;
        in->erase(0, 2);
        state_ = State::kSize;
        break;
      case State::kTrailer: {
        auto eol = in->find("\r\n");
        if (eol == std::string::npos) return true;
        in->erase(0, eol + 2);
        if (eol == 0) state_ = State::kDone;
        break;
      }
      case State::kDone:
        return true;
    }
  }
}

RawSocket::RawSocket(RawSocket&& o) noexcept
    : fd_(o.fd_), errno_(o.errno_), peer_closed_(o.peer_closed_), in_(std::move(o.in_)) {
  o.fd_ = -1;
}

RawSocket& RawSocket::operator=(RawSocket&& o) noexcept {
  if (this != &o) {
    Close();
    fd_ = o.fd_;
    errno_ = o.errno_;
    peer_closed_ = o.peer_closed_;
    in_ = std::move(o.in_);
    o.fd_ = -1;
  }
  return *this;
}

void RawSocket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

RawSocket RawSocket::Connect(int port, const RawOptions& options) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  RawSocket s;
  if (fd < 0) {
    s.errno_ = errno;
    return s;
  }
  s.fd_ = fd;
  if (options.rcvbuf > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options.rcvbuf, sizeof(options.rcvbuf));
  }
  if (!options.source.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, options.source.c_str(), &from.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
      s.errno_ = errno;
      s.Close();
      return s;
    }
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    s.errno_ = errno;
    s.Close();
    return s;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return s;
}

long RawSocket::SendSome(std::string_view data) {
  if (fd_ < 0) return -1;
  const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
  if (n >= 0) return n;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  errno_ = errno;
  return -1;
}

bool RawSocket::SendAll(std::string_view data, RawClock::time_point deadline) {
  while (!data.empty()) {
    const long n = SendSome(data);
    if (n < 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
    if (data.empty()) break;
    if (RawClock::now() >= deadline) return false;
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, std::min(MillisUntil(deadline), 50));
  }
  return true;
}

bool RawSocket::Readable(std::chrono::milliseconds wait) const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(wait.count())) > 0 &&
         (p.revents & (POLLIN | POLLHUP | POLLERR));
}

long RawSocket::Pump(std::chrono::milliseconds wait) {
  if (fd_ < 0 || peer_closed_) return -1;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return 0;
  long total = 0;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      total += n;
      continue;
    }
    if (n == 0) {
      peer_closed_ = true;
      return total > 0 ? total : -1;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return total;
    if (errno == EINTR) continue;
    errno_ = errno;
    peer_closed_ = true;
    return total > 0 ? total : -1;
  }
}

bool RawSocket::TakeHead(RawResponse* r) {
  auto end = in_.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  std::string_view head(in_.data(), end);
  auto eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  // "HTTP/1.1 200 OK"
  auto sp = status_line.find(' ');
  if (sp != std::string_view::npos) {
    std::string_view code = status_line.substr(sp + 1, 3);
    std::from_chars(code.data(), code.data() + code.size(), r->status);
  }
  size_t at = eol == std::string_view::npos ? head.size() : eol + 2;
  while (at < head.size()) {
    auto next = head.find("\r\n", at);
    if (next == std::string_view::npos) next = head.size();
    std::string_view line = head.substr(at, next - at);
    auto colon = line.find(':');
    if (colon != std::string_view::npos) {
      r->headers[Lower(std::string(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
    }
    at = next + 2;
  }
  in_.erase(0, end + 4);
  return true;
}

RawResponse RawSocket::ReadHead(RawClock::time_point deadline) {
  RawResponse r;
  while (!TakeHead(&r)) {
    if (peer_closed_ || RawClock::now() >= deadline) return RawResponse{};
    Pump(std::chrono::milliseconds(std::min(MillisUntil(deadline), 50)));
  }
  // 1xx answers (100 Continue) come before the real one.
  if (r.status >= 100 && r.status < 200) return ReadHead(deadline);
  return r;
}

RawResponse RawSocket::ReadResponse(RawClock::time_point deadline) {
  RawResponse r = ReadHead(deadline);
  if (r.status == 0) return r;
  ReadBody(&r, deadline);
  return r;
}

void RawSocket::ReadBody(RawResponse* response, RawClock::time_point deadline) {
  RawResponse& r = *response;
  if (r.status == 204 || r.status == 304) {
    r.complete = true;
    return;
  }
  if (Lower(r.header("transfer-encoding")) == "chunked") {
    ChunkedDecoder d;
    while (true) {
      if (!d.Feed(&in_, &r.body)) return;
      if (d.done()) {
        r.complete = true;
        return;
      }
      if (peer_closed_ || RawClock::now() >= deadline) return;
      Pump(std::chrono::milliseconds(std::min(MillisUntil(deadline), 50)));
    }
  }
  const std::string cl = r.header("content-length");
  if (!cl.empty()) {
    size_t want = 0;
    std::from_chars(cl.data(), cl.data() + cl.size(), want);
    while (in_.size() < want && !peer_closed_ && RawClock::now() < deadline) {
      Pump(std::chrono::milliseconds(std::min(MillisUntil(deadline), 50)));
    }
    const size_t n = std::min(want, in_.size());
    r.body = in_.substr(0, n);
    in_.erase(0, n);
    r.complete = n == want;
    return;
  }
  while (!peer_closed_ && RawClock::now() < deadline) {
    Pump(std::chrono::milliseconds(std::min(MillisUntil(deadline), 50)));
  }
  r.body = std::move(in_);
  in_.clear();
  r.complete = peer_closed_;
}

std::string RawSocket::ReadChunked(ChunkedDecoder* decoder, RawClock::time_point deadline) {
  std::string out;
  while (true) {
    if (!decoder->Feed(&in_, &out)) return out;
    if (!out.empty() || decoder->done()) return out;
    if (peer_closed_ || RawClock::now() >= deadline) return out;
    Pump(std::chrono::milliseconds(std::min(MillisUntil(deadline), 50)));
  }
}

bool RawSocket::WaitClosed(RawClock::time_point deadline) {
  while (!peer_closed_) {
    if (RawClock::now() >= deadline) return false;
    Pump(std::chrono::milliseconds(std::min(MillisUntil(deadline), 50)));
  }
  return true;
}

RawResponse RawExchange(int port, const std::string& request, std::chrono::milliseconds timeout,
                        const RawOptions& options) {
  const auto deadline = RawClock::now() + timeout;
  RawSocket s = RawSocket::Connect(port, options);
  if (!s.ok() || !s.SendAll(request, deadline)) return RawResponse{};
  return s.ReadResponse(deadline);
}

}  // namespace kiln::testing
