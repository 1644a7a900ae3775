#include "runtime/model/llama.h"

#include <algorithm>
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

LlamaDecoder::LlamaDecoder(const TextConfig& cfg, const TextWeights& weights,
                           const Backend& backend, DType attention_operands)
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
      attention_operands_(attention_operands) {}

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
                                                      bool prefill) const {
  const int64_t rows = n;
  StepValues v;
  v.x = desc.Bound("x", StepElem::kF32, rows * d_);  // F32 [n, hidden]
  v.positions = desc.Bound("positions", StepElem::kI32, rows * (prefill ? rope_axes_ : 1));
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
                                 int call_id) const {
  const LlamaLayerWeights& lw = w_.layers[l];
  // A prefill's rows (and a single decode step's one row) are one sequence's tokens; a batched
  // step's rows are different sequences, which must stay batch-invariant.
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
    // The rows attend to each other causally, straight from the new K/V.
    step_op::Attention a{v.q, v.k, v.v, v.attn, v.lse, {}};
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

absl::StatusOr<std::unique_ptr<PlannedStep>> LlamaDecoder::PlanPrefill(int first, int last, int n,
                                                                       bool with_lse,
                                                                       StepValues* values) const {
  StepDesc desc(absl::StrFormat("prefill, layers %d-%d, %d rows", first, last, n));
  *values = DescribeValues(desc, n, with_lse, /*prefill=*/true);
  for (int l = first; l <= last; ++l) {
    // Before the layer: cancellation and the slice boundary, no value read. After it: the
    // cache takes k and v, the pruner reads q, k, the LSE and the layer's output x.
    desc.Add(step_op::Call{2 * l, /*listed=*/true, {}});
    DescribeLayer(desc, *values, l, n, /*prefill=*/true, 0);
    std::vector<StepValueId> after = {values->q, values->k, values->v, values->x};
    if (with_lse) after.push_back(values->lse);
    desc.Add(step_op::Call{2 * l + 1, /*listed=*/true, std::move(after)});
  }
  return backend_.Plan(std::move(desc));
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

absl::Status LlamaDecoder::PackDecodeTables(const std::vector<int32_t>& tokens,
                                            const std::vector<int32_t>& positions,
                                            const std::vector<KvStore*>& caches,
                                            DecodeWorkspace* ws) const {
  const int b = static_cast<int>(tokens.size());
  std::vector<uint8_t>& packed = ws->packed_;
  packed.clear();
  // Appends `bytes` at a 16-byte boundary; returns where they start.
  auto put = [&packed](const void* data, size_t bytes) {
    const size_t at = (packed.size() + 15) / 16 * 16;
    packed.resize(at + bytes);
    if (bytes > 0) std::memcpy(packed.data() + at, data, bytes);
    return at;
  };
  ws->ids_at_ = put(tokens.data(), sizeof(int32_t) * b);
  // The rows rotate at next_position + rope_delta; the caches record next_position.
  ws->positions_at_ = put(positions.data(), sizeof(int32_t) * b);
  auto* rotary = reinterpret_cast<int32_t*>(packed.data() + ws->positions_at_);
  for (int i = 0; i < b; ++i) rotary[i] += caches[i]->rope_delta;
  ws->k_dst_at_.assign(n_layers(), 0);
  ws->v_dst_at_.assign(n_layers(), 0);
  ws->layer_groups_.assign(1, 0);
  ws->groups_.clear();
  std::vector<void*> k_dst(b), v_dst(b);
  std::vector<int> span_begin;
  std::vector<KvSpan> spans;
  for (int l = 0; l < n_layers(); ++l) {
    DecodeWorkspace::Group group;
    auto flush = [&] {
      if (group.n_seqs == 0) return;
      group.n_spans = static_cast<int>(spans.size());
      group.span_begin_at = put(span_begin.data(), sizeof(int) * span_begin.size());
      group.spans_at = put(spans.data(), sizeof(KvSpan) * spans.size());
      ws->groups_.push_back(group);
    };
    for (int i = 0; i < b; ++i) {
      KvStore* kv = caches[i];
      HAP_ASSIGN_OR_RETURN(KvRowSlot slot, kv->AppendRowSlot(l, positions[i]));
      k_dst[i] = slot.k;
      v_dst[i] = slot.v;
      if (group.n_seqs > 0 && kv->dtype() != group.dtype) {
        flush();
        group = DecodeWorkspace::Group{};
      }
      if (group.n_seqs == 0) {
        group.first_row = i;
        group.dtype = kv->dtype();
        span_begin.assign(1, 0);
        spans.clear();
      }
      kv->Spans(l, &ws->seq_spans_);
      int rows = 0;
      for (const KvSpan& span : ws->seq_spans_) rows += span.rows;
      group.max_rows = std::max(group.max_rows, rows);
      spans.insert(spans.end(), ws->seq_spans_.begin(), ws->seq_spans_.end());
      span_begin.push_back(static_cast<int>(spans.size()));
      ++group.n_seqs;
    }
    flush();
    ws->k_dst_at_[l] = put(k_dst.data(), sizeof(void*) * b);
    ws->v_dst_at_[l] = put(v_dst.data(), sizeof(void*) * b);
    ws->layer_groups_.push_back(static_cast<int>(ws->groups_.size()));
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
  return PrefillRowsInto(std::move(x_host), nullptr, nullptr, false, std::move(positions),
                         vis_begin, n_vis, pruner, cache, trace, logits, mrope);
}

absl::Status LlamaDecoder::PrefillSplicedInto(const std::vector<int32_t>& ids,
                                              const float* image_embeds, bool image_in_backend,
                                              std::vector<int32_t> positions, int vis_begin,
                                              int n_vis, Pruner* pruner, KvStore* cache,
                                              PrefillTrace* trace, BackendArray<float>* logits,
                                              const MropePositions* mrope) const {
  if (pruner != nullptr && pruner->ReadsInputEmbeddings()) {
    return absl::InvalidArgumentError(
        "prefill: this pruning method reads the input embeddings on the host; splice them there");
  }
  if (ids.size() != positions.size() || (n_vis > 0 && image_embeds == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("prefill: %d token ids for %d positions, image rows %s", ids.size(),
                        positions.size(), image_embeds == nullptr ? "missing" : "given"));
  }
  HAP_RETURN_IF_ERROR(CheckTokenIds(ids));
  return PrefillRowsInto({}, &ids, image_embeds, image_in_backend, std::move(positions), vis_begin,
                         n_vis, pruner, cache, trace, logits, mrope);
}

absl::Status LlamaDecoder::PrefillRowsInto(std::vector<float> x_host,
                                           const std::vector<int32_t>* ids,
                                           const float* image_embeds, bool image_in_backend,
                                           std::vector<int32_t> positions, int vis_begin, int n_vis,
                                           Pruner* pruner, KvStore* cache, PrefillTrace* trace,
                                           BackendArray<float>* logits,
                                           const MropePositions* mrope) const {
  int n = static_cast<int>(positions.size());
  const size_t rows_given = ids != nullptr ? ids->size() * d_ : x_host.size();
  if (n == 0 || rows_given != static_cast<size_t>(n) * d_ || vis_begin < 0 || n_vis < 0 ||
      vis_begin + n_vis > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prefill: %d positions, %d embedding values (hidden %d), visual rows [%d, %d)", n,
        rows_given, d_, vis_begin, vis_begin + n_vis));
  }
  if (cache->n_layers() != n_layers() || cache->total_rows() != 0 ||
      cache->row_bytes() != kv_dim() * static_cast<int64_t>(DTypeSize(cache->dtype()))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "prefill into a KV cache of %d layers holding %d rows of %d bytes; %d empty layers of "
        "kv_dim %d were expected", cache->n_layers(), cache->total_rows(), cache->row_bytes(),
        n_layers(), kv_dim()));
  }
  const int32_t next_position = positions.back() + 1;
  // The rows' rotary positions, I32 [n, rope_axes_], move with the rows as position ids do.
  std::vector<int32_t> rotary;
  int32_t rope_delta = 0;
  HAP_RETURN_IF_ERROR(RotaryRows(positions, mrope, &rotary, &rope_delta));
  const size_t rotary_bytes = sizeof(int32_t) * rope_axes_;
  if (pruner) {
    // Spliced on the device, the embeddings are not on the host: the pruner does not read them.
    PrefillInput input{
        ids != nullptr ? nullptr : x_host.data(), n, d_, vis_begin, n_vis, n_layers()};
    HAP_ASSIGN_OR_RETURN(std::optional<std::vector<int>> keep, pruner->Begin(input));
    if (keep.has_value() && ids != nullptr) {
      return absl::InternalError(
          "prefill: a pruner that chooses before the LLM needs the input embeddings on the host");
    }
    if (keep.has_value()) {
      // Pruned before the LLM (PruneStage::kBeforeLlm): the other visual rows leave the input
      // embeddings and position ids here, on the host, before anything is uploaded or cached;
      // the kept rows keep their original positions.
      HAP_RETURN_IF_ERROR(CheckKeepList(*keep, n_vis, "before layer 0"));
      const std::vector<int> rows = KeptRows(n, vis_begin, n_vis, *keep);
      const int64_t kept = static_cast<int64_t>(rows.size());
      HAP_RETURN_IF_ERROR(CpuBackend().GatherRows(x_host.data(), n, sizeof(float) * d_,
                                                  rows.data(), kept, x_host.data()));
      HAP_RETURN_IF_ERROR(CpuBackend().GatherRows(positions.data(), n, sizeof(int32_t),
                                                  rows.data(), kept, positions.data()));
      HAP_RETURN_IF_ERROR(CpuBackend().GatherRows(rotary.data(), n, rotary_bytes, rows.data(), kept,
                                                  rotary.data()));
      x_host.resize(static_cast<size_t>(kept) * d_);
      positions.resize(static_cast<size_t>(kept));
      rotary.resize(static_cast<size_t>(kept) * rope_axes_);
      n_vis = static_cast<int>(keep->size());
      n = static_cast<int>(kept);
    }
  }
  // The hidden states and position ids in the backend's memory; position ids also stay on the
  // host (the cache records them) and are compacted on both sides.
  BackendArray<float> x(backend_);           // F32 [n, hidden]
  BackendArray<int32_t> positions_dev(backend_);  // [n, rope_axes_]: the rotary positions
  if (ids != nullptr) {
    HAP_RETURN_IF_ERROR(x.Resize(static_cast<size_t>(n) * d_));
    BackendArray<int32_t> ids_in_backend(backend_);
    HAP_RETURN_IF_ERROR(ids_in_backend.Assign(ids->data(), ids->size()));
    HAP_RETURN_IF_ERROR(backend_.Embedding(w_.embed, ids_in_backend.data(), n, x.data()));
    float* image_rows = x.data() + static_cast<int64_t>(vis_begin) * d_;
    const size_t image_bytes = sizeof(float) * n_vis * d_;
    HAP_RETURN_IF_ERROR(image_in_backend
                            ? backend_.Copy(image_rows, image_embeds, image_bytes)
                            : backend_.CopyToBackend(image_rows, image_embeds, image_bytes));
  } else {
    HAP_RETURN_IF_ERROR(x.Assign(x_host.data(), x_host.size()));
    std::vector<float>().swap(x_host);  // not read again: the prefill's peak holds one copy
  }
  HAP_RETURN_IF_ERROR(positions_dev.Assign(rotary.data(), rotary.size()));
  std::vector<int32_t>().swap(rotary);
  // Stages a pruner decides in the backend's memory (a device backend): the rows are compacted
  // there into these buffers (swapped with x and positions_dev), and the kept indices, which the
  // pruner keeps valid until Finish, are copied back after the last layer (one copy per run of
  // lists that lie back to back, as HAP's do). Until then the visual rows' position ids are not
  // known on the host: they are −1 in `positions`, and the layers that appended them are
  // rewritten at the end (stage_of_layer: the stages before each layer).
  BackendKeep backend_keep;
  BackendArray<float> x_alt(backend_);
  BackendArray<int32_t> positions_alt(backend_);
  struct BackendStage {
    int after_layer, n_vis;
    const int32_t* kept;
    int count;
  };
  std::vector<BackendStage> backend_stages;
  std::vector<int> stage_of_layer(static_cast<size_t>(n_layers()), 0);
  std::vector<int32_t> visual_positions;  // of the visual rows before the first such stage
  const bool decide_on_backend = pruner != nullptr && !backend_.caps().host_memory;
  // One workspace for every plan of this prefill: the first is the largest (pruning only
  // removes rows), so it is allocated once.
  BackendArray<uint8_t> workspace(backend_);
  std::unique_ptr<PlannedStep> plan;
  StepValues v;
  StepBindings bindings;
  void* bound[2] = {x.data(), positions_dev.data()};
  bindings.bound = bound;
  std::chrono::steady_clock::time_point t0;
  // The engine's part of each layer: before it, the cancellation checks and the slice boundary;
  // after it, the new K/V rows into the cache and the pruner's look at the layer, whose pruning
  // stage stops the run so the layers after it are planned for the rows it keeps.
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
      stage_of_layer[l] = static_cast<int>(backend_stages.size());
      if (trace) {
        trace->tokens_per_layer.push_back(n);
        trace->visual_tokens_per_layer.push_back(n_vis);
      }
      return StepControl::kContinue;
    }
    HAP_RETURN_IF_ERROR(cache->Append(backend_, l, plan->At<float>(v.k, bindings),
                                      plan->At<float>(v.v, bindings), positions.data(), n));
    StepControl control = StepControl::kContinue;
    double prune_ms = 0;
    if (pruner) {
      const auto tp = std::chrono::steady_clock::now();
      LayerAttention att;
      att.layer = l;
      att.n_tokens = n;
      att.n_heads = n_heads_;
      att.n_kv_heads = n_kv_heads_;
      att.head_dim = head_dim_;
      att.scale = scale_;
      att.q = plan->At<float>(v.q, bindings);  // this layer's queries and keys (= the cache's
      att.k = plan->At<float>(v.k, bindings);  // rows of layer l)
      att.lse = plan->At<float>(v.lse, bindings);
      att.backend = &backend_;
      att.vis_begin = vis_begin;
      att.n_vis = n_vis;
      att.hidden = x.data();  // the layer's output, F32 [n, hidden]
      att.d_model = d_;
      backend_keep = BackendKeep{};
      att.backend_keep = decide_on_backend ? &backend_keep : nullptr;
      HAP_ASSIGN_OR_RETURN(std::optional<std::vector<int>> keep, pruner->AfterLayer(att));
      if (!keep.has_value() && backend_keep.kept != nullptr) {
        const int count = backend_keep.count;
        if (count < 0 || count > n_vis) {
          return absl::InternalError(
              absl::StrFormat("pruner kept %d of %d visual tokens at layer %d", count, n_vis, l));
        }
        if (backend_stages.empty()) {
          visual_positions.assign(positions.begin() + vis_begin,
                                  positions.begin() + vis_begin + n_vis);
        }
        backend_stages.push_back({l, n_vis, backend_keep.kept, count});
        const int kept = n - n_vis + count;
        HAP_RETURN_IF_ERROR(x_alt.Resize(static_cast<size_t>(kept) * d_));
        HAP_RETURN_IF_ERROR(positions_alt.Resize(static_cast<size_t>(kept) * rope_axes_));
        HAP_RETURN_IF_ERROR(backend_.GatherKeptRows(x.data(), n, sizeof(float) * d_, vis_begin,
                                                    n_vis, backend_keep.kept, count, x_alt.data()));
        HAP_RETURN_IF_ERROR(backend_.GatherKeptRows(positions_dev.data(), n, rotary_bytes,
                                                    vis_begin, n_vis, backend_keep.kept, count,
                                                    positions_alt.data()));
        std::swap(x, x_alt);
        std::swap(positions_dev, positions_alt);
        bound[0] = x.data();
        bound[1] = positions_dev.data();
        positions.erase(positions.begin() + vis_begin + count,
                        positions.begin() + vis_begin + n_vis);
        std::fill(positions.begin() + vis_begin, positions.begin() + vis_begin + count, -1);
        n_vis = count;
        n = kept;
        control = StepControl::kStop;
      } else if (keep.has_value()) {
        HAP_RETURN_IF_ERROR(
            CheckKeepList(*keep, n_vis, absl::StrFormat("at layer %d", l).c_str()));
        const std::vector<int> rows = KeptRows(n, vis_begin, n_vis, *keep);
        const int64_t kept = static_cast<int64_t>(rows.size());
        HAP_RETURN_IF_ERROR(backend_.GatherRows(x.data(), n, sizeof(float) * d_, rows.data(),
                                                kept, x.data()));
        HAP_RETURN_IF_ERROR(backend_.GatherRows(positions_dev.data(), n, rotary_bytes, rows.data(),
                                                kept, positions_dev.data()));
        for (int64_t i = 0; i < kept; ++i) positions[i] = positions[rows[i]];  // rows ascend
        positions.resize(static_cast<size_t>(kept));
        n_vis = static_cast<int>(keep->size());
        n = static_cast<int>(kept);
        control = StepControl::kStop;
      }
      prune_ms = MsSince(tp);
    }
    if (trace) {
      trace->layer_ms.push_back(MsSince(t0));
      trace->prune_ms.push_back(prune_ms);
    }
    return control;
  };
  bindings.call = &call;
  // A run ends at the pruner's next scheduled stage (where its stop would end it anyway), so
  // planning costs one layer's ops per layer however many stages there are (HAP at 32 of 576
  // prunes after every layer). A stage off the schedule still stops the run where it happens.
  const std::vector<int>* schedule =
      pruner != nullptr &&
              static_cast<int>(pruner->stats().planned_layer_tokens.size()) == n_layers()
          ? &pruner->stats().planned_layer_tokens
          : nullptr;
  auto run_end = [&](int first) {
    for (int l = first; schedule != nullptr && l + 1 < n_layers(); ++l) {
      if ((*schedule)[l + 1] < (*schedule)[l]) return l;
    }
    return n_layers() - 1;
  };
  for (int first = 0; first < n_layers();) {
    const int last = run_end(first);
    HAP_ASSIGN_OR_RETURN(plan, PlanPrefill(first, last, n, pruner != nullptr, &v));
    HAP_RETURN_IF_ERROR(workspace.Resize(plan->workspace_bytes()));
    bindings.workspace = workspace.data();
    HAP_ASSIGN_OR_RETURN(const int stopped, plan->Run(bindings));
    first = stopped < 0 ? last + 1 : stopped / 2 + 1;
  }
  if (pruner) {
    // The stages decided in the backend's memory: their kept indices copied back, the pruner's
    // records completed from them, and the position ids of the visual rows they left in the
    // cache written where −1 stood.
    std::vector<std::vector<int>> kept_lists;
    for (size_t i = 0; i < backend_stages.size();) {
      size_t end = i + 1;  // stages [i, end) lie back to back
      int64_t values = backend_stages[i].count;
      while (end < backend_stages.size() &&
             backend_stages[end].kept ==
                 backend_stages[end - 1].kept + backend_stages[end - 1].count) {
        values += backend_stages[end++].count;
      }
      std::vector<int32_t> run(static_cast<size_t>(values));
      HAP_RETURN_IF_ERROR(
          backend_.CopyToHost(run.data(), backend_stages[i].kept, sizeof(int32_t) * run.size()));
      auto from = run.begin();
      for (; i < end; ++i) {
        kept_lists.emplace_back(from, from + backend_stages[i].count);
        from += backend_stages[i].count;
      }
    }
    HAP_RETURN_IF_ERROR(pruner->Finish(kept_lists));
    for (size_t i = 0; i < backend_stages.size(); ++i) {
      const BackendStage& st = backend_stages[i];
      HAP_RETURN_IF_ERROR(CheckKeepList(kept_lists[i], st.n_vis,
                                        absl::StrFormat("at layer %d", st.after_layer).c_str()));
      std::vector<int32_t> next(kept_lists[i].size());
      for (size_t r = 0; r < next.size(); ++r) next[r] = visual_positions[kept_lists[i][r]];
      visual_positions = std::move(next);
      for (int l = st.after_layer + 1; l < n_layers(); ++l) {
        if (stage_of_layer[l] != static_cast<int>(i) + 1) continue;
        HAP_RETURN_IF_ERROR(cache->RewritePositions(l, vis_begin, visual_positions.data(),
                                                    static_cast<int>(visual_positions.size())));
      }
    }
  }
  cache->next_position = next_position;
  cache->rope_delta = rope_delta;
  return LogitsInto(x.data() + static_cast<int64_t>(n - 1) * d_, 1, logits);
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
  StepValues v;
  HAP_ASSIGN_OR_RETURN(std::shared_ptr<const PlannedStep> plan, DecodePlan(b, &v));
  // Every layer's row slots and spans, the token and position ids: one upload.
  HAP_RETURN_IF_ERROR(PackDecodeTables(tokens, positions, caches, ws));
  HAP_RETURN_IF_ERROR(ws->x_.Resize(static_cast<size_t>(b) * d_));  // F32 [b, hidden]
  auto* ids_dev = reinterpret_cast<const int32_t*>(ws->tables_.data() + ws->ids_at_);
  HAP_RETURN_IF_ERROR(backend_.Embedding(w_.embed, ids_dev, b, ws->x_.data()));
  HAP_RETURN_IF_ERROR(ws->logits_.Resize(static_cast<size_t>(b) * vocab_));  // F32 [b, vocab]
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
  HAP_RETURN_IF_ERROR(plan->Run(bindings).status());
  for (KvStore* cache : caches) ++cache->next_position;
  return absl::OkStatus();
}

}  // namespace hap
