#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace tf {

namespace {

const std::string kSpace = "\xE2\x96\x81";  // U+2581, sentencepiece's visible space

}  // namespace

SpmTokenizer::SpmTokenizer(std::vector<std::string> tokens, std::vector<float> scores,
                           std::vector<int32_t> types, bool add_space_prefix, const std::string& source)
    : tokens_(std::move(tokens)), scores_(std::move(scores)), add_space_prefix_(add_space_prefix) {
  const size_t n = tokens_.size();
  TF_CHECK(n > 0, source, ": tokenizer.ggml.tokens is empty");
  if (scores_.empty()) scores_.assign(n, 0.0f);
  TF_CHECK(scores_.size() == n, source, ": tokenizer.ggml.scores has ", scores_.size(), " entries for ", n, " tokens");
  TF_CHECK(types.empty() || types.size() == n, source, ": tokenizer.ggml.token_type has ", types.size(),
           " entries for ", n, " tokens");
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  types_.resize(n, SpmType::Normal);
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = types.empty() ? 1 : types[i];
    TF_CHECK(t >= 1 && t <= 6, source, ": tokenizer.ggml.token_type[", i, "] = ", t, " is not a known type");
    types_[i] = static_cast<SpmType>(t);
    const auto id = static_cast<int32_t>(i);
    const std::string& s = tokens_[i];
    all_.emplace(s, id);
    switch (types_[i]) {
      case SpmType::Normal:
      case SpmType::UserDefined:
      case SpmType::Unused:
        mergeable_.emplace(s, id);
        break;
      case SpmType::Byte: {
        const int b = utf8::parse_byte_token(s);
        TF_CHECK(b >= 0, source, ": tokenizer.ggml.tokens[", i, "] = '", s.substr(0, 32),
                 "' has the byte type but is not spelled <0xHH>");
        if (byte_ids_[b] < 0) byte_ids_[b] = id;
        break;
      }
      case SpmType::Unknown:
        if (unk_id < 0) unk_id = id;
        break;
      case SpmType::Control:
        break;
    }
    if ((types_[i] == SpmType::Control || types_[i] == SpmType::UserDefined) && !s.empty())
      matchable_.push_back(id);
  }
  std::stable_sort(matchable_.begin(), matchable_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  by_first_.assign(256, {});
  for (int32_t id : matchable_) by_first_[static_cast<unsigned char>(tokens_[id][0])].push_back(id);
}

void SpmTokenizer::emit(std::string_view piece, std::vector<int32_t>& out) const {
  auto it = mergeable_.find(piece);
  if (it != mergeable_.end()) {
    out.push_back(it->second);
    return;
  }
  bool all = true;
  for (unsigned char c : piece) all = all && byte_ids_[c] >= 0;
  if (all) {
    for (unsigned char c : piece) out.push_back(byte_ids_[c]);
  } else if (unk_id >= 0) {
    out.push_back(unk_id);
  }
}

void SpmTokenizer::encode_text(const std::string& text, std::vector<int32_t>& out) const {
  struct Sym {
    size_t start, len;
    int prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < text.size();) {
    size_t n = utf8::valid_len(text, i);
    if (!n) n = 1;
    const int k = static_cast<int>(syms.size());
    syms.push_back({i, n, k - 1, -1});
    if (k > 0) syms[k - 1].next = k;
    i += n;
  }
  struct Pair {
    float score;
    int left, right;
    size_t size;
    bool operator<(const Pair& o) const {  // higher score first, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Pair> agenda;
  // Merged pieces that are unused tokens must be split back into the pieces they came from.
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> new_splits;
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::string_view piece(text.data() + syms[l].start, syms[l].len + syms[r].len);
    auto it = mergeable_.find(piece);
    if (it == mergeable_.end()) return;
    agenda.push({scores_[it->second], l, r, piece.size()});
    if (type(it->second) == SpmType::Unused)
      new_splits.push_back({std::string(piece), {text.substr(syms[l].start, syms[l].len),
                                                 text.substr(syms[r].start, syms[r].len)}});
  };
  for (int k = 0; k + 1 < static_cast<int>(syms.size()); ++k) try_pair(k, k + 1);
  while (!agenda.empty()) {
    const Pair p = agenda.top();
    agenda.pop();
    Sym& l = syms[p.left];
    Sym& r = syms[p.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.size || l.next != p.right) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  if (!new_splits.empty()) {
    // Unused pieces are rare; resolve them from this call's own record.
    std::unordered_map<std::string, std::pair<std::string, std::string>> local(new_splits.begin(), new_splits.end());
    std::function<void(const std::string&)> rec = [&](const std::string& w) {
      auto it = mergeable_.find(w);
      auto sp = local.find(w);
      if (it != mergeable_.end() && type(it->second) == SpmType::Unused && sp != local.end()) {
        rec(sp->second.first);
        rec(sp->second.second);
      } else {
        emit(w, out);
      }
    };
    for (int k = syms.empty() ? -1 : 0; k >= 0; k = syms[k].next) rec(text.substr(syms[k].start, syms[k].len));
    return;
  }
  for (int k = syms.empty() ? -1 : 0; k >= 0; k = syms[k].next)
    emit(std::string_view(text.data() + syms[k].start, syms[k].len), out);
}

std::vector<int32_t> SpmTokenizer::encode(const std::string& raw, bool add_special, bool parse_special) const {
  check_encode_size(raw);
  std::vector<int32_t> out;
  if (add_special && add_bos && bos_id >= 0) out.push_back(bos_id);
  const std::string s = utf8::sanitize(raw);
  bool prev_special = true;  // the text's first fragment gets the dummy prefix
  size_t seg = 0;
  auto flush_text = [&](size_t end) {
    if (end <= seg) return;
    std::string t = (add_space_prefix_ && prev_special) ? kSpace : "";
    for (size_t i = seg; i < end; ++i) {
      if (s[i] == ' ') t += kSpace;
      else t += s[i];
    }
    encode_text(t, out);
    prev_special = false;
  };
  for (size_t i = 0; i < s.size();) {
    int32_t hit = -1;
    for (int32_t id : by_first_[static_cast<unsigned char>(s[i])]) {
      if (type(id) == SpmType::Control && !parse_special) continue;
      if (s.compare(i, tokens_[id].size(), tokens_[id]) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      const size_t n = utf8::valid_len(s, i);
      i += n ? n : 1;
      continue;
    }
    flush_text(i);
    out.push_back(hit);
    prev_special = true;
    seg = i = i + tokens_[hit].size();
  }
  flush_text(s.size());
  if (add_special && add_eos && eos_id >= 0) out.push_back(eos_id);
  return out;
}

std::string SpmTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  if (type(id) == SpmType::Byte) return std::string(1, static_cast<char>(utf8::parse_byte_token(tokens_[id])));
  const std::string& t = tokens_[id];
  std::string out;
  for (size_t p = 0; p < t.size();) {
    if (t.compare(p, kSpace.size(), kSpace) == 0) {
      out += ' ';
      p += kSpace.size();
    } else {
      out += t[p++];
    }
  }
  return out;
}

std::string SpmTokenizer::token_piece(int32_t id) const {
  return (id < 0 || id >= vocab_size()) ? "" : tokens_[id];
}

bool SpmTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && (type(id) == SpmType::Control || type(id) == SpmType::Unknown);
}

int32_t SpmTokenizer::token_id(const std::string& piece) const {
  auto it = all_.find(piece);
  return it == all_.end() ? -1 : it->second;
}

}  // namespace tf
