#include "runtime/model/llama.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "kernels/backend.h"
#include "runtime/model/cancellation.h"

namespace hap {
namespace {

// Rows [0, vis_begin) + the kept visual rows (vis_begin + keep[i]) + [vis_begin + n_vis, n), in
// order: which rows of the sequence stay after a pruning stage.
std::vector<int> KeptRows(int n, int vis_begin, int n_vis, const std::vector<int>& keep) {
  std::vector<int> rows;
  rows.reserve(static_cast<size_t>(n - n_vis) + keep.size());
  for (int r = 0; r < vis_begin; ++r) rows.push_back(r);
  for (int k : keep) rows.push_back(vis_begin + k);
  for (int r = vis_begin + n_vis; r < n; ++r) rows.push_back(r);
  return rows;
}

// A pruner's keep list must be strictly ascending indices into the n_vis visual tokens present.
absl::Status CheckKeepList(const std::vector<int>& keep, int n_vis, const char* where) {
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i] < 0 || keep[i] >= n_vis || (i > 0 && keep[i] <= keep[i - 1])) {
      return absl::InternalError(
          absl::StrFormat("pruner returned an invalid keep list %s (entry %d = %d of %d visual)",
                          where, i, keep[i], n_vis));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PromptError(size_t i, size_t b, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrFormat("prompt %d of %d: %s", i, b, s.message()));
}

// A stage decided in the backend's memory, whose kept indices come back after the last layer.
struct LlamaDecoder::BackendStage {
  int after_layer = 0, n_vis = 0;
  const int32_t* kept = nullptr;
  int count = 0;
};

// One prompt through a (batched) prefill.
struct LlamaDecoder::PromptRows {
  PrefillSequence* in = nullptr;
  int n = 0, vis_begin = 0, n_vis = 0;
  int index = 0;  // its place among the pass's prompts, which errors name
  int start = 0;  // its first row in the batch's rows
  bool leaving = false;  // its caller cancelled: its rows leave at this layer's compaction
  // Position ids on the host, compacted with the rows; −1 for the visual rows of a stage decided
  // in the backend's memory until its kept indices come back.
  std::vector<int32_t> positions;
  std::vector<int32_t> rotary;  // I32 [n, rope_axes_] until uploaded
  int32_t next_position = 0, rope_delta = 0;
  std::vector<BackendStage> backend_stages;
  std::vector<int> stage_of_layer;        // per layer: the backend stages before it
  std::vector<int32_t> visual_positions;  // of the visual rows before the first backend stage
  // This layer's stage: the rows kept listed on the host (host_stage), or the kept visual
  // tokens in the backend's memory (keep.kept).
  bool host_stage = false;
  std::vector<int> rows;
  BackendKeep keep;
  double prune_ms = 0;
};

LlamaDecoder::LlamaDecoder(const TextConfig& cfg, const TextWeights& weights,
                           const Backend& backend, DType attention_operands, bool decode_graphs)
    : backend_(backend),
      cfg_(cfg),
      w_(weights),
      d_(cfg.hidden_size),
      n_heads_(cfg.num_attention_heads),
      n_kv_heads_(cfg.num_key_value_heads),
      head_dim_(cfg.head_dim),
      ffn_(cfg.intermediate_size),
      vocab_(cfg.vocab_size),
      eps_(cfg.rms_norm_eps),
      theta_(cfg.rope_theta),
      scale_(1.f / std::sqrt(static_cast<float>(cfg.head_dim))),
      rope_axes_(cfg.mrope_section.empty() ? 1 : 3),
      attention_operands_(attention_operands),
      decode_graphs_(decode_graphs && backend.caps().graphs) {}

absl::Status LlamaDecoder::RotaryRows(const std::vector<int32_t>& positions,
                                      const MropePositions* mrope, std::vector<int32_t>* rotary,
                                      int32_t* rope_delta) const {
  const size_t n = positions.size();
  *rope_delta = 0;
  if (rope_axes_ == 1) {
    if (mrope != nullptr) {
      return absl::InvalidArgumentError(
          "prefill: 3-D rotary positions for a model with 1-D RoPE (no mrope_section)");
    }
    *rotary = positions;
    return absl::OkStatus();
  }
  rotary->resize(n * 3);
  if (mrope == nullptr) {  // text only: every axis at the position id
    for (size_t r = 0; r < n; ++r) {
      for (int a = 0; a < 3; ++a) (*rotary)[r * 3 + a] = positions[r];
    }
    return absl::OkStatus();
  }
  if (mrope->t.size() != n || mrope->h.size() != n || mrope->w.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prefill: %d rows with %d/%d/%d M-RoPE positions", n, mrope->t.size(),
                        mrope->h.size(), mrope->w.size()));
  }
  for (size_t r = 0; r < n; ++r) {
    (*rotary)[r * 3] = mrope->t[r];
    (*rotary)[r * 3 + 1] = mrope->h[r];
    (*rotary)[r * 3 + 2] = mrope->w[r];
  }
  *rope_delta = n == 0 ? 0 : mrope->next - (positions.back() + 1);
  return absl::OkStatus();
}

absl::Status LlamaDecoder::CheckTokenIds(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("token id %d is outside the vocabulary [0, %d)", id, vocab_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> LlamaDecoder::Embed(const std::vector<int32_t>& ids) const {
  HAP_RETURN_IF_ERROR(CheckTokenIds(ids));
  BackendArray<float> rows(backend_);  // F32 [n, hidden]
  HAP_RETURN_IF_ERROR(rows.Resize(ids.size() * d_));
  BackendArray<int32_t> ids_in_backend(backend_);
  HAP_RETURN_IF_ERROR(ids_in_backend.Assign(ids.data(), ids.size()));
  HAP_RETURN_IF_ERROR(backend_.Embedding(w_.embed, ids_in_backend.data(),
                                         static_cast<int>(ids.size()), rows.data()));
  std::vector<float> out(rows.size());
  HAP_RETURN_IF_ERROR(rows.CopyTo(out.data()));
  return out;
}

LlamaDecoder::StepValues LlamaDecoder::DescribeValues(StepDesc& desc, int n, bool with_lse,
                                                      bool prefill, int n_segments) const {
  const int64_t rows = n;
  StepValues v;
  v.x = desc.Bound("x", StepElem::kF32, rows * d_);  // F32 [n, hidden]
  v.positions = desc.Bound("positions", StepElem::kI32, rows * (prefill ? rope_axes_ : 1));
  if (n_segments > 0) v.segments = desc.Bound("segments", StepElem::kI32, n_segments + 1);
  v.h = desc.Scratch("h", StepElem::kF32, rows * d_);           // F32 [n, hidden]
  v.q = desc.Scratch("q", StepElem::kF32, rows * n_heads_ * head_dim_);
  v.k = desc.Scratch("k", StepElem::kF32, rows * kv_dim());  // F32 [n, kv_heads·hd]
  v.v = desc.Scratch("v", StepElem::kF32, rows * kv_dim());
  v.attn = desc.Scratch("attn", StepElem::kF32, rows * n_heads_ * head_dim_);
  v.gate = desc.Scratch("gate", StepElem::kF32, rows * ffn_);  // F32 [n, ffn]
  v.up = desc.Scratch("up", StepElem::kF32, rows * ffn_);
  if (with_lse) v.lse = desc.Scratch("lse", StepElem::kF32, int64_t{n_heads_} * n);
  return v;
}

void LlamaDecoder::DescribeLayer(StepDesc& desc, const StepValues& v, int l, int n, bool prefill,
                                 int call_id, int n_segments) const {
  const LlamaLayerWeights& lw = w_.layers[l];
  // A prefill's rows (and a single decode step's one row) take the products a prompt's rows do:
  // a batched prefill's prompts too, each of which would take them alone (on the CPU, BF16's
  // Bf16Gemm from 16 rows, row-invariant). A batched step's rows are different sequences, which
  // keep the narrow kernels' batch invariance.
  const LinearRows rows = prefill || n == 1 ? LinearRows::kOneSequence : LinearRows::kIndependent;
  const int64_t n_hidden = int64_t{n} * d_;
  desc.Add(step_op::RmsNorm{v.x, v.h, lw.attn_norm.f32(), n, d_, eps_});
  desc.Add(step_op::Linear{v.h, v.q, lw.q, lw.q_b.f32(), n, rows});
  desc.Add(step_op::Linear{v.h, v.k, lw.k, lw.k_b.f32(), n, rows});
  desc.Add(step_op::Linear{v.h, v.v, lw.v, lw.v_b.f32(), n, rows});
  step_op::Rope rope_q{v.q, v.positions, n, n_heads_, head_dim_, theta_};
  if (prefill && rope_axes_ == 3) {
    // M-RoPE: the pairs' sections rotate at the rows' t, h and w positions. A decode step's
    // rows are text, equal on every axis, where M-RoPE is 1-D RoPE bit for bit.
    for (int a = 0; a < 3; ++a) rope_q.sections[a] = cfg_.mrope_section[a];
  }
  step_op::Rope rope_k = rope_q;
  rope_k.x = v.k;
  rope_k.n_heads = n_kv_heads_;
  desc.Add(rope_q);
  desc.Add(rope_k);
  if (prefill) {
    // The rows attend to each other causally (each prompt's to its own), straight from the new
    // K/V.
    step_op::Attention a{v.q, v.k, v.v, v.attn, v.lse, {}, v.segments};
    a.shape.n_segments = n_segments;
    a.shape.n_q = a.shape.n_kv = n;
    a.shape.n_heads = n_heads_;
    a.shape.n_kv_heads = n_kv_heads_;
    a.shape.head_dim = head_dim_;
    a.shape.scale = scale_;
    a.shape.causal = true;
    a.shape.operands = attention_operands_;
    desc.Add(a);
  } else {
    // AttendDecode: the new rows join the caches, the queries attend over them.
    desc.Add(step_op::Call{call_id, /*listed=*/true, {v.q, v.k, v.v, v.positions}});
  }
  desc.Add(step_op::Linear{v.attn, v.h, lw.o, nullptr, n, rows});
  desc.Add(step_op::Add{v.x, v.h, n_hidden});
  desc.Add(step_op::RmsNorm{v.x, v.h, lw.mlp_norm.f32(), n, d_, eps_});
  desc.Add(step_op::Linear{v.h, v.gate, lw.gate, nullptr, n, rows});
  desc.Add(step_op::Linear{v.h, v.up, lw.up, nullptr, n, rows});
  desc.Add(step_op::SiluMul{v.gate, v.up, int64_t{n} * ffn_});
  desc.Add(step_op::Linear{v.gate, v.h, lw.down, nullptr, n, rows});
  desc.Add(step_op::Add{v.x, v.h, n_hidden});
}

absl::StatusOr<std::shared_ptr<const PlannedStep>> LlamaDecoder::PlanPrefill(
    int first, int last, int n, int n_segments, bool with_lse, StepValues* values) const {
  const PrefillPlanKey key = {first, last, n, n_segments, with_lse ? 1 : 0};
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    auto it = prefill_plans_.find(key);
    if (it != prefill_plans_.end()) {
      *values = it->second.second;
      return it->second.first;
    }
  }
  StepDesc desc(n_segments > 0 ? absl::StrFormat("prefill of %d prompts, layers %d-%d, %d rows",
                                                 n_segments, first, last, n)
                               : absl::StrFormat("prefill, layers %d-%d, %d rows", first, last, n));
  *values = DescribeValues(desc, n, with_lse, /*prefill=*/true, n_segments);
  for (int l = first; l <= last; ++l) {
    // Before the layer: cancellation and the slice boundary, no value read. After it: the
    // cache takes k and v, the pruner reads q, k, the LSE and the layer's output x.
    desc.Add(step_op::Call{2 * l, /*listed=*/true, {}});
    DescribeLayer(desc, *values, l, n, /*prefill=*/true, 0, n_segments);
    std::vector<StepValueId> after = {values->q, values->k, values->v, values->x};
    if (with_lse) after.push_back(values->lse);
    desc.Add(step_op::Call{2 * l + 1, /*listed=*/true, std::move(after)});
  }
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<PlannedStep> planned, backend_.Plan(std::move(desc)));
  std::shared_ptr<const PlannedStep> plan = std::move(planned);
  std::lock_guard<std::mutex> lock(plans_mu_);
  ++prefill_plans_made_;
  if (prefill_plans_.emplace(key, std::make_pair(plan, *values)).second) {
    prefill_plan_order_.push_back(key);
    if (prefill_plan_order_.size() > kMaxKeptPrefillPlans) {
      prefill_plans_.erase(prefill_plan_order_.front());
      prefill_plan_order_.pop_front();
    }
  }
  return plan;
}

int64_t LlamaDecoder::prefill_plans_made() const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  return prefill_plans_made_;
}

absl::StatusOr<std::shared_ptr<const PlannedStep>> LlamaDecoder::DecodePlan(
    int b, StepValues* values) const {
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    auto it = decode_plans_.find(b);
    if (it != decode_plans_.end()) {
      *values = it->second.second;
      return it->second.first;
    }
  }
  StepDesc desc(absl::StrFormat("decode step, %d sequences", b));
  StepValues v = DescribeValues(desc, b, /*with_lse=*/false, /*prefill=*/false);
  v.logits = desc.Bound("logits", StepElem::kF32, int64_t{b} * vocab_);  // F32 [b, vocab]
  for (int l = 0; l < n_layers(); ++l) DescribeLayer(desc, v, l, b, /*prefill=*/false, l);
  desc.Add(step_op::RmsNorm{v.x, v.h, w_.norm.f32(), b, d_, eps_});
  desc.Add(step_op::Linear{v.h, v.logits, w_.lm_head, nullptr, b, LinearRows::kIndependent});
  HAP_ASSIGN_OR_RETURN(std::unique_ptr<PlannedStep> planned, backend_.Plan(std::move(desc)));
  std::shared_ptr<const PlannedStep> plan = std::move(planned);
  *values = v;
  if (b <= kMaxKeptDecodePlans) {
    std::lock_guard<std::mutex> lock(plans_mu_);
    decode_plans_.emplace(b, std::make_pair(plan, v));
  }
  return plan;
}

int DecodeRowsFor(int b) {
  if (b <= 2) return b;
  if (b <= 4) return 4;
  return (b + 7) / 8 * 8;
}

namespace {

// The smallest row bound of a captured step: contexts this short share a graph (a bound at or
// above the true one gives the same results).
constexpr int kMinDecodeRowsBound = 64;
// Failed captures of one shape before it runs op by op for good.
constexpr int kMaxCaptureFailures = 2;

}  // namespace

absl::Status LlamaDecoder::PackDecodeTables(const std::vector<int32_t>& tokens,
                                            const std::vector<int32_t>& positions,
                                            const std::vector<KvStore*>& caches, bool fixed,
                                            DecodeWorkspace* ws) const {
  const int b = static_cast<int>(tokens.size());
  const int rows = fixed ? DecodeRowsFor(b) : b;
  const int layers = n_layers();
  ws->rows_ = rows;
  std::vector<uint8_t>& packed = ws->packed_;
  packed.clear();
  // Appends `bytes` at a 16-byte boundary, zeros after them up to `room`; returns where they
  // start.
  auto put = [&packed](const void* data, size_t bytes, size_t room = 0) {
    const size_t at = (packed.size() + 15) / 16 * 16;
    packed.resize(at + std::max(bytes, room));
    if (bytes > 0) std::memcpy(packed.data() + at, data, bytes);
    return at;
  };
  // The padding rows embed token 0 at position 0.
  std::vector<int32_t> ids(rows, 0), rotary(rows, 0);
  std::copy(tokens.begin(), tokens.end(), ids.begin());
  // The rows rotate at next_position + rope_delta; the caches record next_position.
  for (int i = 0; i < b; ++i) rotary[i] = positions[i] + caches[i]->rope_delta;
  ws->ids_at_ = put(ids.data(), sizeof(int32_t) * rows);
  ws->positions_at_ = put(rotary.data(), sizeof(int32_t) * rows);

  // Runs of consecutive sequences whose caches share a dtype: the same in every layer. The
  // padding rows join the last run and attend over no span.
  struct Run {
    int first = 0, n = 0;
    DType dtype = DType::kF32;
  };
  std::vector<Run> runs;
  for (int i = 0; i < b; ++i) {
    if (runs.empty() || caches[i]->dtype() != runs.back().dtype) {
      runs.push_back(Run{i, 0, caches[i]->dtype()});
    }
    ++runs.back().n;
  }
  runs.back().n += rows - b;

  // Every layer's row slots and spans first: a captured step's bounds come from all of them.
  std::vector<void*> k_dst(static_cast<size_t>(layers) * rows), v_dst(k_dst.size());
  std::vector<KvSpan> spans;
  std::vector<int> seq_spans(static_cast<size_t>(layers) * b + 1, 0);  // [l·b + i] → spans
  std::vector<int> seq_rows(static_cast<size_t>(layers) * b, 0);
  for (int l = 0; l < layers; ++l) {
    for (int i = 0; i < b; ++i) {
      KvStore* kv = caches[i];
      HAP_ASSIGN_OR_RETURN(KvRowSlot slot, kv->AppendRowSlot(l, positions[i]));
      k_dst[static_cast<size_t>(l) * rows + i] = slot.k;
      v_dst[static_cast<size_t>(l) * rows + i] = slot.v;
      kv->Spans(l, &ws->seq_spans_);
      for (const KvSpan& span : ws->seq_spans_) seq_rows[l * b + i] += span.rows;
      spans.insert(spans.end(), ws->seq_spans_.begin(), ws->seq_spans_.end());
      seq_spans[l * b + i + 1] = static_cast<int>(spans.size());
    }
  }
  if (fixed) {
    // Each padding row's K and V go to a row of their own in the sink, never read. Held by every
    // captured step, padded or not, so that its address is the same in all of them.
    HAP_RETURN_IF_ERROR(
        ws->sink_.Resize(static_cast<size_t>(2) * kMaxDecodePaddingRows * kv_dim()));
  }
  if (rows > b) {
    for (int l = 0; l < layers; ++l) {
      for (int j = 0; j < rows - b; ++j) {
        k_dst[static_cast<size_t>(l) * rows + b + j] = ws->sink_.data() + j * kv_dim();
        v_dst[static_cast<size_t>(l) * rows + b + j] =
            ws->sink_.data() + (kMaxDecodePaddingRows + j) * kv_dim();
      }
    }
  }
  // A captured step's bounds, the same in every layer and group: the rows its attention is split
  // for and the spans a group's table has room for, each a power of two. The room is what the
  // group's rows could hold at the row bound (a sequence of paged rows ceil(bound /
  // max_span_rows) spans, a padding row as many as its group's sequences), so that over caches
  // paged alike it follows from the batch size and the row bound alone: the shapes a warm-up
  // captures (DecodeEngine::WarmUp) are those the later steps take.
  int span_room = 0, rows_bound = 1;
  if (fixed) {
    int most_rows = 1;
    for (int l = 0; l < layers; ++l) {
      for (int i = 0; i < b; ++i) most_rows = std::max(most_rows, seq_rows[l * b + i]);
    }
    rows_bound = static_cast<int>(
        std::bit_ceil(static_cast<unsigned>(std::max(kMinDecodeRowsBound, most_rows))));
    int room = 16;
    for (const Run& run : runs) {
      const int last = std::min(run.first + run.n, b);
      int per_seq = 1;
      for (int i = run.first; i < last; ++i) {
        const int span_rows = caches[i]->max_span_rows();
        if (span_rows > 0) per_seq = std::max(per_seq, (rows_bound + span_rows - 1) / span_rows);
      }
      room = std::max(room, run.n * per_seq);
      for (int l = 0; l < layers; ++l) {
        room = std::max(room, seq_spans[l * b + last] - seq_spans[l * b + run.first]);
      }
    }
    span_room = static_cast<int>(std::bit_ceil(static_cast<unsigned>(room)));
  }

  ws->k_dst_at_.assign(layers, 0);
  ws->v_dst_at_.assign(layers, 0);
  ws->layer_groups_.assign(1, 0);
  ws->groups_.clear();
  size_t part_bytes = 0;
  std::vector<int> span_begin;
  for (int l = 0; l < layers; ++l) {
    for (const Run& run : runs) {
      DecodeWorkspace::Group group;
      group.first_row = run.first;
      group.n_seqs = run.n;
      group.dtype = run.dtype;
      const int first_span = seq_spans[l * b + run.first];
      span_begin.assign(1, 0);
      for (int i = run.first; i < run.first + run.n; ++i) {
        const int end = seq_spans[l * b + std::min(i + 1, b)];
        span_begin.push_back(end - first_span);
        if (i < b) group.max_rows = std::max(group.max_rows, seq_rows[l * b + i]);
      }
      const int n_spans = span_begin.back();
      group.n_spans = fixed ? span_room : n_spans;
      if (fixed) group.max_rows = rows_bound;
      group.span_begin_at = put(span_begin.data(), sizeof(int) * span_begin.size());
      group.spans_at =
          put(spans.data() + first_span, sizeof(KvSpan) * n_spans, sizeof(KvSpan) * group.n_spans);
      DecodeAttentionArgs shape;
      shape.n_heads = n_heads_;
      shape.n_kv_heads = n_kv_heads_;
      shape.head_dim = head_dim_;
      shape.n_seqs = group.n_seqs;
      shape.max_rows = group.max_rows;
      shape.kv_dtype = group.dtype;
      part_bytes = std::max(part_bytes, backend_.DecodeAttentionWorkspaceBytes(shape));
      ws->groups_.push_back(group);
    }
    ws->k_dst_at_[l] = put(k_dst.data() + static_cast<size_t>(l) * rows, sizeof(void*) * rows);
    ws->v_dst_at_[l] = put(v_dst.data() + static_cast<size_t>(l) * rows, sizeof(void*) * rows);
    ws->layer_groups_.push_back(static_cast<int>(ws->groups_.size()));
  }
  if (part_bytes > 0) HAP_RETURN_IF_ERROR(ws->parts_.Resize(part_bytes));
  ws->shape_.clear();
  if (fixed) {
    ws->shape_ = {rows, span_room, rows_bound};
    for (const Run& run : runs) {
      ws->shape_.insert(ws->shape_.end(), {run.first, run.n, static_cast<int64_t>(run.dtype)});
    }
  }
  if (ws->host_tables_.bytes() < packed.size()) {
    ws->host_tables_.Reset();
    HAP_ASSIGN_OR_RETURN(ws->host_tables_,
                         BackendBuffer::AllocateHost(ws->tables_.backend(), packed.size()));
  }
  std::memcpy(ws->host_tables_.data(), packed.data(), packed.size());
  HAP_RETURN_IF_ERROR(ws->tables_.Resize(packed.size()));
  return backend_.CopyToBackend(ws->tables_.data(), ws->host_tables_.data(), packed.size());
}

absl::Status LlamaDecoder::RunCaptured(DecodeWorkspace* ws,
                                       const std::function<absl::Status()>& enqueue) const {
  // The graph's ops hold the addresses of the workspace's buffers as well as the shape.
  std::vector<int64_t> key = ws->shape_;
  for (const void* p :
       {static_cast<const void*>(ws->tables_.data()), static_cast<const void*>(ws->x_.data()),
        static_cast<const void*>(ws->workspace_.data()),
        static_cast<const void*>(ws->parts_.data()), static_cast<const void*>(ws->sink_.data()),
        static_cast<const void*>(ws->logits_.data())}) {
    key.push_back(static_cast<int64_t>(reinterpret_cast<intptr_t>(p)));
  }
  auto it = ws->graphs_.find(key);
  if (it == ws->graphs_.end()) {
    if (ws->graphs_.size() >= static_cast<size_t>(kMaxDecodeGraphs)) {
      auto oldest = ws->graphs_.begin();
      for (auto g = ws->graphs_.begin(); g != ws->graphs_.end(); ++g) {
        if (g->second.last_use < oldest->second.last_use) oldest = g;
      }
      ws->graphs_.erase(oldest);
    }
    it = ws->graphs_.emplace(std::move(key), DecodeWorkspace::Captured{}).first;
  }
  DecodeWorkspace::Captured& captured = it->second;
  captured.last_use = ++ws->uses_;
  if (captured.graph != nullptr) {
    const absl::Status replay = captured.graph->Replay();
    if (replay.ok()) {
      ++ws->replays_;
      return replay;
    }
    // Another thread, or the thread's scratch moved since: capture again.
    if (replay.code() != absl::StatusCode::kFailedPrecondition) return replay;
    captured.graph.reset();
  }
  if (captured.failures < kMaxCaptureFailures) {
    absl::StatusOr<std::unique_ptr<BackendGraph>> graph = backend_.Capture(enqueue);
    if (graph.ok()) {
      ++ws->captures_;
      captured.graph = std::move(*graph);
      HAP_RETURN_IF_ERROR(captured.graph->Replay());
      ++ws->replays_;
      return absl::OkStatus();
    }
    // Nothing ran: op by op this time (which may grow what the capture could not), and the
    // shape is tried again next time, up to kMaxCaptureFailures.
    ++captured.failures;
  }
  return enqueue();
}

absl::Status LlamaDecoder::AttendDecode(int l, const DecodeWorkspace& ws, const float* q,
                                        const float* k_new, const float* v_new, float* attn) const {
  const int q_dim = n_heads_ * head_dim_;
  uint8_t* tables = ws.tables_.data();
  auto* k_dst = reinterpret_cast<void* const*>(tables + ws.k_dst_at_[l]);
  auto* v_dst = reinterpret_cast<void* const*>(tables + ws.v_dst_at_[l]);
  for (int g = ws.layer_groups_[l]; g < ws.layer_groups_[l + 1]; ++g) {
    const DecodeWorkspace::Group& group = ws.groups_[g];
    const int64_t row = group.first_row;
    StoreKvRowsArgs store;
    store.k = k_new + row * kv_dim();
    store.v = v_new + row * kv_dim();
    store.k_dst = k_dst + row;
    store.v_dst = v_dst + row;
    store.n = group.n_seqs;
    store.kv_dim = kv_dim();
    store.dtype = group.dtype;
    HAP_RETURN_IF_ERROR(backend_.StoreKvRows(store));
    DecodeAttentionArgs args;
    args.q = q + row * q_dim;
    args.spans = reinterpret_cast<const KvSpan*>(tables + group.spans_at);
    args.n_spans = group.n_spans;
    args.kv_dtype = group.dtype;
    args.out = attn + row * q_dim;
    args.n_heads = n_heads_;
    args.n_kv_heads = n_kv_heads_;
    args.head_dim = head_dim_;
    args.scale = scale_;
    args.n_seqs = group.n_seqs;
    args.span_begin = reinterpret_cast<const int*>(tables + group.span_begin_at);
    args.tables_in_backend = true;
    args.max_rows = group.max_rows;
    args.workspace = ws.parts_.size() > 0 ? ws.parts_.data() : nullptr;
    args.workspace_bytes = ws.parts_.size();
    HAP_RETURN_IF_ERROR(backend_.DecodeAttention(args));
  }
  return absl::OkStatus();
}

absl::Status LlamaDecoder::LogitsInto(const float* rows, int n,
                                      BackendArray<float>* logits) const {
  BackendArray<float> h(backend_);  // F32 [n, hidden]
  HAP_RETURN_IF_ERROR(h.Resize(static_cast<size_t>(n) * d_));
  logits->Rebind(backend_);
  HAP_RETURN_IF_ERROR(logits->Resize(static_cast<size_t>(n) * vocab_));  // F32 [n, vocab]
  HAP_RETURN_IF_ERROR(backend_.RmsNorm(rows, w_.norm.f32(), h.data(), n, d_, eps_));
  return backend_.Linear(h.data(), w_.lm_head, nullptr, logits->data(), n,
                         LinearRows::kIndependent);
}

absl::StatusOr<std::vector<float>> LlamaDecoder::Prefill(std::vector<float> x,
                                                         std::vector<int32_t> positions,
                                                         int vis_begin, int n_vis, Pruner* pruner,
                                                         KvCache* cache, PrefillTrace* trace,
                                                         const MropePositions* mrope) const {
  cache->Clear();
  cache->kv_dim = kv_dim();
  cache->layers.resize(w_.layers.size());
  BackendArray<float> logits(backend_);  // F32 [1, vocab]
  HAP_RETURN_IF_ERROR(PrefillInto(std::move(x), std::move(positions), vis_begin, n_vis, pruner,
                                  cache, trace, &logits, mrope));
  std::vector<float> out(logits.size());
  HAP_RETURN_IF_ERROR(logits.CopyTo(out.data()));
  return out;
}

absl::Status LlamaDecoder::PrefillInto(std::vector<float> x_host, std::vector<int32_t> positions,
                                       int vis_begin, int n_vis, Pruner* pruner, KvStore* cache,
                                       PrefillTrace* trace, BackendArray<float>* logits,
                                       const MropePositions* mrope) const {
  std::vector<PrefillSequence> one(1);
  PrefillSequence& s = one[0];
  s.x = std::move(x_host);
  s.positions = std::move(positions);
  s.vis_begin = vis_begin;
  s.n_vis = n_vis;
  s.pruner = pruner;
  s.cache = cache;
  s.trace = trace;
  s.logits = logits;
  s.mrope = mrope;
  return PrefillBatchInto(one);
}

absl::Status LlamaDecoder::BeginPrompt(PrefillSequence& in, PromptRows* p) const {
  const std::vector<int32_t>* ids = in.ids;
  if (ids != nullptr) {
    if (in.pruner != nullptr && in.pruner->ReadsInputEmbeddings()) {
      return absl::InvalidArgumentError(
          "prefill: this pruning method reads the input embeddings on the host; splice them "
          "there");
    }
    if (ids->size() != in.positions.size() || (in.n_vis > 0 && in.image_embeds == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("prefill: %d token ids for %d positions, image rows %s", ids->size(),
                          in.positions.size(), in.image_embeds == nullptr ? "missing" : "given"));
    }
    HAP_RETURN_IF_ERROR(CheckTokenIds(*ids));
  }
  int n = static_cast<int>(in.positions.size());
  const size_t rows_given = ids != nullptr ? ids->size() * d_ : in.x.size();
  if (n == 0 || rows_given != static_cast<size_t>(n) * d_ || in.vis_begin < 0 || in.n_vis < 0 ||
      in.vis_begin + in.n_vis > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prefill: %d positions, %d embedding values (hidden %d), visual rows [%d, %d)", n,
        rows_given, d_, in.vis_begin, in.vis_begin + in.n_vis));
  }
  KvStore* cache = in.cache;
  if (cache == nullptr || in.logits == nullptr) {
    return absl::InvalidArgumentError("prefill: no KV cache or logits to fill");
  }
  if (cache->n_layers() != n_layers() || cache->total_rows() != 0 ||
      cache->row_bytes() != kv_dim() * static_cast<int64_t>(DTypeSize(cache->dtype()))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prefill into a KV cache of %d layers holding %d rows of %d bytes; %d empty layers of "
        "kv_dim %d were expected", cache->n_layers(), cache->total_rows(), cache->row_bytes(),
        n_layers(), kv_dim()));
  }
  p->in = &in;
  p->vis_begin = in.vis_begin;
  p->n_vis = in.n_vis;
  p->positions = std::move(in.positions);
  p->next_position = p->positions.back() + 1;
  p->stage_of_layer.assign(static_cast<size_t>(n_layers()), 0);
  // The rows' rotary positions, I32 [n, rope_axes_], move with the rows as position ids do.
  HAP_RETURN_IF_ERROR(RotaryRows(p->positions, in.mrope, &p->rotary, &p->rope_delta));
  if (in.pruner != nullptr) {
    // Spliced on the device, the embeddings are not on the host: the pruner does not read them.
    PrefillInput input{
        ids != nullptr ? nullptr : in.x.data(), n, d_, p->vis_begin, p->n_vis, n_layers()};
    HAP_ASSIGN_OR_RETURN(std::optional<std::vector<int>> keep, in.pruner->Begin(input));
    if (keep.has_value() && ids != nullptr) {
      return absl::InternalError(
          "prefill: a pruner that chooses before the LLM needs the input embeddings on the host");
    }
    if (keep.has_value()) {
      // Pruned before the LLM (PruneStage::kBeforeLlm): the other visual rows leave the input
      // embeddings and position ids here, on the host, before anything is uploaded or cached;
      // the kept rows keep their original positions.
      HAP_RETURN_IF_ERROR(CheckKeepList(*keep, p->n_vis, "before layer 0"));
      const std::vector<int> rows = KeptRows(n, p->vis_begin, p->n_vis, *keep);
      const int64_t kept = static_cast<int64_t>(rows.size());
      const size_t rotary_bytes = sizeof(int32_t) * rope_axes_;
      HAP_RETURN_IF_ERROR(CpuBackend().GatherRows(in.x.data(), n, sizeof(float) * d_, rows.data(),
                                                  kept, in.x.data()));
      HAP_RETURN_IF_ERROR(CpuBackend().GatherRows(p->positions.data(), n, sizeof(int32_t),
                                                  rows.data(), kept, p->positions.data()));
      HAP_RETURN_IF_ERROR(CpuBackend().GatherRows(p->rotary.data(), n, rotary_bytes, rows.data(),
                                                  kept, p->rotary.data()));
      in.x.resize(static_cast<size_t>(kept) * d_);
      p->positions.resize(static_cast<size_t>(kept));
      p->rotary.resize(static_cast<size_t>(kept) * rope_axes_);
      p->n_vis = static_cast<int>(keep->size());
      n = static_cast<int>(kept);
    }
  }
  p->n = n;
  return absl::OkStatus();
}

absl::Status LlamaDecoder::FinishPrompt(PromptRows* p) const {
  PrefillSequence& in = *p->in;
  if (in.pruner != nullptr) {
    // The stages decided in the backend's memory: their kept indices copied back, the pruner's
    // records completed from them, and the position ids of the visual rows they left in the
    // cache written where −1 stood.
    const std::vector<BackendStage>& stages = p->backend_stages;
    std::vector<std::vector<int>> kept_lists;
    for (size_t i = 0; i < stages.size();) {
      size_t end = i + 1;  // stages [i, end) lie back to back
      int64_t values = stages[i].count;
      while (end < stages.size() &&
             stages[end].kept == stages[end - 1].kept + stages[end - 1].count) {
        values += stages[end++].count;
      }
      std::vector<int32_t> run(static_cast<size_t>(values));
      HAP_RETURN_IF_ERROR(
          backend_.CopyToHost(run.data(), stages[i].kept, sizeof(int32_t) * run.size()));
      auto from = run.begin();
      for (; i < end; ++i) {
        kept_lists.emplace_back(from, from + stages[i].count);
        from += stages[i].count;
      }
    }
    HAP_RETURN_IF_ERROR(in.pruner->Finish(kept_lists));
    std::vector<int32_t>& visual_positions = p->visual_positions;
    for (size_t i = 0; i < stages.size(); ++i) {
      const BackendStage& st = stages[i];
      HAP_RETURN_IF_ERROR(CheckKeepList(kept_lists[i], st.n_vis,
                                        absl::StrFormat("at layer %d", st.after_layer).c_str()));
      std::vector<int32_t> next(kept_lists[i].size());
      for (size_t r = 0; r < next.size(); ++r) next[r] = visual_positions[kept_lists[i][r]];
      visual_positions = std::move(next);
      for (int l = st.after_layer + 1; l < n_layers(); ++l) {
        if (p->stage_of_layer[l] != static_cast<int>(i) + 1) continue;
        HAP_RETURN_IF_ERROR(in.cache->RewritePositions(l, p->vis_begin, visual_positions.data(),
                                                       static_cast<int>(visual_positions.size())));
      }
    }
  }
  in.cache->next_position = p->next_position;
  in.cache->rope_delta = p->rope_delta;
  return absl::OkStatus();
}

absl::Status LlamaDecoder::PrefillBatchInto(std::vector<PrefillSequence>& seqs) const {
  const int b = static_cast<int>(seqs.size());
  if (b == 0) return absl::InvalidArgumentError("prefill: no prompts");
  // An error of one prompt of several names it.
  auto of_prompt = [b](int i, absl::Status s) {
    return b == 1 || s.ok() ? s : PromptError(i, b, s);
  };
  // The prompts still in the pass: all of them, until a caller cancels (PrefillSequence::
  // cancelled) and its prompt leaves.
  std::vector<PromptRows> ps(static_cast<size_t>(b));
  auto live = [&ps] { return static_cast<int>(ps.size()); };
  bool any_pruner = false;
  for (int i = 0; i < b; ++i) {
    seqs[i].left_pass = false;
    ps[i].index = i;
    HAP_RETURN_IF_ERROR(of_prompt(i, BeginPrompt(seqs[i], &ps[i])));
    any_pruner = any_pruner || seqs[i].pruner != nullptr;
  }
  // The prompts' rows lie back to back, each run's start rounded up to the backend's
  // attention_run_align; the rows in between are its padding (zeros), which its causal rows
  // never see and nothing reads back.
  const int align = b == 1 ? 1 : std::max(1, backend_.caps().attention_run_align);
  auto lay_out = [&ps, align] {
    int at = 0;
    for (PromptRows& p : ps) {
      p.start = (at + align - 1) / align * align;
      at = p.start + p.n;
    }
    return at;
  };
  int n = lay_out();
  const size_t row_bytes = sizeof(float) * d_;
  const size_t rotary_bytes = sizeof(int32_t) * rope_axes_;
  // align − 1 rows of zeros in the backend's memory, uploaded once: what the padding rows are
  // copied from, within that memory, at the start and after each stage.
  BackendArray<float> zero_rows(backend_);
  if (align > 1) {
    const std::vector<float> zeros(static_cast<size_t>(align - 1) * std::max(d_, rope_axes_), 0.f);
    HAP_RETURN_IF_ERROR(zero_rows.Assign(zeros.data(), zeros.size()));
  }
  // The padding rows after prompt i (up to the next prompt's start) set to zeros, in the hidden
  // states and, where given, the rotary positions (zero bits are 0 in both).
  auto zero_padding = [&](int i, float* x_rows, int32_t* rotary_rows) -> absl::Status {
    const PromptRows& p = ps[i];
    const size_t pad = i + 1 < live() ? static_cast<size_t>(ps[i + 1].start - (p.start + p.n)) : 0;
    if (pad == 0) return absl::OkStatus();
    const int64_t first = p.start + p.n;
    HAP_RETURN_IF_ERROR(backend_.Copy(x_rows + first * d_, zero_rows.data(), pad * row_bytes));
    if (rotary_rows == nullptr) return absl::OkStatus();
    return backend_.Copy(rotary_rows + first * rope_axes_, zero_rows.data(), pad * rotary_bytes);
  };
  // The hidden states and rotary positions in the backend's memory; position ids also stay on the
  // host (the cache records them) and are compacted on both sides.
  BackendArray<float> x(backend_);                // F32 [n, hidden]
  BackendArray<int32_t> positions_dev(backend_);  // I32 [n, rope_axes_]
  HAP_RETURN_IF_ERROR(x.Resize(static_cast<size_t>(n) * d_));
  {
    std::vector<int32_t> rotary(static_cast<size_t>(n) * rope_axes_, 0);
    for (int i = 0; i < b; ++i) {
      PromptRows& p = ps[i];
      PrefillSequence& in = *p.in;
      float* rows = x.data() + static_cast<int64_t>(p.start) * d_;
      if (in.ids != nullptr) {
        BackendArray<int32_t> ids_in_backend(backend_);
        HAP_RETURN_IF_ERROR(ids_in_backend.Assign(in.ids->data(), in.ids->size()));
        HAP_RETURN_IF_ERROR(backend_.Embedding(w_.embed, ids_in_backend.data(), p.n, rows));
        float* image_rows = rows + static_cast<int64_t>(p.vis_begin) * d_;
        const size_t image_bytes = row_bytes * p.n_vis;
        HAP_RETURN_IF_ERROR(in.image_in_backend
                                ? backend_.Copy(image_rows, in.image_embeds, image_bytes)
                                : backend_.CopyToBackend(image_rows, in.image_embeds, image_bytes));
      } else {
        HAP_RETURN_IF_ERROR(backend_.CopyToBackend(rows, in.x.data(), row_bytes * p.n));
        std::vector<float>().swap(in.x);  // not read again: the prefill's peak holds one copy
      }
      std::copy(p.rotary.begin(), p.rotary.end(),
                rotary.begin() + static_cast<int64_t>(p.start) * rope_axes_);
      std::vector<int32_t>().swap(p.rotary);
      HAP_RETURN_IF_ERROR(zero_padding(i, x.data(), nullptr));  // `rotary` is 0 there
    }
    HAP_RETURN_IF_ERROR(positions_dev.Assign(rotary.data(), rotary.size()));
  }
  // Where each run starts, and n: the step's segment bounds when there are several prompts.
  std::vector<int32_t> bounds;
  BackendArray<int32_t> bounds_dev(backend_);
  // Each stage compacts the rows into these buffers (swapped with x and positions_dev).
  BackendArray<float> x_alt(backend_);
  BackendArray<int32_t> positions_alt(backend_);
  const bool decide_on_backend = any_pruner && !backend_.caps().host_memory;
  // One workspace for every plan of this prefill: the first is the largest (pruning only
  // removes rows), so it is allocated once.
  BackendArray<uint8_t> workspace(backend_);
  std::shared_ptr<const PlannedStep> plan;
  StepValues v;
  StepBindings bindings;
  void* bound[3] = {x.data(), positions_dev.data(), nullptr};
  std::chrono::steady_clock::time_point t0;
  // The batch's compaction after prompts' stages: the rows of prompts leaving the pass dropped,
  // each other prompt's rows gathered (a stage) or copied to its new start.
  auto compact = [&]() -> absl::Status {
    for (PromptRows& p : ps) p.in->left_pass = p.leaving;
    ps.erase(std::remove_if(ps.begin(), ps.end(), [](const PromptRows& p) { return p.leaving; }),
             ps.end());
    if (ps.empty()) {
      return absl::CancelledError("prefill cancelled: every prompt left the pass");
    }
    std::vector<int> old_start(ps.size()), old_n(ps.size());
    for (int i = 0; i < live(); ++i) {
      PromptRows& p = ps[i];
      old_start[i] = p.start;
      old_n[i] = p.n;
      if (p.host_stage) {
        p.n = static_cast<int>(p.rows.size());
      } else if (p.keep.kept != nullptr) {
        p.n = p.n - p.n_vis + p.keep.count;
      }
    }
    const int kept = lay_out();
    HAP_RETURN_IF_ERROR(x_alt.Resize(static_cast<size_t>(kept) * d_));
    HAP_RETURN_IF_ERROR(positions_alt.Resize(static_cast<size_t>(kept) * rope_axes_));
    for (int i = 0; i < live(); ++i) {
      PromptRows& p = ps[i];
      const float* x_src = x.data() + static_cast<int64_t>(old_start[i]) * d_;
      float* x_dst = x_alt.data() + static_cast<int64_t>(p.start) * d_;
      const int32_t* r_src = positions_dev.data() + static_cast<int64_t>(old_start[i]) * rope_axes_;
      int32_t* r_dst = positions_alt.data() + static_cast<int64_t>(p.start) * rope_axes_;
      if (p.host_stage) {
        HAP_RETURN_IF_ERROR(
            backend_.GatherRows(x_src, old_n[i], row_bytes, p.rows.data(), p.n, x_dst));
        HAP_RETURN_IF_ERROR(
            backend_.GatherRows(r_src, old_n[i], rotary_bytes, p.rows.data(), p.n, r_dst));
        for (int r = 0; r < p.n; ++r) p.positions[r] = p.positions[p.rows[r]];  // rows ascend
        p.positions.resize(static_cast<size_t>(p.n));
        p.n_vis = p.n - (old_n[i] - p.n_vis);
      } else if (p.keep.kept != nullptr) {
        const int count = p.keep.count;
        HAP_RETURN_IF_ERROR(backend_.GatherKeptRowsPair(x_src, row_bytes, x_dst, r_src,
                                                        rotary_bytes, r_dst, old_n[i], p.vis_begin,
                                                        p.n_vis, p.keep.kept, count));
        p.positions.erase(p.positions.begin() + p.vis_begin + count,
                          p.positions.begin() + p.vis_begin + p.n_vis);
        std::fill(p.positions.begin() + p.vis_begin, p.positions.begin() + p.vis_begin + count, -1);
        p.n_vis = count;
      } else {
        HAP_RETURN_IF_ERROR(backend_.Copy(x_dst, x_src, row_bytes * p.n));
        HAP_RETURN_IF_ERROR(backend_.Copy(r_dst, r_src, rotary_bytes * p.n));
      }
      HAP_RETURN_IF_ERROR(zero_padding(i, x_alt.data(), positions_alt.data()));
    }
    std::swap(x, x_alt);
    std::swap(positions_dev, positions_alt);
    bound[0] = x.data();
    bound[1] = positions_dev.data();
    n = kept;
    return absl::OkStatus();
  };
  // The engine's part of each layer: before it, the cancellation checks and the slice boundary;
  // after it, each prompt's new K/V rows into its cache and its pruner's look at the layer, whose
  // pruning stage stops the run so the layers after it are planned for the rows it keeps.
  const StepCallFn call = [&](int id) -> absl::StatusOr<StepControl> {
    const int l = id / 2;
    if (id % 2 == 0) {
      // Cancellation is seen before a slice boundary, so a cancelled prefill does not first wait
      // its turn behind the others while holding its activations and cache.
      if (CancellationRequested()) {
        return absl::CancelledError(absl::StrFormat("prefill cancelled before layer %d", l));
      }
      BeforeLayer(n);  // where a sliced prefill hands the compute on (docs/design.md §6)
      if (CancellationRequested()) {
        return absl::CancelledError(absl::StrFormat("prefill cancelled before layer %d", l));
      }
      t0 = std::chrono::steady_clock::now();
      for (PromptRows& p : ps) {
        p.stage_of_layer[l] = static_cast<int>(p.backend_stages.size());
        if (p.in->trace != nullptr) {
          p.in->trace->tokens_per_layer.push_back(p.n);
          p.in->trace->visual_tokens_per_layer.push_back(p.n_vis);
        }
      }
      return StepControl::kContinue;
    }
    const float* q = plan->At<float>(v.q, bindings);
    const float* k = plan->At<float>(v.k, bindings);
    const float* v_rows = plan->At<float>(v.v, bindings);
    const float* lse = any_pruner ? plan->At<float>(v.lse, bindings) : nullptr;
    bool stage = false;
    for (PromptRows& p : ps) {
      PrefillSequence& in = *p.in;
      const int64_t r0 = p.start;
      // A prompt whose caller cancelled leaves the pass here, before its cache takes this layer.
      if (in.cancelled != nullptr && (*in.cancelled)()) {
        p.leaving = true;
        stage = true;
        continue;
      }
      const int i = p.index;
      HAP_RETURN_IF_ERROR(
          of_prompt(i, in.cache->Append(backend_, l, k + r0 * kv_dim(), v_rows + r0 * kv_dim(),
                                        p.positions.data(), p.n)));
      p.host_stage = false;
      p.keep = BackendKeep{};
      p.prune_ms = 0;
      if (in.pruner == nullptr) continue;
      const auto tp = std::chrono::steady_clock::now();
      LayerAttention att;
      att.layer = l;
      att.n_tokens = p.n;
      att.n_heads = n_heads_;
      att.n_kv_heads = n_kv_heads_;
      att.head_dim = head_dim_;
      att.scale = scale_;
      att.q = q + r0 * n_heads_ * head_dim_;  // this layer's queries and keys (= the cache's
      att.k = k + r0 * kv_dim();              // rows of layer l)
      att.lse = lse + r0;
      att.lse_stride = n;
      att.backend = &backend_;
      att.vis_begin = p.vis_begin;
      att.n_vis = p.n_vis;
      att.hidden = x.data() + r0 * d_;  // the layer's output, F32 [n, hidden]
      att.d_model = d_;
      att.backend_keep = decide_on_backend ? &p.keep : nullptr;
      absl::StatusOr<std::optional<std::vector<int>>> keep = in.pruner->AfterLayer(att);
      if (!keep.ok()) return of_prompt(i, keep.status());
      if (!keep->has_value() && p.keep.kept != nullptr) {
        const int count = p.keep.count;
        if (count < 0 || count > p.n_vis) {
          return of_prompt(
              i, absl::InternalError(absl::StrFormat(
                     "pruner kept %d of %d visual tokens at layer %d", count, p.n_vis, l)));
        }
        if (p.backend_stages.empty()) {
          p.visual_positions.assign(p.positions.begin() + p.vis_begin,
                                    p.positions.begin() + p.vis_begin + p.n_vis);
        }
        p.backend_stages.push_back({l, p.n_vis, p.keep.kept, count});
        stage = true;
      } else if (keep->has_value()) {
        p.keep = BackendKeep{};
        HAP_RETURN_IF_ERROR(of_prompt(
            i, CheckKeepList(**keep, p.n_vis, absl::StrFormat("at layer %d", l).c_str())));
        p.rows = KeptRows(p.n, p.vis_begin, p.n_vis, **keep);
        p.host_stage = true;
        stage = true;
      } else {
        p.keep = BackendKeep{};
      }
      p.prune_ms = MsSince(tp);
    }
    if (stage) HAP_RETURN_IF_ERROR(compact());
    for (PromptRows& p : ps) {
      if (p.in->trace == nullptr) continue;
      p.in->trace->layer_ms.push_back(MsSince(t0));
      p.in->trace->prune_ms.push_back(p.prune_ms);
    }
    return stage ? StepControl::kStop : StepControl::kContinue;
  };
  bindings.call = &call;
  // A run ends at the next stage a pruner's schedule plans (where its stop would end it anyway),
  // so planning costs one layer's ops per layer however many stages there are (HAP at 32 of 576
  // prunes after every layer). A stage off a schedule still stops the run where it happens.
  auto run_end = [&](int first) {
    int last = n_layers() - 1;
    for (const PromptRows& p : ps) {
      const Pruner* pruner = p.in->pruner;
      if (pruner == nullptr ||
          static_cast<int>(pruner->stats().planned_layer_tokens.size()) != n_layers()) {
        continue;
      }
      const std::vector<int>& schedule = pruner->stats().planned_layer_tokens;
      for (int l = first; l + 1 < n_layers() && l < last; ++l) {
        if (schedule[l + 1] < schedule[l]) {
          last = l;
          break;
        }
      }
    }
    return last;
  };
  for (int first = 0; first < n_layers();) {
    const int last = run_end(first);
    const int segments = live() > 1 ? live() : 0;
    if (segments > 0) {
      bounds.resize(static_cast<size_t>(segments) + 1);
      for (int i = 0; i < segments; ++i) bounds[i] = ps[i].start;
      bounds[segments] = n;
      HAP_RETURN_IF_ERROR(bounds_dev.Assign(bounds.data(), bounds.size()));
      bound[2] = bounds_dev.data();
    }
    bindings.bound = absl::MakeConstSpan(bound, segments > 0 ? 3 : 2);
    HAP_ASSIGN_OR_RETURN(plan, PlanPrefill(first, last, n, segments, any_pruner, &v));
    HAP_RETURN_IF_ERROR(workspace.Resize(plan->workspace_bytes()));
    bindings.workspace = workspace.data();
    HAP_ASSIGN_OR_RETURN(const int stopped, plan->Run(bindings));
    first = stopped < 0 ? last + 1 : stopped / 2 + 1;
  }
  for (PromptRows& p : ps) HAP_RETURN_IF_ERROR(of_prompt(p.index, FinishPrompt(&p)));
  const int prompts_left = live();
  if (prompts_left == 1) {
    const PromptRows& p = ps[0];
    return LogitsInto(x.data() + static_cast<int64_t>(p.start + p.n - 1) * d_, 1, p.in->logits);
  }
  // Every prompt's last row through the final norm and the LM head at once (its rows are
  // independent), then each prompt's logits row into its own array.
  std::vector<int> last_rows(static_cast<size_t>(prompts_left));
  for (int i = 0; i < prompts_left; ++i) last_rows[i] = ps[i].start + ps[i].n - 1;
  BackendArray<float> last(backend_);  // F32 [b, hidden]
  HAP_RETURN_IF_ERROR(last.Resize(static_cast<size_t>(prompts_left) * d_));
  HAP_RETURN_IF_ERROR(
      backend_.GatherRows(x.data(), n, row_bytes, last_rows.data(), prompts_left, last.data()));
  BackendArray<float> all(backend_);  // F32 [b, vocab]
  HAP_RETURN_IF_ERROR(LogitsInto(last.data(), prompts_left, &all));
  for (int i = 0; i < prompts_left; ++i) {
    BackendArray<float>* logits = ps[i].in->logits;
    logits->Rebind(backend_);
    HAP_RETURN_IF_ERROR(logits->Resize(static_cast<size_t>(vocab_)));
    HAP_RETURN_IF_ERROR(backend_.Copy(logits->data(), all.data() + static_cast<int64_t>(i) * vocab_,
                                      sizeof(float) * vocab_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> LlamaDecoder::DecodeStep(int32_t token, KvStore* cache) const {
  return DecodeBatch({token}, {cache});
}

absl::Status LlamaDecoder::CheckCanDecode(const KvStore& cache) const {
  if (cache.n_layers() != n_layers()) {
    return absl::FailedPreconditionError("decode step on a KV cache without prefill");
  }
  if (cache.device() != backend_.device()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the KV cache is in %s memory; the %s backend decodes from its own memory "
        "(DeviceKv::FromCache)", std::string(DeviceName(cache.device())),
        std::string(backend_.name())));
  }
  if (cache.next_position >= cfg_.max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrFormat("position %d reaches the model's context of %d",
                                                 cache.next_position,
                                                 cfg_.max_position_embeddings));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> LlamaDecoder::DecodeBatch(
    const std::vector<int32_t>& tokens, const std::vector<KvStore*>& caches) const {
  DecodeWorkspace ws(backend_);
  HAP_RETURN_IF_ERROR(DecodeBatchInto(tokens, caches, &ws));
  std::vector<float> out(ws.logits().size());
  HAP_RETURN_IF_ERROR(ws.logits().CopyTo(out.data()));
  return out;
}

absl::Status LlamaDecoder::DecodeBatchInto(const std::vector<int32_t>& tokens,
                                           const std::vector<KvStore*>& caches,
                                           DecodeWorkspace* ws) const {
  const int b = static_cast<int>(tokens.size());
  if (b == 0 || caches.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "decode batch: %d tokens for %d caches", tokens.size(), caches.size()));
  }
  if (&ws->tables_.backend() != &backend_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "decode batch: a workspace of the %s backend for a decoder on the %s backend",
        std::string(ws->tables_.backend().name()), std::string(backend_.name())));
  }
  std::vector<int32_t> positions(b);
  for (int i = 0; i < b; ++i) {
    HAP_RETURN_IF_ERROR(CheckCanDecode(*caches[i]));
    positions[i] = caches[i]->next_position;
  }
  HAP_RETURN_IF_ERROR(CheckTokenIds(tokens));
  const bool graphs = decode_graphs_ && ws->graphs_allowed_;
  // Every layer's row slots and spans, the token and position ids: one upload.
  HAP_RETURN_IF_ERROR(PackDecodeTables(tokens, positions, caches, graphs, ws));
  const int rows = ws->rows_;
  StepValues v;
  HAP_ASSIGN_OR_RETURN(std::shared_ptr<const PlannedStep> plan, DecodePlan(rows, &v));
  HAP_RETURN_IF_ERROR(ws->x_.Resize(static_cast<size_t>(rows) * d_));  // F32 [rows, hidden]
  HAP_RETURN_IF_ERROR(ws->logits_.Resize(static_cast<size_t>(rows) * vocab_));  // F32 [rows, vocab]
  HAP_RETURN_IF_ERROR(ws->workspace_.Resize(plan->workspace_bytes()));
  StepBindings bindings;
  void* bound[3] = {ws->x_.data(), ws->tables_.data() + ws->positions_at_, ws->logits_.data()};
  bindings.bound = bound;
  bindings.workspace = ws->workspace_.data();
  const StepCallFn call = [&](int l) -> absl::StatusOr<StepControl> {
    HAP_RETURN_IF_ERROR(AttendDecode(l, *ws, plan->At<float>(v.q, bindings),
                                     plan->At<float>(v.k, bindings), plan->At<float>(v.v, bindings),
                                     plan->At<float>(v.attn, bindings)));
    return StepControl::kContinue;
  };
  bindings.call = &call;
  const std::function<absl::Status()> enqueue = [&]() -> absl::Status {
    auto* ids_dev = reinterpret_cast<const int32_t*>(ws->tables_.data() + ws->ids_at_);
    HAP_RETURN_IF_ERROR(backend_.Embedding(w_.embed, ids_dev, rows, ws->x_.data()));
    return plan->Run(bindings).status();
  };
  HAP_RETURN_IF_ERROR(graphs ? RunCaptured(ws, enqueue) : enqueue());
  // The padding rows' logits are not the caller's.
  HAP_RETURN_IF_ERROR(ws->logits_.Resize(static_cast<size_t>(b) * vocab_));
  for (KvStore* cache : caches) ++cache->next_position;
  return absl::OkStatus();
}

}  // namespace hap
