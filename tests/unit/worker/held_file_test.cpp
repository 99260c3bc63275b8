// HeldFile: counters read whole at offset 0, again and again. A cgroup's
// counter files are stood in for by files on a real filesystem and by a
// real cgroup-like kernel file (/proc/sys, also made whole on each read).
#include "worker/sandbox/held_file.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/support/process.hpp"

namespace kiln::worker::sandbox {
namespace {

class HeldFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("kiln-held"); }
  void TearDown() override { testing::RemoveTree(dir_); }
  std::string Put(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(HeldFileTest, ANumberIsReadAfreshEachTime) {
  const std::string path = Put("usage", "12345\n");
  HeldFile f = HeldFile::Open(path, O_RDONLY);
  ASSERT_TRUE(f.valid());
  auto v = f.ReadU64();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 12345u);
  std::ofstream(path) << "987654321098\n";  // same inode, new contents
  v = f.ReadU64();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 987654321098u);
}

// A number followed by more than one read's worth of text (no cgroup file
// is, but a longer file must still parse, through the whole-file path).
TEST_F(HeldFileTest, ANumberInALongFileStillParses) {
  HeldFile f = HeldFile::Open(Put("long", "42" + std::string(5000, ' ') + "\n"), O_RDONLY);
  auto v = f.ReadU64();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 42u);
  auto whole = f.Read();
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), 5003u);
}

TEST_F(HeldFileTest, NotANumberAndAMissingFileAreErrors) {
  EXPECT_FALSE(HeldFile::Open(Put("word", "max\n"), O_RDONLY).ReadU64().ok());
  HeldFile missing = HeldFile::Open(dir_ + "/none", O_RDONLY);
  EXPECT_FALSE(missing.valid());
  auto v = missing.ReadU64();
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("none"), std::string::npos) << v.status().ToString();
}

// A counter counted from a baseline: never below 0, unset when unreadable.
TEST_F(HeldFileTest, ACounterSinceItsBaseline) {
  HeldFile f = HeldFile::Open(Put("counter", "100\n"), O_RDONLY);
  EXPECT_EQ(f.ReadU64Since(40), std::optional<uint64_t>(60));
  EXPECT_EQ(f.ReadU64Since(100), std::optional<uint64_t>(0));
  EXPECT_EQ(f.ReadU64Since(250), std::optional<uint64_t>(0));
  EXPECT_EQ(HeldFile::Open(dir_ + "/none", O_RDONLY).ReadU64Since(0), std::nullopt);
  EXPECT_EQ(HeldFile::Open(Put("word2", "max\n"), O_RDONLY).ReadU64Since(0), std::nullopt);
}

TEST_F(HeldFileTest, AKernelNumberFile) {
  HeldFile f = HeldFile::Open("/proc/sys/kernel/pid_max", O_RDONLY);
  ASSERT_TRUE(f.valid());
  auto v = f.ReadU64();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_GT(*v, 0u);
  auto again = f.ReadU64();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *v);
}

}  // namespace
}  // namespace kiln::worker::sandbox
