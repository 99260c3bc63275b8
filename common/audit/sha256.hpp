// SHA-256 over OpenSSL's EVP interface, as lowercase hex: the digests of the
// audit trail (code, input, output, chain links).
//
//   std::string h = Sha256Hex("abc");  // "ba7816bf..."
//   Sha256 s; s.Update(prev); s.Update("\n"); s.Update(entry); std::string link = s.FinishHex();
//
// Sha256 is one incremental hash, one thread at a time; Sha256Hex any thread.
#pragma once

#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace kiln::common {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  Sha256(Sha256&&) = delete;
  Sha256& operator=(Sha256&&) = delete;

  void Update(std::string_view data);
  // 64 lowercase hex digits; the object is then spent.
  std::string FinishHex();

 private:
  evp_md_ctx_st* ctx_;
};

std::string Sha256Hex(std::string_view data);

}  // namespace kiln::common
