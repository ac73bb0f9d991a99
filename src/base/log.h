#pragma once
// Minimal leveled logger to stderr; the server and CLI share it.
#include <string>

#include "base/error.h"

namespace tf {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& msg);

template <typename... Args>
void log_info(const Args&... args) {
  if (log_level() <= LogLevel::Info) log_line(LogLevel::Info, cat(args...));
}
template <typename... Args>
void log_warn(const Args&... args) {
  if (log_level() <= LogLevel::Warn) log_line(LogLevel::Warn, cat(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
  if (log_level() <= LogLevel::Debug) log_line(LogLevel::Debug, cat(args...));
}
template <typename... Args>
void log_error(const Args&... args) {
  log_line(LogLevel::Error, cat(args...));
}

}  // namespace tf
