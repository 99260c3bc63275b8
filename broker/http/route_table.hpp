// RouteTable: the HTTP API's routes in one table — method, path pattern,
// name (the `route` label of kiln_http_requests_total), who may call it and
// whether its handler blocks (calls Redis) — and the matching of a request.
//
//   RouteTable routes({{"GET", "/v1/executions/{id}", "get", Access::kToken, true}, ...});
//   RouteTable::Match m = routes.Find("GET", "/v1/executions/ex_1");  // m.params == {"ex_1"}
//
// A path that exists under other methods is kMethodNotAllowed with the
// methods in `allow` (for 405 and its Allow header); anything else is
// kNotFound. Parameters match one non-empty segment. Pure; any thread after
// construction.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::broker {

enum class Access {
  kPublic,  // no token (health, metrics)
  kToken,   // a tenant's or an admin's token
  kAdmin,   // an admin token
};

struct RouteSpec {
  std::string method;
  std::string pattern;  // "/v1/executions/{id}/events"
  std::string name;
  Access access = Access::kToken;
  bool blocking = true;  // its handler calls Redis: run it on the work pool
};

class RouteTable {
 public:
  struct Match {
    enum class Kind { kFound, kNotFound, kMethodNotAllowed };
    Kind kind = Kind::kNotFound;
    size_t index = 0;  // into routes(): the route, or the path's first one for 405
    std::vector<std::string> params;
    std::string allow;  // "GET, POST" when kMethodNotAllowed
  };

  explicit RouteTable(std::vector<RouteSpec> routes);

  Match Find(std::string_view method, std::string_view path) const;
  // The metrics label for a request: the route's name (of the path's first
  // route when only the method is wrong), or "other".
  std::string_view NameOf(std::string_view method, std::string_view path) const;
  const std::vector<RouteSpec>& routes() const { return routes_; }

 private:
  // Parameters of `path` when it has the route's shape, else false.
  static bool Matches(const std::vector<std::string>& segments, std::string_view path,
                      std::vector<std::string>* params);

  std::vector<RouteSpec> routes_;
  std::vector<std::vector<std::string>> segments_;  // per route; "{" marks a parameter
};

}  // namespace kiln::broker
