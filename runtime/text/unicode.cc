// Unicode lookups over the generated tables, NFC (UAX #15) and lossy UTF-8 (Unicode §3.9).
#include "runtime/text/unicode.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/text/unicode_tables.inc"

namespace hap::unicode {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kReplacement = 0xFFFD;

// The names of Category's enumerators, in order; must match the generator's order.
constexpr const char* kCategoryNames[] = {
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
    "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};

constexpr bool CategoryOrderMatches() {
  if (std::size(kCategoryNames) * 2 + 1 != std::size(kCategoryOrder)) return false;
  for (size_t i = 0; i < std::size(kCategoryNames); ++i) {
    if (kCategoryNames[i][0] != kCategoryOrder[2 * i] ||
        kCategoryNames[i][1] != kCategoryOrder[2 * i + 1]) {
      return false;
    }
  }
  return true;
}
static_assert(CategoryOrderMatches(), "unicode_tables.inc numbers categories differently");
static_assert(static_cast<int>(Category::kCn) == 29);

// Hangul syllable arithmetic (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00;
constexpr char32_t kLBase = 0x1100;
constexpr char32_t kVBase = 0x1161;
constexpr char32_t kTBase = 0x11A7;  // kTBase itself means "no trailing consonant"
constexpr char32_t kLCount = 19;
constexpr char32_t kVCount = 21;
constexpr char32_t kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

// Value of the run containing `c` in a table of (first << shift | value) runs sorted by first,
// whose first run starts at 0.
template <size_t N>
uint32_t RunValue(const uint32_t (&runs)[N], char32_t c, int shift) {
  const uint32_t key = (static_cast<uint32_t>(c) << shift) | ((1u << shift) - 1);
  const uint32_t* it = std::upper_bound(runs, runs + N, key);
  return *(it - 1) & ((1u << shift) - 1);
}

int CombiningClass(char32_t c) {
  if (c > kMaxCodePoint) return 0;
  return static_cast<int>(RunValue(kCombiningClassRuns, c, 8));
}

const CodePointTriple* FindDecomposition(char32_t c) {
  const CodePointTriple* end = std::end(kDecompositions);
  const CodePointTriple* it =
      std::lower_bound(std::begin(kDecompositions), end, c,
                       [](const CodePointTriple& t, char32_t key) { return t.first < key; });
  return it != end && it->first == c ? it : nullptr;
}

// Appends the full canonical decomposition of `c` (mappings applied until none is left).
void AppendDecomposed(char32_t c, std::u32string* out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const CodePointTriple* d = FindDecomposition(c);
  if (d == nullptr) {
    out->push_back(c);
    return;
  }
  AppendDecomposed(d->second, out);
  if (d->third != 0) AppendDecomposed(d->third, out);
}

// The primary composite of `first` + `second`, or 0 if there is none.
char32_t Compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const CodePointTriple* end = std::end(kCompositions);
  const CodePointTriple* it = std::lower_bound(
      std::begin(kCompositions), end, std::pair(first, second),
      [](const CodePointTriple& t, const std::pair<char32_t, char32_t>& key) {
        return t.first < key.first || (t.first == key.first && t.second < key.second);
      });
  return it != end && it->first == first && it->second == second ? it->third : 0;
}

}  // namespace

std::string_view UnicodeVersion() { return kUnicodeVersion; }

Category GeneralCategory(char32_t c) {
  if (c > kMaxCodePoint) return Category::kCn;
  return static_cast<Category>(RunValue(kCategoryRuns, c, 5));
}

char MajorClass(Category category) {
  const auto index = static_cast<size_t>(category);
  return index < std::size(kCategoryNames) ? kCategoryNames[index][0] : 'C';
}

bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

char32_t SimpleFold(char32_t c) {
  if (c < 0x41) return c;  // nothing below 'A' folds
  const CodePointPair* end = std::end(kSimpleFolds);
  const CodePointPair* it =
      std::lower_bound(std::begin(kSimpleFolds), end, c,
                       [](const CodePointPair& p, char32_t key) { return p.from < key; });
  return it != end && it->from == c ? it->to : c;
}

bool IsPythonSpace(char32_t c) { return IsWhitespace(c) || (c >= 0x1C && c <= 0x1F); }

namespace {

// Appends c's mapping in `table` (sorted by code point), or c itself.
template <size_t N>
void AppendMapped(const CaseMapping (&table)[N], char32_t c, std::u32string* out) {
  const CaseMapping* it =
      std::lower_bound(std::begin(table), std::end(table), c,
                       [](const CaseMapping& m, char32_t v) { return m.from < v; });
  if (it == std::end(table) || it->from != c) {
    out->push_back(c);
    return;
  }
  out->append(kCasePool + it->offset, it->length);
}

// The Cased property (Python's _PyUnicode_IsCased).
bool IsCased(char32_t c) {
  const CodePointPair* it =
      std::upper_bound(std::begin(kCasedRanges), std::end(kCasedRanges), c,
                       [](char32_t v, const CodePointPair& r) { return v < r.from; });
  return it != std::begin(kCasedRanges) && c <= (it - 1)->to;
}

// Case_Ignorable: marks, format characters, modifier letters and symbols, and the word-internal
// punctuation Unicode lists (apostrophes, period, colon, middle dot).
bool IsCaseIgnorable(char32_t c) {
  const Category cat = GeneralCategory(c);
  if (cat == Category::kMn || cat == Category::kMe || cat == Category::kCf ||
      cat == Category::kLm || cat == Category::kSk) {
    return true;
  }
  return c == U'\'' || c == U'.' || c == U':' || c == 0x00B7 || c == 0x2019 || c == 0x2018 ||
         c == 0x2024 || c == 0xFE13 || c == 0xFE52 || c == 0xFE55 || c == 0xFF07 || c == 0xFF0E ||
         c == 0xFF1A || c == 0x0387 || c == 0x05F4 || c == 0x2027 || c == 0xFE30;
}

// Python's lowercasing of text[i] (with its neighbours for the final sigma).
void AppendLowerAt(std::u32string_view text, size_t i, std::u32string* out) {
  if (text[i] == 0x03A3) {
    size_t j = i;
    while (j > 0 && IsCaseIgnorable(text[j - 1])) --j;
    bool final_sigma = j > 0 && IsCased(text[j - 1]);
    if (final_sigma) {
      size_t k = i + 1;
      while (k < text.size() && IsCaseIgnorable(text[k])) ++k;
      final_sigma = k == text.size() || !IsCased(text[k]);
    }
    out->push_back(final_sigma ? 0x03C2 : 0x03C3);
    return;
  }
  AppendMapped(kLowerMap, text[i], out);
}

}  // namespace

std::u32string PyUpper(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) AppendMapped(kUpperMap, c, &out);
  return out;
}

std::u32string PyLower(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) AppendLowerAt(text, i, &out);
  return out;
}

std::u32string PyTitle(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  bool previous_cased = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (previous_cased) {
      AppendLowerAt(text, i, &out);
    } else {
      AppendMapped(kTitleMap, text[i], &out);
    }
    previous_cased = IsCased(text[i]);
  }
  return out;
}

std::u32string PyCapitalize(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == 0) {
      AppendMapped(kTitleMap, text[i], &out);
    } else {
      AppendLowerAt(text, i, &out);
    }
  }
  return out;
}

std::u32string Nfc(std::u32string_view text) {
  // 1. Full canonical decomposition.
  std::u32string buf;
  buf.reserve(text.size());
  for (char32_t c : text) {
    if (c < 0xC0) {
      buf.push_back(c);  // Latin-1 below À neither decomposes nor combines
    } else {
      AppendDecomposed(c, &buf);
    }
  }

  // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
  std::vector<int> ccc(buf.size());
  for (size_t i = 0; i < buf.size(); ++i) ccc[i] = CombiningClass(buf[i]);
  for (size_t i = 0; i < buf.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < buf.size() && ccc[j] != 0) ++j;
    if (j - i > 1) {
      // Insertion sort: runs are short and it is stable.
      for (size_t k = i + 1; k < j; ++k) {
        const char32_t c = buf[k];
        const int cc = ccc[k];
        size_t m = k;
        for (; m > i && ccc[m - 1] > cc; --m) {
          buf[m] = buf[m - 1];
          ccc[m] = ccc[m - 1];
        }
        buf[m] = c;
        ccc[m] = cc;
      }
    }
    i = j;
  }

  // 3. Canonical composition. `c` combines with the last starter unless a character between
  // them blocks it: a starter, or a non-starter of class >= ccc(c). After reordering, the last
  // character kept since the starter has the highest class among them, so it alone decides.
  if (buf.empty()) return buf;
  size_t starter = 0;  // index in buf of the last starter kept
  bool have_starter = ccc[0] == 0;
  int last_class = have_starter ? 0 : 256;  // class of the last kept character; 256 blocks all
  size_t out = 1;
  for (size_t i = 1; i < buf.size(); ++i) {
    const char32_t c = buf[i];
    const int cc = ccc[i];
    const bool adjacent = out == starter + 1;
    if (have_starter && (adjacent || (last_class != 0 && last_class < cc))) {
      const char32_t composite = Compose(buf[starter], c);
      if (composite != 0) {
        buf[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = out;
      have_starter = true;
    }
    last_class = cc;
    buf[out++] = c;
  }
  buf.resize(out);
  return buf;
}

std::u32string DecodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    }
    // Sequence length and the allowed range of the second byte (Unicode Table 3-7); later
    // bytes are always 80..BF.
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    char32_t cp;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 1;
      cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 2;
      cp = b0 & 0x0F;
      if (b0 == 0xE0) lo = 0xA0;  // overlong
      if (b0 == 0xED) hi = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 3;
      cp = b0 & 0x07;
      if (b0 == 0xF0) lo = 0x90;  // overlong
      if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      out.push_back(kReplacement);  // 80..C1, F5..FF never start a sequence
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (int k = 0; k < need; ++k, ++j) {
      if (j >= n) {
        ok = false;
        break;
      }
      const auto b = static_cast<unsigned char>(text[j]);
      if (b < lo || b > hi) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (b & 0x3F);
      lo = 0x80;
      hi = 0xBF;
    }
    // A broken sequence's valid prefix is one U+FFFD; the byte that broke it starts afresh.
    out.push_back(ok ? cp : kReplacement);
    i = j;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c > kMaxCodePoint || (c >= 0xD800 && c <= 0xDFFF)) c = kReplacement;
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) AppendUtf8(c, &out);
  return out;
}

bool EndsInsideUtf8Sequence(std::string_view text) {
  // Trailing continuation bytes (at most 2 can belong to an unfinished sequence), then the
  // byte before them must be a lead that needs more than that many.
  size_t conts = 0;
  while (conts < 3 && conts < text.size() &&
         (static_cast<unsigned char>(text[text.size() - 1 - conts]) & 0xC0) == 0x80) {
    ++conts;
  }
  if (conts == text.size() || conts == 3) return false;
  const size_t lead_at = text.size() - 1 - conts;
  const auto lead = static_cast<unsigned char>(text[lead_at]);
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return false;
  }
  if (conts >= static_cast<size_t>(need)) return false;
  if (conts == 0) return true;
  // Only the second byte has a narrower range; the rest are any continuation byte.
  const auto second = static_cast<unsigned char>(text[lead_at + 1]);
  return second >= lo && second <= hi;
}

}  // namespace hap::unicode
