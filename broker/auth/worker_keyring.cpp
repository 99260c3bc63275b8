#include "broker/auth/worker_keyring.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <vector>

#include "common/curve/curve_keys.hpp"
#include "common/log/logging.hpp"

namespace kiln::broker {
namespace {

const common::SubsystemLog kLog("scheduler");
constexpr std::string_view kSuffix = ".pub";

struct Entry {
  std::string name;  // the worker id: the file name without ".pub"
  std::string path;
  struct stat st {};
};

// The directory's *.pub files, sorted by name; empty when it cannot be read.
std::vector<Entry> List(const std::string& dir, bool* readable) {
  std::vector<Entry> out;
  DIR* d = ::opendir(dir.c_str());
  *readable = d != nullptr;
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string_view file = e->d_name;
    if (file.size() <= kSuffix.size() || file.substr(file.size() - kSuffix.size()) != kSuffix) {
      continue;
    }
    Entry entry{std::string(file.substr(0, file.size() - kSuffix.size())),
                dir + "/" + std::string(file)};
    if (::fstatat(::dirfd(d), e->d_name, &entry.st, 0) != 0 || !S_ISREG(entry.st.st_mode)) {
      continue;
    }
    out.push_back(std::move(entry));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

std::string Signature(const std::vector<Entry>& entries) {
  std::string s;
  for (const auto& e : entries) {
    s += e.name + '\0' + std::to_string(e.st.st_ino) + ':' + std::to_string(e.st.st_size) + ':' +
         std::to_string(e.st.st_mtim.tv_sec) + '.' + std::to_string(e.st.st_mtim.tv_nsec) + '\n';
  }
  return s;
}

}  // namespace

bool WorkerKeyring::Refresh() {
  ++scans_;
  bool readable = false;
  std::vector<Entry> entries = List(dir_, &readable);
  if (!readable) {
    static common::LogLimiter limit(1, std::chrono::seconds(60));
    kLog.Error(limit, {}, "cannot read the accepted worker keys in {}: no worker is accepted",
               dir_);
  }
  std::string signature = Signature(entries);
  if (signature == signature_ && !signature_.empty()) return false;
  signature_ = std::move(signature);

  auto keys = std::make_shared<Keys>();
  std::set<std::string> duplicated;
  for (const auto& e : entries) {
    if (!common::IsCurveKeyName(e.name)) {
      kLog.Warn({}, "{}: skipped, '{}' is not a worker id a key may name", e.path, e.name);
      continue;
    }
    auto key = common::ReadCurvePublicKeyFile(e.path);
    if (!key.ok()) {
      kLog.Warn({}, "skipped: {}", key.status().message());
      continue;
    }
    if (auto [it, fresh] = keys->emplace(*key, e.name); !fresh) {
      kLog.Warn({}, "{} and {}.pub hold the same key: neither is accepted", e.path, it->second);
      duplicated.insert(*key);
    }
  }
  for (const auto& k : duplicated) keys->erase(k);

  std::lock_guard lock(mu_);
  if (*keys == *keys_) return false;
  kLog.Info({}, "accepted worker keys: {} (from {})", keys->size(), dir_);
  keys_ = std::move(keys);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

std::optional<std::string> WorkerKeyring::WorkerOf(std::string_view public_z85) const {
  std::shared_ptr<const Keys> keys;
  {
    std::lock_guard lock(mu_);
    keys = keys_;
  }
  auto it = keys->find(std::string(public_z85));
  if (it == keys->end()) return std::nullopt;
  return it->second;
}

size_t WorkerKeyring::size() const {
  std::lock_guard lock(mu_);
  return keys_->size();
}

}  // namespace kiln::broker
