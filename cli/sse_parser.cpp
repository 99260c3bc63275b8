#include "cli/sse_parser.hpp"

namespace kiln::cli {

common::StatusOr<std::vector<SseEvent>> SseParser::Feed(std::string_view bytes) {
  if (!error_.ok()) return error_;
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      skip_lf_ = c == '\r';
      Line(partial_, &out);
      partial_.clear();
      continue;
    }
    if (partial_.size() >= kMaxLineBytes) {
      error_ = common::Unavailable("event stream: a line longer than " +
                                   std::to_string(kMaxLineBytes) + " bytes");
      return error_;
    }
    partial_ += c;
  }
  return out;
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {  // dispatch
    if (has_data_ || !event_.empty()) {
      SseEvent e;
      if (!event_.empty()) e.event = event_;
      e.id = id_;
      e.data = data_;
      last_event_id_ = id_;
      out->push_back(std::move(e));
    }
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment (keep-alive)
  std::string_view field = line;
  std::string_view value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "event") {
    event_ = value;
  } else if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_ = value;
  }
  // "retry" and unknown fields: ignored.
}

}  // namespace kiln::cli
