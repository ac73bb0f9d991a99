#pragma once
// UTF-8 helpers shared by the tokenizers: validation, repair, code point access, byte tokens.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tf::utf8 {

// Length of the valid UTF-8 sequence starting at s[pos], or 0 when it is not valid there.
size_t valid_len(std::string_view s, size_t pos);
// Length of the sequence a lead byte announces (1 for ASCII and for stray bytes).
size_t lead_len(unsigned char c);
// Replaces each maximal invalid subpart by U+FFFD, as Python's errors="replace" and Rust's
// from_utf8_lossy do, so every later stage sees valid UTF-8.
std::string sanitize(std::string_view s);
bool is_valid(std::string_view s);
// Bytes at the end of s that start a UTF-8 sequence which may still be completed.
size_t incomplete_tail(std::string_view s);
// Decodes the code point at s[pos] (s must be valid there) and its length.
uint32_t decode(std::string_view s, size_t pos, size_t* len);
void append(std::string& out, uint32_t cp);
// The byte a byte-fallback token spells as "<0xHH>" (exactly two hex digits), else -1.
int parse_byte_token(std::string_view t);

}  // namespace tf::utf8
