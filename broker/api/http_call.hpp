// HttpApi::Call (one request being handled) and the JSON answers every
// handler gives. Internal to broker/api: included by HttpApi's .cpp files only.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "broker/api/http_api.hpp"
#include "broker/http/http_exchange.hpp"
#include "broker/job/job.hpp"
#include "common/json/bounded_json.hpp"
#include "common/status.hpp"

namespace kiln::broker {

// As every answer is written: invalid UTF-8 in output becomes U+FFFD.
inline HttpResponse JsonResponse(int status, const nlohmann::json& body, HttpHeaders headers = {}) {
  return HttpResponse{status, common::DumpJson(body), "application/json", std::move(headers)};
}

// The API's error object with its HTTP status; 401 names the scheme, 429
// and 503 say when to retry.
inline HttpResponse ErrorResponse(const common::Status& st) {
  HttpHeaders headers;
  if (st.code() == common::Code::kUnauthorized) headers.emplace_back("WWW-Authenticate", "Bearer");
  const int status = common::HttpStatusFor(st.code());
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  return JsonResponse(status, ErrorJson(st), std::move(headers));
}

struct HttpApi::Call {
  std::shared_ptr<HttpExchange> ex;
  Caller caller;
  std::vector<std::string> params;
  QuotaCounter::Hold request_hold;  // released when the handler returns

  const HttpRequest& req() const { return ex->request(); }
  void Reply(int status, const nlohmann::json& body, HttpHeaders headers = {}) const {
    ex->Reply(JsonResponse(status, body, std::move(headers)));
  }
  void Fail(const common::Status& st) const { ex->Reply(ErrorResponse(st)); }
};

}  // namespace kiln::broker
