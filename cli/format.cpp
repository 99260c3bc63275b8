#include "cli/format.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace kiln::cli {
namespace {

using nlohmann::json;

// A field as display text: strings as is, numbers and others as JSON, "-" for
// missing or null.
std::string Text(const json& object, const char* key) {
  if (!object.is_object()) return "-";
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "-";
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

std::string Join(const json& array, const char* sep) {
  if (!array.is_array() || array.empty()) return "-";
  std::string out;
  for (const auto& v : array) {
    if (!out.empty()) out += sep;
    out += v.is_string() ? v.get<std::string>() : v.dump();
  }
  return out;
}

void Line(std::string* out, const std::string& label, const std::string& value) {
  std::string padded = label + ":";
  padded.resize(std::max<size_t>(padded.size() + 1, 12), ' ');
  *out += padded + value + "\n";
}

}  // namespace

std::string FormatDurationMs(const json& ms) {
  if (!ms.is_number()) return "-";
  double v = ms.get<double>();
  char buf[64];
  if (v < 1000) {
    std::snprintf(buf, sizeof buf, "%.1f ms", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", v / 1000);
  }
  return buf;
}

std::string FormatAge(int64_t then_ms, int64_t now_ms) {
  if (then_ms <= 0) return "never";
  int64_t age = std::max<int64_t>(now_ms - then_ms, 0);
  char buf[64];
  if (age < 10'000) {
    std::snprintf(buf, sizeof buf, "%.1fs ago", static_cast<double>(age) / 1000);
  } else if (age < 120'000) {
    std::snprintf(buf, sizeof buf, "%llds ago", static_cast<long long>(age / 1000));
  } else if (age < 7'200'000) {
    std::snprintf(buf, sizeof buf, "%lldm ago", static_cast<long long>(age / 60'000));
  } else {
    std::snprintf(buf, sizeof buf, "%lldh ago", static_cast<long long>(age / 3'600'000));
  }
  return buf;
}

std::string FormatRecordSummary(const json& record) {
  if (!record.is_object()) return record.dump() + "\n";
  std::string out;
  Line(&out, "id", Text(record, "id"));
  Line(&out, "status", Text(record, "status"));
  if (Text(record, "signal") != "-") {
    Line(&out, "signal", Text(record, "signal"));
  } else {
    Line(&out, "exit code", Text(record, "exit_code"));
  }
  Line(&out, "duration", FormatDurationMs(record.value("duration_ms", json())));
  Line(&out, "worker", Text(record, "worker"));
  if (Text(record, "language") != "-") Line(&out, "language", Text(record, "language"));
  if (Text(record, "session_id") != "-") Line(&out, "session", Text(record, "session_id"));
  if (Text(record, "queue_position") != "-") {
    Line(&out, "queue pos", Text(record, "queue_position"));
  }
  auto error = record.find("error");
  if (error != record.end() && error->is_object()) {
    std::string e = Text(*error, "code") + ": " + Text(*error, "message");
    if (Text(*error, "type") != "-") e += " (" + Text(*error, "type") + ")";
    Line(&out, "error", e);
  } else {
    Line(&out, "error", "-");
  }
  if (record.value("truncated", false)) Line(&out, "output", "truncated");
  return out;
}

std::string FormatWorkersTable(const json& workers, int64_t now_ms, bool wide) {
  if (!workers.is_array() || workers.empty()) return "no workers connected\n";
  std::vector<std::vector<std::string>> rows = {
      {"ID", "RUNTIMES", "SLOTS", "RUNNING", "LAYERS", "HEARTBEAT"}};
  for (const auto& w : workers) {
    std::string id = Text(w, "id");
    if (w.value("draining", false)) id += " (draining)";
    int64_t heartbeat = 0;
    if (auto it = w.find("last_heartbeat_ms"); it != w.end() && it->is_number()) {
      heartbeat = it->get<int64_t>();
    }
    const json layers = w.value("sandbox_layers", json::array());
    std::string layer_text =
        wide || !layers.is_array() ? Join(layers, ",") : std::to_string(layers.size());
    rows.push_back({id, Join(w.value("runtimes", json()), ","), Text(w, "slots"),
                    Text(w, "running"), layer_text, FormatAge(heartbeat, now_ms)});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string FormatHealth(const json& health) {
  std::string out = Text(health, "status") + ": redis " + Text(health, "redis");
  out += ", " + Text(health, "workers") + " workers, " + Text(health, "queued") + " queued\n";
  return out;
}

}  // namespace kiln::cli
