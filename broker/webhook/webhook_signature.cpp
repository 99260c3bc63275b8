#include "broker/webhook/webhook_signature.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace kiln::broker {

std::string SignWebhook(std::string_view secret, int64_t unix_seconds, std::string_view body) {
  const std::string t = std::to_string(unix_seconds);
  const std::string message = t + "." + std::string(body);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "t=" + t + ",v1=";
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 15];
  }
  return out;
}

}  // namespace kiln::broker
