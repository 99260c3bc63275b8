// Standard base64 (RFC 4648, with padding) over OpenSSL's EVP block codec.
//
//   std::string text = Base64Encode(bytes);
//   StatusOr<std::string> back = Base64Decode(text);  // INVALID_REQUEST on bad input
//
// Stateless; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/status.hpp"

namespace kiln::common {

std::string Base64Encode(std::string_view bytes);
StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace kiln::common
