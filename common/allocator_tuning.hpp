// ReturnFreedMemory: makes memory a daemon frees go back to the system, so
// its resident size follows what it holds rather than its highest burst.
//
//   common::ReturnFreedMemory();   // in main(), before any thread starts
//
// glibc raises its mmap threshold each time a large block is freed, after
// which large request bodies and records come from the heap and stay
// resident when freed (a soak run grew a broker from 40 to 270 MB this way,
// with nothing leaked). Fixing the threshold at 128 KiB keeps large blocks
// mmapped (unmapped on free), and capping the arenas keeps per-thread heaps
// from multiplying that. Once, from main(), before other threads start.
#pragma once

namespace kiln::common {

void ReturnFreedMemory();

}  // namespace kiln::common
