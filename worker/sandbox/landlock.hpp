// Landlock: read and execute everywhere in the (already minimal) view, write
// only in /workspace, /tmp and the /dev nodes; with ABI >= 4 no TCP bind or
// connect at all; with ABI >= 6 no abstract unix sockets or signals outside
// the sandbox's own domain.
#pragma once

namespace kiln::worker::sandbox {

// Parent side: the kernel's Landlock ABI version, or 0 (not available), or -errno.
int LandlockAbi();

// Child side, after pivot_root and no_new_privs; paths are in the new root.
int ApplyLandlock(int abi);

}  // namespace kiln::worker::sandbox
