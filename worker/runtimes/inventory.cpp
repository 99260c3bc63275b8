#include "worker/runtimes/inventory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "common/unique_fd.hpp"

extern char** environ;

namespace kiln::worker::runtimes {
namespace {

constexpr auto kInterpreterWait = std::chrono::seconds(5);
constexpr size_t kMaxVersionOutput = 4096;
constexpr size_t kMaxStdlibOutput = 64 << 10;  // ~2.5 KiB for python 3.11's 305 names

std::string ReadSmallFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// "<name>-<version>.dist-info" / ".egg-info" (Debian's egg-info may carry
// "-py3.11" after the version).
bool ParseDistEntry(const std::string& entry, PackageVersion* out) {
  std::string stem;
  for (const char* suffix : {".dist-info", ".egg-info"}) {
    const std::string s(suffix);
    if (entry.size() > s.size() && entry.compare(entry.size() - s.size(), s.size(), s) == 0) {
      stem = entry.substr(0, entry.size() - s.size());
    }
  }
  const size_t dash = stem.find('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == stem.size()) return false;
  out->name = stem.substr(0, dash);
  out->version = stem.substr(dash + 1);
  out->version = out->version.substr(0, out->version.find('-'));
  return !out->version.empty();
}

}  // namespace

std::string ParseVersionOutput(Language language, const std::string& output) {
  const std::string line = output.substr(0, output.find('\n'));
  std::string v;
  switch (language) {
    case Language::kPython:
      if (line.rfind("Python ", 0) == 0) v = line.substr(7);
      break;
    case Language::kJavaScript:
      if (line.size() > 1 && line[0] == 'v') v = line.substr(1);
      break;
    case Language::kShell:
      if (size_t at = line.find("version "); at != std::string::npos) {
        v = line.substr(at + 8);
        v = v.substr(0, v.find(' '));
      }
      break;
  }
  while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
  return v.size() <= 64 ? v : "";
}

namespace {

// What `argv` (argv[0] an absolute path) prints on stdout and stderr, at most
// about `max_bytes` (a read more at most), waiting at most kInterpreterWait;
// "" when it cannot start.
std::string OutputOf(const std::vector<const char*>& argv, size_t max_bytes) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "";
  common::UniqueFd read_end(fds[0]), write_end(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<const char*> args = argv;
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, const_cast<char* const*>(args.data()),
                         environ);
  posix_spawn_file_actions_destroy(&actions);
  write_end.Reset();
  if (rc != 0) return "";
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + kInterpreterWait;
  char buf[4096];
  while (out.size() < max_bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    struct pollfd p = {read_end.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    ssize_t n = ::read(read_end.get(), buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::kill(pid, SIGKILL);  // done or too slow: it has nothing more to say
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

}  // namespace

std::string InterpreterVersion(Language language, const std::string& interpreter) {
  return ParseVersionOutput(language,
                            OutputOf({interpreter.c_str(), "--version"}, kMaxVersionOutput));
}

ModuleSet PythonStdlibModules(const std::string& interpreter) {
  const std::string out =
      OutputOf({interpreter.c_str(), "-I", "-c",
                "import sys; print('kiln-stdlib', *sorted(sys.stdlib_module_names))"},
               kMaxStdlibOutput);
  ModuleSet names;
  std::istringstream words(out);
  std::string word;
  if (!(words >> word) || word != "kiln-stdlib") return names;
  while (words >> word) {
    if (IsValidIdentifier(word)) names.insert(word);
  }
  return names;
}

std::vector<std::string> PythonPackageDirs() {
  std::vector<std::string> dirs;
  for (const char* pattern :
       {"/usr/local/lib/python3*/dist-packages", "/usr/lib/python3/dist-packages",
        "/usr/lib/python3.*/dist-packages"}) {
    glob_t g{};
    if (::glob(pattern, GLOB_ONLYDIR, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) dirs.emplace_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
  }
  return dirs;
}

std::vector<PackageVersion> PythonPackages(const std::vector<std::string>& dirs) {
  std::map<std::string, std::string> found;
  for (const std::string& dir : dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    while (struct dirent* e = ::readdir(d)) {
      PackageVersion p;
      if (ParseDistEntry(e->d_name, &p)) found.emplace(p.name, p.version);
    }
    ::closedir(d);
  }
  std::vector<PackageVersion> out;
  for (auto& [name, version] : found) out.push_back({name, version});
  return out;
}

std::vector<PackageVersion> JavascriptPackages(const std::string& node_modules) {
  std::vector<PackageVersion> out;
  if (node_modules.empty()) return out;
  std::vector<std::string> names;
  const std::string manifest = node_modules.substr(0, node_modules.rfind('/')) + "/package.json";
  auto top = nlohmann::json::parse(ReadSmallFile(manifest), nullptr, false);
  if (top.is_object() && top.contains("dependencies") && top["dependencies"].is_object()) {
    for (const auto& [name, range] : top["dependencies"].items()) names.push_back(name);
  } else if (DIR* d = ::opendir(node_modules.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.' && e->d_name[0] != '@') names.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  for (const std::string& name : names) {
    auto pkg = nlohmann::json::parse(ReadSmallFile(node_modules + "/" + name + "/package.json"),
                                     nullptr, false);
    if (!pkg.is_object() || !pkg.contains("version") || !pkg["version"].is_string()) continue;
    out.push_back({name, pkg["version"].get<std::string>()});
  }
  std::sort(out.begin(), out.end(),
            [](const PackageVersion& a, const PackageVersion& b) { return a.name < b.name; });
  return out;
}

RuntimeOffer TakeInventory(const std::map<Language, Runtime>& runtimes,
                           const std::string& node_modules) {
  RuntimeOffer offer;
  for (const auto& [language, runtime] : runtimes) {
    const std::string name(LanguageName(language));
    offer.versions[name] = InterpreterVersion(language, runtime.interpreter());
    std::vector<PackageVersion> packages;
    if (language == Language::kPython) packages = PythonPackages(PythonPackageDirs());
    if (language == Language::kJavaScript) packages = JavascriptPackages(node_modules);
    for (const auto& p : packages) {
      if (offer.packages.size() == common::protocol::kMaxPackages) break;
      // Names and versions never hold spaces: the broker splits on them.
      if (p.name.find(' ') != std::string::npos || p.version.find(' ') != std::string::npos) {
        continue;
      }
      offer.packages.push_back(name + " " + p.name + " " + p.version);
    }
  }
  return offer;
}

}  // namespace kiln::worker::runtimes
