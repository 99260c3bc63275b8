#include "broker/http/route_table.hpp"

namespace kiln::broker {
namespace {

std::vector<std::string> Split(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.emplace_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

RouteTable::RouteTable(std::vector<RouteSpec> routes) : routes_(std::move(routes)) {
  for (const auto& r : routes_) segments_.push_back(Split(r.pattern));
}

bool RouteTable::Matches(const std::vector<std::string>& segments, std::string_view path,
                         std::vector<std::string>* params) {
  params->clear();
  size_t i = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    if (i > path.size()) return false;
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    const std::string& want = segments[s];
    if (!want.empty() && want.front() == '{') {
      if (part.empty()) return false;
      params->emplace_back(part);
    } else if (part != want) {
      return false;
    }
    i = j + 1;
  }
  return i == path.size() + 1;  // every segment of the path was used
}

RouteTable::Match RouteTable::Find(std::string_view method, std::string_view path) const {
  Match m;
  std::vector<std::string> params;
  for (size_t r = 0; r < routes_.size(); ++r) {
    if (!Matches(segments_[r], path, &params)) continue;
    if (routes_[r].method == method) {
      m.kind = Match::Kind::kFound;
      m.index = r;
      m.params = std::move(params);
      m.allow.clear();
      return m;
    }
    if (m.kind == Match::Kind::kNotFound) m.index = r;
    if (m.allow.find(routes_[r].method) == std::string::npos) {
      if (!m.allow.empty()) m.allow += ", ";
      m.allow += routes_[r].method;
    }
    m.kind = Match::Kind::kMethodNotAllowed;
  }
  return m;
}

std::string_view RouteTable::NameOf(std::string_view method, std::string_view path) const {
  Match m = Find(method, path);
  return m.kind == Match::Kind::kNotFound ? "other" : std::string_view(routes_[m.index].name);
}

}  // namespace kiln::broker
