// Runs a Qwen2.5-VL directory end to end for tests/model/qwen_model_parity.py: image → patches
// → embeddings → chat prompt → prefill (optionally pruned) → greedy decode, on the CPU backend or
// the CUDA backend under SIMT emulation, and prints one JSON object with each stage's result.
//
// usage: qwen_model_tool --model DIR --image FILE --question TEXT [--max-new N]
//                        [--method M --keep-fraction F] [--device cpu|cuda-emulated]
// --keep-fraction: the pruning budget as a fraction of the image's visual tokens (the average a
// decoder layer keeps).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/flags.h"
#include "kernels/cuda/cuda_backend.h"
#include "nlohmann/json.hpp"
#include "runtime/model/pipeline.h"
#include "runtime/model/qwen_model.h"
#include "runtime/prune/factory.h"

namespace {

int Fail(const absl::Status& s) {
  std::printf("%s\n", nlohmann::json{{"error", std::string(s.ToString())}}.dump().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<hap::Flags> flags = hap::Flags::Parse(
      argc, argv, {"model", "image", "question", "max-new", "method", "keep-fraction", "device"},
      {});
  if (!flags.ok()) return Fail(flags.status());
  const std::string model_dir = flags->GetOr("model", ""), image_path = flags->GetOr("image", ""),
                    question = flags->GetOr("question", ""),
                    method = flags->GetOr("method", "none"), device = flags->GetOr("device", "cpu");
  absl::StatusOr<int> max_new = flags->PositiveInt("max-new", 8);
  if (!max_new.ok()) return Fail(max_new.status());
  absl::StatusOr<double> keep_fraction = flags->Double("keep-fraction", 0);
  if (!keep_fraction.ok()) return Fail(keep_fraction.status());
  hap::ModelOptions options;
  if (device == "cuda-emulated") {
    absl::StatusOr<const hap::Backend*> cuda = hap::GetCudaBackend();
    if (!cuda.ok()) return Fail(cuda.status());
    options.backend = *cuda;
    options.attention_dtype = hap::DType::kF32;
  }
  absl::StatusOr<std::unique_ptr<hap::QwenModel>> model = hap::QwenModel::Load(model_dir, options);
  if (!model.ok()) return Fail(model.status());
  const hap::QwenModel& m = **model;
  std::ifstream in(image_path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  absl::StatusOr<hap::Qwen2VLPixels> pixels = m.PreprocessImage(bytes.str());
  if (!pixels.ok()) return Fail(pixels.status());
  absl::StatusOr<std::vector<float>> embeds = m.ImageEmbeddings(*pixels);
  if (!embeds.ok()) return Fail(embeds.status());
  absl::StatusOr<hap::QwenPrompt> prompt = m.Tokenize(question, pixels->grid);
  if (!prompt.ok()) return Fail(prompt.status());
  std::unique_ptr<hap::Pruner> pruner;
  if (method != "none") {
    const hap::ModelDims dims = hap::DimsOf(m.config(), prompt->tokens.n_vis);
    hap::PruneRequest req;
    req.method = method;
    req.retain = *keep_fraction * prompt->tokens.n_vis;
    req.text_tokens = static_cast<int>(prompt->tokens.ids.size()) - prompt->tokens.n_vis;
    absl::StatusOr<std::unique_ptr<hap::Pruner>> made = hap::MakePruner(req, dims);
    if (!made.ok()) return Fail(made.status());
    pruner = std::move(*made);
  }
  absl::StatusOr<hap::PrefillOutput> pre =
      m.Prefill(*prompt, *embeds, pruner.get(), nullptr, *max_new);
  if (!pre.ok()) return Fail(pre.status());
  nlohmann::json out;
  out["ids"] = prompt->tokens.ids;
  out["vis_begin"] = prompt->tokens.vis_begin;
  out["n_vis"] = prompt->tokens.n_vis;
  out["grid"] = {pixels->grid.t, pixels->grid.h, pixels->grid.w};
  out["mrope"] = {{"t", prompt->mrope.t},
                  {"h", prompt->mrope.h},
                  {"w", prompt->mrope.w},
                  {"next", prompt->mrope.next}};
  out["image_embeds"] = *embeds;
  out["logits"] = pre->logits;
  out["tokens_per_layer"] = pre->trace.tokens_per_layer;
  out["rope_delta"] = pre->kv().rope_delta;
  if (pruner) {
    // Where each stage pruned and which of the image's tokens it kept.
    out["stages"] = nlohmann::json::array();
    for (const hap::PruneStage& st : pruner->stats().stages) {
      out["stages"].push_back({{"after_layer", st.after_layer}, {"kept", st.kept_original}});
    }
  }
  // Greedy decoding from the prefill's logits.
  std::vector<int32_t> tokens;
  std::vector<float> logits = pre->logits;
  for (int step = 0; step < *max_new; ++step) {
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    }
    tokens.push_back(best);
    if (step + 1 == *max_new) break;
    absl::StatusOr<std::vector<float>> next = m.DecodeStep(best, &pre->kv());
    if (!next.ok()) return Fail(next.status());
    logits = std::move(*next);
  }
  out["tokens"] = tokens;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
