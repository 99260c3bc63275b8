// CaptureStderr: runs a body with fd 2 going to a temporary file and returns
// the lines written, so logging tests read the process's real stderr. For the
// tests in this folder; not thread-safe against other writers of fd 2.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::common::testing {

template <typename F>
std::vector<std::string> CaptureStderr(F body) {
  char path[] = "/tmp/kiln-log-test-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  std::fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  unlink(path);
  return lines;
}

}  // namespace kiln::common::testing
