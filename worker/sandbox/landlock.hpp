// Landlock: read and execute everywhere in the (already minimal) view, write
// only in /workspace, /tmp and the /dev nodes; with ABI >= 4 no TCP bind at
// all and no TCP connect but to the egress gateway's port (in the sandbox's
// own network namespace, where only the worker listens on it); with ABI >= 6
// no abstract unix sockets or signals outside the sandbox's own domain.
#pragma once

#include <cstdint>

namespace kiln::worker::sandbox {

// The port of the egress gateway on 127.0.0.1 inside a sandbox's network
// namespace (network on request, worker/egress/): a job's HTTP(S) proxy.
inline constexpr uint16_t kSandboxProxyPort = 3128;

// Parent side: the kernel's Landlock ABI version, or 0 (not available), or -errno.
int LandlockAbi();

// Child side, after pivot_root and no_new_privs; paths are in the new root.
// `connect_port` (0: none) is the one TCP port connect() may reach.
int ApplyLandlock(int abi, uint16_t connect_port);

}  // namespace kiln::worker::sandbox
