// Parses and validates the body of POST /v1/executions into a JobSpec.
//
//   StatusOr<JobSpec> spec = ParseSubmitRequest(body, tenant, config);
//
// Pure function (no I/O): malformed JSON, unknown fields, wrong types, unknown
// languages, oversized code/input/files, bad paths and limits above the
// configured maxima come back as INVALID_REQUEST or LIMIT_EXCEEDED with a
// message naming the field (e.g. "files[1].path: ..."). So does everything a
// worker would refuse after dispatch: file names over 255 bytes, a file that
// is also another file's directory, NUL bytes in shell code, names a runtime
// cannot assign (common/runtime_names.hpp), a job too big for one protocol
// frame. Fills unset limits from config defaults. Any thread.
#pragma once

#include <string_view>

#include "broker/config.hpp"
#include "broker/job/job.hpp"
#include "common/status.hpp"

namespace kiln::broker {

// Session and conversation ids: 1-128 characters of [A-Za-z0-9._:-].
bool IsSessionName(const std::string& s);

common::StatusOr<JobSpec> ParseSubmitRequest(std::string_view body, const std::string& tenant,
                                             const BrokerConfig& config);

}  // namespace kiln::broker
