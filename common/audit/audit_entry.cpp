#include "common/audit/audit_entry.hpp"

#include "common/audit/sha256.hpp"
#include "common/json/bounded_json.hpp"

namespace kiln::common {
namespace {

using Json = nlohmann::json;

// Reads one field of an entry with the type the writer uses.
class FieldReader {
 public:
  explicit FieldReader(const Json& j) : j_(j) {}

  void String(const char* key, std::string* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_string()) return Fail(key, "expected a string");
    *out = v->get<std::string>();
  }
  template <typename Int>
  void Integer(const char* key, Int* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_number_integer()) return Fail(key, "expected an integer");
    *out = v->get<Int>();
  }
  template <typename Int>
  void OptionalInteger(const char* key, std::optional<Int>* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      out->reset();
      return;
    }
    if (!v->is_number_integer()) return Fail(key, "expected an integer or null");
    *out = v->get<Int>();
  }
  void Strings(const char* key, std::vector<std::string>* out) {
    const Json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_array()) return Fail(key, "expected a list of strings");
    for (const auto& s : *v) {
      if (!s.is_string()) return Fail(key, "expected a list of strings");
      out->push_back(s.get<std::string>());
    }
  }
  const Status& status() const { return status_; }

 private:
  const Json* Find(const char* key) {
    if (!status_.ok()) return nullptr;
    auto it = j_.find(key);
    if (it == j_.end()) {
      Fail(key, "missing");
      return nullptr;
    }
    return &*it;
  }
  void Fail(const char* key, const std::string& what) {
    if (status_.ok()) status_ = InvalidRequest(std::string("audit entry: ") + key + ": " + what);
  }

  const Json& j_;
  Status status_;
};

}  // namespace

Json AuditEntry::ToJson() const {
  Json j = Json::object();
  j["v"] = kVersion;
  j["time_ms"] = time_ms;
  j["tenant"] = tenant;
  j["session_id"] = session_id;
  j["runtime"] = runtime;
  j["job_id"] = job_id;
  j["code"] = code;
  j["code_sha256"] = code_sha256;
  if (code_bytes) j["code_bytes"] = *code_bytes;
  j["input_sha256"] = input_sha256;
  j["output_sha256"] = output_sha256;
  j["stdout_head"] = stdout_head;
  j["exit_code"] = exit_code ? Json(*exit_code) : Json(nullptr);
  j["status"] = status;
  j["duration_ms"] = duration_ms ? Json(*duration_ms) : Json(nullptr);
  j["approval"] = approval;
  j["redactions"] = redactions;
  j["worker"] = worker;
  j["warnings"] = warnings;
  if (network) j["network"] = *network;
  if (tools) j["tools"] = *tools;
  return j;
}

StatusOr<AuditEntry> AuditEntry::FromJson(const Json& j) {
  if (!j.is_object()) return InvalidRequest("audit entry: expected an object");
  AuditEntry e;
  FieldReader r(j);
  int version = 0;
  r.Integer("v", &version);
  r.Integer("time_ms", &e.time_ms);
  r.String("tenant", &e.tenant);
  r.String("session_id", &e.session_id);
  r.String("runtime", &e.runtime);
  r.String("job_id", &e.job_id);
  r.String("code", &e.code);
  r.String("code_sha256", &e.code_sha256);
  if (j.contains("code_bytes")) r.OptionalInteger("code_bytes", &e.code_bytes);
  r.String("input_sha256", &e.input_sha256);
  r.String("output_sha256", &e.output_sha256);
  r.String("stdout_head", &e.stdout_head);
  r.OptionalInteger("exit_code", &e.exit_code);
  r.String("status", &e.status);
  r.OptionalInteger("duration_ms", &e.duration_ms);
  r.String("approval", &e.approval);
  r.Integer("redactions", &e.redactions);
  r.String("worker", &e.worker);
  r.Strings("warnings", &e.warnings);
  if (auto n = j.find("network"); n != j.end()) {
    if (!n->is_object()) return InvalidRequest("audit entry: network: expected an object");
    e.network = *n;
  }
  if (auto t = j.find("tools"); t != j.end()) {
    if (!t->is_array()) return InvalidRequest("audit entry: tools: expected an array");
    e.tools = *t;
  }
  if (!r.status().ok()) return r.status();
  if (version != kVersion) {
    return InvalidRequest("audit entry: v: unsupported version " + std::to_string(version));
  }
  return e;
}

std::string AuditEntry::CanonicalJson(const Json& j) { return DumpJson(j); }

std::string Utf8Head(std::string_view s, size_t max_chars) {
  size_t i = 0;
  size_t chars = 0;
  while (i < s.size() && chars < max_chars) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t len = lead < 0x80           ? 1
                 : (lead >> 5) == 0x6  ? 2
                 : (lead >> 4) == 0xE  ? 3
                 : (lead >> 3) == 0x1E ? 4
                                       : 1;
    // A truncated or malformed sequence: its lead byte counts as one character.
    if (i + len > s.size()) len = 1;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        len = 1;
        break;
      }
    }
    i += len;
    ++chars;
  }
  return std::string(s.substr(0, i));
}

std::string OutputDigest(std::string_view stdout_data, std::string_view stderr_data,
                         std::string_view result_json) {
  Sha256 h;
  for (std::string_view part : {stdout_data, stderr_data, result_json}) {
    h.Update(std::to_string(part.size()));
    h.Update(":");
    h.Update(part);
    h.Update(",");
  }
  return h.FinishHex();
}

}  // namespace kiln::common
