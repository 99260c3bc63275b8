// libFuzzer target for the native client codec (client_codec.hpp), the
// decoder every byte a client sends to broker.clients.endpoint goes through:
// any bytes must come back as a message or as a described INVALID_REQUEST;
// a decoded message must survive Encode + Decode unchanged; PeekRequestId
// (used to address the error about an undecodable frame) must agree with
// the decoded request_id.
//
//   tests/fuzz/fuzz.sh build-fuzz 600 client_protocol_fuzz   # build, then fuzz for 10 minutes
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/protocol/client_codec.hpp"
#include "common/protocol/messages.hpp"
#include "common/status.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace {

using kiln::common::Code;
using kiln::common::StatusOr;
namespace protocol = kiln::common::protocol;
namespace client = kiln::common::protocol::client;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "client_protocol_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

int kiln::fuzz::ClientProtocolOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t peeked = client::PeekRequestId(bytes);
  StatusOr<client::Message> first = client::Decode(bytes);
  if (!first.ok()) {
    if (first.status().code() != Code::kInvalidRequest || first.status().message().empty()) {
      Fail("rejection is not a described INVALID_REQUEST", first.status().ToString());
    }
    return 0;
  }
  const char* type = client::TypeName(client::TypeOf(*first));
  if (peeked != client::RequestIdOf(*first)) {
    Fail("PeekRequestId disagrees with the decoded request_id", type);
  }
  const std::string again = client::Encode(*first);
  // Encode writes every optional field, so a frame that omitted them and sat
  // right at the size limit can legitimately re-encode over it.
  if (again.size() > protocol::kMaxMessageBytes) return 0;
  StatusOr<client::Message> second = client::Decode(again);
  if (!second.ok()) Fail("re-encoded message does not decode", second.status().ToString());
  if (!(*second == *first)) Fail("round trip changed the message", type);
  if (client::Encode(*second) != again) Fail("encoding is not deterministic", type);
  return 0;
}

KILN_LIBFUZZER_ENTRY(kiln::fuzz::ClientProtocolOneInput)
