// Qwen2.5-VL's vision tower (transformers' Qwen2_5_VisionTransformerPretrainedModel): the patch
// embedding over temporal x spatial patches, the blocks (RMSNorm, attention with the 2-D rotary
// over each patch's row and column, SwiGLU) attending within windows except at
// fullatt_block_indexes, and the merger joining each merge x merge square into one token of the
// language model's width.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/image/qwen2vl_preprocess.h"
#include "runtime/io/qwen_config.h"
#include "runtime/io/qwen_weights.h"

namespace hap {

// pixels: F32 [Σ patches, C·T·P·P] in the backend's memory, the images' rows one after another as
// Qwen2VLPreprocess lays them out, `grids` their patch grids. `out` (resized) receives the image
// embeddings F32 [Σ patches / merge², out_hidden_size] in the same order: the order of the
// image pad tokens they replace. attention_operands: AttentionArgs::operands of the tower's
// attention. InvalidArgument when the rows and the grids disagree or a grid is not whole merge
// units; Cancelled between blocks when the caller's request is cancelled.
absl::Status RunQwenVisionInto(const Backend& backend, const Qwen25VLVisionConfig& cfg,
                               const QwenVisionWeights& w, const float* pixels, int64_t n_rows,
                               const std::vector<ImageGrid>& grids, DType attention_operands,
                               BackendArray<float>* out);

// The same from host pixels, the embeddings returned on the host.
absl::StatusOr<std::vector<float>> RunQwenVision(const Backend& backend,
                                                 const Qwen25VLVisionConfig& cfg,
                                                 const QwenVisionWeights& w,
                                                 const std::vector<float>& pixels,
                                                 const std::vector<ImageGrid>& grids,
                                                 DType attention_operands = DType::kF32);

}  // namespace hap
