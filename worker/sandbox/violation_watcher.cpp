#include "worker/sandbox/violation_watcher.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::worker::sandbox {

using common::Status;
using common::StatusOr;
using common::UniqueFd;

namespace {
constexpr uint64_t kStopKey = 0;
constexpr int kX32Bit = 0x40000000;
}  // namespace

StatusOr<std::unique_ptr<ViolationWatcher>> ViolationWatcher::Start() {
  std::unique_ptr<ViolationWatcher> w(new ViolationWatcher());
  w->epoll_.Reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!w->epoll_.valid()) return common::ErrnoStatus("epoll_create1", errno);
  w->stop_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!w->stop_.valid()) return common::ErrnoStatus("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kStopKey;
  if (::epoll_ctl(w->epoll_.get(), EPOLL_CTL_ADD, w->stop_.get(), &ev) != 0) {
    return common::ErrnoStatus("epoll_ctl", errno);
  }
  w->thread_ = std::thread([p = w.get()] { p->Run(); });
  return w;
}

ViolationWatcher::~ViolationWatcher() {
  uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

StatusOr<std::unique_ptr<ViolationWatcher::Watch>> ViolationWatcher::Add(UniqueFd listener,
                                                                         int pidfd) {
  auto record = std::make_shared<Record>();
  record->listener = std::move(listener);
  record->pidfd.Reset(::fcntl(pidfd, F_DUPFD_CLOEXEC, 0));
  if (!record->pidfd.valid()) return common::ErrnoStatus("dup of the sandbox's pidfd", errno);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t key = next_key_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, record->listener.get(), &ev) != 0) {
    return common::ErrnoStatus("epoll_ctl on a seccomp listener", errno);
  }
  records_[key] = record;
  return std::unique_ptr<Watch>(new Watch(this, key, std::move(record)));
}

void ViolationWatcher::Remove(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) return;
  // Already gone from the set after a hang-up: ENOENT, harmless.
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second->listener.get(), nullptr);
  records_.erase(it);  // the thread may still hold the record: the fd lives until it lets go
}

void ViolationWatcher::Run() {
  epoll_event events[32];
  for (;;) {
    int n = ::epoll_wait(epoll_.get(), events, 32, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kStopKey) return;
      Handle(events[i].data.u64, events[i].events);
    }
  }
}

void ViolationWatcher::Handle(uint64_t key, uint32_t events) {
  std::shared_ptr<Record> record;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(key);
    if (it == records_.end()) return;
    record = it->second;
    if (!(events & EPOLLIN)) {
      // Hang-up without a notification: every process of the sandbox is
      // gone. Stop watching (the set is level-triggered).
      (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, record->listener.get(), nullptr);
      return;
    }
  }
  // A notification is pending, so this does not block: the kernel counts
  // it until it is received, and answers ENOENT if the caller died first.
  seccomp_notif notif;
  std::memset(&notif, 0, sizeof notif);
  if (::ioctl(record->listener.get(), SECCOMP_IOCTL_NOTIF_RECV, &notif) == 0) {
    record->nr.store(notif.data.nr);
    record->arch.store(notif.data.arch);
  }
  record->fired.store(true);
  // pid 1 first: its pid namespace takes every other process with it. The
  // caller is left blocked in its call until then: no reply is sent.
  (void)::syscall(SYS_pidfd_send_signal, record->pidfd.get(), SIGKILL, nullptr, 0);
}

ViolationWatcher::Watch::~Watch() { watcher_->Remove(key_); }

std::string ViolationWatcher::Watch::Describe() const {
  if (!record_->fired.load()) return "";
  int nr = record_->nr.load();
  uint32_t arch = record_->arch.load();
  if (nr < 0) return "a system call on the kill list";
  if (arch == AUDIT_ARCH_X86_64 && (nr & kX32Bit) == 0) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
    if (name != nullptr) {
      std::string out = name;
      std::free(name);
      return out;
    }
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "a system call of a foreign ABI (arch 0x%x, nr %d)", arch, nr);
  return buf;
}

}  // namespace kiln::worker::sandbox
