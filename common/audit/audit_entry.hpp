// AuditEntry: what the audit trail records about one finished execution, and
// its canonical JSON, the exact text the hash chain covers (audit_chain.hpp).
//
//   AuditEntry e;  e.job_id = id;  e.code = code;  e.code_sha256 = Sha256Hex(code);  ...
//   std::string text = e.Canonical();   // {"approval":"auto","code":...} keys sorted
//
// Canonical JSON: one line, keys sorted (nlohmann's object is a std::map), no
// floating-point values (durations are whole milliseconds), absent optionals as
// null (except code_bytes, left out when absent), invalid UTF-8 replaced by
// U+FFFD (the digests are taken over the original bytes, so they stay exact). Re-serialising a
// parsed canonical text gives the same text (CanonicalJson), so exported entries can be verified
// offline. Plain data; any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace kiln::common {

struct AuditEntry {
  static constexpr int kVersion = 1;  // the "v" field
  static constexpr size_t kStdoutHeadChars = 500;

  int64_t time_ms = 0;  // when the job ended (Unix ms)
  std::string tenant;
  std::string session_id;  // empty for one-shot jobs
  std::string runtime;     // python, javascript, shell
  std::string job_id;
  std::string code;         // the submitted code, or an excerpt of it (code_bytes set)
  std::string code_sha256;  // of the submitted code bytes, always the whole code
  // Set when `code` is an excerpt (a refused submission, kept bounded): the
  // size of the submitted code. Written only when set, so entries without it
  // have the same text as before the field existed.
  std::optional<uint64_t> code_bytes;
  std::string input_sha256;   // of the input JSON text ("" input: digest of "")
  std::string output_sha256;  // OutputDigest(stdout, stderr, result)
  std::string stdout_head;    // Utf8Head(filtered stdout, kStdoutHeadChars)
  std::optional<int32_t> exit_code;
  std::string status;                  // the record's status, e.g. "succeeded"
  std::optional<int64_t> duration_ms;  // the worker's run time; null if it never ran
  std::string approval;                // "auto", "admin:<name>" or "none"
  uint32_t redactions = 0;             // secrets masked in the output
  std::string worker;                  // empty if it never ran
  std::vector<std::string> warnings;   // policy rules that warned
  // Jobs with network only (written only when set, as code_bytes): the
  // egress gateway's account, every destination allowed and refused
  // (common::NetworkUsage::ToJson: integers, strings and booleans only).
  std::optional<nlohmann::json> network;
  // Jobs that declared tools only (written only when set): each call in
  // order, {call_id, name, state, arguments_sha256, answer_sha256 (null
  // when unanswered)}; state answered, error or unanswered. Digests, not
  // contents: arguments and answers may be large, and the client has them.
  std::optional<nlohmann::json> tools;

  nlohmann::json ToJson() const;
  // Strict: every field present with its type, "v" equal to kVersion.
  static StatusOr<AuditEntry> FromJson(const nlohmann::json& j);
  std::string Canonical() const { return CanonicalJson(ToJson()); }

  // The canonical text of any JSON value (see above).
  static std::string CanonicalJson(const nlohmann::json& j);
};

// The first `max_chars` UTF-8 characters of `s`, never cutting a character in
// two (an invalid byte counts as one character).
std::string Utf8Head(std::string_view s, size_t max_chars);

// SHA-256 hex of the netstrings of stdout, stderr and the result JSON text
// ("<len>:<bytes>," each), so no byte can move between them unnoticed.
std::string OutputDigest(std::string_view stdout_data, std::string_view stderr_data,
                         std::string_view result_json);

}  // namespace kiln::common
