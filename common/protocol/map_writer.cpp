#include "common/protocol/map_writer.hpp"

#include <bit>

namespace kiln::common::protocol {
namespace {

void PackStr(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackBin(Packer& pk, std::string_view s) {
  pk.pack_bin(static_cast<uint32_t>(s.size()));
  pk.pack_bin_body(s.data(), static_cast<uint32_t>(s.size()));
}

}  // namespace

void MapWriter::Key(std::string_view key) { PackStr(pk_, key); }

void MapWriter::Id(std::string_view key, const std::string& v) { Text(key, v, Need::kRequired, 0); }

void MapWriter::Text(std::string_view key, const std::string& v, Need, size_t) {
  Key(key);
  PackStr(pk_, v);
}

void MapWriter::Bytes(std::string_view key, const std::string& v, Need, size_t) {
  Key(key);
  PackBin(pk_, v);
}

void MapWriter::Bool(std::string_view key, const bool& v, Need) {
  Key(key);
  if (v) {
    pk_.pack_true();
  } else {
    pk_.pack_false();
  }
}

// Always float64: msgpack-c's pack_double would write whole values as integers.
void MapWriter::Double(std::string_view key, const double& v, Need) {
  Key(key);
  const auto bits = std::bit_cast<uint64_t>(v);
  char b[9] = {static_cast<char>(0xcb)};
  for (int i = 0; i < 8; ++i) b[1 + i] = static_cast<char>(bits >> (8 * (7 - i)));
  sink_.write(b, sizeof(b));
}

void MapWriter::OptionalInt(std::string_view key, const std::optional<int32_t>& v) {
  if (!v.has_value()) return;
  Key(key);
  pk_.pack_int64(*v);
}

void MapWriter::TextList(std::string_view key, const std::vector<std::string>& v, Need, size_t,
                         size_t) {
  Key(key);
  pk_.pack_array(static_cast<uint32_t>(v.size()));
  for (const std::string& s : v) PackStr(pk_, s);
}

void MapWriter::TextMap(std::string_view key, const std::map<std::string, std::string>& v, Need) {
  Key(key);
  pk_.pack_map(static_cast<uint32_t>(v.size()));
  for (const auto& [name, value] : v) {
    PackStr(pk_, name);
    PackStr(pk_, value);
  }
}

}  // namespace kiln::common::protocol
