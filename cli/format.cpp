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

int64_t IntOr(const json& object, const char* key, int64_t fallback) {
  if (!object.is_object()) return fallback;
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<int64_t>() : fallback;
}

// `line` with every byte that could hide or fake text on a terminal shown as
// an escape instead: control characters but tab (\x1b, \r, ...), DEL, and the
// Unicode bidirectional overrides and isolates (U+202A..U+202E,
// U+2066..U+2069, "Trojan Source"). A reviewer sees exactly what will run.
std::string VisibleLine(const std::string& line) {
  std::string out;
  char buf[16];
  for (size_t i = 0; i < line.size(); ++i) {
    auto c = static_cast<unsigned char>(line[i]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
      continue;
    }
    // UTF-8 of U+202A..U+202E: E2 80 AA..AE; U+2066..U+2069: E2 81 A6..A9.
    if (c == 0xe2 && i + 2 < line.size()) {
      auto c1 = static_cast<unsigned char>(line[i + 1]);
      auto c2 = static_cast<unsigned char>(line[i + 2]);
      bool bidi =
          (c1 == 0x80 && c2 >= 0xaa && c2 <= 0xae) || (c1 == 0x81 && c2 >= 0xa6 && c2 <= 0xa9);
      if (bidi) {
        unsigned cp = ((c & 0x0fu) << 12) | ((c1 & 0x3fu) << 6) | (c2 & 0x3fu);
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
        out += buf;
        i += 2;
        continue;
      }
    }
    out += static_cast<char>(c);
  }
  return out;
}

// Left-aligned columns, two spaces apart; rows[0] is the header.
std::string RenderTable(const std::vector<std::vector<std::string>>& rows) {
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
  return RenderTable(rows);
}

std::string FormatSessionsTable(const json& sessions, int64_t now_ms) {
  if (!sessions.is_array() || sessions.empty()) return "no sessions\n";
  std::vector<std::vector<std::string>> rows = {
      {"ID", "LANGUAGE", "STATE", "WORKER", "RUNS", "EPOCH", "LAST USED", "CONVERSATION"}};
  for (const auto& s : sessions) {
    rows.push_back({Text(s, "id"), Text(s, "language"), Text(s, "state"), Text(s, "worker"),
                    Text(s, "execution_count"), Text(s, "epoch"),
                    FormatAge(IntOr(s, "last_used_at", 0), now_ms), Text(s, "conversation_id")});
  }
  return RenderTable(rows);
}

std::string FormatApprovals(const json& approvals, int64_t now_ms) {
  if (!approvals.is_array() || approvals.empty()) return "no executions awaiting approval\n";
  std::string out;
  for (const auto& a : approvals) {
    out += Text(a, "id") + "  tenant " + Text(a, "tenant") + "  " + Text(a, "language");
    if (Text(a, "session_id") != "-") out += "  session " + Text(a, "session_id");
    out += "  created " + FormatAge(IntOr(a, "created_at", 0), now_ms);
    if (int64_t expires = IntOr(a, "expires_at", 0); expires > 0) {
      int64_t left = expires - now_ms;
      out += left > 0 ? "  expires in " + std::to_string((left + 999) / 1000) + "s" : "  expired";
    }
    out += "\n";
    std::string code = a.is_object() ? a.value("code", "") : "";
    size_t start = 0;
    while (start < code.size()) {
      size_t end = code.find('\n', start);
      if (end == std::string::npos) end = code.size();
      out += "    | " + VisibleLine(code.substr(start, end - start)) + "\n";
      start = end + 1;
    }
    out += "\n";
  }
  return out;
}

std::string FormatHealth(const json& health) {
  std::string out = Text(health, "status") + ": redis " + Text(health, "redis");
  out += ", " + Text(health, "workers") + " workers, " + Text(health, "queued") + " queued\n";
  return out;
}

}  // namespace kiln::cli
