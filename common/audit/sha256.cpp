#include "common/audit/sha256.hpp"

#include <openssl/evp.h>

#include <cstdlib>

namespace kiln::common {

// EVP_sha256 cannot fail short of memory exhaustion or a broken OpenSSL; there
// is nothing sensible to return then, so abort rather than hash wrongly.
Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(std::string_view data) {
  if (EVP_DigestUpdate(ctx_, data.data(), data.size()) != 1) std::abort();
}

std::string Sha256::FinishHex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_, md, &len) != 1) std::abort();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(size_t{2} * len, '0');
  for (size_t i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 s;
  s.Update(data);
  return s.FinishHex();
}

}  // namespace kiln::common
