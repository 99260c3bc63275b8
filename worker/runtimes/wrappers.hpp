// The wrapper programs (one-shot) and session drivers of
// worker/runtimes/wrappers/, embedded at build time
// (sources.cmake generates wrappers.cpp from wrappers.cpp.in), so the worker
// never reads its source tree at run time.
//
//   std::string_view w = kPythonOneShotWrapper;  // passed as `python3 -I -c <w>`
//
// Constants; any thread.
#pragma once

#include <string_view>

namespace kiln::worker::runtimes {

extern const std::string_view kPythonOneShotWrapper;
extern const std::string_view kJavaScriptOneShotWrapper;
extern const std::string_view kShellOneShotWrapper;
extern const std::string_view kPythonSessionDriver;      // python_session.py
extern const std::string_view kJavaScriptSessionDriver;  // javascript_session.js
extern const std::string_view kShellSessionDriver;       // shell_session.sh
extern const std::string_view kPythonZygote;             // python_zygote.py

}  // namespace kiln::worker::runtimes
