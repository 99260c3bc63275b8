// Status and StatusOr<T>: how every fallible Kiln function reports failure.
//
//   StatusOr<Job> job = store.Load(id);
//   if (!job.ok()) return job.status().WithContext("loading job");
//
// The codes are a small closed set that maps one-to-one onto the error codes
// of the client API (docs/api.md), plus three internal ones (NOT_FOUND,
// UNAVAILABLE, INTERNAL). No exceptions cross component or thread boundaries:
// code that calls a throwing library catches at the call and returns a Status.
// Values are plain data; any thread may use them.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kiln::common {

enum class Code {
  kOk,
  kInvalidRequest,
  kUnauthorized,
  kForbidden,
  kLimitExceeded,
  kRuntimeUnavailable,
  kSecurityBlocked,
  kQueueFull,
  kSessionNotFound,
  kSessionForbidden,
  kSessionLanguageMismatch,
  kSessionBusyLimit,
  kSessionLost,
  kWorkerLost,
  kApprovalDenied,
  kApprovalExpired,
  kCancelled,
  kTimeout,
  kMemoryExceeded,
  kOutputLimit,
  kPackageInstallFailed,  // a job's `packages` could not be installed (job error.code)
  kNetworkNotAllowed,     // `network` asked for what the tenant's allowlist does not allow (403)
  kNetworkLimit,          // a job over its network caps (job error.code)
  kCodeExecutionDisabled,
  kRateLimited,       // a per-tenant or per-address cap on concurrent use or rate (429)
  kMethodNotAllowed,  // the path exists, the method does not (405)
  kPayloadTooLarge,   // a request body or frame above the configured maximum (413)
  kRequestTimeout,    // a request that did not arrive within its deadline (408)
  kToolCallClosed,    // a tool call answered, timed out, or whose execution ended (409)
  kNotFound,
  kUnavailable,
  kInternal,
};

// The API name of a code, e.g. "QUEUE_FULL".
std::string_view CodeName(Code code);
// The HTTP status an API error with this code answers with.
int HttpStatusFor(Code code);
// Whether a client may retry the same request later and expect success.
bool IsRetryable(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message", keeping the code; used as errors travel up.
  Status WithContext(std::string_view context) const;
  // "CODE: message", for logs.
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidRequest(std::string m) { return {Code::kInvalidRequest, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
// errno -> Status at a syscall wrapper: "what: strerror(err)".
Status ErrnoStatus(std::string_view what, int err);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "StatusOr built from an OK status");
    if (status_.ok()) status_ = Internal("StatusOr built from an OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  // The value, or `fallback` when not OK.
  T value_or(T fallback) && { return ok() ? std::move(*value_) : std::move(fallback); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kiln::common

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr)                     \
  do {                                            \
    ::kiln::common::Status kiln_status_ = (expr); \
    if (!kiln_status_.ok()) return kiln_status_;  \
  } while (0)

// ASSIGN_OR_RETURN(auto x, Foo()); declares x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
