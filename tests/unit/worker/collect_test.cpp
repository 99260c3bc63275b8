// Workspace files on a real directory: what WriteWorkspaceFiles refuses (the
// broker refuses the same at submit), and what `collect` says when it cannot
// return every matching file (CollectedFiles, then the Result's
// files_truncated / files_omitted through ApplyCollected and FitToWire).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "worker/executor/output_pump.hpp"
#include "worker/sandbox/workspace.hpp"

namespace kiln::worker {
namespace {

namespace fs = std::filesystem;
namespace protocol = common::protocol;
using ::testing::HasSubstr;

class Workspace : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/kiln-ws-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Make(const std::string& rel, const std::string& content) {
    fs::create_directories((fs::path(dir_) / rel).parent_path());
    std::ofstream(fs::path(dir_) / rel) << content;
  }
  common::Status Write(const std::vector<protocol::FileEntry>& files) {
    return sandbox::WriteWorkspaceFiles(dir_, files, ::getuid(), ::getgid());
  }

  std::string dir_;
};

TEST_F(Workspace, RefusesWhatTheBrokerRefuses) {
  EXPECT_TRUE(Write({{"d/" + std::string(255, 'n'), "x"}}).ok());
  auto st = Write({{"d/" + std::string(256, 'n'), "x"}});
  EXPECT_EQ(st.code(), common::Code::kInvalidRequest);
  EXPECT_THAT(st.message(), HasSubstr("256 bytes"));
  EXPECT_EQ(Write({{"../x", "x"}}).code(), common::Code::kInvalidRequest);
  // A file and a directory of the same name cannot both exist.
  EXPECT_FALSE(Write({{"a", "1"}, {"a/b", "2"}}).ok());
}

TEST_F(Workspace, CollectCountsWhatItLeavesOut) {
  for (int i = 0; i < 300; ++i) Make("out/f" + std::to_string(1000 + i), "x");
  Make("other.txt", "y");
  auto all = sandbox::ReadWorkspaceFiles(dir_, {"*"}, 1 << 20);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->files.size(), protocol::kMaxFiles);
  EXPECT_EQ(all->omitted, 301u - protocol::kMaxFiles);
  EXPECT_FALSE(all->incomplete);
  EXPECT_TRUE(all->truncated());

  auto few = sandbox::ReadWorkspaceFiles(dir_, {"other.txt", "out/f100?"}, 1 << 20);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(few->files.size(), 11u);
  EXPECT_FALSE(few->truncated());

  // The byte budget: files over it are left out, smaller ones after them still fit.
  Make("big/a", std::string(100, 'a'));
  Make("big/b", "b");
  auto budget = sandbox::ReadWorkspaceFiles(dir_, {"big/*"}, 50);
  ASSERT_TRUE(budget.ok());
  ASSERT_EQ(budget->files.size(), 1u);
  EXPECT_EQ(budget->files[0].path, "big/b");
  EXPECT_EQ(budget->omitted, 1u);
}

TEST_F(Workspace, CollectSaysWhenTheSearchStoppedEarly) {
  std::string deep = "d";
  for (int i = 0; i < sandbox::kMaxCollectDepth + 2; ++i) deep += "/d";
  Make(deep + "/f", "x");
  Make("top", "x");
  auto r = sandbox::ReadWorkspaceFiles(dir_, {"top"}, 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->files.size(), 1u);
  EXPECT_TRUE(r->incomplete);
  EXPECT_TRUE(r->truncated());
}

TEST(Collect, ResultCarriesWhatWasLeftOut) {
  const protocol::Execute job;
  protocol::Result r;
  sandbox::CollectedFiles c;
  c.files = {{"a", "1"}};
  c.omitted = 3;
  ApplyCollected(c, job, &r);
  EXPECT_EQ(r.files.size(), 1u);
  EXPECT_TRUE(r.files_truncated);
  EXPECT_EQ(r.files_omitted, 3u);

  protocol::Result whole;
  ApplyCollected(sandbox::CollectedFiles{.files = {{"a", "1"}}}, job, &whole);
  EXPECT_FALSE(whole.files_truncated);
  EXPECT_EQ(whole.files_omitted, 0u);

  protocol::Result failed;
  ApplyCollected(common::Internal("boom"), job, &failed);
  EXPECT_TRUE(failed.files_truncated);
  EXPECT_THAT(failed.stderr_data, HasSubstr("collecting output files failed: boom"));
}

// The job's registered secrets are masked in collected files (binary ones
// too); the built-in credential patterns are not applied to files.
TEST(Collect, RegisteredSecretsAreMaskedInFiles) {
  protocol::Execute job;
  job.secrets = {"hunter2-Zq9xK7"};
  protocol::Result r;
  r.redactions = 2;  // from the streams
  sandbox::CollectedFiles c;
  c.files = {{"a.txt", "x hunter2-Zq9xK7 y"},
             {"b.bin", std::string("\x89PNG\0hunter2-Zq9xK7\0", 20)},
             {"c.txt", "AKIAABCDEFGHIJKLMNOP"}};
  ApplyCollected(c, job, &r);
  ASSERT_EQ(r.files.size(), 3u);
  EXPECT_EQ(r.files[0].content, "x *** y");
  EXPECT_EQ(r.files[1].content, std::string("\x89PNG\0***\0", 9));
  EXPECT_EQ(r.files[2].content, "AKIAABCDEFGHIJKLMNOP");
  EXPECT_EQ(r.redactions, 4u);
}

TEST(Collect, FitToWireCountsTheFilesItDrops) {
  protocol::Result r;
  for (size_t i = 0; i < protocol::kMaxFiles + 5; ++i)
    r.files.push_back({"f" + std::to_string(i), "x"});
  r.files_omitted = 2;
  FitToWire(&r);
  EXPECT_EQ(r.files.size(), protocol::kMaxFiles);
  EXPECT_TRUE(r.files_truncated);
  EXPECT_EQ(r.files_omitted, 7u);

  protocol::Result small;
  small.files = {{"a", "1"}};
  FitToWire(&small);
  EXPECT_FALSE(small.files_truncated);
}

}  // namespace
}  // namespace kiln::worker
