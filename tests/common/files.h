// Whole-file reads and writes for tests: a file's bytes as a string, and a string as a file.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace hap::testing {

// Writes `bytes` to `path`, replacing what was there; a failed write fails the test.
inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

// The bytes of the file at `path` ("" when it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace hap::testing
