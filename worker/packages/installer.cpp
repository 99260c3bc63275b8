#include "worker/packages/installer.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "common/unique_fd.hpp"

namespace kiln::worker {
namespace {

using common::Code;
using common::Status;

constexpr size_t kMaxOutputKept = 256u << 10;  // the installer's output tail
constexpr size_t kMaxErrorText = 2000;

Status Failed(std::string message) {
  return Status(Code::kPackageInstallFailed, "packages: " + std::move(message));
}

// Where the set's own javascript imports bare names from: a module at the
// set's root resolves them in <set>/node_modules first (javascript wrappers).
constexpr const char* kImportHelper = ".kiln-import.mjs";
constexpr const char* kImportHelperText =
    "// Written by the Kiln worker: import() from the package set's root.\n"
    "export default (specifier) => import(specifier);\n";

std::vector<std::string> InstallerArgv(const PackageInstallConfig& c, const std::string& language,
                                       const std::vector<std::string>& specs,
                                       const std::string& dir) {
  std::vector<std::string> argv;
  if (language == "python") {
    argv = {c.python,
            "-m",
            "pip",
            "install",
            "--target",
            dir,
            "--index-url",
            c.python_index,
            "--only-binary",
            ":all:",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-input",
            "--no-color",
            "--progress-bar",
            "off",
            "--no-warn-script-location",
            "--"};
  } else {
    argv = {c.npm,
            "install",
            "--prefix",
            dir,
            "--registry",
            c.npm_registry,
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
            "--omit=dev",
            "--no-package-lock",
            "--no-progress",
            "--loglevel=error",
            "--"};
  }
  argv.insert(argv.end(), specs.begin(), specs.end());
  return argv;
}

std::vector<std::string> InstallerEnv(const std::string& home) {
  // No user or site configuration: only the command line steers the installer.
  return {"PATH=/usr/local/bin:/usr/bin:/bin",
          "HOME=" + home,
          "LANG=C.UTF-8",
          "PIP_CONFIG_FILE=/dev/null",
          "PYTHONNOUSERSITE=1",
          "NPM_CONFIG_USERCONFIG=" + home + "/npmrc",  // absent: none
          "NPM_CONFIG_GLOBALCONFIG=" + home + "/npmrc-global",
          "NPM_CONFIG_CACHE=" + home + "/npm-cache",
          "NPM_CONFIG_UPDATE_NOTIFIER=false"};
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// After fork, in the child of a multi-threaded process: async-signal-safe
// calls only. Never returns.
[[noreturn]] void ExecInstaller(const PackageInstallConfig& c, const std::string& dir, int out_fd,
                                char* const* argv, char* const* envp) {
  ::setsid();                          // its own process group: killed whole
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and with the worker's job thread
  int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd < 0 || ::dup2(null_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(out_fd, 2) < 0) {
    ::_exit(126);
  }
  ::syscall(SYS_close_range, 3u, ~0u, 0u);
  const rlimit fsize{c.max_set_bytes, c.max_set_bytes};
  const rlimit core{0, 0};
  ::umask(022);  // readable by every sandbox uid
  if (::setrlimit(RLIMIT_FSIZE, &fsize) != 0 || ::setrlimit(RLIMIT_CORE, &core) != 0 ||
      ::setgroups(0, nullptr) != 0 || ::setresgid(c.gid, c.gid, c.gid) != 0 ||
      ::setresuid(c.uid, c.uid, c.uid) != 0 || ::chdir(dir.c_str()) != 0) {
    ::_exit(126);
  }
  ::execve(argv[0], argv, envp);
  ::_exit(127);
}

// Checks and hands the tree to root: regular files, folders and symlinks
// only, at most max_bytes of files.
Status SealTree(const std::string& dir, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  uint64_t total = 0;
  std::vector<std::string> paths;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) return common::ErrnoStatus("lstat", errno);
    if (S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_size);
    } else if (!S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
      return Failed("the installer left a special file: " + it->path().filename().string());
    }
    if (total > max_bytes) {
      return Failed("the packages take more than the worker's cap of " +
                    std::to_string(max_bytes >> 20) + " MiB");
    }
    paths.push_back(it->path().string());
  }
  if (ec) return Failed("could not read the installed files: " + ec.message());
  paths.push_back(dir);
  for (const auto& p : paths) {
    if (::lchown(p.c_str(), 0, 0) != 0) return common::ErrnoStatus("lchown", errno);
  }
  return Status::Ok();
}

}  // namespace

std::string InstallerErrorText(const std::string& output, const std::string& secret, size_t max) {
  std::vector<std::string> lines, errors;
  size_t start = 0;
  while (start < output.size()) {
    size_t nl = output.find('\n', start);
    if (nl == std::string::npos) nl = output.size();
    std::string line = output.substr(start, nl - start);
    start = nl + 1;
    if (!secret.empty()) {
      for (size_t at = line.find(secret); at != std::string::npos; at = line.find(secret, at)) {
        line.replace(at, secret.size(), "<index>");
        at += 7;
      }
    }
    for (char& c : line) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    }
    if (line.find_first_not_of(' ') == std::string::npos) continue;
    if (line.rfind("ERROR:", 0) == 0 || line.rfind("npm ERR!", 0) == 0 ||
        line.rfind("npm error", 0) == 0) {
      errors.push_back(line);
    }
    lines.push_back(std::move(line));
  }
  const auto& chosen = errors.empty() ? lines : errors;
  std::string text;
  for (size_t i = chosen.size() > 8 ? chosen.size() - 8 : 0; i < chosen.size(); ++i) {
    if (!text.empty()) text += " | ";
    text += chosen[i];
  }
  if (text.size() > max) text = "..." + text.substr(text.size() - max + 3);
  return text;
}

Status RunInstaller(const PackageInstallConfig& config, const std::string& language,
                    const std::vector<std::string>& specs, const std::string& dir, int cancel_fd) {
  const std::string& index = language == "python" ? config.python_index : config.npm_registry;
  if (index.empty()) {
    return Failed("this worker installs no " + language +
                  " packages (no index is configured: packages.install)");
  }
  const std::string home = dir + ".home";
  if (::mkdir(home.c_str(), 0700) != 0 || ::chown(home.c_str(), config.uid, config.gid) != 0) {
    return common::ErrnoStatus("installer home " + home, errno);
  }
  struct HomeCleanup {
    const std::string& path;
    ~HomeCleanup() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } home_cleanup{home};

  std::vector<std::string> argv_s = InstallerArgv(config, language, specs, dir);
  std::vector<std::string> env_s = InstallerEnv(home);
  std::vector<char*> argv = CStrings(argv_s), envp = CStrings(env_s);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return common::ErrnoStatus("pipe2", errno);
  common::UniqueFd out_r(pipe_fds[0]), out_w(pipe_fds[1]);
  const pid_t pid = ::fork();
  if (pid < 0) return common::ErrnoStatus("fork", errno);
  if (pid == 0) ExecInstaller(config, dir, out_w.get(), argv.data(), envp.data());
  out_w.Reset();
  auto kill_all = [&] {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
  };
  common::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) {
    kill_all();
    ::waitpid(pid, nullptr, 0);
    return common::ErrnoStatus("pidfd_open", errno);
  }

  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config.timeout_ms);
  std::string output;
  bool exited = false, cancelled = false, timed_out = false, out_open = true;
  while (!exited || out_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      timed_out = !exited;
      break;
    }
    pollfd fds[3] = {{out_r.get(), POLLIN, 0}, {pidfd.get(), POLLIN, 0}, {cancel_fd, POLLIN, 0}};
    int n = ::poll(fds, cancel_fd >= 0 ? 3 : 2, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (cancel_fd >= 0 && (fds[2].revents & POLLIN)) {
      cancelled = true;
      break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16384];
      ssize_t r = ::read(out_r.get(), buf, sizeof(buf));
      if (r > 0) {
        output.append(buf, static_cast<size_t>(r));
        if (output.size() > kMaxOutputKept) output.erase(0, output.size() - kMaxOutputKept);
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        out_open = false;
        fds[0].fd = -1;
      }
    }
    // Exited: the output is read to EOF, for at most a second more (a
    // leftover process of its group may hold the pipe; it is killed below).
    if ((fds[1].revents & POLLIN) && !exited) {
      exited = true;
      deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    }
  }
  kill_all();  // whatever of its process group is left
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  if (cancelled) return Status(Code::kCancelled, "cancelled while installing packages");
  if (timed_out) {
    return Failed("the install took longer than " + std::to_string(config.timeout_ms) +
                  " ms: " + InstallerErrorText(output, index, kMaxErrorText / 2));
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::string how = WIFEXITED(wstatus)
                          ? "exited with status " + std::to_string(WEXITSTATUS(wstatus))
                          : "was killed by signal " + std::to_string(WTERMSIG(wstatus));
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) >= 126) how += " (it could not be started)";
    // RLIMIT_FSIZE: pip reports EFBIG, npm may die of SIGXFSZ.
    if ((WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGXFSZ) ||
        output.find("[Errno 27]") != std::string::npos ||
        output.find("EFBIG") != std::string::npos) {
      how += " (a file over the worker's cap of " + std::to_string(config.max_set_bytes >> 20) +
             " MiB)";
    }
    return Failed(std::string(language == "python" ? "pip" : "npm") + " " + how + ": " +
                  InstallerErrorText(output, index, kMaxErrorText));
  }
  RETURN_IF_ERROR(SealTree(dir, config.max_set_bytes));
  if (language == "javascript") {
    const std::string helper = dir + "/" + kImportHelper;
    common::UniqueFd fd(::open(helper.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd.valid()) return common::ErrnoStatus("write " + helper, errno);
    const std::string text = kImportHelperText;
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      return common::ErrnoStatus("write " + helper, errno);
    }
  }
  return Status::Ok();
}

}  // namespace kiln::worker
