#include "tests/bench/bench_sample.hpp"

namespace kiln::bench {
namespace {

using nlohmann::json;

std::optional<double> NumberField(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

std::string ErrorCodeOf(const json& j) {
  auto it = j.find("error");
  if (it == j.end() || !it->is_object()) return "";
  auto code = it->find("code");
  return code != it->end() && code->is_string() ? code->get<std::string>() : "";
}

Sample SampleFromRecord(const json& record) {
  Sample s;
  const std::string code = ErrorCodeOf(record);
  auto status = record.find("status");
  std::string st = status != record.end() && status->is_string() ? status->get<std::string>() : "?";
  s.ok = st == "succeeded";
  s.outcome = s.ok || code.empty() ? st : st + "/" + code;
  s.duration_ms = NumberField(record, "duration_ms");
  s.queued_ms = NumberField(record, "queued_ms");
  auto worker = record.find("worker");
  if (worker != record.end() && worker->is_string()) s.worker = worker->get<std::string>();
  return s;
}

}  // namespace kiln::bench
