// RunInstaller: installs package specs into an empty folder with the
// language's own installer, as an unprivileged user, from the operator's
// index only, with no package code running.
//
//   RETURN_IF_ERROR(RunInstaller(config, "python", {"tabulate==0.9.0"}, staging, cancel_fd));
//
// python: `pip install --target <dir> --index-url <python_index>
// --only-binary :all:` (wheels only: no setup.py, no build backend ever
// runs); javascript: `npm install --prefix <dir> --registry <npm_registry>
// --ignore-scripts` (no lifecycle script of any package runs). The process
// runs as config.uid/gid in its own session with a clean environment (no
// user config files), RLIMIT_FSIZE at the set cap, killed at the timeout or
// when `cancel_fd` becomes readable. Afterwards the folder is checked
// (regular files, directories and symlinks only; at most max_set_bytes) and
// handed to root, so nothing but the worker can change it. Blocks the
// calling (job) thread; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"
#include "worker/packages/package_cache.hpp"

namespace kiln::worker {

// `dir` exists, is empty and is writable by config.uid. Errors are
// PACKAGE_INSTALL_FAILED (with the installer's last error lines, the
// index's address masked) or CANCELLED.
common::Status RunInstaller(const PackageInstallConfig& config, const std::string& language,
                            const std::vector<std::string>& specs, const std::string& dir,
                            int cancel_fd);

// What the installer's output says, for an error message: its lines that
// report errors (pip's `ERROR:`, npm's `npm ERR!`/`npm error`), else its last
// lines; at most `max` bytes, control characters replaced, every occurrence
// of `secret` (the index URL, which may carry credentials) shown as <index>.
std::string InstallerErrorText(const std::string& output, const std::string& secret, size_t max);

}  // namespace kiln::worker
