#include <string>

#include "broker/http/http_exchange.hpp"

namespace kiln::broker {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decoding of a query component ('+' is a space); a bad escape is kept as is.
std::string DecodeComponent(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 &&
               HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

void ParseQueryInto(std::string_view q, std::map<std::string, std::string>* out) {
  while (!q.empty()) {
    auto amp = q.find('&');
    std::string_view pair = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    std::string key = DecodeComponent(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : DecodeComponent(pair.substr(eq + 1));
    (*out)[std::move(key)] = std::move(value);
  }
}

}  // namespace

void ParseTarget(std::string_view target, std::string* path,
                 std::map<std::string, std::string>* query) {
  const auto q = target.find('?');
  *path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) ParseQueryInto(target.substr(q + 1), query);
}

std::string_view HttpRequest::Header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return v;
  }
  return {};
}

bool HttpRequest::HasHeader(std::string_view lower_name) const {
  for (const auto& [k, v] : headers) {
    if (k == lower_name) return true;
  }
  return false;
}

std::string HttpRequest::Param(const std::string& name) const {
  auto it = query.find(name);
  return it == query.end() ? std::string() : it->second;
}

}  // namespace kiln::broker
