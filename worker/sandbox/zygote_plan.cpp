#include "worker/sandbox/zygote_plan.hpp"

#include <cstdint>
#include <cstring>
#include <utility>

namespace kiln::worker::sandbox {
namespace {

constexpr uint32_t kMagic = 0x3150'5a4b;  // "KZP1"
constexpr uint32_t kNull = 0xffff'ffff;   // a null string
constexpr uint32_t kMaxString = 64 << 10;
constexpr uint32_t kMaxOps = 4096;
constexpr uint32_t kMaxFilter = 4096;  // BPF_MAXINSNS
constexpr uint32_t kMaxCgroupFds = 8;
constexpr uint32_t kMaxEnvBytes = 1 << 20;

// The plan's booleans, as bits.
constexpr uint32_t kJoinCgroups = 1 << 0, kCgroupNs = 1 << 1, kFilesystem = 1 << 2, kUtsNs = 1 << 3,
                   kNetNs = 1 << 4, kTimeNs = 1 << 5, kLandlock = 1 << 6, kSeccomp = 1 << 7,
                   kLoopback = 1 << 8;
// Which of the fixed descriptors are present: bits 0-3 fds[0..3], then these.
constexpr uint32_t kNotifyBit = 1 << 4, kStatusBit = 1 << 5, kToolBit = 1 << 6;
constexpr uint32_t kPresentBits = 7;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void Str(const char* s) {
    if (s == nullptr) return Put<uint32_t>(kNull);
    Put<uint32_t>(static_cast<uint32_t>(std::strlen(s)));
    out_ += s;
  }
  void Bytes(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), end_(p + n) {}
  template <typename T>
  bool Get(T* v) {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) return fail();
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  // A string kept in `strings`; *out is null for a null string.
  bool Str(std::deque<std::string>& strings, const char** out) {
    uint32_t n;
    if (!Get(&n)) return false;
    if (n == kNull) {
      *out = nullptr;
      return true;
    }
    if (n > kMaxString || static_cast<size_t>(end_ - p_) < n) return fail();
    std::string s(p_, n);
    if (s.find('\0') != std::string::npos) return fail();
    p_ += n;
    *out = strings.emplace_back(std::move(s)).c_str();
    return true;
  }
  bool Bytes(void* dst, size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) return fail();
    std::memcpy(dst, p_, n);
    p_ += n;
    return true;
  }
  bool done() const { return ok_ && p_ == end_; }

 private:
  bool fail() {
    ok_ = false;
    return false;
  }
  const char* p_;
  const char* end_;
  bool ok_ = true;
};

}  // namespace

std::vector<int> ZygoteFds(const ChildPlan& plan) {
  std::vector<int> fds;
  for (int fd : plan.fds) {
    if (fd >= 0) fds.push_back(fd);
  }
  if (plan.notify_sock >= 0) fds.push_back(plan.notify_sock);
  if (plan.status_fd >= 0) fds.push_back(plan.status_fd);
  if (plan.tool_fd >= 0) fds.push_back(plan.tool_fd);
  for (int i = 0; i < plan.cgroup_fd_count; ++i) fds.push_back(plan.cgroup_fds[i]);
  return fds;
}

std::string EncodeZygotePlan(const ChildPlan& p, unsigned long clone_flags,
                             const std::vector<std::string>& env) {
  Writer w;
  std::string env_block;
  for (const std::string& e : env) {
    env_block += e;
    env_block += '\0';
  }
  w.Put<uint32_t>(static_cast<uint32_t>(env_block.size()));
  w.Bytes(env_block.data(), env_block.size());
  w.Put<uint32_t>(kMagic);
  uint32_t bits = 0;
  for (auto [on, bit] : {std::pair{p.join_cgroups, kJoinCgroups},
                         {p.cgroup_ns, kCgroupNs},
                         {p.filesystem, kFilesystem},
                         {p.uts_ns, kUtsNs},
                         {p.net_ns, kNetNs},
                         {p.time_ns, kTimeNs},
                         {p.landlock, kLandlock},
                         {p.seccomp, kSeccomp},
                         {p.loopback, kLoopback}}) {
    if (on) bits |= bit;
  }
  w.Put<uint32_t>(bits);
  w.Put<uint64_t>(clone_flags);
  w.Put<uint32_t>(p.uid);
  w.Put<uint32_t>(p.gid);
  w.Put<int32_t>(p.landlock_abi);
  for (int i = 0; i < kRlimitCount; ++i) {
    w.Put<int32_t>(p.rlimits.resource[i]);
    w.Put<uint64_t>(p.rlimits.value[i].rlim_cur);
    w.Put<uint64_t>(p.rlimits.value[i].rlim_max);
  }
  w.Str(p.new_root);
  w.Str(p.hostname);
  w.Put<uint32_t>(static_cast<uint32_t>(p.mount_op_count));
  for (size_t i = 0; i < p.mount_op_count; ++i) {
    const MountOp& op = p.mount_ops[i];
    w.Put<uint8_t>(static_cast<uint8_t>(op.kind));
    w.Str(op.source);
    w.Str(op.target);
    w.Str(op.data);
    w.Put<uint64_t>(op.flags);
    w.Put<uint32_t>(op.mode);
    w.Put<uint64_t>(op.dev);
    w.Put<uint8_t>(op.optional ? 1 : 0);
  }
  for (int i = 0; i < 2; ++i) {
    w.Put<uint32_t>(p.seccomp_lens[i]);
    w.Bytes(p.seccomp_filters[i], p.seccomp_lens[i] * sizeof(sock_filter));
  }
  uint32_t present = 0;
  for (int i = 0; i < 4; ++i) {
    if (p.fds[i] >= 0) present |= 1u << i;
  }
  if (p.notify_sock >= 0) present |= kNotifyBit;
  if (p.status_fd >= 0) present |= kStatusBit;
  if (p.tool_fd >= 0) present |= kToolBit;
  w.Put<uint32_t>(present);
  w.Put<uint32_t>(static_cast<uint32_t>(p.cgroup_fd_count));
  return std::move(w.out());
}

std::unique_ptr<DecodedZygotePlan> DecodeZygotePlan(const char* data, size_t size, const int* fds,
                                                    int fd_count, std::string* error) {
  auto d = std::make_unique<DecodedZygotePlan>();
  ChildPlan& p = d->plan;
  auto bad = [&](const char* what) {
    *error = what;
    return nullptr;
  };
  Reader r(data, size);
  uint32_t env_bytes;
  if (!r.Get(&env_bytes) || env_bytes > kMaxEnvBytes) return bad("bad environment size");
  std::string env(env_bytes, '\0');
  if (!r.Bytes(env.data(), env_bytes) || (!env.empty() && env.back() != '\0')) {
    return bad("bad environment");
  }
  for (size_t at = 0; at < env.size();) {
    size_t end = env.find('\0', at);
    d->env.push_back(env.substr(at, end - at));
    at = end + 1;
  }
  for (const std::string& e : d->env) d->envp.push_back(e.c_str());
  d->envp.push_back(nullptr);
  p.envp = d->envp.data();
  uint32_t magic, bits, uid, gid;
  uint64_t clone_flags;
  int32_t abi;
  if (!r.Get(&magic) || magic != kMagic) return bad("not a zygote plan");
  if (!r.Get(&bits) || !r.Get(&clone_flags) || !r.Get(&uid) || !r.Get(&gid) || !r.Get(&abi)) {
    return bad("truncated header");
  }
  d->clone_flags = clone_flags;
  p.join_cgroups = bits & kJoinCgroups;
  p.cgroup_ns = bits & kCgroupNs;
  p.filesystem = bits & kFilesystem;
  p.uts_ns = bits & kUtsNs;
  p.net_ns = bits & kNetNs;
  p.time_ns = bits & kTimeNs;
  p.landlock = bits & kLandlock;
  p.seccomp = bits & kSeccomp;
  p.loopback = bits & kLoopback;
  p.uid = uid;
  p.gid = gid;
  p.landlock_abi = abi;
  for (int i = 0; i < kRlimitCount; ++i) {
    int32_t res;
    uint64_t cur, max;
    if (!r.Get(&res) || !r.Get(&cur) || !r.Get(&max)) return bad("truncated rlimits");
    p.rlimits.resource[i] = res;
    p.rlimits.value[i].rlim_cur = cur;
    p.rlimits.value[i].rlim_max = max;
  }
  const char* hostname;
  if (!r.Str(d->strings, &p.new_root) || !r.Str(d->strings, &hostname)) return bad("bad root");
  p.hostname = hostname != nullptr ? hostname : "kiln";
  uint32_t op_count;
  if (!r.Get(&op_count) || op_count > kMaxOps) return bad("bad mount op count");
  d->ops.resize(op_count);
  for (MountOp& op : d->ops) {
    uint8_t kind, optional;
    uint64_t flags, dev;
    uint32_t mode;
    if (!r.Get(&kind) || kind > static_cast<uint8_t>(MountOpKind::kMknod) ||
        !r.Str(d->strings, &op.source) || !r.Str(d->strings, &op.target) ||
        !r.Str(d->strings, &op.data) || !r.Get(&flags) || !r.Get(&mode) || !r.Get(&dev) ||
        !r.Get(&optional)) {
      return bad("bad mount op");
    }
    op.kind = static_cast<MountOpKind>(kind);
    op.flags = flags;
    op.mode = mode;
    op.dev = dev;
    op.optional = optional != 0;
  }
  p.mount_ops = d->ops.data();
  p.mount_op_count = d->ops.size();
  for (int i = 0; i < 2; ++i) {
    uint32_t n;
    if (!r.Get(&n) || n > kMaxFilter) return bad("bad seccomp filter size");
    d->filters[i].resize(n);
    if (!r.Bytes(d->filters[i].data(), n * sizeof(sock_filter))) return bad("truncated filter");
    p.seccomp_filters[i] = d->filters[i].data();
    p.seccomp_lens[i] = static_cast<unsigned short>(n);
  }
  uint32_t present, cgroup_count;
  if (!r.Get(&present) || !r.Get(&cgroup_count) || cgroup_count > kMaxCgroupFds) {
    return bad("bad descriptor list");
  }
  if (!r.done()) return bad("trailing bytes");
  int expected = static_cast<int>(cgroup_count);
  for (uint32_t b = 0; b < kPresentBits; ++b) expected += (present >> b) & 1;
  if (present >> kPresentBits != 0 || fd_count != expected) {
    return bad("descriptors do not match the plan");
  }
  int at = 0;
  for (int i = 0; i < 4; ++i) p.fds[i] = (present & (1u << i)) ? fds[at++] : -1;
  p.notify_sock = (present & kNotifyBit) ? fds[at++] : -1;
  p.status_fd = (present & kStatusBit) ? fds[at++] : -1;
  p.tool_fd = (present & kToolBit) ? fds[at++] : -1;
  d->cgroup_fds.assign(fds + at, fds + at + cgroup_count);
  p.cgroup_fds = d->cgroup_fds.data();
  p.cgroup_fd_count = static_cast<int>(cgroup_count);
  return d;
}

}  // namespace kiln::worker::sandbox
