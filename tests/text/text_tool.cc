// Command-line access to runtime/text for the Python parity test (prompt_parity.py):
//   text_tool train CORPUS OUT_MODEL VOCAB_SIZE
//   text_tool options                         spm_train options, one per line
//   text_tool prompt MODEL IMAGE_ID N_VIS MAX QUESTION   ids of BuildLlavaPrompt, or the error
//   text_tool encode MODEL TEXT                ids
//   text_tool decode MODEL ID...               decoded text, then the streamed text, as hex
//   text_tool train-bytelevel CORPUS OUT_DIR MERGES   a Qwen2-layout byte-level BPE
//       (runtime/tiny/bytelevel_bpe.h): OUT_DIR/tokenizer.json and tokenizer_config.json
//   text_tool render TEMPLATE_FILE CASES.json  for each {"messages", "add_generation_prompt",
//       "extra"} of the JSON list, one JSON line {"text": rendered} or {"error": message}
//   text_tool batch TOKENIZER TEXTS.json       for each text of the JSON list, one JSON line:
//       {"as_text": ids, "recognized": ids (special tokens recognized), "decoded": text of the
//        recognized ids, "streamed": the same through StreamingDetokenizer}
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/text/chat_template.h"
#include "runtime/text/llava_prompt.h"
#include "runtime/text/streaming_detokenizer.h"
#include "runtime/text/tokenizer.h"
#include "runtime/tiny/bytelevel_bpe.h"
#include "runtime/tiny/train_tokenizer.h"

namespace {

void PrintIds(const std::vector<int32_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
  std::printf("\n");
}

std::string Hex(const std::string& s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "%s\n", msg.c_str());
  return 1;
}

std::unique_ptr<hap::Tokenizer> LoadOrDie(const char* path) {
  auto tok = hap::Tokenizer::Load(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(tok).value();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "train" && argc == 5) {
    const absl::Status s = hap::TrainTokenizer(argv[2], argv[3], std::atoi(argv[4]));
    return s.ok() ? 0 : Fail(s.ToString());
  }
  if (cmd == "options" && argc == 2) {
    for (const char* opt : hap::kSpmTrainOptions) std::printf("%s\n", opt);
    return 0;
  }
  if (cmd == "prompt" && argc == 7) {
    auto tok = LoadOrDie(argv[2]);
    auto prompt = hap::BuildLlavaPrompt(*tok, argv[6], std::atoi(argv[3]), std::atoi(argv[4]),
                                        std::atoi(argv[5]));
    if (!prompt.ok()) return Fail(prompt.status().ToString());
    std::printf("%d %d\n", prompt->vis_begin, prompt->n_vis);
    PrintIds(prompt->ids);
    return 0;
  }
  if (cmd == "encode" && argc == 4) {
    PrintIds(LoadOrDie(argv[2])->Encode(argv[3]));
    return 0;
  }
  if (cmd == "decode" && argc >= 3) {
    auto tok = LoadOrDie(argv[2]);
    std::vector<int32_t> ids;
    for (int i = 3; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
    hap::StreamingDetokenizer stream(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    streamed += stream.Flush();
    std::printf("%s\n%s\n", Hex(tok->Decode(ids)).c_str(), Hex(streamed).c_str());
    return 0;
  }
  if (cmd == "train-bytelevel" && argc == 5) {
    auto bpe = hap::TrainByteLevelBpe(argv[2], std::atoi(argv[4]));
    if (!bpe.ok()) return Fail(bpe.status().ToString());
    const std::string dir = argv[3];
    std::ofstream(dir + "/tokenizer.json", std::ios::binary) << hap::QwenTokenizerJson(*bpe);
    std::ofstream(dir + "/tokenizer_config.json", std::ios::binary)
        << hap::QwenTokenizerConfigJson(*bpe, 32768);
    std::printf("trained %zu merges, %zu tokens\n", bpe->merges.size(), bpe->vocab.size());
    return 0;
  }
  if (cmd == "render" && argc == 4) {
    std::ifstream source_file(argv[2], std::ios::binary);
    std::stringstream source;
    source << source_file.rdbuf();
    auto chat = hap::ChatTemplate::Parse(source.str(), argv[2]);
    if (!chat.ok()) return Fail(chat.status().ToString());
    std::ifstream in(argv[3]);
    const nlohmann::json cases = nlohmann::json::parse(in, nullptr, false);
    if (cases.is_discarded() || !cases.is_array()) return Fail("cases must be a JSON list");
    for (const nlohmann::json& c : cases) {
      auto text = chat->Render(c.at("messages"), c.value("add_generation_prompt", false),
                               c.value("extra", nlohmann::json::object()));
      const nlohmann::json line =
          text.ok() ? nlohmann::json{{"text", *text}}
                    : nlohmann::json{{"error", std::string(text.status().message())}};
      std::printf("%s\n",
                  line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return 0;
  }
  if (cmd == "batch" && argc == 4) {
    auto tok = LoadOrDie(argv[2]);
    std::ifstream in(argv[3]);
    const nlohmann::json texts = nlohmann::json::parse(in, nullptr, false);
    if (texts.is_discarded() || !texts.is_array()) return Fail("texts must be a JSON list");
    for (const nlohmann::json& t : texts) {
      const std::string text = t.get<std::string>();
      const std::vector<int32_t> ids =
          tok->Encode(text, hap::Tokenizer::SpecialTokens::kRecognized);
      hap::StreamingDetokenizer stream(*tok);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.Push(id);
      streamed += stream.Flush();
      const nlohmann::json line = {{"as_text", tok->Encode(text)},
                                   {"recognized", ids},
                                   {"decoded", tok->Decode(ids)},
                                   {"streamed", streamed}};
      std::printf("%s\n",
                  line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return 0;
  }
  return Fail(
      "usage: text_tool train|train-bytelevel|options|prompt|encode|decode|render|batch ... (see "
      "source)");
}
