// Sample: the outcome of one kiln-bench job, whichever protocol carried it,
// and SampleFromRecord, which reads one from the job's record (the JSON of
// GET /v1/executions/{id}: what `wait: true` answers over HTTP and what a
// native `result` carries), so both protocols report the same figures.
//
//   Sample s = SampleFromRecord(json::parse(body));
//   s.latency_ms = ...;  // the caller times the round trip
//
// Plain values; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kiln::bench {

struct Sample {
  bool ok = false;        // the job's record says "succeeded"
  std::string outcome;    // "succeeded", "failed/EXECUTION_FAILED", "http 429/QUEUE_FULL", ...
  double latency_ms = 0;  // client: request sent -> record read
  std::optional<double> duration_ms;  // record: worker frame written -> process exited
  std::optional<double> queued_ms;
  // native only: request sent -> `accepted` read (the submit's own round trip)
  std::optional<double> accepted_ms;
  std::string worker;
  std::string body;  // kept only for the first failure
};

// ok, outcome (status, plus "/<error.code>" when not succeeded), duration_ms,
// queued_ms and worker of a record; body is left empty.
Sample SampleFromRecord(const nlohmann::json& record);

// The error code of a record ({"error": {"code"}}) or of an API error answer;
// "" when there is none.
std::string ErrorCodeOf(const nlohmann::json& j);

}  // namespace kiln::bench
