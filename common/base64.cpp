#include "common/base64.hpp"

#include <openssl/evp.h>

namespace kiln::common {

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return InvalidRequest("base64 length is not a multiple of 4");
  if (text.empty()) return std::string();
  std::string out(3 * (text.size() / 4), '\0');
  // EVP_DecodeBlock skips leading/trailing whitespace, which we do not allow.
  for (char c : text) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '/' || c == '=';
    if (!ok) return InvalidRequest("invalid base64 character");
  }
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return InvalidRequest("invalid base64");
  // EVP_DecodeBlock counts padding as zero bytes: drop them.
  size_t pad = 0;
  if (text.back() == '=') ++pad;
  if (text.size() >= 2 && text[text.size() - 2] == '=') ++pad;
  for (size_t i = 0; i < text.size() - pad; ++i) {
    if (text[i] == '=') return InvalidRequest("invalid base64 padding");
  }
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

}  // namespace kiln::common
