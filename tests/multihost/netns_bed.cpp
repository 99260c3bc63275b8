#include "tests/multihost/netns_bed.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace kiln::testing {
namespace {

constexpr const char* kSubnet = "10.213.0.";  // hosts get .2, .3, ...
constexpr size_t kMaxHosts = 9;
constexpr const char* kBridge = "br0";

// "kiln-h<pid>-" followed by a host name: the pid, else -1.
pid_t PidOfBedNamespace(const std::string& name) {
  if (name.rfind("kiln-h", 0) != 0) return -1;
  size_t i = 6, start = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == start || i >= name.size() || name[i] != '-') return -1;
  return static_cast<pid_t>(std::stol(name.substr(start, i - start)));
}

void Must(const std::string& command) {
  std::string out;
  const int rc = RunCommand(command, &out);
  if (rc != 0) {
    throw std::runtime_error("`" + command + "` failed (" + std::to_string(rc) + "): " + out);
  }
}

std::string SwitchPort(const std::string& host) { return "v-" + host; }

}  // namespace

bool BedOwnerAlive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  FILE* f = ::fopen(("/proc/" + std::to_string(pid) + "/comm").c_str(), "r");
  if (f == nullptr) return false;
  char comm[64] = {};
  const bool ok = ::fgets(comm, sizeof comm, f) != nullptr;
  ::fclose(f);
  return ok && std::string(comm).rfind("multihost", 0) == 0;
}

int RunCommand(const std::string& command, std::string* out) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = ::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  if (out != nullptr) *out = std::move(text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> NetnsBed::ListBedNamespaces() {
  std::string out;
  RunCommand("ip netns list", &out);
  std::vector<std::string> names;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (PidOfBedNamespace(name) > 0) names.push_back(name);
  }
  return names;
}

int NetnsBed::RemoveStale() {
  int removed = 0;
  for (const std::string& name : ListBedNamespaces()) {
    const pid_t owner = PidOfBedNamespace(name);
    if (owner == ::getpid() || BedOwnerAlive(owner)) continue;
    // Processes a crashed run left inside (the bed started every one of them).
    std::string pids;
    RunCommand("ip netns pids " + name, &pids);
    std::istringstream in(pids);
    for (pid_t pid; in >> pid;) ::kill(pid, SIGKILL);
    if (RunCommand("ip netns delete " + name) == 0) ++removed;
  }
  return removed;
}

void NetnsBed::EnterNetns(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error("setns " + path + ": " + std::strerror(err));
}

std::unique_ptr<NetnsBed> NetnsBed::Create(const std::vector<std::string>& hosts) {
  if (hosts.empty() || hosts.size() > kMaxHosts) {
    throw std::runtime_error("a bed has 1 to 9 hosts");
  }
  RemoveStale();
  std::unique_ptr<NetnsBed> bed(new NetnsBed());
  bed->prefix_ = "kiln-h" + std::to_string(::getpid()) + "-";
  // Leftovers of this very process (a bed whose destructor never ran).
  for (const std::string& name : ListBedNamespaces()) {
    if (name.rfind(bed->prefix_, 0) == 0) RunCommand("ip netns delete " + name);
  }
  try {
    const std::string sw = bed->prefix_ + "sw";
    Must("ip netns add " + sw);
    bed->made_.push_back(sw);
    Must("ip -n " + sw + " link set lo up");
    // No STP: a port forwards as soon as it is up (a healed link at once).
    Must("ip -n " + sw + " link add " + kBridge + " type bridge stp_state 0 forward_delay 0");
    Must("ip -n " + sw + " link set " + kBridge + " up");
    for (size_t i = 0; i < hosts.size(); ++i) {
      const std::string& host = hosts[i];
      const std::string name = bed->prefix_ + host;
      Must("ip netns add " + name);
      bed->made_.push_back(name);
      bed->hosts_.push_back(host);
      // Both ends are made in their own namespaces: nothing passes the root's.
      Must("ip -n " + sw + " link add " + SwitchPort(host) + " type veth peer name eth0 netns " +
           name);
      Must("ip -n " + sw + " link set " + SwitchPort(host) + " master " + kBridge + " up");
      Must("ip -n " + name + " link set lo up");
      Must("ip -n " + name + " addr add " + bed->ip(host) + "/24 dev eth0");
      Must("ip -n " + name + " link set eth0 up");
    }
  } catch (...) {
    bed->Teardown();
    throw;
  }
  return bed;
}

NetnsBed::~NetnsBed() { Teardown(); }

void NetnsBed::Teardown() {
  // Hosts first: deleting a namespace destroys its veth end, and so the pair.
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) RunCommand("ip netns delete " + *it);
  made_.clear();
}

std::string NetnsBed::ip(const std::string& host) const {
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (hosts_[i] == host) return kSubnet + std::to_string(i + 2);
  }
  throw std::runtime_error("no host " + host);
}

std::string NetnsBed::ns(const std::string& host) const {
  ip(host);  // throws for an unknown host
  return prefix_ + host;
}

ChildProcess NetnsBed::Start(const std::string& host, const std::vector<std::string>& argv,
                             const std::string& log_file,
                             const std::vector<std::string>& extra_env) const {
  std::vector<std::string> full = {"/usr/bin/nsenter", "--net=" + ns_path(host), "--"};
  full.insert(full.end(), argv.begin(), argv.end());
  return ChildProcess::Start(full, log_file, extra_env);
}

void NetnsBed::Partition(const std::string& host) const {
  ip(host);
  Must("ip -n " + prefix_ + "sw link set " + SwitchPort(host) + " down");
}

void NetnsBed::Heal(const std::string& host) const {
  ip(host);
  Must("ip -n " + prefix_ + "sw link set " + SwitchPort(host) + " up");
}

}  // namespace kiln::testing
