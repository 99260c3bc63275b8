// ZygotePlan: a ChildPlan survives encoding into bytes and decoding in the
// zygote field for field (mount ops, filters, rlimits, descriptors in
// ZygoteFds order, environment), and every malformed message — truncated,
// padded, wrong magic, oversized counts, descriptors that do not match — is
// refused without a plan.
#include "worker/sandbox/zygote_plan.hpp"

#include <gtest/gtest.h>
#include <sched.h>

#include <cstring>
#include <string>
#include <vector>

namespace kiln::worker::sandbox {
namespace {

struct Fixture {
  std::vector<MountOp> ops;
  std::vector<sock_filter> filter0, filter1;
  std::vector<int> cgroup_fds = {40, 41};
  ChildPlan plan;

  Fixture() {
    ops.push_back({MountOpKind::kTmpfs, nullptr, "/run/kiln/root", "size=1m", 6, 0755, 0, false});
    ops.push_back({MountOpKind::kBind, "/usr", "/run/kiln/root/usr", nullptr, 4097, 0, 0, true});
    ops.push_back({MountOpKind::kMknod, "/dev/null", "/run/kiln/root/dev/null", nullptr, 0, 0666,
                   makedev_value(1, 3), false});
    filter0 = {{0x20, 0, 0, 4}, {0x06, 0, 0, 0x7fff0000}};
    filter1 = {{0x06, 0, 0, 0x7fff0000}};
    plan.join_cgroups = true;
    plan.cgroup_ns = false;
    plan.net_ns = true;
    plan.time_ns = false;
    plan.loopback = false;
    plan.cgroup_fds = cgroup_fds.data();
    plan.cgroup_fd_count = 2;
    plan.mount_ops = ops.data();
    plan.mount_op_count = ops.size();
    plan.new_root = "/run/kiln/root";
    plan.hostname = "kiln";
    for (int i = 0; i < kRlimitCount; ++i) {
      plan.rlimits.resource[i] = i;
      plan.rlimits.value[i] = {static_cast<rlim_t>(100 + i), static_cast<rlim_t>(200 + i)};
    }
    plan.fds[0] = 10;
    plan.fds[1] = 11;
    plan.fds[2] = -1;
    plan.fds[3] = 13;
    plan.notify_sock = 14;
    plan.status_fd = 15;
    plan.uid = 200123;
    plan.gid = 200124;
    plan.landlock_abi = 7;
    plan.seccomp_filters[0] = filter0.data();
    plan.seccomp_lens[0] = static_cast<unsigned short>(filter0.size());
    plan.seccomp_filters[1] = filter1.data();
    plan.seccomp_lens[1] = static_cast<unsigned short>(filter1.size());
  }
  static dev_t makedev_value(unsigned major, unsigned minor) {
    return static_cast<dev_t>(major) << 8 | minor;
  }
};

TEST(ZygotePlanTest, RoundTripsEveryField) {
  Fixture f;
  const std::vector<std::string> env = {"PATH=/usr/bin", "HOME=/workspace", "EMPTY="};
  std::string msg = EncodeZygotePlan(f.plan, CLONE_NEWPID | CLONE_NEWNET, env);
  std::vector<int> fds = ZygoteFds(f.plan);
  EXPECT_EQ(fds, (std::vector<int>{10, 11, 13, 14, 15, 40, 41}));
  // The zygote receives other numbers for the same descriptors.
  std::vector<int> received = {50, 51, 53, 54, 55, 60, 61};
  std::string error;
  auto d = DecodeZygotePlan(msg.data(), msg.size(), received.data(),
                            static_cast<int>(received.size()), &error);
  ASSERT_TRUE(d) << error;
  const ChildPlan& p = d->plan;
  EXPECT_EQ(d->clone_flags, static_cast<unsigned long>(CLONE_NEWPID | CLONE_NEWNET));
  EXPECT_EQ(d->env, env);
  ASSERT_NE(p.envp, nullptr);
  EXPECT_STREQ(p.envp[0], "PATH=/usr/bin");
  EXPECT_STREQ(p.envp[2], "EMPTY=");
  EXPECT_EQ(p.envp[3], nullptr);
  EXPECT_TRUE(p.join_cgroups);
  EXPECT_FALSE(p.cgroup_ns);
  EXPECT_TRUE(p.filesystem);
  EXPECT_TRUE(p.uts_ns);
  EXPECT_TRUE(p.net_ns);
  EXPECT_FALSE(p.time_ns);
  EXPECT_TRUE(p.landlock);
  EXPECT_TRUE(p.seccomp);
  EXPECT_FALSE(p.loopback);
  EXPECT_EQ(p.uid, 200123u);
  EXPECT_EQ(p.gid, 200124u);
  EXPECT_EQ(p.landlock_abi, 7);
  EXPECT_STREQ(p.new_root, "/run/kiln/root");
  EXPECT_STREQ(p.hostname, "kiln");
  for (int i = 0; i < kRlimitCount; ++i) {
    EXPECT_EQ(p.rlimits.resource[i], i);
    EXPECT_EQ(p.rlimits.value[i].rlim_cur, static_cast<rlim_t>(100 + i));
    EXPECT_EQ(p.rlimits.value[i].rlim_max, static_cast<rlim_t>(200 + i));
  }
  ASSERT_EQ(p.mount_op_count, 3u);
  EXPECT_EQ(p.mount_ops[0].kind, MountOpKind::kTmpfs);
  EXPECT_EQ(p.mount_ops[0].source, nullptr);
  EXPECT_STREQ(p.mount_ops[0].target, "/run/kiln/root");
  EXPECT_STREQ(p.mount_ops[0].data, "size=1m");
  EXPECT_EQ(p.mount_ops[0].flags, 6u);
  EXPECT_EQ(p.mount_ops[0].mode, 0755u);
  EXPECT_STREQ(p.mount_ops[1].source, "/usr");
  EXPECT_TRUE(p.mount_ops[1].optional);
  EXPECT_EQ(p.mount_ops[2].dev, Fixture::makedev_value(1, 3));
  ASSERT_EQ(p.seccomp_lens[0], 2);
  ASSERT_EQ(p.seccomp_lens[1], 1);
  EXPECT_EQ(std::memcmp(p.seccomp_filters[0], f.filter0.data(), 2 * sizeof(sock_filter)), 0);
  EXPECT_EQ(p.seccomp_filters[1][0].k, 0x7fff0000u);
  EXPECT_EQ(p.fds[0], 50);
  EXPECT_EQ(p.fds[1], 51);
  EXPECT_EQ(p.fds[2], -1);
  EXPECT_EQ(p.fds[3], 53);
  EXPECT_EQ(p.notify_sock, 54);
  EXPECT_EQ(p.status_fd, 55);
  ASSERT_EQ(p.cgroup_fd_count, 2);
  EXPECT_EQ(p.cgroup_fds[0], 60);
  EXPECT_EQ(p.cgroup_fds[1], 61);
}

TEST(ZygotePlanTest, RefusesMalformedMessages) {
  Fixture f;
  std::string msg = EncodeZygotePlan(f.plan, 0, {"A=1"});
  std::vector<int> fds = {1, 2, 3, 4, 5, 6, 7};
  std::string error;
  auto decode = [&](const std::string& m, int count) {
    error.clear();
    return DecodeZygotePlan(m.data(), m.size(), fds.data(), count, &error) != nullptr;
  };
  ASSERT_TRUE(decode(msg, 7)) << error;
  // Every truncation fails, none crashes.
  for (size_t n = 0; n < msg.size(); ++n) {
    EXPECT_FALSE(decode(msg.substr(0, n), 7)) << "truncated to " << n;
    EXPECT_FALSE(error.empty());
  }
  EXPECT_FALSE(decode(msg + "x", 7));
  EXPECT_EQ(error, "trailing bytes");
  EXPECT_FALSE(decode(msg, 6));  // one descriptor missing
  EXPECT_FALSE(decode(msg, 8));  // one too many
  std::string bad_magic = msg;
  bad_magic[4 + 4] ^= 1;  // after the env size and "A=1\0"
  EXPECT_FALSE(decode(bad_magic, 7));
  EXPECT_EQ(error, "not a zygote plan");
  std::string huge_env = msg;
  uint32_t big = 0xfffffff0;
  std::memcpy(huge_env.data(), &big, 4);
  EXPECT_FALSE(decode(huge_env, 7));
  std::string no_nul_env = msg;
  no_nul_env[4 + 3] = 'x';  // the env block no longer ends in NUL
  EXPECT_FALSE(decode(no_nul_env, 7));
}

}  // namespace
}  // namespace kiln::worker::sandbox
