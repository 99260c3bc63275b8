// NameThisThread: names the calling thread for `top -H`, `ps -L`, perf and
// gdb, so an operator sees which of a daemon's threads burns CPU.
//
//   std::jthread t([&](std::stop_token st) { common::NameThisThread("kiln-audit"); ... });
//
// Linux keeps 15 bytes of a name; longer ones are cut there. Best effort:
// a failure changes nothing else. Any thread, for itself.
#pragma once

#include <string_view>

namespace kiln::common {

void NameThisThread(std::string_view name);

}  // namespace kiln::common
