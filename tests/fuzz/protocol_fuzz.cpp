// libFuzzer target for the wire codec: any bytes given to Decode must come
// back as a message or as INVALID_REQUEST, and a decoded message must survive
// Encode + Decode unchanged.
//
//   tests/fuzz/fuzz.sh build-fuzz 600 protocol_fuzz   # build, then fuzz for 10 minutes
//
// The same function is linked into protocol_fuzz_smoke and fuzz_replay (any
// compiler), which feed it mutated valid frames and the checked-in corpus
// under ctest. Violations abort, so all of them report them as crashes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/protocol/codec.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace {

using kiln::common::Code;
using kiln::common::StatusOr;
namespace protocol = kiln::common::protocol;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "protocol_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

int kiln::fuzz::ProtocolOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  StatusOr<protocol::Message> first = protocol::Decode(bytes);
  if (!first.ok()) {
    if (first.status().code() != Code::kInvalidRequest || first.status().message().empty()) {
      Fail("rejection is not a described INVALID_REQUEST", first.status().ToString());
    }
    return 0;
  }
  const std::string again = protocol::Encode(*first);
  // Encode writes every defaulted field, so a frame that omitted them and sat
  // right at the size limit can legitimately re-encode over it.
  if (again.size() > protocol::kMaxMessageBytes) return 0;
  StatusOr<protocol::Message> second = protocol::Decode(again);
  if (!second.ok()) Fail("re-encoded message does not decode", second.status().ToString());
  if (!(*second == *first)) {
    Fail("round trip changed the message", protocol::TypeName(protocol::TypeOf(*first)));
  }
  return 0;
}

KILN_LIBFUZZER_ENTRY(kiln::fuzz::ProtocolOneInput)
