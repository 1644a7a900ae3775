// TokenAuth without servers: the tokens file format and its errors, the Authorization forms
// accepted and refused (one message for all refusals, never the token), the per-client limit,
// and the re-read of the file when it changes or on SIGHUP (a revoked token stops working).
#include "services/auth/token_auth.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"

namespace hap::svc {
namespace {

using std::chrono::milliseconds;

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-abcdefghijkl";  // as long as kAlice
constexpr char kCarol[] = "carol-token-mnopqrstuv";

std::string TestDir() {
  const std::string dir = std::string(HAP_BINARY_DIR) + "/tests/e2e/token_auth";
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// Polls `done` every 10 ms up to `timeout`.
bool Eventually(const std::function<bool()>& done, milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

TEST(ParseTokensTest, ReadsClientsSkipsCommentsAndBlankLines) {
  const std::string text = std::string("# clients of the front door\n\n  alice : ") + kAlice +
                           "  \r\nbob:" + kBob + "\n\t\n# rotation: alice has two\nalice:" + kCarol;
  auto tokens = ParseTokens(text, "tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0].client_id, "alice");
  EXPECT_EQ((*tokens)[0].digest, DigestToken(kAlice));
  EXPECT_EQ((*tokens)[1].client_id, "bob");
  EXPECT_EQ((*tokens)[2].client_id, "alice");
  EXPECT_EQ((*tokens)[2].digest, DigestToken(kCarol));
  // A token may hold ':' (split at the first).
  auto colon = ParseTokens("svc@team.example:abc:def:ghi:jklmnop", "f");
  ASSERT_TRUE(colon.ok()) << colon.status();
  EXPECT_EQ((*colon)[0].digest, DigestToken("abc:def:ghi:jklmnop"));
  auto empty = ParseTokens("# nobody yet\n\n", "f");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ParseTokensTest, ErrorsNameTheFileAndLineAndNeverTheToken) {
  const std::string secret = "s3cret-but-short";  // 16: long enough
  struct Case {
    std::string text, want;
  };
  const std::vector<Case> cases = {
      {"alice:" + std::string(kAlice) + "\nno colon here", "/etc/t:2: expected 'client-id:token'"},
      {"\n\nbad id!:" + secret, "/etc/t:3: the client id must be 1-128 characters"},
      {":" + secret, "/etc/t:1: the client id"},
      {"alice:short-token", "/etc/t:1: the token of client 'alice' is shorter than 16 characters"},
      {"alice:", "shorter than 16"},
      {"alice:" + secret + "\x01", "/etc/t:1: the token of client 'alice' has a character"},
      {"alice:with space inside it", "has a character other than printable ASCII"},
      {"alice:" + secret + "\nbob:" + secret,
       "/etc/t:2: the token of client 'bob' is the one on "
       "line 1: give every token to one client only"},
  };
  for (const Case& c : cases) {
    auto got = ParseTokens(c.text, "/etc/t");
    ASSERT_FALSE(got.ok()) << c.want;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(c.want), std::string::npos) << got.status();
    EXPECT_EQ(got.status().message().find(secret), std::string::npos) << got.status();
    EXPECT_EQ(got.status().message().find("short-token"), std::string::npos) << got.status();
  }
}

class TokenAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TestDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    WriteFile(path_, std::string("alice:") + kAlice + "\nbob:" + kBob + "\n");
  }
  std::unique_ptr<TokenAuth> Start(int per_client = 0, milliseconds interval = milliseconds(50)) {
    TokenAuthOptions o;
    o.tokens_file = path_;
    o.max_concurrent_per_client = per_client;
    o.check_interval = interval;
    o.program = "token_auth_test";
    auto auth = TokenAuth::Start(o);
    EXPECT_TRUE(auth.ok()) << auth.status();
    return auth.ok() ? std::move(*auth) : nullptr;
  }
  std::string path_;
};

TEST_F(TokenAuthTest, AcceptsBearerTokensAndRefusesEverythingElseAlike) {
  auto auth = Start();
  ASSERT_NE(auth, nullptr);
  EXPECT_EQ(auth->token_count(), 2u);
  for (const std::string& header :
       {std::string("Bearer ") + kAlice, std::string("bearer ") + kAlice,
        std::string("BEARER   ") + kAlice + " "}) {
    auto client = auth->Authenticate(header, "test");
    ASSERT_TRUE(client.ok()) << header << ": " << client.status();
    EXPECT_EQ(*client, "alice");
  }
  EXPECT_EQ(auth->Authenticate(std::string("Bearer ") + kBob, "test").value_or(""), "bob");
  const std::vector<std::string> refused = {
      "",
      "Bearer",
      "Bearer ",
      std::string("Basic ") + kAlice,
      std::string("Bearer") + kAlice,
      std::string(kAlice),
      std::string("Bearer ") + kCarol,        // unknown
      std::string("Bearer ") + kAlice + "x",  // a prefix of it is known
      std::string("Bearer ") + std::string(kAlice).substr(0, 20),
      std::string("Bearer ") + kAlice + " " + kBob,  // two tokens
      "Bearer " + std::string(5000, 'a'),            // too long
  };
  for (const std::string& header : refused) {
    auto client = auth->Authenticate(header, "test");
    ASSERT_FALSE(client.ok()) << header;
    EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(client.status().message(), kUnauthenticatedMessage) << header;
  }
}

TEST_F(TokenAuthTest, StartRefusesAMissingEmptyOrBadFile) {
  TokenAuthOptions o;
  o.tokens_file = path_ + ".missing";
  auto missing = TokenAuth::Start(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(o.tokens_file), std::string::npos);
  WriteFile(path_, "# no clients\n");
  o.tokens_file = path_;
  auto empty = TokenAuth::Start(o);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("holds no tokens"), std::string::npos);
  WriteFile(path_, "alice:tooshort\n");
  auto bad = TokenAuth::Start(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path_ + ":1: the token of client 'alice' is shorter"),
            std::string::npos)
      << bad.status();
}

TEST_F(TokenAuthTest, PerClientLimitLeavesOtherClientsAlone) {
  auto auth = Start(/*per_client=*/2);
  ASSERT_NE(auth, nullptr);
  auto a1 = auth->Admit("alice");
  auto a2 = auth->Admit("alice");
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto a3 = auth->Admit("alice");
  ASSERT_FALSE(a3.ok());
  EXPECT_EQ(a3.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a3.status().message(),
            "client 'alice' is at its limit of 2 requests in flight "
            "(--auth-max-concurrent-per-client)");
  auto b1 = auth->Admit("bob");
  EXPECT_TRUE(b1.ok());
  EXPECT_EQ(auth->in_flight("alice"), 2);
  EXPECT_EQ(auth->in_flight("bob"), 1);
  a1->Release();
  a1->Release();  // once only
  EXPECT_EQ(auth->in_flight("alice"), 1);
  ClientSlot moved = std::move(*a2);
  EXPECT_EQ(auth->in_flight("alice"), 1);
  { ClientSlot gone = std::move(moved); }
  EXPECT_EQ(auth->in_flight("alice"), 0);
  EXPECT_TRUE(auth->Admit("alice").ok());
  EXPECT_EQ(auth->in_flight("alice"), 0) << "a slot not kept is given back at once";
  // No limit: any number.
  auto open = Start(/*per_client=*/0);
  std::vector<ClientSlot> many;
  for (int i = 0; i < 100; ++i) many.push_back(std::move(open->Admit("alice").value()));
  EXPECT_EQ(open->in_flight("alice"), 100);
}

TEST_F(TokenAuthTest, AChangedFileRevokesAndAddsTokens) {
  auto auth = Start();
  ASSERT_NE(auth, nullptr);
  const std::string alice = std::string("Bearer ") + kAlice;
  const std::string bob = std::string("Bearer ") + kBob;
  const std::string carol = std::string("Bearer ") + kCarol;
  ASSERT_TRUE(auth->Authenticate(bob, "t").ok());
  // Rewritten in place (an editor), bob revoked and carol added.
  WriteFile(path_, std::string("alice:") + kAlice + "\ncarol:" + kCarol + "\n");
  EXPECT_TRUE(Eventually([&] { return !auth->Authenticate(bob, "t").ok(); }, milliseconds(2000)))
      << "bob's revoked token still works";
  EXPECT_EQ(auth->Authenticate(carol, "t").value_or(""), "carol");
  EXPECT_EQ(auth->Authenticate(alice, "t").value_or(""), "alice");
  // Replaced by a rename (how a Kubernetes Secret volume updates: a new inode).
  const std::string next = path_ + ".next";
  WriteFile(next, std::string("bob:") + kBob + "\n");
  std::filesystem::rename(next, path_);
  EXPECT_TRUE(Eventually([&] { return auth->Authenticate(bob, "t").ok(); }, milliseconds(2000)));
  EXPECT_FALSE(auth->Authenticate(alice, "t").ok());
  // A bad file keeps the tokens read before (and is reported, not retried every interval).
  WriteFile(path_, "bob has no colon\n");
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(auth->Authenticate(bob, "t").ok());
  EXPECT_EQ(auth->token_count(), 1u);
  // A valid empty file is taken: nobody gets in.
  WriteFile(path_, "# everyone revoked\n");
  EXPECT_TRUE(Eventually([&] { return !auth->Authenticate(bob, "t").ok(); }, milliseconds(2000)));
  EXPECT_EQ(auth->token_count(), 0u);
  // A missing file keeps what was read.
  WriteFile(path_, std::string("carol:") + kCarol + "\n");
  EXPECT_TRUE(Eventually([&] { return auth->Authenticate(carol, "t").ok(); }, milliseconds(2000)));
  std::filesystem::remove(path_);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(auth->Authenticate(carol, "t").ok());
}

TEST_F(TokenAuthTest, SighupReadsTheFileAgain) {
  // A long interval: only SIGHUP can make the change visible in time.
  auto auth = Start(0, milliseconds(60000));
  ASSERT_NE(auth, nullptr);
  const std::string bob = std::string("Bearer ") + kBob;
  ASSERT_TRUE(auth->Authenticate(bob, "t").ok());
  WriteFile(path_, std::string("alice:") + kAlice + "\ncarol:" + kCarol + "\n");
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_TRUE(auth->Authenticate(bob, "t").ok()) << "re-read without SIGHUP";
  ASSERT_EQ(raise(SIGHUP), 0);
  EXPECT_TRUE(Eventually([&] { return !auth->Authenticate(bob, "t").ok(); }, milliseconds(2000)));
  EXPECT_EQ(auth->Authenticate(std::string("Bearer ") + kCarol, "t").value_or(""), "carol");
}

TEST(DigestTokenTest, IsSha256) {
  // SHA-256("abc"), FIPS 180-2's example.
  const TokenDigest d = DigestToken("abc");
  EXPECT_EQ(d[0], 0xba);
  EXPECT_EQ(d[1], 0x78);
  EXPECT_EQ(d[31], 0xad);
}

}  // namespace
}  // namespace hap::svc
