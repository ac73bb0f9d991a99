#pragma once
// Errors carry their context (file, field, value) and are thrown, never aborted on.
#include <sstream>
#include <stdexcept>
#include <string>

namespace tf {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(cat(args...));
}

}  // namespace tf

#define TF_CHECK(cond, ...)                    \
  do {                                         \
    if (!(cond)) ::tf::fail(__VA_ARGS__);      \
  } while (0)
