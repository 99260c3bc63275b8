#include "common/config/yaml_reader.hpp"

#include <charconv>

namespace kiln::common {

YamlReader::YamlReader(YAML::Node node, std::string path)
    : node_(std::move(node)), path_(std::move(path)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    error_ = InvalidRequest(path_ + ": expected a mapping");
  }
}

std::string YamlReader::KeyPath(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool YamlReader::Has(const std::string& key) const {
  if (!node_ || !node_.IsMap()) return false;
  const YAML::Node& map = node_;
  return static_cast<bool>(map[key]);
}

YAML::Node YamlReader::Find(const std::string& key) {
  used_.insert(key);
  // Absent keys come back as an undefined node (operator bool is false); a
  // default-constructed YAML::Node would count as a defined null.
  static const YAML::Node kUndefined = YAML::Node()["kiln-undefined"];
  if (!node_ || !node_.IsMap()) return kUndefined;
  const YAML::Node& map = node_;
  YAML::Node n = map[key];
  if (!n || n.IsNull()) return kUndefined;
  return n;
}

void YamlReader::Fail(const std::string& key, const std::string& what) {
  if (error_.ok()) error_ = InvalidRequest(KeyPath(key) + ": " + what);
}

void YamlReader::Get(const std::string& key, std::string* out) {
  YAML::Node n = Find(key);
  if (!n) return;
  if (!n.IsScalar()) return Fail(key, "expected a string");
  *out = n.Scalar();
}

void YamlReader::Get(const std::string& key, bool* out) {
  YAML::Node n = Find(key);
  if (!n) return;
  const std::string& s = n.IsScalar() ? n.Scalar() : std::string();
  if (s == "true") {
    *out = true;
  } else if (s == "false") {
    *out = false;
  } else {
    Fail(key, "expected true or false");
  }
}

void YamlReader::Get(const std::string& key, uint64_t* out, uint64_t min, uint64_t max) {
  YAML::Node n = Find(key);
  if (!n) return;
  const std::string s = n.IsScalar() ? n.Scalar() : std::string();
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    return Fail(key, "expected a non-negative integer, got '" + s + "'");
  }
  if (v < min || v > max) {
    return Fail(key, "must be between " + std::to_string(min) + " and " + std::to_string(max) +
                         ", got " + s);
  }
  *out = v;
}

void YamlReader::Get(const std::string& key, uint32_t* out, uint32_t min, uint32_t max) {
  uint64_t v = *out;
  Get(key, &v, min, max);
  *out = static_cast<uint32_t>(v);
}

void YamlReader::Get(const std::string& key, double* out, double min, double max) {
  YAML::Node n = Find(key);
  if (!n) return;
  const std::string s = n.IsScalar() ? n.Scalar() : std::string();
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !(v >= min && v <= max)) {
    return Fail(key, "expected a number between " + std::to_string(min) + " and " +
                         std::to_string(max) + ", got '" + s + "'");
  }
  *out = v;
}

void YamlReader::Get(const std::string& key, std::vector<std::string>* out) {
  YAML::Node n = Find(key);
  if (!n) return;
  if (!n.IsSequence()) return Fail(key, "expected a list of strings");
  std::vector<std::string> v;
  for (const auto& item : n) {
    if (!item.IsScalar()) return Fail(key, "expected a list of strings");
    v.push_back(item.Scalar());
  }
  *out = std::move(v);
}

void YamlReader::Get(const std::string& key, std::map<std::string, std::string>* out) {
  YAML::Node n = Find(key);
  if (!n) return;
  if (!n.IsMap()) return Fail(key, "expected a mapping of strings");
  std::map<std::string, std::string> m;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar() || !kv.second.IsScalar()) {
      return Fail(key, "expected a mapping of strings");
    }
    m[kv.first.Scalar()] = kv.second.Scalar();
  }
  *out = std::move(m);
}

void YamlReader::GetEnum(const std::string& key, std::string* out,
                         const std::set<std::string>& allowed) {
  std::string v = *out;
  Get(key, &v);
  if (allowed.count(v) == 0) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    return Fail(key, "must be one of " + list + ", got '" + v + "'");
  }
  *out = v;
}

YamlReader YamlReader::Child(const std::string& key) { return YamlReader(Find(key), KeyPath(key)); }

YAML::Node YamlReader::Sequence(const std::string& key) {
  YAML::Node n = Find(key);
  if (n && !n.IsSequence()) {
    Fail(key, "expected a list");
    return YAML::Node();
  }
  return n;
}

Status YamlReader::Finish() {
  if (!error_.ok()) return error_;
  if (node_ && node_.IsMap()) {
    for (const auto& kv : node_) {
      const std::string k = kv.first.Scalar();
      if (used_.count(k) == 0) return InvalidRequest(KeyPath(k) + ": unknown key");
    }
  }
  return Status::Ok();
}

StatusOr<YAML::Node> LoadYamlFile(const std::string& file) {
  try {
    return YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    return InvalidRequest("cannot read config file " + file);
  } catch (const YAML::Exception& e) {
    return InvalidRequest(file + ": " + e.what());
  }
}

}  // namespace kiln::common
