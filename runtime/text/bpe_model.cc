// BpeModel: tokenizer.json's BPE vocabulary and merges, and the merge loop over one word.
#include "runtime/text/bpe_model.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace hap::text_internal {
namespace {

// Bytes of the UTF-8 character starting at `s[0]` (1 for a byte that starts none; input
// reaching here is valid UTF-8, produced by the normalizer and pre-tokenizer).
size_t CharBytes(std::string_view s) {
  const auto lead = static_cast<uint8_t>(s[0]);
  size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
  return std::min(n, s.size());
}

std::string Brief(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

// A merge line: ["a", "b"] in files written since tokenizers 0.20, "a b" before.
bool ParseMerge(const nlohmann::json& m, std::string* left, std::string* right) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *left = m[0].get<std::string>();
    *right = m[1].get<std::string>();
    return true;
  }
  if (!m.is_string()) return false;
  const std::string s = m.get<std::string>();
  const size_t space = s.find(' ');
  if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) return false;
  *left = s.substr(0, space);
  *right = s.substr(space + 1);
  return true;
}

absl::Status OptionalString(const nlohmann::json& obj, const char* key, const std::string& source,
                            std::string* out) {
  if (!obj.contains(key) || obj[key].is_null()) return absl::OkStatus();
  if (!obj[key].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model.", key, " must be a string or null, got ", Brief(obj[key])));
  }
  *out = obj[key].get<std::string>();
  return absl::OkStatus();
}

absl::Status OptionalBool(const nlohmann::json& obj, const char* key, const std::string& source,
                          bool* out) {
  if (!obj.contains(key) || obj[key].is_null()) return absl::OkStatus();
  if (!obj[key].is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model.", key, " must be true or false, got ", Brief(obj[key])));
  }
  *out = obj[key].get<bool>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BpeModel> BpeModel::FromJson(const nlohmann::json& model,
                                            const std::string& source) {
  if (!model.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": \"model\" must be an object"));
  }
  const std::string type = model.value("type", std::string());
  if (type != "BPE") {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": model.type is \"", type,
        "\"; only \"BPE\" models are supported (byte-level BPE as Qwen2 and Llama 3 ship, and "
        "SentencePiece-style BPE as Llama 2 and llava-hf ship)"));
  }
  BpeModel m;
  std::fill(std::begin(m.byte_ids_), std::end(m.byte_ids_), -1);
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": model.dropout is ", Brief(model["dropout"]),
        "; BPE dropout makes encoding random and is for training only (expected null)"));
  }
  HAP_RETURN_IF_ERROR(OptionalBool(model, "byte_fallback", source, &m.byte_fallback_));
  HAP_RETURN_IF_ERROR(OptionalBool(model, "fuse_unk", source, &m.fuse_unk_));
  HAP_RETURN_IF_ERROR(OptionalBool(model, "ignore_merges", source, &m.ignore_merges_));
  HAP_RETURN_IF_ERROR(
      OptionalString(model, "continuing_subword_prefix", source, &m.continuing_subword_prefix_));
  HAP_RETURN_IF_ERROR(OptionalString(model, "end_of_word_suffix", source, &m.end_of_word_suffix_));

  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model.vocab must be an object of token: id"));
  }
  const nlohmann::json& vocab = model["vocab"];
  m.token_to_id_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": model.vocab[\"", it.key(),
                                                     "\"] must be a non-negative id, got ",
                                                     Brief(it.value())));
    }
    const int id = it.value().get<int>();
    if (id >= static_cast<int>(m.id_to_token_.size())) m.id_to_token_.resize(id + 1);
    if (!m.id_to_token_[id].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": model.vocab gives id ", id,
                                                     " to both \"", m.id_to_token_[id], "\" and \"",
                                                     it.key(), "\""));
    }
    m.id_to_token_[id] = it.key();
    m.token_to_id_.emplace(it.key(), id);
  }
  for (int b = 0; b < 256; ++b) {
    static const char kHex[] = "0123456789ABCDEF";
    const std::string piece = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    m.byte_ids_[b] = m.TokenToId(piece);
  }
  std::string unk;
  HAP_RETURN_IF_ERROR(OptionalString(model, "unk_token", source, &unk));
  if (!unk.empty()) {
    m.unk_id_ = m.TokenToId(unk);
    if (m.unk_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": model.unk_token \"", unk, "\" is not in model.vocab"));
    }
  }

  if (!model.contains("merges") || !model["merges"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": model.merges must be a list"));
  }
  const nlohmann::json& merges = model["merges"];
  m.merges_.reserve(merges.size());
  std::string left, right;
  for (size_t i = 0; i < merges.size(); ++i) {
    if (!ParseMerge(merges[i], &left, &right)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": model.merges[", i,
                                                     "] must be [\"a\", \"b\"] or \"a b\", got ",
                                                     Brief(merges[i])));
    }
    const int left_id = m.TokenToId(left);
    const int right_id = m.TokenToId(right);
    // The merged token drops the right part's continuing-subword prefix, as the library does.
    std::string_view right_body = right;
    if (!m.continuing_subword_prefix_.empty() &&
        right_body.substr(0, m.continuing_subword_prefix_.size()) == m.continuing_subword_prefix_) {
      right_body.remove_prefix(m.continuing_subword_prefix_.size());
    }
    const int merged_id = m.TokenToId(absl::StrCat(left, std::string(right_body)));
    if (left_id < 0 || right_id < 0 || merged_id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": model.merges[", i, "] ", Brief(merges[i]), ": \"",
                       left_id < 0    ? left
                       : right_id < 0 ? right
                                      : left + std::string(right_body),
                       "\" is not in model.vocab"));
    }
    // A repeated pair keeps its first (lowest) rank.
    m.merges_.emplace(PairKey(left_id, right_id), Merge{static_cast<int>(i), merged_id});
  }
  return m;
}

int BpeModel::TokenToId(std::string_view token) const {
  const auto it = token_to_id_.find(std::string(token));
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string& BpeModel::IdToToken(int id) const {
  static const std::string kNone;
  return id >= 0 && id < size() ? id_to_token_[id] : kNone;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int>* symbols) const {
  bool pending_unk = false;  // fuse_unk: the previous symbol is an unk that absorbs more
  for (size_t at = 0; at < word.size();) {
    const size_t n = CharBytes(word.substr(at));
    std::string piece(word.substr(at, n));
    if (at > 0) piece = continuing_subword_prefix_ + piece;
    if (at + n == word.size()) piece += end_of_word_suffix_;
    at += n;
    const int id = TokenToId(piece);
    if (id >= 0) {
      symbols->push_back(id);
      pending_unk = false;
      continue;
    }
    if (byte_fallback_) {
      // The character's own bytes, without the prefix or suffix.
      const std::string_view bytes = word.substr(at - n, n);
      bool all = true;
      for (char c : bytes) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : bytes) symbols->push_back(byte_ids_[static_cast<uint8_t>(c)]);
        pending_unk = false;
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk token: the library drops the character
    if (!(fuse_unk_ && pending_unk)) symbols->push_back(unk_id_);
    pending_unk = true;
  }
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int whole = TokenToId(word);
    if (whole >= 0) {
      ids->push_back(whole);
      return;
    }
  }
  std::vector<int> symbol;  // id of the symbol starting at each initial position
  InitialSymbols(word, &symbol);
  const int n = static_cast<int>(symbol.size());
  if (n == 0) return;
  // A doubly linked list over the initial positions; merged symbols keep their left position.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int rank, pos, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    const auto it = merges_.find(PairKey(symbol[pos], symbol[next[pos]]));
    if (it != merges_.end()) {
      queue.push({it->second.rank, pos, symbol[pos], symbol[next[pos]]});
    }
  };
  for (int i = 0; i < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    // Skip candidates a merge since made stale: a removed position or changed symbols.
    const int right = next[c.pos];
    if (symbol[c.pos] != c.left_id || right < 0 || symbol[right] != c.right_id) continue;
    symbol[c.pos] = merges_.at(PairKey(c.left_id, c.right_id)).merged_id;
    symbol[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) ids->push_back(symbol[i]);
}

}  // namespace hap::text_internal
