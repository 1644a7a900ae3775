// Unit tests of PretokenizeRegex: Oniguruma's matching order, the tokenizer.json patterns, long
// inputs, and the constructs Compile refuses. regex_parity.py compares it with JavaScript.
#include "runtime/text/pretokenize_regex.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/text/unicode.h"

namespace hap {
namespace {

using Pieces = std::vector<std::string>;

constexpr char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The o200k (GPT-4o) style: case runs, marks and optional contractions.
constexpr char kGpt4o[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

PretokenizeRegex CompileOrDie(std::string_view pattern) {
  auto regex = PretokenizeRegex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << pattern << ": " << regex.status();
  return *std::move(regex);
}

// Every match in order, as JavaScript's matchAll finds them (an empty match moves the search on
// by one code point), in UTF-8.
std::vector<std::string> Matches(std::string_view pattern, std::string_view text) {
  const PretokenizeRegex regex = CompileOrDie(pattern);
  const std::u32string cps = unicode::DecodeUtf8(text);
  std::vector<std::string> out;
  size_t pos = 0, begin = 0, end = 0;
  while (pos <= cps.size() && regex.Find(cps, pos, &begin, &end)) {
    out.push_back(unicode::EncodeUtf8(std::u32string_view(cps).substr(begin, end - begin)));
    pos = end > begin ? end : end + 1;
  }
  return out;
}

// The first match, or "<none>".
std::string First(std::string_view pattern, std::string_view text) {
  const PretokenizeRegex regex = CompileOrDie(pattern);
  const std::u32string cps = unicode::DecodeUtf8(text);
  size_t begin = 0, end = 0;
  if (!regex.Find(cps, 0, &begin, &end)) return "<none>";
  return unicode::EncodeUtf8(std::u32string_view(cps).substr(begin, end - begin));
}

// Whether Compile refuses `pattern` with InvalidArgument and a message containing `expected`.
::testing::AssertionResult RefusedWith(std::string_view pattern, std::string_view expected) {
  auto regex = PretokenizeRegex::Compile(pattern);
  if (regex.ok()) return ::testing::AssertionFailure() << pattern << " compiled";
  if (regex.status().code() != absl::StatusCode::kInvalidArgument ||
      std::string(regex.status().message()).find(expected) == std::string::npos) {
    return ::testing::AssertionFailure()
           << pattern << ": " << regex.status() << ", expected \"" << expected << "\"";
  }
  return ::testing::AssertionSuccess();
}

TEST(PretokenizeRegexTest, Gpt2SplitsWordsNumbersPunctuationAndSpaces) {
  EXPECT_EQ(Matches(kGpt2, "Hello world's  123!! x"),
            (Pieces{"Hello", " world", "'s", " ", " 123", "!!", " x"}));
  // "\s+(?!\S)" leaves the last space to the next word; trailing spaces stay together.
  EXPECT_EQ(Matches(kGpt2, "a   b  "), (Pieces{"a", "  ", " b", "  "}));
  // Uppercase contractions are not contractions for GPT-2 (case-sensitive).
  EXPECT_EQ(Matches(kGpt2, "IT'S"), (Pieces{"IT", "'", "S"}));
}

TEST(PretokenizeRegexTest, Qwen2AndLlama3) {
  EXPECT_EQ(Matches(kQwen2, "I'M fine!!\n\nOK 12345"),
            (Pieces{"I", "'M", " fine", "!!\n\n", "OK", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(Matches(kLlama3, "I'M fine!!\n\nOK 12345"),
            (Pieces{"I", "'M", " fine", "!!\n\n", "OK", " ", "123", "45"}));
  EXPECT_EQ(Matches(kLlama3, "a \n\n b\r\n"), (Pieces{"a", " \n\n", " b", "\r\n"}));
  // "é" as e + U+0301: the mark is not \p{L}, so it starts the next piece.
  EXPECT_EQ(Matches(kLlama3, "cafe\xCC\x81s"), (Pieces{"cafe", "\xCC\x81s"}));
}

TEST(PretokenizeRegexTest, Gpt4oStylePatternWithMarksAndNestedClasses) {
  EXPECT_EQ(Matches(kGpt4o, "HelloWorld's cafe\xCC\x81 ABC"),
            (Pieces{"Hello", "World's", " cafe\xCC\x81", " ABC"}));
}

TEST(PretokenizeRegexTest, AlternativesAreTriedInOrder) {
  EXPECT_EQ(First("a|ab", "ab"), "a");
  EXPECT_EQ(First("ab|a", "ab"), "ab");
  EXPECT_EQ(First("(?:a|ab)c", "abc"), "abc");  // backtracks into the second alternative
  EXPECT_EQ(First("x|", "ab"), "");             // empty alternative matches at 0
}

TEST(PretokenizeRegexTest, GreedyAndLazyQuantifiers) {
  EXPECT_EQ(First("a+", "aaa"), "aaa");
  EXPECT_EQ(First("a+?", "aaa"), "a");
  EXPECT_EQ(First("a*?b", "aaab"), "aaab");
  EXPECT_EQ(First("a??a", "aa"), "a");
  EXPECT_EQ(First("a{2,3}", "aaaa"), "aaa");
  EXPECT_EQ(First("a{2,3}?", "aaaa"), "aa");
  EXPECT_EQ(First("a{2,}", "aaaa"), "aaaa");
  EXPECT_EQ(First("a{,2}", "aaaa"), "aa");
  EXPECT_EQ(First("(?:ab)+", "ababx"), "abab");
  EXPECT_EQ(First("(?:ab)+?", "ababx"), "ab");
  EXPECT_EQ(First("(?:a|b)*c", "abbac"), "abbac");
  EXPECT_EQ(First("(?:a*)*b", "aab"), "aab");  // empty iterations end the loop
  EXPECT_EQ(First("(?:ab){2}", "ababab"), "abab");
  // Oniguruma: a fixed interval stays greedy, so "{n}?" is an optional "{n}"...
  EXPECT_EQ(First("a{2}?", "aaa"), "aa");
  EXPECT_EQ(First("ba{2}?", "ba"), "b");
  // ...and "{n,m}+" repeats the interval.
  EXPECT_EQ(First("a{2}+", "aaaaa"), "aaaa");
  // '{' that starts no interval is a literal.
  EXPECT_EQ(First("a{", "a{"), "a{");
  EXPECT_EQ(First("a{1,x}", "a{1,x}"), "a{1,x}");
  EXPECT_EQ(First("x*", "ab"), "");
}

TEST(PretokenizeRegexTest, Lookahead) {
  EXPECT_EQ(First(R"(\s+(?!\S))", "   x"), "  ");
  EXPECT_EQ(First(R"(\s+(?!\S))", "   "), "   ");
  EXPECT_EQ(First("a(?=b)", "ac ab"), "a");
  EXPECT_EQ(Matches("a(?=b)", "ac ab"), (Pieces{"a"}));
  EXPECT_EQ(First("(?=(a+))a", "aaa"), "a");  // the lookahead consumes nothing
  EXPECT_EQ(First("(?!a)\\w", "ab"), "b");
}

TEST(PretokenizeRegexTest, CaseInsensitive) {
  EXPECT_EQ(Matches("(?i:'s|'ll)", "'s 'S 'lL 'LL"), (Pieces{"'s", "'S", "'lL", "'LL"}));
  EXPECT_EQ(First("(?i:'s)", "'\xC5\xBF"), "'\xC5\xBF");       // U+017F LATIN SMALL LETTER LONG S
  EXPECT_EQ(First("(?i:k)", "\xE2\x84\xAA"), "\xE2\x84\xAA");  // U+212A KELVIN SIGN
  EXPECT_EQ(First("(?i:\xCF\x83)", "\xCE\xA3"), "\xCE\xA3");   // σ matches Σ
  EXPECT_EQ(First("(?i:[a-c]+)", "xBaC"), "BaC");
  EXPECT_EQ(First("(?i:[A-C]+)", "xbAc"), "bAc");
  EXPECT_EQ(First("(?i:[^a-z]+)", "Qq1"), "1");
  EXPECT_EQ(First("(?i:x)y", "XY"), "<none>");  // the group ends the option
  // An isolated (?i) runs to the end of its group, later alternatives included (Oniguruma:
  // "a(?i)b|c" is "a(?i:b|c)").
  EXPECT_EQ(First("a(?i)b|c", "aB"), "aB");
  EXPECT_EQ(First("a(?i)b|c", "aC"), "aC");
  EXPECT_EQ(First("a(?i)b|c", "C"), "<none>");
  EXPECT_EQ(First("(?:(?i)a)a", "AA"), "<none>");
  EXPECT_EQ(First("(?i:a(?-i)b)", "Ab"), "Ab");
  EXPECT_EQ(First("(?i:a(?-i)b)", "AB"), "<none>");
}

TEST(PretokenizeRegexTest, Classes) {
  EXPECT_EQ(First(R"([^\s\p{L}\p{N}]+)", "ab!?. c"), "!?.");
  EXPECT_EQ(First("[a-cx-z]+", "-abyzd"), "abyz");
  EXPECT_EQ(First(R"([a\-z]+)", "b-az"), "-az");
  EXPECT_EQ(First("[-a]+", "b-a"), "-a");
  EXPECT_EQ(First("[a-]+", "b-a"), "-a");
  EXPECT_EQ(First("[]a]+", "b]a"), "]a");
  EXPECT_EQ(First("[a[bc]]+", "xabcd"), "abc");
  EXPECT_EQ(First("[a-z&&[^aeiou]]+", "abcdea"), "bcd");
  EXPECT_EQ(First("[^[a-c]x]+", "abxd"), "d");
  EXPECT_EQ(First(R"([\x41-\x43]+)", "ABCD"), "ABC");
  EXPECT_EQ(First(R"([\b])", "a\bb"), "\b");
  EXPECT_EQ(First(R"([\p{Lu}\p{M}]+)",
                  "aB\xCC\x81"
                  "C"),
            "B\xCC\x81"
            "C");
}

TEST(PretokenizeRegexTest, PropertiesAndEscapes) {
  EXPECT_EQ(First(R"(\p{Lu}+)", "abCDe"), "CD");
  EXPECT_EQ(First(R"(\p{lu}+)", "abCDe"), "CD");  // names ignore case
  EXPECT_EQ(First(R"(\p{Uppercase_Letter}+)", "abCDe"), "CD");
  EXPECT_EQ(First(R"(\P{L}+)", "ab12c"), "12");
  EXPECT_EQ(First(R"(\p{^L}+)", "ab12c"), "12");
  EXPECT_EQ(First(R"(\p{N}+)", "x\xD9\xA3\xEF\xBC\x91\xC2\xBD"), "\xD9\xA3\xEF\xBC\x91\xC2\xBD");
  EXPECT_EQ(First(R"(\d+)",
                  "x\xD9\xA3\xD9\xA4"
                  "5"),
            "\xD9\xA3\xD9\xA4"
            "5");  // Unicode Nd
  EXPECT_EQ(First(R"(\p{M})", "e\xCC\x81"), "\xCC\x81");
  EXPECT_EQ(First(R"(\p{Any}+)", "a\n"), "a\n");
  EXPECT_EQ(First(".+", "ab\ncd"), "ab");  // . stops at \n
  EXPECT_EQ(First(R"(\s+)", "x\xC2\xA0\xE3\x80\x80\t\ny"), "\xC2\xA0\xE3\x80\x80\t\n");
  EXPECT_EQ(First(R"(\S+)", "  ab "), "ab");
  EXPECT_EQ(First(R"(\w+)", "!a_1\xC3\xA9!"), "a_1\xC3\xA9");
  EXPECT_EQ(First(R"(\h+)", "xy0fAgz"), "0fA");  // Oniguruma \h: a hex digit
  EXPECT_EQ(First(R"(\x41\x{1F600}\u00e9\.\t)", "A\xF0\x9F\x98\x80\xC3\xA9.\t"),
            "A\xF0\x9F\x98\x80\xC3\xA9.\t");
  EXPECT_EQ(First(R"(\0)", std::string_view("a\0", 2)), std::string_view("\0", 1));
  EXPECT_EQ(First(" ", "a b"), " ");
}

TEST(PretokenizeRegexTest, Anchors) {
  EXPECT_EQ(Matches("^a", "a\na"), (Pieces{"a", "a"}));
  EXPECT_EQ(Matches("a$", "a\na"), (Pieces{"a", "a"}));
  EXPECT_EQ(Matches(R"(\Aa)", "a\na"), (Pieces{"a"}));
  EXPECT_EQ(First(R"(a\z)", "a\n"), "<none>");
  EXPECT_EQ(First(R"(a\Z)", "a\n"), "a");
  EXPECT_EQ(First(R"(a\Z)", "a\n\n"), "<none>");
  // ^ does not match after a newline that ends the text (Oniguruma's begin-line).
  const PretokenizeRegex caret = CompileOrDie("^");
  const std::u32string text = U"a\n";
  size_t begin = 0, end = 0;
  EXPECT_FALSE(caret.Find(text, 1, &begin, &end));
}

TEST(PretokenizeRegexTest, FindStartsAtFrom) {
  PretokenizeRegex regex = CompileOrDie(R"(\p{N})");
  const std::u32string text = U"a1b2";
  size_t begin = 0, end = 0;
  ASSERT_TRUE(regex.Find(text, 2, &begin, &end));
  EXPECT_EQ(begin, 3u);
  EXPECT_EQ(end, 4u);
  EXPECT_FALSE(regex.Find(text, 4, &begin, &end));
  PretokenizeRegex moved = CompileOrDie("b");
  moved = std::move(regex);
  EXPECT_EQ(moved.pattern(), R"(\p{N})");
  ASSERT_TRUE(moved.Find(text, 0, &begin, &end));
  EXPECT_EQ(begin, 1u);
}

// Repetitions of one code point run iteratively: long runs must not grow the stack.
TEST(PretokenizeRegexTest, LongInputs) {
  constexpr size_t kN = 200000;
  for (const char* pattern : {kGpt2, kQwen2, kLlama3, kGpt4o}) {
    const PretokenizeRegex regex = CompileOrDie(pattern);
    size_t begin = 0, end = 0;
    const std::u32string spaces(kN, U' ');
    ASSERT_TRUE(regex.Find(spaces, 0, &begin, &end)) << pattern;
    EXPECT_EQ(end - begin, kN) << pattern;
    const std::u32string spaces_x = spaces + U"x";
    ASSERT_TRUE(regex.Find(spaces_x, 0, &begin, &end)) << pattern;
    EXPECT_EQ(end, kN - 1) << pattern;
    const std::u32string letters(kN, U'\u4E2D');
    ASSERT_TRUE(regex.Find(letters, 0, &begin, &end)) << pattern;
    EXPECT_EQ(end, kN) << pattern;
    const std::u32string newlines(kN, U'\n');
    ASSERT_TRUE(regex.Find(newlines, 0, &begin, &end)) << pattern;
    EXPECT_EQ(end, kN) << pattern;
  }
  const PretokenizeRegex lazy = CompileOrDie(".*?x");
  std::u32string text(kN, U'a');
  text += U'x';
  size_t begin = 0, end = 0;
  ASSERT_TRUE(lazy.Find(text, 0, &begin, &end));
  EXPECT_EQ(end, kN + 1);
}

// Repetitions of groups recurse per iteration; past the depth bound Find reports no match
// instead of overflowing the stack.
TEST(PretokenizeRegexTest, DeepGroupRepetitionGivesUp) {
  const PretokenizeRegex regex = CompileOrDie("(?:ab)+");
  std::u32string text;
  for (int i = 0; i < 200; ++i) text += U"ab";
  size_t begin = 0, end = 0;
  ASSERT_TRUE(regex.Find(text, 0, &begin, &end));
  EXPECT_EQ(end, text.size());
  for (int i = 0; i < 100000; ++i) text += U"ab";
  EXPECT_FALSE(regex.Find(text, 0, &begin, &end));
}

TEST(PretokenizeRegexTest, RefusesUnsupportedConstructsNamingThem) {
  EXPECT_TRUE(RefusedWith(R"((a)\1)", "backreference at byte 3"));
  EXPECT_TRUE(RefusedWith("(?<=a)b", "lookbehind (?<= or (?<! at byte 0"));
  EXPECT_TRUE(RefusedWith("x(?<!a)b", "lookbehind (?<= or (?<! at byte 1"));
  EXPECT_TRUE(RefusedWith("(?<name>a)", "named group at byte 0"));
  EXPECT_TRUE(RefusedWith("(?>a)", "atomic group (?> at byte 0"));
  EXPECT_TRUE(RefusedWith("a*+", "possessive quantifier at byte 1"));
  EXPECT_TRUE(RefusedWith("ab++", "possessive quantifier at byte 2"));
  EXPECT_TRUE(RefusedWith("a?+", "possessive quantifier at byte 1"));
  EXPECT_TRUE(RefusedWith("[[:alpha:]]", "POSIX bracket [:name:] at byte 1"));
  EXPECT_TRUE(RefusedWith(R"(\p{Foo})", R"(property \p{Foo} at byte 0)"));
  EXPECT_TRUE(RefusedWith(R"(x\p{Han})", R"(property \p{Han} at byte 1)"));
  EXPECT_TRUE(RefusedWith(R"(\pL)", "without braces"));
  EXPECT_TRUE(RefusedWith(R"(\k<a>)", "named backreference"));
  EXPECT_TRUE(RefusedWith(R"(a\b)", "word boundary \\b at byte 1"));
  EXPECT_TRUE(RefusedWith("(?m:a)", "group option 'm'"));
  EXPECT_TRUE(RefusedWith("(?x)a", "group option 'x'"));
  EXPECT_TRUE(RefusedWith("\xC3\xA9(?<=x)", "at byte 2"));  // offsets are bytes
  EXPECT_TRUE(RefusedWith(R"(\y)", "escape \\y"));
  EXPECT_TRUE(RefusedWith("^*", "quantifier on an anchor or lookahead"));
  EXPECT_TRUE(RefusedWith("a{100001}", "repeat count above 100000"));
  // Malformed patterns.
  EXPECT_TRUE(RefusedWith("(ab", "missing ')' at byte 0"));
  EXPECT_TRUE(RefusedWith("ab)", "unmatched ')' at byte 2"));
  EXPECT_TRUE(RefusedWith("[abc", "missing ']' at byte 0"));
  EXPECT_TRUE(RefusedWith("*a", "quantifier without a target at byte 0"));
  EXPECT_TRUE(RefusedWith("a|+", "quantifier without a target at byte 2"));
  EXPECT_TRUE(RefusedWith("a{3,2}", "min > max"));
  EXPECT_TRUE(RefusedWith("[z-a]", "empty range in class at byte 1"));
  EXPECT_TRUE(RefusedWith("a\\", "ends with"));
  EXPECT_TRUE(RefusedWith("\xFF", "invalid UTF-8 at byte 0"));
  EXPECT_TRUE(RefusedWith("[]", "empty class"));
}

TEST(PretokenizeRegexTest, PlainSplitPatterns) {
  EXPECT_EQ(Matches(" ", "a b  c"), (Pieces{" ", " ", " "}));
  EXPECT_EQ(Matches(R"(\s+)", "a b  c\n"), (Pieces{" ", "  ", "\n"}));
  EXPECT_EQ(Matches(R"(\p{N})", "a12"), (Pieces{"1", "2"}));
  EXPECT_EQ(Matches(R"(\d)", "a12"), (Pieces{"1", "2"}));
  EXPECT_EQ(Matches("", "ab"), (Pieces{"", "", ""}));
}

}  // namespace
}  // namespace hap
