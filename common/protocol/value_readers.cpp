#include "common/protocol/value_readers.hpp"

#include <cmath>
#include <limits>
#include <string_view>

#include "common/protocol/frame_parser.hpp"

namespace kiln::common::protocol {

Status TooMany(size_t n, size_t limit) {
  return InvalidRequest(std::to_string(n) + " entries exceeds the limit of " +
                        std::to_string(limit));
}

Status ReadText(const msgpack::object& o, size_t max_bytes, std::string* out) {
  if (!IsText(o)) return WrongType("str or bin", o);
  std::string_view s = View(o);
  if (s.size() > max_bytes) {
    return InvalidRequest(std::to_string(s.size()) + " bytes exceeds the limit of " +
                          std::to_string(max_bytes));
  }
  out->assign(s);
  return Status::Ok();
}

Status ReadUint(const msgpack::object& o, uint64_t max, uint64_t* out) {
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    return InvalidRequest("expected unsigned integer, got negative " + std::to_string(o.via.i64));
  }
  if (o.type != msgpack::type::POSITIVE_INTEGER) return WrongType("unsigned integer", o);
  if (o.via.u64 > max) {
    return InvalidRequest(std::to_string(o.via.u64) + " exceeds the maximum " +
                          std::to_string(max));
  }
  *out = o.via.u64;
  return Status::Ok();
}

Status ReadInt32(const msgpack::object& o, int32_t* out) {
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(kMax)) {
      return InvalidRequest(std::to_string(o.via.u64) + " is outside the int32 range");
    }
    *out = static_cast<int32_t>(o.via.u64);
    return Status::Ok();
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if (o.via.i64 < kMin) {
      return InvalidRequest(std::to_string(o.via.i64) + " is outside the int32 range");
    }
    *out = static_cast<int32_t>(o.via.i64);
    return Status::Ok();
  }
  return WrongType("integer", o);
}

Status ReadDouble(const msgpack::object& o, double* out) {
  double d = 0;
  if (o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64) {
    d = o.via.f64;
  } else if (o.type == msgpack::type::POSITIVE_INTEGER) {
    d = static_cast<double>(o.via.u64);
  } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    d = static_cast<double>(o.via.i64);
  } else {
    return WrongType("number", o);
  }
  if (!std::isfinite(d) || d < 0) return InvalidRequest("expected a finite number >= 0");
  *out = d;
  return Status::Ok();
}

}  // namespace kiln::common::protocol
