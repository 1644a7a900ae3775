// Unit tests for runtime/text: training, loading, encode/decode, LLaVA prompts, streaming.
#include "runtime/text/tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "runtime/text/llava_prompt.h"
#include "runtime/text/streaming_detokenizer.h"
#include "runtime/tiny/train_tokenizer.h"
#include "tests/common/files.h"
#include "tests/common/utf8.h"
#include "tests/text/streaming.h"

namespace hap {
namespace {

namespace fs = std::filesystem;
using ::hap::testing::IsValidUtf8;
using ::hap::testing::ReadFile;
using ::hap::testing::StreamChunks;
using ::hap::testing::WriteFile;

constexpr int kVocab = 1000;
constexpr int kImageId = 32000;
constexpr int kPadId = 32001;
const char* const kUnderline = "\xE2\x96\x81";

std::string CorpusPath() { return std::string(HAP_SOURCE_DIR) + "/data/tokenizer/corpus.txt"; }

// One scratch directory and one trained model shared by every test in this binary.
class TextTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!dir_.empty()) return;
    std::string tmpl = (fs::temp_directory_path() / "hap-text-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    model_path_ = dir_ + "/tokenizer.model";
    const absl::Status s = TrainTokenizer(CorpusPath(), model_path_, kVocab);
    ASSERT_TRUE(s.ok()) << s;
    auto tok = Tokenizer::Load(model_path_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(tok).value().release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }

  static std::string dir_;
  static std::string model_path_;
  static Tokenizer* tok_;
};

std::string TextTest::dir_;
std::string TextTest::model_path_;
Tokenizer* TextTest::tok_ = nullptr;

// Streams `ids` one at a time; checks each chunk is valid UTF-8 and returns the concatenation.
std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids,
                   std::vector<std::string>* chunks = nullptr) {
  const std::vector<std::string> pieces = StreamChunks(tok, ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_TRUE(IsValidUtf8(pieces[i])) << "chunk after id " << ids[i];
  }
  EXPECT_TRUE(IsValidUtf8(pieces.back()));
  if (chunks) chunks->insert(chunks->end(), pieces.begin(), pieces.end());
  return absl::StrJoin(pieces, "");
}

std::vector<int32_t> Ids(const Tokenizer& tok, std::initializer_list<const char*> pieces) {
  std::vector<int32_t> ids;
  for (const char* p : pieces) ids.push_back(tok.PieceToId(p));
  return ids;
}

// ---------------------------------------------------------------------------------------------
// Training

TEST_F(TextTest, TrainedModelHasLlamaSpecialIds) {
  EXPECT_EQ(tok_->vocab_size(), kVocab);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->IdToPiece(0), "<unk>");
  EXPECT_EQ(tok_->IdToPiece(1), "<s>");
  EXPECT_EQ(tok_->IdToPiece(2), "</s>");
  // Byte fallback: all 256 <0xNN> pieces right after the specials.
  EXPECT_EQ(tok_->IdToPiece(3), "<0x00>");
  EXPECT_EQ(tok_->IdToPiece(3 + 0xE2), "<0xE2>");
  // The prompt template's words were in the corpus, so they are whole pieces.
  EXPECT_NE(tok_->PieceToId(kUnderline + std::string("ASSISTANT")), 0);
  EXPECT_NE(tok_->PieceToId(kUnderline + std::string("USER")), 0);
}

TEST_F(TextTest, TrainingIsByteReproducible) {
  const std::string again = dir_ + "/again.model";
  ASSERT_TRUE(TrainTokenizer(CorpusPath(), again, kVocab).ok());
  EXPECT_EQ(ReadFile(again), ReadFile(model_path_));
  // No temporary files are left beside the output.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".hap-spm"), std::string::npos) << entry.path();
  }
}

TEST_F(TextTest, TrainingErrors) {
  absl::Status s = TrainTokenizer(dir_ + "/no-such-corpus.txt", dir_ + "/x.model", kVocab);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("no-such-corpus.txt"), std::string::npos) << s;

  s = TrainTokenizer(CorpusPath(), dir_ + "/x.model", 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;

  // A vocabulary larger than the corpus supports: spm_train fails and says why.
  s = TrainTokenizer(CorpusPath(), dir_ + "/x.model", 50000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("spm_train"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ocab"), std::string::npos) << s;  // spm's "Vocabulary size..."
  EXPECT_FALSE(fs::exists(dir_ + "/x.model"));

  s = TrainTokenizer(CorpusPath(), dir_ + "/missing-dir/x.model", kVocab);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST_F(TextTest, TrainingWithoutSpmTrainOnPath) {
  const char* old = getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", dir_.c_str(), 1);  // a directory with no spm_train in it
  const absl::Status s = TrainTokenizer(CorpusPath(), dir_ + "/y.model", kVocab);
  setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("spm_train not found"), std::string::npos) << s;
}

// ---------------------------------------------------------------------------------------------
// Loading

TEST_F(TextTest, LoadMissingFileNamesIt) {
  auto tok = Tokenizer::Load(dir_ + "/absent.model");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(tok.status().message().find(dir_ + "/absent.model"), std::string::npos);
}

TEST_F(TextTest, LoadCorruptFilesNamesIt) {
  const std::string garbage = dir_ + "/garbage.model";
  WriteFile(garbage, "this is not a sentencepiece model \x01\x02\x03\xff\xfe");
  const std::string truncated = dir_ + "/truncated.model";
  WriteFile(truncated, ReadFile(model_path_).substr(0, 1000));
  const std::string empty = dir_ + "/empty.model";
  WriteFile(empty, "");
  for (const std::string& path : {garbage, truncated, empty, dir_}) {
    auto tok = Tokenizer::Load(path);
    ASSERT_FALSE(tok.ok()) << path;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();
    EXPECT_NE(tok.status().message().find(path), std::string::npos) << tok.status();
  }
}

// ---------------------------------------------------------------------------------------------
// Encode / Decode

TEST_F(TextTest, EncodeDecodeRoundTrip) {
  const std::vector<std::string> texts = {
      "What colour is the car?",
      "The car is red.",
      " leading space",
      "two  spaces and\ttab\nnewline",
      "café naïve 5 € 東京",
      "not in the corpus: ß Ω 😀 ŝ",
      "digits 0123456789 and 3.14",
      "",
  };
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok_->Encode(text);
    EXPECT_EQ(tok_->Decode(ids), text);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, kVocab);
      EXPECT_NE(id, 0) << "byte fallback means no <unk> for " << text;
    }
  }
}

TEST_F(TextTest, SplitDigitsAndByteFallback) {
  std::vector<std::string> pieces;
  for (int32_t id : tok_->Encode("2024")) pieces.push_back(tok_->IdToPiece(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{kUnderline, "2", "0", "2", "4"}));

  // "ß" is not in the corpus: two byte pieces after the dummy prefix.
  pieces.clear();
  for (int32_t id : tok_->Encode("ß")) pieces.push_back(tok_->IdToPiece(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{kUnderline, "<0xC3>", "<0x9F>"}));
}

TEST_F(TextTest, IdsOutsideTheVocabularyDecodeToNothing) {
  std::vector<int32_t> ids = tok_->Encode("a red car");
  std::vector<int32_t> with_extras = {kImageId, tok_->bos_id()};
  with_extras.insert(with_extras.end(), ids.begin(), ids.end());
  with_extras.insert(with_extras.end(), {kPadId, -1, kVocab, tok_->eos_id(), 1 << 30});
  EXPECT_EQ(tok_->Decode(with_extras), "a red car");
  EXPECT_EQ(tok_->Decode({kImageId, kPadId}), "");
  EXPECT_EQ(tok_->IdToPiece(kImageId), "");
  EXPECT_EQ(tok_->IdToPiece(-3), "");
  // Unknown pieces map to <unk>, as in SentencePiece.
  EXPECT_EQ(tok_->PieceToId("no-such-piece"), 0);
}

// ---------------------------------------------------------------------------------------------
// LLaVA prompt

TEST_F(TextTest, PromptLayout) {
  auto p = BuildLlavaPrompt(*tok_, "What colour is the car?", kImageId, 576, 4096);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<int32_t>& ids = p->ids;
  EXPECT_EQ(ids.front(), tok_->bos_id());
  EXPECT_EQ(p->n_vis, 576);
  const std::vector<int32_t> before = tok_->Encode("USER: ");
  EXPECT_EQ(p->vis_begin, 1 + static_cast<int>(before.size()));
  EXPECT_TRUE(std::equal(before.begin(), before.end(), ids.begin() + 1));
  for (int i = 0; i < 576; ++i) ASSERT_EQ(ids[p->vis_begin + i], kImageId);

  // "USER: " ends in a lone '▁'; after the image, "\n{question} ASSISTANT:" is encoded on its
  // own, so it starts with the dummy-prefix '▁' and then the newline byte (LLaMA: 29871, 13).
  EXPECT_EQ(tok_->IdToPiece(before.back()), kUnderline);
  const std::vector<int32_t> after(ids.begin() + p->vis_begin + 576, ids.end());
  EXPECT_EQ(after, tok_->Encode("\nWhat colour is the car? ASSISTANT:"));
  ASSERT_GE(after.size(), 2u);
  EXPECT_EQ(tok_->IdToPiece(after[0]), kUnderline);
  EXPECT_EQ(tok_->IdToPiece(after[1]), "<0x0A>");
  EXPECT_EQ(tok_->Decode(after), "\nWhat colour is the car? ASSISTANT:");
  EXPECT_EQ(tok_->Decode(ids), "USER:  \nWhat colour is the car? ASSISTANT:");
}

// The ids of LLaVA's tokenizer_image_token on the committed default model's tokenizer, derived
// outside this code base with Debian's python3-sentencepiece:
//   /usr/bin/python3 tools/llava_prompt_ids.py --image-token 512 --n-vis 3
// Each list is BOS, the text before <image> encoded alone, 3 image ids, the text after it
// encoded alone: 471 is the lone '▁' (LLaMA's 29871) on both sides of the image, 13 is "\n".
TEST(LlavaPromptIds, MatchLlavaOnTheDefaultModel) {
  auto tok = Tokenizer::Load(std::string(HAP_SOURCE_DIR) + "/models/scenes-llava/tokenizer.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  constexpr int kImage = 512;
  const std::vector<std::pair<std::string, std::vector<int32_t>>> cases = {
      {"USER: <image>\nWhat colour is the circle? ASSISTANT:",
       {1,   273, 479, 471, 512, 512, 512, 471, 13,  496, 314,
        280, 336, 482, 469, 288, 261, 313, 488, 275, 479}},
      {"USER: <image>\nHow many red shapes are there? ASSISTANT:",
       {1, 273, 479, 471, 512, 512, 512, 471, 13, 504, 284, 322, 356, 324, 321, 294, 488, 275,
        479}},
      {"Be brief. USER: <image>\nHi ASSISTANT: Hello USER: Why? ASSISTANT:",
       {1,   471, 69,  472, 285, 287, 428, 49,  273, 479, 471, 512, 512, 512, 471, 13,
        504, 484, 275, 479, 317, 362, 482, 273, 479, 283, 476, 499, 488, 275, 479}},
      {"<image>\nDescribe.", {1, 512, 512, 512, 471, 13, 71, 339, 486, 287, 417, 49}},
  };
  for (const auto& [prompt, want] : cases) {
    auto got = TokenizeImagePrompt(**tok, prompt, kImage, 3, 4096);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->ids, want) << prompt;
  }
  // The built-in template gives the same ids as the rendered prompt.
  auto built = BuildLlavaPrompt(**tok, "What colour is the circle?", kImage, 3, 4096);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->ids, cases[0].second);
  EXPECT_EQ(built->vis_begin, 4);
}

TEST_F(TextTest, LiteralImageTagInQuestionIsText) {
  auto p = BuildLlavaPrompt(*tok_, "<image> <image> what is this?", kImageId, 10, 4096);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(std::count(p->ids.begin(), p->ids.end(), kImageId), 10);
  EXPECT_EQ(p->n_vis, 10);
  EXPECT_EQ(tok_->Decode(p->ids), "USER:  \n<image> <image> what is this? ASSISTANT:");
}

TEST_F(TextTest, RenderedPromptTokenizesLikeTheTemplate) {
  // A chat template's rendering of one turn gives the same ids as the built-in template.
  auto built = BuildLlavaPrompt(*tok_, "What colour is the car?", kImageId, 16, 4096);
  auto rendered = TokenizeImagePrompt(
      *tok_, "USER: <image>\nWhat colour is the car? ASSISTANT:", kImageId, 16, 4096);
  ASSERT_TRUE(built.ok() && rendered.ok());
  EXPECT_EQ(rendered->ids, built->ids);
  EXPECT_EQ(rendered->vis_begin, built->vis_begin);
  // A system line before the turn and a second turn after it stay text.
  auto two = TokenizeImagePrompt(*tok_, "Be brief. USER: <image>\nHi ASSISTANT: Hello USER: why?",
                                 kImageId, 4, 4096);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(std::count(two->ids.begin(), two->ids.end(), kImageId), 4);
  EXPECT_EQ(tok_->Decode(two->ids), "Be brief. USER:  \nHi ASSISTANT: Hello USER: why?");

  for (const char* bad : {"USER: no image ASSISTANT:", "USER: <image><image> ASSISTANT:"}) {
    auto r = TokenizeImagePrompt(*tok_, bad, kImageId, 4, 4096);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("<image> placeholder"), std::string::npos);
  }
  auto over = TokenizeImagePrompt(*tok_, "<image> x", kImageId, 10, 10);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("the model's context is 10"), std::string::npos);
}

TEST_F(TextTest, EmptyPromptIsRejected) {
  for (const char* q : {"", " ", "\n\t  \r\n"}) {
    auto p = BuildLlavaPrompt(*tok_, q, kImageId, 576, 4096);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(p.status().message(), "prompt is empty");
  }
}

TEST_F(TextTest, TooLongPromptNamesBothNumbers) {
  const std::string question = "How many circles are there?";
  auto fits = BuildLlavaPrompt(*tok_, question, kImageId, 576, 4096);
  ASSERT_TRUE(fits.ok());
  const int total = static_cast<int>(fits->ids.size());
  const int text = total - 576;
  // Exactly at the limit is fine; one token over is not.
  EXPECT_TRUE(BuildLlavaPrompt(*tok_, question, kImageId, 576, total).ok());
  auto over = BuildLlavaPrompt(*tok_, question, kImageId, 576, total - 1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(),
            "prompt is " + std::to_string(total) + " tokens (576 visual + " + std::to_string(text) +
                " text); the model's context is " + std::to_string(total - 1));

  // A long question against the real 4096 context.
  std::string long_question;
  for (int i = 0; i < 1000; ++i) long_question += "What colour is the car? ";
  auto big = BuildLlavaPrompt(*tok_, long_question, kImageId, 576, 4096);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("(576 visual + "), std::string::npos);
  EXPECT_NE(big.status().message().find("the model's context is 4096"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Streaming detokenizer

TEST_F(TextTest, StreamingHoldsPartialUtf8) {
  const std::vector<int32_t> euro = Ids(*tok_, {"<0xE2>", "<0x82>", "<0xAC>"});
  StreamingDetokenizer stream(*tok_);
  const int the = tok_->PieceToId(kUnderline + std::string("The"));
  ASSERT_NE(the, 0);
  EXPECT_EQ(stream.Push(the), "The");
  EXPECT_EQ(stream.Push(the), " The");
  EXPECT_EQ(stream.Push(euro[0]), "");
  EXPECT_EQ(stream.Push(euro[1]), "");
  EXPECT_EQ(stream.Push(euro[2]), "€");
  EXPECT_EQ(stream.Flush(), "");
}

TEST_F(TextTest, StreamingFirstSpaceRule) {
  // The answer's first '▁' is dropped as Decode drops it; later ones are spaces.
  const std::vector<int32_t> ids = tok_->Encode("The car is red.");
  std::vector<std::string> chunks;
  EXPECT_EQ(Stream(*tok_, ids, &chunks), "The car is red.");
  EXPECT_EQ(chunks.front(), "The");
  EXPECT_EQ(chunks[1].front(), ' ');

  // Leading BOS, image and pad ids do not count as the first piece; a lone '▁' does.
  std::vector<int32_t> prefixed = {tok_->bos_id(), kImageId, kPadId};
  prefixed.insert(prefixed.end(), ids.begin(), ids.end());
  EXPECT_EQ(Stream(*tok_, prefixed), tok_->Decode(prefixed));
  std::vector<int32_t> spaced = Ids(*tok_, {kUnderline, kUnderline});
  spaced.insert(spaced.end(), ids.begin(), ids.end());
  EXPECT_EQ(Stream(*tok_, spaced), tok_->Decode(spaced));
  EXPECT_EQ(tok_->Decode(spaced), "  The car is red.");

  // Flush resets: the next stream starts fresh.
  StreamingDetokenizer stream(*tok_);
  for (int32_t id : ids) stream.Push(id);
  stream.Flush();
  std::string second;
  for (int32_t id : ids) second += stream.Push(id);
  EXPECT_EQ(second + stream.Flush(), "The car is red.");
}

TEST_F(TextTest, StreamingMatchesDecodeOnText) {
  for (const std::string text : {"Café, naïve, 5 €, 東京 and ß Ω 😀 𝄞 — done.", "😀😀😀", "ß",
                                 "a\nb\n\nc ", "  two leading spaces"}) {
    const std::vector<int32_t> ids = tok_->Encode(text);
    std::vector<std::string> chunks;
    EXPECT_EQ(Stream(*tok_, ids, &chunks), text);
    EXPECT_EQ(tok_->Decode(ids), text);
  }
}

TEST_F(TextTest, StreamingMatchesDecodeOnRandomIds) {
  // Random soup: byte pieces (mostly UTF-8 lead/continuation bytes, so runs are often invalid
  // or unfinished), ordinary pieces, specials, image/pad ids, out-of-range ids.
  std::mt19937 rng(42);
  std::vector<int32_t> bytes_hi;
  for (int b = 0x80; b <= 0xFF; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    bytes_hi.push_back(tok_->PieceToId(name));
  }
  const std::vector<int32_t> euro = Ids(*tok_, {"<0xE2>", "<0x82>", "<0xAC>"});
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      switch (rng() % 7) {
        case 0:
        case 1:
          ids.push_back(bytes_hi[rng() % bytes_hi.size()]);
          break;
        case 2:
          ids.insert(ids.end(), euro.begin(), euro.begin() + 1 + rng() % 3);
          break;
        case 3:
          ids.push_back(static_cast<int32_t>(rng() % 3));  // unk, bos, eos
          break;
        case 4:
          ids.push_back(rng() % 2 ? kImageId : -7);
          break;
        default:
          ids.push_back(static_cast<int32_t>(rng() % kVocab));
      }
    }
    ASSERT_EQ(Stream(*tok_, ids), tok_->Decode(ids)) << "iteration " << iter;
  }
}

}  // namespace
}  // namespace hap
