// CURVE key files (common/curve/curve_keys.hpp): written, read back, and
// refused when malformed or open to others.
#include "common/curve/curve_keys.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace kiln::common {
namespace {

class CurveKeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-curve-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text, mode_t mode) {
    std::ofstream(dir_ + "/" + name) << text;
    ::chmod((dir_ + "/" + name).c_str(), mode);
  }
  std::string dir_;
};

TEST_F(CurveKeysTest, APairWrittenIsReadBack) {
  auto kp = GenerateCurveKeyPair();
  ASSERT_TRUE(kp.ok());
  EXPECT_TRUE(IsCurveKey(kp->public_z85));
  EXPECT_TRUE(IsCurveKey(kp->secret_z85));
  ASSERT_TRUE(WriteCurveKeyFiles(dir_, "w-1.a", *kp).ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/w-1.a.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto secret = ReadCurveSecretKeyFile(dir_ + "/w-1.a.key");
  ASSERT_TRUE(secret.ok()) << secret.status().ToString();
  EXPECT_EQ(secret->secret_z85, kp->secret_z85);
  EXPECT_EQ(secret->public_z85, kp->public_z85);  // derived from the secret
  auto pub = ReadCurvePublicKeyFile(dir_ + "/w-1.a.pub");
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(*pub, kp->public_z85);
  // Never overwritten.
  EXPECT_FALSE(WriteCurveKeyFiles(dir_, "w-1.a", *kp).ok());
}

TEST_F(CurveKeysTest, SecretKeysOpenToOthersAndMalformedFilesAreRefused) {
  auto kp = GenerateCurveKeyPair();
  ASSERT_TRUE(kp.ok());
  Write("open.key", kp->secret_z85 + "\n", 0644);
  auto open = ReadCurveSecretKeyFile(dir_ + "/open.key");
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos);
  Write("short.pub", "abc\n", 0644);
  EXPECT_FALSE(ReadCurvePublicKeyFile(dir_ + "/short.pub").ok());
  Write("two.pub", kp->public_z85 + "\n" + kp->public_z85 + "\n", 0644);
  EXPECT_FALSE(ReadCurvePublicKeyFile(dir_ + "/two.pub").ok());
  Write("empty.pub", "# nothing here\n\n", 0644);
  EXPECT_FALSE(ReadCurvePublicKeyFile(dir_ + "/empty.pub").ok());
  Write("commented.pub", "# a comment\n  " + kp->public_z85 + "  \r\n", 0644);
  EXPECT_TRUE(ReadCurvePublicKeyFile(dir_ + "/commented.pub").ok());
  EXPECT_FALSE(IsCurveKey(std::string(40, '~')));  // not the Z85 alphabet
  EXPECT_FALSE(ReadCurvePublicKeyFile(dir_ + "/missing.pub").ok());
}

TEST(CurveKeyName, IsAWorkerIdShapedFileName) {
  EXPECT_TRUE(IsCurveKeyName("worker-17"));
  EXPECT_TRUE(IsCurveKeyName("w0.host_a"));
  EXPECT_FALSE(IsCurveKeyName(""));
  EXPECT_FALSE(IsCurveKeyName(".hidden"));
  EXPECT_FALSE(IsCurveKeyName("a/b"));
  EXPECT_FALSE(IsCurveKeyName("a b"));
  EXPECT_FALSE(IsCurveKeyName(std::string(129, 'a')));
}

}  // namespace
}  // namespace kiln::common
