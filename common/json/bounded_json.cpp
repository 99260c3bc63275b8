#include "common/json/bounded_json.hpp"

#include <string>
#include <vector>

namespace kiln::common {
namespace {

using nlohmann::json;

// Builds the value from SAX events, as nlohmann's own DOM builder does, but
// refuses to open a container past the depth limit or add a value past the
// count limit. Containers are held by pointer: a parent is never appended to
// while one of its children is open, so the pointers stay valid.
class BoundedBuilder {
 public:
  BoundedBuilder(json* root, const JsonLimits& limits) : root_(root), limits_(limits) {}

  bool null() { return Add(nullptr); }
  bool boolean(bool v) { return Add(v); }
  bool number_integer(json::number_integer_t v) { return Add(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Add(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return Add(v); }
  bool string(json::string_t& v) { return Add(std::move(v)); }
  bool binary(json::binary_t& v) { return Add(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return Open(json::object()); }
  bool start_array(std::size_t) { return Open(json::array()); }
  bool key(json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1,
    // column 7: syntax error ..."; keep the part after the id.
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    error_ = "not valid JSON at byte " + std::to_string(position) + " (" + what + ")";
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  // Places `v` in the open container (or as the root); returns where it went.
  json* Place(json&& v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    json* parent = stack_.back();
    if (parent->is_array()) {
      parent->push_back(std::move(v));
      return &parent->back();
    }
    json& slot = (*parent)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool Count() {
    if (++values_ > limits_.max_values) {
      error_ = "more than " + std::to_string(limits_.max_values) + " values";
      return false;
    }
    return true;
  }
  bool Add(json&& v) {
    if (!Count()) return false;
    Place(std::move(v));
    return true;
  }
  bool Open(json&& container) {
    if (!Count()) return false;
    if (stack_.size() + 1 > limits_.max_depth) {
      error_ = "nested deeper than " + std::to_string(limits_.max_depth) + " levels";
      return false;
    }
    stack_.push_back(Place(std::move(container)));
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }

  json* root_;
  const JsonLimits& limits_;
  std::vector<json*> stack_;
  std::string key_;
  size_t values_ = 0;
  std::string error_;
};

}  // namespace

StatusOr<nlohmann::json> ParseJson(std::string_view text, const JsonLimits& limits,
                                   std::string_view what) {
  json out;
  BoundedBuilder builder(&out, limits);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const std::exception& e) {  // the SAX parser reports through parse_error; be sure
    return InvalidRequest(std::string(what) + ": " + e.what());
  }
  if (!ok) {
    std::string why = builder.error().empty() ? "not valid JSON" : builder.error();
    return InvalidRequest(std::string(what) + ": " + why);
  }
  return out;
}

}  // namespace kiln::common
