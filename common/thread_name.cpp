#include "common/thread_name.hpp"

#include <pthread.h>

#include <string>

namespace kiln::common {

void NameThisThread(std::string_view name) {
  // pthread_setname_np refuses (ERANGE) rather than cuts a name over 15 bytes.
  const std::string cut(name.substr(0, 15));
  ::pthread_setname_np(::pthread_self(), cut.c_str());
}

}  // namespace kiln::common
