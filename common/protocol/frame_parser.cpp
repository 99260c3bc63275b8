// Decoding a frame takes two passes over the bytes:
//   1. FrameScanner, a msgpack visitor that builds nothing, checks that the
//      bytes are one complete MessagePack value with no trailing bytes and
//      enforces the structural bounds (entries per container, total entries,
//      nesting depth, str/bin/ext size) before anything is allocated.
//   2. msgpack::unpack with the same bounds as an unpack_limit (defence in
//      depth) and a reference function, so strings point into `bytes` instead
//      of being copied; the codec then walks the object tree directly.
// The pre-scan exists because msgpack::unpack allocates a container's
// elements as soon as it reads the header: without a bound on the total, a
// 64 MiB frame of nested one-byte values would cost over a gigabyte.

#include "common/protocol/frame_parser.hpp"

#include <exception>
#include <new>
#include <string>

#include "common/protocol/messages.hpp"

namespace kiln::common::protocol {
namespace {

// Structural bounds of a frame, enforced before and during unpacking. They
// are above every per-field limit in messages.hpp, so a legitimate frame never
// meets them and an over-limit field gets the per-field error naming it.
constexpr size_t kMaxContainerEntries = 1024;     // one array or map (env: 256)
constexpr size_t kMaxTotalObjects = 1u << 16;     // all container slots of a frame
constexpr size_t kMaxNesting = 8;                 // [v, t, {files: [{...}]}] is 4
constexpr size_t kMaxBlobBytes = kMaxFilesBytes;  // one str/bin/ext: a single file

// A msgpack visitor that builds nothing and stops at the first structural
// bound exceeded. Its methods hide null_visitor's (msgpack::parse is a
// template over the visitor type, not virtual dispatch).
class FrameScanner : public msgpack::null_visitor {
 public:
  const std::string& error() const { return error_; }

  bool visit_str(const char*, uint32_t size) { return Blob("str", size); }
  bool visit_bin(const char*, uint32_t size) { return Blob("bin", size); }
  bool visit_ext(const char*, uint32_t size) { return Blob("ext", size); }
  bool start_array(uint32_t n) { return Open("array", n, n); }
  bool end_array() { return Close(); }
  bool start_map(uint32_t n) { return Open("map", n, 2 * static_cast<uint64_t>(n)); }
  bool end_map() { return Close(); }
  void parse_error(size_t, size_t error_offset) {
    error_ = "malformed MessagePack at byte " + std::to_string(error_offset);
  }
  void insufficient_bytes(size_t, size_t) { error_ = "truncated frame: the message is incomplete"; }

 private:
  bool Blob(std::string_view what, uint32_t size) {
    if (size <= kMaxBlobBytes) return true;
    error_ = std::string(what) + " of " + std::to_string(size) + " bytes exceeds the limit of " +
             std::to_string(kMaxBlobBytes);
    return false;
  }
  bool Open(std::string_view what, uint32_t n, uint64_t objects) {
    if (++depth_ > kMaxNesting) {
      error_ = "nesting deeper than " + std::to_string(kMaxNesting) + " levels";
      return false;
    }
    if (n > kMaxContainerEntries) {
      error_ = std::string(what) + " of " + std::to_string(n) + " entries exceeds the limit of " +
               std::to_string(kMaxContainerEntries);
      return false;
    }
    objects_ += objects;
    if (objects_ > kMaxTotalObjects) {
      error_ = "more than " + std::to_string(kMaxTotalObjects) + " values in one frame";
      return false;
    }
    return true;
  }
  bool Close() {
    --depth_;
    return true;
  }

  size_t depth_ = 0;
  uint64_t objects_ = 0;
  std::string error_;
};

// Strings and bins point into the caller's bytes instead of being copied into
// the zone; the tree never outlives Decode.
bool ReferenceInPlace(msgpack::type::object_type, size_t, void*) { return true; }

}  // namespace

std::string_view TypeLabel(msgpack::type::object_type t) {
  switch (t) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "bool";
    case msgpack::type::POSITIVE_INTEGER:
      return "unsigned integer";
    case msgpack::type::NEGATIVE_INTEGER:
      return "negative integer";
    case msgpack::type::FLOAT32:
      return "float32";
    case msgpack::type::FLOAT64:
      return "float64";
    case msgpack::type::STR:
      return "str";
    case msgpack::type::BIN:
      return "bin";
    case msgpack::type::ARRAY:
      return "array";
    case msgpack::type::MAP:
      return "map";
    case msgpack::type::EXT:
      return "ext";
  }
  return "unknown";
}

std::string_view View(const msgpack::object& o) {
  return o.type == msgpack::type::STR ? std::string_view(o.via.str.ptr, o.via.str.size)
                                      : std::string_view(o.via.bin.ptr, o.via.bin.size);
}

bool IsText(const msgpack::object& o) {
  return o.type == msgpack::type::STR || o.type == msgpack::type::BIN;
}

Status WrongType(std::string_view expected, const msgpack::object& o) {
  return InvalidRequest("expected " + std::string(expected) + ", got " +
                        std::string(TypeLabel(o.type)));
}

Status ParseFrame(std::string_view bytes,
                  const std::function<Status(const msgpack::object& root)>& visit) {
  if (bytes.size() > kMaxMessageBytes) {
    return InvalidRequest("frame of " + std::to_string(bytes.size()) +
                          " bytes exceeds the limit of " + std::to_string(kMaxMessageBytes));
  }
  if (bytes.empty()) return InvalidRequest("empty frame");
  try {
    FrameScanner scanner;
    size_t end = 0;
    if (!msgpack::parse(bytes.data(), bytes.size(), end, scanner)) {
      return InvalidRequest(scanner.error().empty() ? "malformed MessagePack" : scanner.error());
    }
    if (end != bytes.size()) {
      return InvalidRequest(std::to_string(bytes.size() - end) +
                            " trailing bytes after the message");
    }
    const msgpack::unpack_limit limit(kMaxContainerEntries, kMaxContainerEntries, kMaxBlobBytes,
                                      kMaxBlobBytes, kMaxBlobBytes, kMaxNesting);
    size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(bytes.data(), bytes.size(), offset, ReferenceInPlace, nullptr, limit);
    return visit(handle.get());
  } catch (const msgpack::insufficient_bytes&) {
    return InvalidRequest("truncated frame: the message is incomplete");
  } catch (const msgpack::size_overflow& e) {
    return InvalidRequest(std::string("frame exceeds a structural limit: ") + e.what());
  } catch (const msgpack::unpack_error& e) {
    return InvalidRequest(std::string("malformed MessagePack: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Internal("out of memory decoding a frame of " + std::to_string(bytes.size()) + " bytes");
  } catch (const std::exception& e) {
    return InvalidRequest(std::string("undecodable frame: ") + e.what());
  } catch (...) {
    return InvalidRequest("undecodable frame");
  }
}

Status CheckEnvelope(const msgpack::object& frame, uint32_t version, std::string_view protocol) {
  if (frame.type != msgpack::type::ARRAY) {
    return InvalidRequest("frame must be a MessagePack array [version, type, body], got " +
                          std::string(TypeLabel(frame.type)));
  }
  const msgpack::object_array& a = frame.via.array;
  if (a.size == 0) return InvalidRequest("frame is an empty array, expected [version, type, body]");
  const msgpack::object& v = a.ptr[0];
  if (v.type != msgpack::type::POSITIVE_INTEGER) {
    return InvalidRequest("protocol version must be an unsigned integer, got " +
                          std::string(TypeLabel(v.type)));
  }
  if (v.via.u64 != version) {
    return InvalidRequest("unsupported " + std::string(protocol) + " version " +
                          std::to_string(v.via.u64) + " (this side speaks " +
                          std::to_string(version) + ")");
  }
  if (a.size != 3) {
    return InvalidRequest("frame has " + std::to_string(a.size) +
                          " elements, expected 3 [version, type, body]");
  }
  const msgpack::object& type = a.ptr[1];
  if (type.type != msgpack::type::POSITIVE_INTEGER) {
    return InvalidRequest("message type must be an unsigned integer, got " +
                          std::string(TypeLabel(type.type)));
  }
  return Status::Ok();
}

}  // namespace kiln::common::protocol
