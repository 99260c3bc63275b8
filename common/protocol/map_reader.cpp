#include "common/protocol/map_reader.hpp"

namespace kiln::common::protocol {

void MapReader::Id(std::string_view key, std::string& v) {
  const msgpack::object* o = Find(key, Need::kRequired);
  if (o == nullptr) return;
  Check(key, ReadText(*o, kMaxIdBytes, &v));
  if (status_.ok() && v.empty()) Check(key, InvalidRequest("must not be empty"));
}

void MapReader::Text(std::string_view key, std::string& v, Need need, size_t max_bytes) {
  if (const msgpack::object* o = Find(key, need)) Check(key, ReadText(*o, max_bytes, &v));
}

void MapReader::Bytes(std::string_view key, std::string& v, Need need, size_t max_bytes) {
  Text(key, v, need, max_bytes);
}

void MapReader::Bool(std::string_view key, bool& v, Need need) {
  const msgpack::object* o = Find(key, need);
  if (o == nullptr) return;
  if (o->type != msgpack::type::BOOLEAN) {
    Check(key, WrongType("bool", *o));
    return;
  }
  v = o->via.boolean;
}

void MapReader::Double(std::string_view key, double& v, Need need) {
  if (const msgpack::object* o = Find(key, need)) Check(key, ReadDouble(*o, &v));
}

void MapReader::OptionalInt(std::string_view key, std::optional<int32_t>& v) {
  const msgpack::object* o = Find(key, Need::kOptional);
  if (o == nullptr || o->type == msgpack::type::NIL) return;
  int32_t i = 0;
  Check(key, ReadInt32(*o, &i));
  if (status_.ok()) v = i;
}

void MapReader::TextList(std::string_view key, std::vector<std::string>& v, Need need,
                         size_t max_entries, size_t max_bytes) {
  const msgpack::object_array* a = FindArray(key, need, max_entries);
  if (a == nullptr) return;
  v.resize(a->size);
  for (uint32_t i = 0; i < a->size && status_.ok(); ++i) {
    Check(key, ReadText(a->ptr[i], max_bytes, &v[i]), i);
  }
}

void MapReader::TextMap(std::string_view key, std::map<std::string, std::string>& v, Need need) {
  const msgpack::object* o = Find(key, need);
  if (o == nullptr) return;
  if (o->type != msgpack::type::MAP) return Check(key, WrongType("map", *o));
  const msgpack::object_map& m = o->via.map;
  if (m.size > kMaxEnvEntries) return Check(key, TooMany(m.size, kMaxEnvEntries));
  for (uint32_t i = 0; i < m.size && status_.ok(); ++i) {
    std::string name;
    std::string value;
    Check(key, ReadText(m.ptr[i].key, kMaxStringBytes, &name).WithContext("name"), i);
    if (status_.ok()) {
      Check(key, ReadText(m.ptr[i].val, kMaxStringBytes, &value).WithContext("value"), i);
    }
    if (status_.ok() && !v.emplace(std::move(name), std::move(value)).second) {
      Check(key, InvalidRequest("duplicate name"), i);
    }
  }
}

const msgpack::object* MapReader::Find(std::string_view key, Need need) {
  if (!status_.ok()) return nullptr;
  const msgpack::object* found = nullptr;
  for (uint32_t i = 0; i < map_.size; ++i) {
    if (View(map_.ptr[i].key) != key) continue;
    if (found != nullptr) {
      Check(key, InvalidRequest("duplicate key"));
      return nullptr;
    }
    found = &map_.ptr[i].val;
  }
  if (found == nullptr && need == Need::kRequired) {
    Check(key, InvalidRequest("required field is missing"));
  }
  return found;
}

const msgpack::object_array* MapReader::FindArray(std::string_view key, Need need,
                                                  size_t max_entries) {
  const msgpack::object* o = Find(key, need);
  if (o == nullptr) return nullptr;
  if (o->type != msgpack::type::ARRAY) {
    Check(key, WrongType("array", *o));
    return nullptr;
  }
  if (o->via.array.size > max_entries) {
    Check(key, TooMany(o->via.array.size, max_entries));
    return nullptr;
  }
  return &o->via.array;
}

bool MapReader::InRange(std::string_view key, uint64_t u, uint64_t lo, uint64_t hi) {
  if (u >= lo && u <= hi) return true;
  Check(key, InvalidRequest(std::to_string(u) + " is not a valid value (" + std::to_string(lo) +
                            ".." + std::to_string(hi) + ")"));
  return false;
}

void MapReader::CheckTotal(std::string_view key, size_t total, size_t max) {
  if (total <= max) return;
  Check(key, InvalidRequest("contents total " + std::to_string(total) +
                            " bytes, exceeding the limit of " + std::to_string(max)));
}

void MapReader::Check(std::string_view key, const Status& st, size_t index) {
  if (st.ok()) return;
  status_ = st.WithContext(FieldPath{&path_, key, index}.ToString());
}

Status CheckMapKeys(const msgpack::object& o, const FieldPath& path) {
  if (o.type != msgpack::type::MAP) {
    return WrongType("map", o).WithContext(path.ToString());
  }
  const msgpack::object_map& map = o.via.map;
  for (uint32_t i = 0; i < map.size; ++i) {
    if (!IsText(map.ptr[i].key)) {
      return InvalidRequest("map keys must be strings, got " +
                            std::string(TypeLabel(map.ptr[i].key.type)))
          .WithContext(path.ToString());
    }
  }
  return Status::Ok();
}

}  // namespace kiln::common::protocol
