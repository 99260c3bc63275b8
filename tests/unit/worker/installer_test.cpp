// RunInstaller (worker/packages/installer.hpp) with stand-in installers:
// shell scripts at config.python, run for real as the configured user, so
// the timeout, cancel, sealing, special-file and size checks are exercised
// without pip or an index (package_install_test covers those).
#include "worker/packages/installer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/unique_fd.hpp"

namespace kiln::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class InstallerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the installer changes uid: needs root";
    char tmpl[] = "/tmp/kiln-installer-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ::chmod(root_.c_str(), 0755);
    dir_ = root_ + "/set";
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
    ASSERT_EQ(::chown(dir_.c_str(), config_.uid, config_.gid), 0);
    config_.python_index = "http://user:s3cret@127.0.0.1:9/simple";
    config_.timeout_ms = 10'000;
    config_.max_set_bytes = 1 << 20;
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }
  // The stand-in "python": a shell script given `-m pip install ...`.
  void Script(const std::string& body) {
    config_.python = root_ + "/fake-python";
    std::ofstream(config_.python) << "#!/bin/sh\n" << body << "\n";
    ::chmod(config_.python.c_str(), 0755);
  }
  common::Status Run(int cancel_fd = -1) {
    return RunInstaller(config_, "python", {"tabulate==0.9.0"}, dir_, cancel_fd);
  }

  PackageInstallConfig config_;
  std::string root_, dir_;
};

TEST_F(InstallerTest, RunsAsTheInstallUserAndHandsTheSetToRoot) {
  Script("id -u > uid.txt; echo \"$@\" > argv.txt; env > env.txt; mkdir -p pkg; echo x > pkg/m.py");
  ASSERT_TRUE(Run().ok());
  auto read = [&](const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const std::string uid = read("uid.txt"), argv = read("argv.txt"), env = read("env.txt");
  EXPECT_EQ(uid, std::to_string(config_.uid) + "\n");
  EXPECT_THAT(argv, HasSubstr("--only-binary :all:"));
  EXPECT_THAT(argv, HasSubstr("--target " + dir_));
  EXPECT_THAT(argv, HasSubstr("-- tabulate==0.9.0"));
  EXPECT_THAT(env, HasSubstr("PIP_CONFIG_FILE=/dev/null"));
  EXPECT_THAT(env, Not(HasSubstr("KILN_")));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/pkg/m.py").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "the installed files still belong to the install user";
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_FALSE(std::filesystem::exists(dir_ + ".home")) << "the installer's home is left behind";
}

TEST_F(InstallerTest, AFailureSaysWhyWithTheIndexMasked) {
  Script(
      "echo 'Looking in indexes: http://user:s3cret@127.0.0.1:9/simple'\n"
      "echo 'ERROR: No matching distribution found for tabulate' >&2\nexit 1");
  common::Status st = Run();
  EXPECT_EQ(st.code(), common::Code::kPackageInstallFailed);
  EXPECT_THAT(st.message(), HasSubstr("exited with status 1"));
  EXPECT_THAT(st.message(), HasSubstr("No matching distribution found for tabulate"));
  EXPECT_THAT(st.message(), Not(HasSubstr("s3cret")));
}

TEST_F(InstallerTest, TheTimeoutKillsTheWholeProcessGroup) {
  config_.timeout_ms = 1000;
  Script("sleep 60 & sleep 60");
  const auto start = std::chrono::steady_clock::now();
  common::Status st = Run();
  EXPECT_EQ(st.code(), common::Code::kPackageInstallFailed);
  EXPECT_THAT(st.message(), HasSubstr("took longer than 1000 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
}

TEST_F(InstallerTest, ACancelEndsTheInstall) {
  Script("sleep 60");
  common::UniqueFd cancel(::eventfd(0, EFD_CLOEXEC));
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    uint64_t one = 1;
    EXPECT_EQ(::write(cancel.get(), &one, sizeof(one)), 8);
  });
  const auto start = std::chrono::steady_clock::now();
  common::Status st = Run(cancel.get());
  t.join();
  EXPECT_EQ(st.code(), common::Code::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(InstallerTest, SpecialFilesAndOversizedSetsAreRefused) {
  Script("mkfifo pipe");
  common::Status st = Run();
  EXPECT_EQ(st.code(), common::Code::kPackageInstallFailed);
  EXPECT_THAT(st.message(), HasSubstr("special file"));

  std::filesystem::remove_all(dir_);
  ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chown(dir_.c_str(), config_.uid, config_.gid), 0);
  // Each file under RLIMIT_FSIZE (the cap), together over it.
  Script("head -c 600000 /dev/zero > a; head -c 600000 /dev/zero > b");
  st = Run();
  EXPECT_EQ(st.code(), common::Code::kPackageInstallFailed);
  EXPECT_THAT(st.message(), HasSubstr("cap of 1 MiB"));
}

TEST_F(InstallerTest, NoIndexNoInstall) {
  config_.python_index.clear();
  Script("touch ran");
  common::Status st = Run();
  EXPECT_EQ(st.code(), common::Code::kPackageInstallFailed);
  EXPECT_THAT(st.message(), HasSubstr("no index is configured"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/ran"));
}

TEST(InstallerErrorTextTest, PicksErrorLinesAndBoundsThem) {
  EXPECT_EQ(InstallerErrorText("Collecting x\nERROR: one\nnoise\nERROR: two\n", "", 200),
            "ERROR: one | ERROR: two");
  EXPECT_EQ(InstallerErrorText("a\nb\x01\n", "", 200), "a | b ");
  EXPECT_EQ(InstallerErrorText("npm error 404 http://idx/x\n", "http://idx", 200),
            "npm error 404 <index>/x");
  std::string long_text = "ERROR: " + std::string(5000, 'x');
  EXPECT_EQ(InstallerErrorText(long_text, "", 100).size(), 100u);
}

}  // namespace
}  // namespace kiln::worker
