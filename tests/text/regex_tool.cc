// The C++ side of regex_parity.py: reads {"pattern": P, "texts": [..]} as JSON on stdin and
// prints, for each text, the spans [begin, end) in code points that iterating
// PretokenizeRegex::Find yields, as JavaScript's String.prototype.matchAll does (after an
// empty match the search resumes one code point later). Prints {"error": ..} if P is refused.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/text/pretokenize_regex.h"
#include "runtime/text/unicode.h"

int main() {
  const std::string input{std::istreambuf_iterator<char>(std::cin),
                          std::istreambuf_iterator<char>()};
  const nlohmann::json request = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded() || !request.contains("pattern") || !request.contains("texts")) {
    std::fprintf(stderr, "expected {\"pattern\": .., \"texts\": [..]} on stdin\n");
    return 2;
  }
  auto regex = hap::PretokenizeRegex::Compile(request["pattern"].get<std::string>());
  if (!regex.ok()) {
    std::cout << nlohmann::json{{"error", std::string(regex.status().message())}}.dump() << "\n";
    return 0;
  }
  nlohmann::json result = nlohmann::json::array();
  for (const auto& text_json : request["texts"]) {
    const std::u32string text = hap::unicode::DecodeUtf8(text_json.get<std::string>());
    nlohmann::json spans = nlohmann::json::array();
    size_t pos = 0, begin = 0, end = 0;
    while (pos <= text.size() && regex->Find(text, pos, &begin, &end)) {
      spans.push_back({begin, end});
      pos = end > begin ? end : end + 1;
    }
    result.push_back(std::move(spans));
  }
  std::cout << result.dump() << "\n";
  return 0;
}
