// The fuzz targets: one entry point per decoder of client or peer input, each
// checking its decoder's contract on arbitrary bytes and aborting on a
// violation (so libFuzzer and ctest both report it as a crash).
//
//   int SubmitOneInput(const uint8_t* data, size_t size);  // defined in submit_fuzz.cpp
//   KILN_LIBFUZZER_ENTRY(SubmitOneInput)                    // its last line
//
// Each libFuzzer binary (tests/fuzz/CMakeLists.txt, -DKILN_FUZZ=ON) wraps one
// entry point; fuzz_replay (any compiler, ctest) runs all of them over the
// checked-in corpus/<name>/ and regressions/<name>/. Entry points keep no
// state between calls; any thread, one call at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::fuzz {

// protocol_fuzz.cpp: the broker <-> worker MessagePack codec.
int ProtocolOneInput(const uint8_t* data, size_t size);
// client_protocol_fuzz.cpp: the native client codec.
int ClientProtocolOneInput(const uint8_t* data, size_t size);
// submit_fuzz.cpp: ParseJson and the POST /v1/executions body.
int SubmitOneInput(const uint8_t* data, size_t size);
// http_fuzz.cpp: the HTTP request head and body as the broker parses them,
// its route table and Last-Event-ID.
int HttpOneInput(const uint8_t* data, size_t size);
// tool_fuzz.cpp: tool declarations (hostile JSON Schemas) and call arguments.
int ToolOneInput(const uint8_t* data, size_t size);

}  // namespace kiln::fuzz

// Each target's source ends with this, so its libFuzzer binary (compiled with
// KILN_LIBFUZZER) has the entry point libFuzzer calls; fuzz_replay links all
// targets without it.
#ifdef KILN_LIBFUZZER
#define KILN_LIBFUZZER_ENTRY(function)                                      \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    return function(data, size);                                            \
  }
#else
#define KILN_LIBFUZZER_ENTRY(function)
#endif
