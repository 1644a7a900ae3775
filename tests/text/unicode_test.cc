// Unit tests for runtime/text/unicode: hand-picked cases (expected values from Python 3.11's
// unicodedata), then every code point and a few thousand sequences against the cases
// tools/unicode/gen_unicode_tables.py --check-cases writes from Python's unicodedata.
#include "runtime/text/unicode.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace hap::unicode {
namespace {

namespace fs = std::filesystem;

TEST(UnicodeTest, GeneralCategory) {
  EXPECT_EQ(GeneralCategory(U'A'), Category::kLu);
  EXPECT_EQ(GeneralCategory(U'a'), Category::kLl);
  EXPECT_EQ(GeneralCategory(U'\u01C5'), Category::kLt);  // ǅ
  EXPECT_EQ(GeneralCategory(U'\u02B0'), Category::kLm);
  EXPECT_EQ(GeneralCategory(U'中'), Category::kLo);
  EXPECT_EQ(GeneralCategory(U'\u0663'), Category::kNd);  // ٣
  EXPECT_EQ(GeneralCategory(U'\u216B'), Category::kNl);  // Ⅻ
  EXPECT_EQ(GeneralCategory(U'\u00BD'), Category::kNo);  // ½
  EXPECT_EQ(GeneralCategory(U'\u0301'), Category::kMn);
  EXPECT_EQ(GeneralCategory(U'\u0903'), Category::kMc);
  EXPECT_EQ(GeneralCategory(U'\u20DD'), Category::kMe);
  EXPECT_EQ(GeneralCategory(U'_'), Category::kPc);
  EXPECT_EQ(GeneralCategory(U'-'), Category::kPd);
  EXPECT_EQ(GeneralCategory(U'('), Category::kPs);
  EXPECT_EQ(GeneralCategory(U')'), Category::kPe);
  EXPECT_EQ(GeneralCategory(U'\u00AB'), Category::kPi);
  EXPECT_EQ(GeneralCategory(U'\u00BB'), Category::kPf);
  EXPECT_EQ(GeneralCategory(U'!'), Category::kPo);
  EXPECT_EQ(GeneralCategory(U'+'), Category::kSm);
  EXPECT_EQ(GeneralCategory(U'$'), Category::kSc);
  EXPECT_EQ(GeneralCategory(U'^'), Category::kSk);
  EXPECT_EQ(GeneralCategory(U'\U0001F600'), Category::kSo);  // 😀
  EXPECT_EQ(GeneralCategory(U' '), Category::kZs);
  EXPECT_EQ(GeneralCategory(U'\u00A0'), Category::kZs);
  EXPECT_EQ(GeneralCategory(U'\u2028'), Category::kZl);
  EXPECT_EQ(GeneralCategory(U'\u2029'), Category::kZp);
  EXPECT_EQ(GeneralCategory(U'\n'), Category::kCc);
  EXPECT_EQ(GeneralCategory(U'\0'), Category::kCc);
  EXPECT_EQ(GeneralCategory(U'\u200B'), Category::kCf);
  EXPECT_EQ(GeneralCategory(char32_t{0xD800}), Category::kCs);
  EXPECT_EQ(GeneralCategory(U'\uE000'), Category::kCo);
  EXPECT_EQ(GeneralCategory(U'\U0010FFFD'), Category::kCo);
  EXPECT_EQ(GeneralCategory(char32_t{0x0378}), Category::kCn);
  EXPECT_EQ(GeneralCategory(char32_t{0x10FFFF}), Category::kCn);
  EXPECT_EQ(GeneralCategory(char32_t{0x110000}), Category::kCn);
  EXPECT_EQ(GeneralCategory(char32_t{0xFFFFFFFF}), Category::kCn);

  EXPECT_EQ(MajorClass(Category::kLt), 'L');
  EXPECT_EQ(MajorClass(Category::kMe), 'M');
  EXPECT_EQ(MajorClass(Category::kNo), 'N');
  EXPECT_EQ(MajorClass(Category::kPf), 'P');
  EXPECT_EQ(MajorClass(Category::kSo), 'S');
  EXPECT_EQ(MajorClass(Category::kZp), 'Z');
  EXPECT_EQ(MajorClass(Category::kCn), 'C');
  EXPECT_TRUE(IsLetter(U'中'));
  EXPECT_FALSE(IsLetter(U'\u0301'));
  EXPECT_TRUE(IsNumber(U'\u216B'));
  EXPECT_FALSE(IsNumber(U'x'));
}

TEST(UnicodeTest, Whitespace) {
  for (char32_t c : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2005, 0x200A,
                     0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_TRUE(IsWhitespace(c)) << std::hex << static_cast<uint32_t>(c);
  }
  for (char32_t c :
       {0x00, 0x08, 0x0E, 0x1C, 0x1F, 0x21, 0x180E, 0x200B, 0x200C, 0x2060, 0xFEFF, 0x110000}) {
    EXPECT_FALSE(IsWhitespace(c)) << std::hex << static_cast<uint32_t>(c);
  }
}

TEST(UnicodeTest, SimpleFold) {
  EXPECT_EQ(SimpleFold(U'A'), U'a');
  EXPECT_EQ(SimpleFold(U'a'), U'a');
  EXPECT_EQ(SimpleFold(U'1'), U'1');
  EXPECT_EQ(SimpleFold(U'\u212A'), U'k');  // KELVIN SIGN
  EXPECT_EQ(SimpleFold(U'\u017F'), U's');  // LONG S
  EXPECT_EQ(SimpleFold(U'\u03A3'), U'\u03C3');
  EXPECT_EQ(SimpleFold(U'\u03C2'), U'\u03C3');
  EXPECT_EQ(SimpleFold(U'\u03C3'), U'\u03C3');
  EXPECT_EQ(SimpleFold(U'\u00C5'), U'\u00E5');
  EXPECT_EQ(SimpleFold(U'\u212B'), U'\u00E5');  // ANGSTROM SIGN
  EXPECT_EQ(SimpleFold(U'\u0345'), U'\u03B9');
  EXPECT_EQ(SimpleFold(U'\u13F8'), U'\u13F0');  // Cherokee folds to upper case
  EXPECT_EQ(SimpleFold(U'\uAB70'), U'\u13A0');
  EXPECT_EQ(SimpleFold(U'\U00010400'), U'\U00010428');
  // Status S (the F entry is multi-character): ẞ → ß, ᾈ → ᾀ, ᾼ → ᾳ.
  EXPECT_EQ(SimpleFold(U'\u1E9E'), U'\u00DF');
  EXPECT_EQ(SimpleFold(U'\u1F88'), U'\u1F80');
  EXPECT_EQ(SimpleFold(U'\u1FBC'), U'\u1FB3');
  // Only F/T entries: no simple fold.
  EXPECT_EQ(SimpleFold(U'\u00DF'), U'\u00DF');
  EXPECT_EQ(SimpleFold(U'\u0130'), U'\u0130');
  EXPECT_EQ(SimpleFold(U'\u0149'), U'\u0149');
  EXPECT_EQ(SimpleFold(char32_t{0x110000}), char32_t{0x110000});
}

TEST(UnicodeTest, Nfc) {
  EXPECT_EQ(Nfc(U""), U"");
  EXPECT_EQ(Nfc(U"plain ascii"), U"plain ascii");
  EXPECT_EQ(Nfc(U"e\u0301"), U"\u00E9");
  EXPECT_EQ(Nfc(U"\u00E9"), U"\u00E9");
  EXPECT_EQ(Nfc(U"\u1100\u1161\u11A8"), U"\uAC01");  // 각 from jamo
  EXPECT_EQ(Nfc(U"\uAC00\u11A8"), U"\uAC01");        // LV + T
  EXPECT_EQ(Nfc(U"\u1100\u1161\u0301\u11A8"), U"\uAC00\u0301\u11A8");
  EXPECT_EQ(Nfc(U"\u1100\u0300\u1161"), U"\u1100\u0300\u1161");
  EXPECT_EQ(Nfc(U"\u212B"), U"\u00C5");  // singleton decomposition
  EXPECT_EQ(Nfc(U"\u2126"), U"\u03A9");
  // Reordering: dot below (220) sorts before circumflex (230) either way round.
  EXPECT_EQ(Nfc(U"a\u0323\u0302"), U"\u1EAD");
  EXPECT_EQ(Nfc(U"a\u0302\u0323"), U"\u1EAD");
  EXPECT_EQ(Nfc(U"\u1E0B\u0323"), U"\u1E0D\u0307");
  EXPECT_EQ(Nfc(U"q\u0307\u0323"), U"q\u0323\u0307");
  EXPECT_EQ(Nfc(U"A\u0301\u0327"), U"\u00C1\u0327");
  // Blocking: the second acute has the same class as the first.
  EXPECT_EQ(Nfc(U"e\u0328\u0301\u0301"), U"\u0119\u0301\u0301");
  EXPECT_EQ(Nfc(U"a\u0346\u0301"), U"a\u0346\u0301");
  EXPECT_EQ(Nfc(U"a\u0301\u0346"), U"\u00E1\u0346");
  // Composition exclusions and non-starter decompositions stay decomposed.
  EXPECT_EQ(Nfc(U"\u0958"), U"\u0915\u093C");
  EXPECT_EQ(Nfc(U"\u0344"), U"\u0308\u0301");
  EXPECT_EQ(Nfc(U"\U0001D15E"), U"\U0001D157\U0001D165");
  // Starter + starter compositions, chained.
  EXPECT_EQ(Nfc(U"\u0CC6\u0CC2\u0CD5"), U"\u0CCB");
  EXPECT_EQ(Nfc(U"\u0B47\u0B3E"), U"\u0B4B");
  EXPECT_EQ(Nfc(U"A\u030A\u0301"), U"\u01FA");
  EXPECT_EQ(Nfc(U"\u0301e"), U"\u0301e");  // a leading non-starter composes with nothing
  EXPECT_EQ(Nfc(U"\u05B8\u05B9\u05B1\u0591\u05C3\u05B0\u05AC\u059F"),
            U"\u05B1\u05B8\u05B9\u0591\u05C3\u05B0\u05AC\u059F");
}

TEST(UnicodeTest, DecodeUtf8) {
  EXPECT_EQ(DecodeUtf8(""), U"");
  EXPECT_EQ(DecodeUtf8("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"), U"a\u00E9\u4E2D\U0001F600");
  EXPECT_EQ(DecodeUtf8("\xF4\x8F\xBF\xBF"), U"\U0010FFFF");
  EXPECT_EQ(DecodeUtf8(std::string_view("\0", 1)), std::u32string(1, U'\0'));
  // A truncated sequence's valid prefix is one U+FFFD; the breaking byte starts afresh.
  EXPECT_EQ(DecodeUtf8("\xE2\x82"
                       "A"),
            U"\uFFFDA");
  EXPECT_EQ(DecodeUtf8("\xE2\x82"), U"\uFFFD");
  EXPECT_EQ(DecodeUtf8("\xE2\x82\xE2\x82\xAC"), U"\uFFFD\u20AC");
  EXPECT_EQ(DecodeUtf8("\xF0\x80"), U"\uFFFD\uFFFD");  // 80 can't follow F0
  EXPECT_EQ(DecodeUtf8("\xF0\x80\x80\x80"), U"\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(DecodeUtf8("\xED\xA0\x80"), U"\uFFFD\uFFFD\uFFFD");  // surrogate
  EXPECT_EQ(DecodeUtf8("\xED\x9F\xBF"), U"\uD7FF");
  EXPECT_EQ(DecodeUtf8("\xC0\xAF"), U"\uFFFD\uFFFD");  // overlong
  EXPECT_EQ(DecodeUtf8("\xE0\x80\xAF"), U"\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(DecodeUtf8("\xF4\x90\x80\x80"), U"\uFFFD\uFFFD\uFFFD\uFFFD");  // > U+10FFFF
  EXPECT_EQ(DecodeUtf8("\xF5\xFF\x80"), U"\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(DecodeUtf8("\xF0\x9F\x98"), U"\uFFFD");
  EXPECT_EQ(DecodeUtf8("\xF0\x9F\x98x"), U"\uFFFDx");
  // The example of Unicode §3.9 (U+FFFD Substitution of Maximal Subparts), Table 3-11.
  EXPECT_EQ(DecodeUtf8("a\xF1\x80\x80\xE1\x80\xC2"
                       "b\x80"
                       "c\x80\xBF"
                       "d"),
            U"a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
}

TEST(UnicodeTest, EncodeUtf8) {
  EXPECT_EQ(EncodeUtf8(U"a\u00E9\u4E2D\U0001F600"), "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
  EXPECT_EQ(EncodeUtf8(std::u32string{0xD800, 0x110000, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000,
                                      0x10FFFF}),
            "\xEF\xBF\xBD\xEF\xBF\xBD\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF"
            "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF");
  std::string out = "x";
  AppendUtf8(U'\u20AC', &out);
  EXPECT_EQ(out, "x\xE2\x82\xAC");
  // Round trip over every scalar value.
  std::u32string all;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if (c < 0xD800 || c > 0xDFFF) all.push_back(c);
  }
  EXPECT_EQ(DecodeUtf8(EncodeUtf8(all)), all);
}

TEST(UnicodeTest, EndsInsideUtf8Sequence) {
  EXPECT_TRUE(EndsInsideUtf8Sequence("\xE2\x82"));
  EXPECT_TRUE(EndsInsideUtf8Sequence("\xE2"));
  EXPECT_TRUE(EndsInsideUtf8Sequence("ab\xC3"));
  EXPECT_TRUE(EndsInsideUtf8Sequence("\xF0\x9F"));
  EXPECT_TRUE(EndsInsideUtf8Sequence("\xF0\x9F\x98"));
  EXPECT_TRUE(EndsInsideUtf8Sequence("\x80\xE0\xA0"));
  EXPECT_TRUE(EndsInsideUtf8Sequence("\xF4\x8F\xBF"));
  EXPECT_FALSE(EndsInsideUtf8Sequence(""));
  EXPECT_FALSE(EndsInsideUtf8Sequence("abc"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xE2\x82\xAC"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xF0\x80"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xC0"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xC1"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xF5"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xED\xA0"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xE0\x80"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xF4\x90"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\x80"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\x80\x80\x80"));
  EXPECT_FALSE(EndsInsideUtf8Sequence("\xC3\xA9\x80"));

  // Agrees with the decoder: a string ends inside a sequence exactly when its decoding ends in
  // U+FFFD that one more continuation byte could turn into something else.
  for (uint32_t a = 0; a < 256; ++a) {
    for (uint32_t b = 0; b < 256; ++b) {
      const std::string s{static_cast<char>(a), static_cast<char>(b)};
      bool completes = false;
      for (char extra : {'\x80', '\x90', '\xA0', '\xBF'}) {
        for (const std::string& tail : {std::string(1, extra), std::string(1, extra) + "\x80",
                                        std::string(1, extra) + "\x80\x80"}) {
          const std::u32string whole = DecodeUtf8(s + tail);
          const std::u32string head = DecodeUtf8(s);
          if (!head.empty() && head.back() == 0xFFFD && whole.size() < head.size() + tail.size() &&
              whole.back() != 0xFFFD) {
            completes = true;
          }
        }
      }
      EXPECT_EQ(EndsInsideUtf8Sequence(s), completes) << std::hex << a << " " << b;
    }
  }
}

// --- Everything against Python's unicodedata (tools/unicode/gen_unicode_tables.py) ---

std::u32string ParseHexSeq(const std::string& text) {
  std::u32string out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, '.')) out.push_back(std::stoul(item, nullptr, 16));
  return out;
}

std::string Hex(std::u32string_view s) {
  std::ostringstream out;
  for (char32_t c : s) out << std::hex << static_cast<uint32_t>(c) << ' ';
  return out.str();
}

// The cases file: $HAP_UNICODE_CASES if set, otherwise written by the generator now. Empty
// (and a skip reason in `why`) when Python is not there to write it.
std::string CasesPath(std::string* why) {
  if (const char* env = getenv("HAP_UNICODE_CASES"); env != nullptr && *env != '\0') return env;
  const std::string python = "/usr/bin/python3";
  if (access(python.c_str(), X_OK) != 0) {
    *why = python + " is not installed";
    return "";
  }
  std::string dir = (fs::temp_directory_path() / "hap-unicode-test-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) {
    *why = "mkdtemp failed";
    return "";
  }
  const std::string path = dir + "/cases.txt";
  const std::string cmd =
      python + " " + HAP_SOURCE_DIR + "/tools/unicode/gen_unicode_tables.py --check-cases " + path;
  if (std::system(cmd.c_str()) != 0) {
    *why = "failed: " + cmd;
    return "";
  }
  return path;
}

TEST(UnicodeTest, MatchesPythonUnicodedata) {
  std::string why;
  const std::string path = CasesPath(&why);
  if (path.empty()) GTEST_SKIP() << why;
  // Removes the scratch directory CasesPath made, however the test ends.
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      if (!dir.empty()) fs::remove_all(dir);
    }
  } cleanup{getenv("HAP_UNICODE_CASES") == nullptr ? fs::path(path).parent_path().string() : ""};
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;

  std::map<char32_t, char32_t> folds;
  std::map<char32_t, std::u32string> nfc1;
  static constexpr const char* kNames[] = {
      "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
      "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn"};
  char32_t next_category = 0;  // G runs must cover every code point in order
  int sequences = 0;
  int case_mappings = 0;
  int failures = 0;
  std::string line;
  while (std::getline(in, line) && failures < 20) {
    std::istringstream fields(line);
    std::string tag, a, b, c;
    fields >> tag >> a >> b >> c;
    if (tag == "V") {
      if (a != UnicodeVersion()) {
        GTEST_SKIP() << "Python has Unicode " << a << ", the tables " << UnicodeVersion()
                     << " (regenerate them: gen_unicode_tables.py)";
      }
    } else if (tag == "G") {
      const char32_t first = std::stoul(a, nullptr, 16);
      const char32_t last = std::stoul(b, nullptr, 16);
      ASSERT_EQ(first, next_category) << line;
      for (char32_t cp = first; cp <= last; ++cp) {
        const char* got = kNames[static_cast<int>(GeneralCategory(cp))];
        if (c != got) {
          ADD_FAILURE() << "category of U+" << std::hex << static_cast<uint32_t>(cp) << ": " << got
                        << ", want " << c;
          ++failures;
          break;
        }
      }
      next_category = last + 1;
    } else if (tag == "F") {
      folds[std::stoul(a, nullptr, 16)] = std::stoul(b, nullptr, 16);
    } else if (tag == "N1") {
      nfc1[std::stoul(a, nullptr, 16)] = ParseHexSeq(b);
    } else if (tag == "U" || tag == "L" || tag == "T") {
      // A code point alone: the mapping has no context (the final sigma needs a word).
      const std::u32string input(1, static_cast<char32_t>(std::stoul(a, nullptr, 16)));
      const std::u32string got = tag == "U"   ? PyUpper(input)
                                 : tag == "L" ? PyLower(input)
                                              : PyTitle(input);
      if (got != ParseHexSeq(b)) {
        ADD_FAILURE() << tag << " of " << Hex(input) << " = " << Hex(got) << ", want " << b;
        ++failures;
      }
      ++case_mappings;
    } else if (tag == "N") {
      const std::u32string input = ParseHexSeq(a);
      const std::u32string want = ParseHexSeq(b);
      const std::u32string got = Nfc(input);
      if (got != want) {
        ADD_FAILURE() << "Nfc(" << Hex(input) << ") = " << Hex(got) << ", want " << Hex(want);
        ++failures;
      }
      ++sequences;
    } else {
      FAIL() << "bad line in " << path << ": " << line;
    }
  }
  ASSERT_EQ(failures, 0);
  EXPECT_EQ(next_category, char32_t{0x110000});
  EXPECT_GT(folds.size(), 1000u);
  EXPECT_GT(nfc1.size(), 1000u);
  EXPECT_GT(sequences, 5000);
  EXPECT_GT(case_mappings, 4000);

  // Every code point: the listed ones map as listed, the rest to themselves.
  for (char32_t cp = 0; cp <= 0x10FFFF && failures < 20; ++cp) {
    const auto fold = folds.find(cp);
    const char32_t want_fold = fold == folds.end() ? cp : fold->second;
    if (SimpleFold(cp) != want_fold) {
      ADD_FAILURE() << "SimpleFold(U+" << std::hex << static_cast<uint32_t>(cp)
                    << ") = " << static_cast<uint32_t>(SimpleFold(cp)) << ", want "
                    << static_cast<uint32_t>(want_fold);
      ++failures;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const auto nfc = nfc1.find(cp);
    const std::u32string want = nfc == nfc1.end() ? std::u32string(1, cp) : nfc->second;
    const std::u32string got = Nfc(std::u32string(1, cp));
    if (got != want) {
      ADD_FAILURE() << "Nfc(U+" << std::hex << static_cast<uint32_t>(cp) << ") = " << Hex(got)
                    << ", want " << Hex(want);
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Unicode, PythonStringMethods) {
  EXPECT_EQ(PyUpper(U"na\u00efve stra\u00dfe"), U"NA\u00cfVE STRASSE");
  EXPECT_EQ(PyLower(U"\u039f\u0394\u039f\u03a3"), U"\u03bf\u03b4\u03bf\u03c2");  // final ς
  EXPECT_EQ(PyLower(U"\u03a3\u039f \u039f\u03a3."), U"\u03c3\u03bf \u03bf\u03c2.");
  EXPECT_EQ(PyLower(U"\u0130"), U"i\u0307");
  EXPECT_EQ(PyTitle(U"\u00e9a b \u01c6x"), U"\u00c9a B \u01c5x");
  EXPECT_EQ(PyCapitalize(U"\u00dfAB"), U"Ssab");
  EXPECT_TRUE(IsPythonSpace(0x3000));
  EXPECT_TRUE(IsPythonSpace(0x1F));
  EXPECT_FALSE(IsPythonSpace(0x200B));
}

}  // namespace
}  // namespace hap::unicode
