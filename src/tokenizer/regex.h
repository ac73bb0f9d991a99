#pragma once
// PCRE2 regexes (UTF + UCP, JIT when available) that split text the way HF tokenizers'
// Oniguruma regexes do.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf {

class Regex {
 public:
  // Throws tf::Error naming the pattern when it does not compile.
  explicit Regex(const std::string& pattern);
  // Non-overlapping matches [begin, end) in s, which must be valid UTF-8. Thread-safe.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

  static std::string escape(const std::string& literal);

 private:
  std::string pattern_;
  std::shared_ptr<void> code_;
};

}  // namespace tf
