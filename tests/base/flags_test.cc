// The project's flag parser (base/flags.h): both value forms, booleans, the errors that name the
// flag, and the typed getters' checks.
#include "base/flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace hap {
namespace {

absl::StatusOr<Flags> ParseArgs(const std::vector<std::string>& args) {
  return Flags::Parse(args, {"model", "retain", "batches", "repeats"}, {"json"});
}

// The status's message contains `needle`.
void ExpectMessage(const absl::Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s;
}

TEST(FlagsTest, ValuesInBothFormsAndBooleans) {
  absl::StatusOr<Flags> f = ParseArgs({"--model", "dir", "--retain=8,57.5", "--json"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->GetOr("model", ""), "dir");
  EXPECT_TRUE(f->Bool("json"));
  EXPECT_FALSE(f->Has("batches"));
  absl::StatusOr<std::vector<double>> retain = f->PositiveNumbers("retain", {});
  ASSERT_TRUE(retain.ok()) << retain.status();
  EXPECT_EQ(*retain, (std::vector<double>{8, 57.5}));
  // Absent flags give the fallback, unchecked.
  EXPECT_EQ(*f->PositiveInts("batches", {1, 4}), (std::vector<int>{1, 4}));
  EXPECT_EQ(*f->PositiveInt("repeats", 0), 0);
  // argc/argv: the program's name is skipped.
  const char* argv[] = {"bench", "--repeats", "5"};
  absl::StatusOr<Flags> g = Flags::Parse(3, const_cast<char**>(argv), {"repeats"}, {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(*g->PositiveInt("repeats", 1), 5);
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  ExpectMessage(ParseArgs({"--bogus", "1"}).status(), "unknown flag --bogus");
  ExpectMessage(ParseArgs({"--model"}).status(), "--model needs a value");
  ExpectMessage(ParseArgs({"--json=yes"}).status(), "--json takes no value");
  ExpectMessage(ParseArgs({"model"}).status(), "unexpected argument 'model'");
  absl::StatusOr<Flags> f =
      ParseArgs({"--repeats", "0", "--batches", "1,,4", "--retain", "8,-1", "--model", "x"});
  ASSERT_TRUE(f.ok()) << f.status();
  ExpectMessage(f->PositiveInt("repeats", 1).status(), "--repeats: '0' is not a positive integer");
  ExpectMessage(f->PositiveInts("batches", {}).status(), "--batches: '1,,4'");
  ExpectMessage(f->PositiveNumbers("retain", {}).status(), "--retain: '8,-1'");
  ExpectMessage(f->Int("model", 0).status(), "--model: 'x' is not an integer");
  ExpectMessage(f->Required("image").status(), "--image is required");
}

}  // namespace
}  // namespace hap
