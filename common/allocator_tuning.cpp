#include "common/allocator_tuning.hpp"

#include <malloc.h>

namespace kiln::common {

void ReturnFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_ARENA_MAX, 4);
}

}  // namespace kiln::common
