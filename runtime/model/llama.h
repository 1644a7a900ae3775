// The decoder of LLaVA (LLaMA) and of Qwen2.5-VL (Qwen2: q, k and v biases, M-RoPE): prefill
// (with an optional visual-token pruner called before layer 0 and after each layer) and
// single-token decode steps over a per-layer KV cache.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "runtime/io/config.h"
#include "runtime/io/weights.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/mrope_positions.h"
#include "runtime/prune/pruner.h"

namespace hap {

// Per-layer record of one prefill, for stats, traces and tests.
struct PrefillTrace {
  std::vector<int> tokens_per_layer;         // sequence rows each layer processed
  std::vector<int> visual_tokens_per_layer;  // visual rows each layer processed
  std::vector<double> layer_ms;              // wall time of each layer, pruner included
  std::vector<double> prune_ms;              // time inside the pruner after each layer
};

// The rows a captured decode step of b sequences runs (the sizes graphs are captured at, as
// vLLM pads its decode batches): b up to 2, then 4, 8, then the next multiple of 8; at most
// kMaxDecodePaddingRows padding rows.
int DecodeRowsFor(int b);
inline constexpr int kMaxDecodePaddingRows = 7;
// The captured steps a DecodeWorkspace keeps at most (the least recently used goes first).
inline constexpr int kMaxDecodeGraphs = 64;

// What a decode step keeps from one step to the next, so that once warm it allocates nothing and
// uploads once: the step's tables (token ids, position ids, and each layer's KV row addresses
// and spans) packed in host memory the backend copies from without staging
// (Backend::AllocateHost: page-locked on a GPU) and their copy in the backend's memory, the
// hidden states, the plan's workspace, the decode attention's partial results and the logits. One
// per caller that decodes (the decode engine's thread, a generation), on the decoder's backend;
// not for two threads at once. The upload reads the host tables after the call returns on a GPU,
// so a step on a workspace must follow a read of the previous step's results
// (DecodeBatchSampled and DecodeBatch read theirs).
//
// On a backend that captures (BackendCaps::graphs, a GPU) the workspace also keeps the steps it
// captured (LlamaDecoder::DecodeBatchInto): a step's ops recorded once as a graph and replayed by
// the later steps of the same shape, on the thread that captured them.
class DecodeWorkspace {
 public:
  // graphs false: this workspace's steps run op by op even where the decoder captures (a
  // measurement of what graphs save; ModelOptions::decode_graphs is the switch for a model).
  explicit DecodeWorkspace(const Backend& backend, bool graphs = true)
      : graphs_allowed_(graphs),
        tables_(backend),
        x_(backend),
        workspace_(backend),
        parts_(backend),
        sink_(backend),
        logits_(backend) {}
  // F32 [b, vocab] of the last step, in the backend's memory.
  const BackendArray<float>& logits() const { return logits_; }
  // Steps captured as graphs, and steps run by replaying one (a capture is replayed at once).
  int64_t graph_captures() const { return captures_; }
  int64_t graph_replays() const { return replays_; }
  int graphs_held() const { return static_cast<int>(graphs_.size()); }

 private:
  friend class LlamaDecoder;
  // Layer l's sequences [first_row, first_row + n_seqs) whose caches share a dtype: one
  // StoreKvRows and one DecodeAttention. Offsets are into the tables.
  struct Group {
    int first_row = 0, n_seqs = 0, n_spans = 0;
    int max_rows = 0;  // the most rows a sequence of the group attends over
    DType dtype = DType::kF32;
    size_t span_begin_at = 0, spans_at = 0;
  };
  // A captured step, and how often capturing its shape failed (it then runs op by op).
  struct Captured {
    std::unique_ptr<BackendGraph> graph;
    int failures = 0;
    uint64_t last_use = 0;
  };
  bool graphs_allowed_;
  std::vector<uint8_t> packed_;  // the tables as built, then copied into host_tables_
  BackendBuffer host_tables_;    // Backend::AllocateHost of tables_'s backend
  BackendArray<uint8_t> tables_;
  int rows_ = 0;  // the step's rows: its sequences, then padding rows up to a captured size
  size_t ids_at_ = 0, positions_at_ = 0;
  std::vector<size_t> k_dst_at_, v_dst_at_;  // per layer: [rows_] row addresses
  std::vector<int> layer_groups_;            // layer l's groups: [layer_groups_[l], [l + 1])
  std::vector<Group> groups_;
  std::vector<KvSpan> seq_spans_;
  std::vector<int64_t> shape_;  // what fixes a captured step's ops besides its buffers
  BackendArray<float> x_;
  BackendArray<uint8_t> workspace_;
  BackendArray<uint8_t> parts_;  // DecodeAttentionArgs::workspace
  BackendArray<float> sink_;     // where the padding rows' new K and V rows go
  BackendArray<float> logits_;
  std::map<std::vector<int64_t>, Captured> graphs_;
  uint64_t uses_ = 0;
  int64_t captures_ = 0, replays_ = 0;
};

// One prompt of a prefill (LlamaDecoder::PrefillBatchInto): PrefillInto's arguments, its input
// rows in `x`, or spliced in the backend's memory: the token embeddings of `ids` (an image row's id
// is embedded, then overwritten), then the image's rows `image_embeds` copied over rows
// [vis_begin, vis_begin + n_vis) — one upload of the image's rows (none where image_in_backend:
// a copy within the backend's memory) and no trip of the prompt's rows through the host. Not for a
// pruner that reads the input embeddings (Pruner::ReadsInputEmbeddings): InvalidArgument.
struct PrefillSequence {
  std::vector<float> x;                       // F32 [n, hidden] on the host; empty with ids
  const std::vector<int32_t>* ids = nullptr;  // [n]
  const float* image_embeds = nullptr;        // F32 [n_vis, hidden], host or backend memory
  bool image_in_backend = false;
  std::vector<int32_t> positions;  // [n]
  int vis_begin = 0;
  int n_vis = 0;
  Pruner* pruner = nullptr;
  KvStore* cache = nullptr;
  PrefillTrace* trace = nullptr;
  BackendArray<float>* logits = nullptr;  // F32 [1, vocab], on the decoder's backend
  const MropePositions* mrope = nullptr;
  // May be null. Polled after each layer: once it says true, the prompt leaves the pass there
  // (its rows leave the batch, the others go on), `left_pass` is set, and its cache, trace and
  // logits are left unfinished.
  const std::function<bool()>* cancelled = nullptr;
  bool left_pass = false;  // set by the prefill
};

// `s` with "prompt i of b: " before its message: an error of one prompt of a batched prefill.
absl::Status PromptError(size_t i, size_t b, const absl::Status& s);

class LlamaDecoder {
 public:
  // Every op runs on `backend` (which must outlive the decoder).
  // attention_operands: AttentionArgs::operands of the prefill's attention
  // (ModelOptions::attention_dtype).
  // With cfg.mrope_section, the prefill's rows rotate at 3-D positions (`mrope` below).
  // decode_graphs: capture decode steps as graphs where the backend can (BackendCaps::graphs;
  // DecodeBatchInto).
  LlamaDecoder(const TextConfig& cfg, const TextWeights& weights, const Backend& backend,
               DType attention_operands = DType::kF32, bool decode_graphs = true);

  // Token embeddings F32 [n, hidden] for ids (InvalidArgument for an id outside the vocab).
  absl::StatusOr<std::vector<float>> Embed(const std::vector<int32_t>& ids) const;

  // x: F32 [n, hidden] input embeddings, positions [n]; visual rows are [vis_begin,
  // vis_begin + n_vis). Fills `cache` (one LayerKv per layer) and returns the logits
  // F32 [vocab] of the last row. `pruner` may be null (no pruning). Visual rows the pruner drops
  // in Begin never reach layer 0 (trace and cache count only the kept ones).
  // `positions` are the rows' position ids, which the cache records. A model with M-RoPE
  // rotates the rows at `mrope`'s 3-D positions (one per row; null: text only, every axis at
  // the position id) and sets the cache's rope_delta from mrope->next; a pruned row keeps its
  // positions. InvalidArgument for `mrope` on a model without M-RoPE.
  absl::StatusOr<std::vector<float>> Prefill(std::vector<float> x, std::vector<int32_t> positions,
                                             int vis_begin, int n_vis, Pruner* pruner,
                                             KvCache* cache, PrefillTrace* trace,
                                             const MropePositions* mrope = nullptr) const;
  // Prefill with the last row's logits F32 [1, vocab] left in the backend's memory (`logits`,
  // on the decoder's backend), for a sampler that reads them there (runtime/model/row_sampling.h),
  // into any empty `cache` of n_layers() layers of kv_dim() (a DeviceKv on a device backend).
  absl::Status PrefillInto(std::vector<float> x, std::vector<int32_t> positions, int vis_begin,
                           int n_vis, Pruner* pruner, KvStore* cache, PrefillTrace* trace,
                           BackendArray<float>* logits,
                           const MropePositions* mrope = nullptr) const;
  // Several prompts in one pass (one: a prefill): every product reads each weight once for all
  // of their rows, and one variable-length attention per layer attends each prompt over its own
  // rows (AttentionArgs::segment_bounds), with no padding to the longest. Each prompt keeps its
  // own pruner (method, budget, stages at its own layers), cache, trace and logits, and gets what
  // it gets alone: its rows start at multiples of the backend's attention_run_align, and the
  // other ops treat rows alone, so kept sets, KV and logits are bit for bit those of the prompt
  // alone where the backend's products give a row the same result whatever the rows beside it
  // (the CPU's BF16 products from 16 rows on, with AVX512-BF16; the emulation's; not OpenBLAS's
  // sgemm nor cuBLAS, which pick their kernels by shape: there to the products' rounding). A
  // pruning stage of one prompt compacts the batch's rows and plans the layers after it again
  // for them all. A prompt whose caller cancels (PrefillSequence::cancelled) leaves the pass
  // after the layer running when it did, the same way: the others' results do not change. When
  // every prompt has left, Cancelled. Errors are the whole batch's ("prompt i of b: ..."); an
  // error leaves every cache unusable.
  absl::Status PrefillBatchInto(std::vector<PrefillSequence>& seqs) const;

  // Appends `token` at cache->next_position (rotated at next_position + rope_delta) and returns
  // the next logits F32 [vocab].
  absl::StatusOr<std::vector<float>> DecodeStep(int32_t token, KvStore* cache) const;

  // One decode step for b sequences at once: tokens[i] is appended to caches[i] (distinct
  // caches of any lengths and pruning). Every weight is read once for the whole batch; each
  // sequence's logits are exactly those of its own DecodeStep (the matmul is batch-invariant
  // up to the CPU backend's narrow-kernel rows, and attention runs per sequence). Returns F32 [b,
  // vocab]. Errors from the checks before the first layer (bad batch, cache without prefill,
  // context full) leave every cache untouched; an error inside a layer leaves the caches unusable.
  absl::StatusOr<std::vector<float>> DecodeBatch(const std::vector<int32_t>& tokens,
                                                 const std::vector<KvStore*>& caches) const;
  // DecodeBatch with the logits F32 [b, vocab] left in the backend's memory
  // (workspace->logits()), for a sampler that reads them there (runtime/model/row_sampling.h).
  // The workspace is on the decoder's backend; see DecodeWorkspace for when it may be reused.
  // With decode graphs on a backend that captures, the step runs as a graph kept in the
  // workspace, captured the first time its shape is seen: the batch padded to a captured size
  // (DecodeRowsFor; the padding rows attend over nothing and their results are dropped), each
  // layer's span tables sized to a power of two and DecodeAttentionArgs::max_rows to one, so
  // that one graph serves a batch size while the caches grow within those bounds. The logits
  // are those of the same step run op by op (decode_graphs off) bit for bit: the ops and their
  // arguments are the same. A shape whose capture fails runs op by op.
  absl::Status DecodeBatchInto(const std::vector<int32_t>& tokens,
                               const std::vector<KvStore*>& caches,
                               DecodeWorkspace* workspace) const;
  // Whether `cache` can take another decode step: FailedPrecondition without a prefill,
  // OutOfRange once its next position reaches the context. DecodeBatch checks every cache.
  absl::Status CheckCanDecode(const KvStore& cache) const;

  int n_layers() const { return static_cast<int>(w_.layers.size()); }
  // Whether decode steps run as captured graphs: decode_graphs on a backend that captures.
  bool captures_decode_steps() const { return decode_graphs_; }
  int kv_dim() const { return n_kv_heads_ * head_dim_; }
  // How many prefill runs were planned rather than found among the kept plans (PlanPrefill).
  int64_t prefill_plans_made() const;

 private:
  // The values of a planned step over n rows (kernels/step.h, docs/design.md §6): the hidden
  // states, position ids and (decode) logits are bound to the caller's arrays; the rest live in
  // the run's workspace. After a layer's ops, q, k and v hold that layer's RoPE'd queries, new
  // keys and new values, which the Call after them appends to the cache.
  struct StepValues {
    StepValueId x, positions, logits = kNoStepValue;  // bound
    StepValueId segments = kNoStepValue;              // bound: a batched prefill's runs
    StepValueId h, q, k, v, attn, gate, up, lse = kNoStepValue;
  };
  // positions: I32 [n, rope_axes_] in a prefill, I32 [n] in a decode step (whose rows are
  // text: every axis at one position). n_segments > 0: a batched prefill's runs, I32
  // [n_segments + 1], bound after the positions.
  StepValues DescribeValues(StepDesc& desc, int n, bool with_lse, bool prefill,
                            int n_segments = 0) const;
  // Layer l's ops over n rows. `prefill`: the rows attend to each other (Attention op, with the
  // LSE when the values have one; within each run where the values have segments); otherwise a
  // Call with id `call_id` sits between RoPE and the output projection, where the engine appends
  // each sequence's row and attends over its cache.
  void DescribeLayer(StepDesc& desc, const StepValues& v, int l, int n, bool prefill, int call_id,
                     int n_segments = 0) const;
  // The rows' rotary positions I32 [n, rope_axes_] and the cache's rope_delta (PrefillInto's
  // `mrope`).
  absl::Status RotaryRows(const std::vector<int32_t>& positions, const MropePositions* mrope,
                          std::vector<int32_t>* rotary, int32_t* rope_delta) const;
  struct BackendStage;
  struct PromptRows;
  // Checks one prompt of a prefill, runs its pruner's Begin (a stage before the LLM compacts
  // its host rows) and fills `p` (its rows uploaded later).
  absl::Status BeginPrompt(PrefillSequence& in, PromptRows* p) const;
  // After the last layer: the prompt's stages decided in the backend's memory copied back and
  // handed to its pruner's Finish, the cache's positions completed.
  absl::Status FinishPrompt(PromptRows* p) const;
  // Layers [first, last] of a prefill over n rows in n_segments runs (0: one prompt), with a
  // Call before each layer (id 2l) and after it (id 2l + 1): planned up to the pruners' next
  // scheduled stage, and again after every pruning stage, for the rows it leaves. Plans are kept
  // by their shape (up to kMaxKeptPrefillPlans, the oldest dropped first): a prompt of a length
  // seen before, pruned by the same schedule, plans none of its runs again (HAP at 32 of 576
  // plans a run per layer).
  absl::StatusOr<std::shared_ptr<const PlannedStep>> PlanPrefill(int first, int last, int n,
                                                                 int n_segments, bool with_lse,
                                                                 StepValues* values) const;
  // A whole decode step of b sequences, the final norm and LM head included, with a Call (id l)
  // at each layer's attention. Planned once per batch size and kept.
  absl::StatusOr<std::shared_ptr<const PlannedStep>> DecodePlan(int b, StepValues* values) const;
  // Takes every layer's row slot of each cache and packs the step's tables into `ws` (its
  // host tables), then uploads them: the step's one copy to the backend. `fixed`: laid out for a
  // captured step (the padding rows, the tables' bounds; ws->shape_ says what fixes the ops).
  absl::Status PackDecodeTables(const std::vector<int32_t>& tokens,
                                const std::vector<int32_t>& positions,
                                const std::vector<KvStore*>& caches, bool fixed,
                                DecodeWorkspace* ws) const;
  // Runs a step's ops (`enqueue`) as the graph `ws` keeps for its shape and buffers, capturing
  // it first when there is none; op by op when capturing that shape failed.
  absl::Status RunCaptured(DecodeWorkspace* ws, const std::function<absl::Status()>& enqueue) const;
  // Layer l's attention in a decode step: each sequence's new row (row i of k/v) is stored at its
  // slot, and its query attends over the cache's spans, a group of consecutive sequences whose
  // caches share a dtype at a time (one StoreKvRows and one DecodeAttention: two launches on a
  // device).
  absl::Status AttendDecode(int l, const DecodeWorkspace& ws, const float* q, const float* k_new,
                            const float* v_new, float* attn) const;
  // InvalidArgument for an id outside the vocabulary.
  absl::Status CheckTokenIds(const std::vector<int32_t>& ids) const;
  // Final norm and LM head over rows F32 [n, hidden] (backend memory) into `logits`
  // F32 [n, vocab] in the backend's memory.
  absl::Status LogitsInto(const float* rows, int n, BackendArray<float>* logits) const;

  const Backend& backend_;
  const TextConfig cfg_;
  const TextWeights& w_;
  int d_, n_heads_, n_kv_heads_, head_dim_, ffn_, vocab_;
  float eps_, theta_, scale_;
  int rope_axes_;  // 3 with M-RoPE, else 1
  DType attention_operands_;
  bool decode_graphs_;  // decode_graphs and the backend captures
  // Decode plans by batch size (up to kMaxKeptDecodePlans; larger batches plan per step).
  static constexpr int kMaxKeptDecodePlans = 64;
  mutable std::mutex plans_mu_;
  mutable std::map<int, std::pair<std::shared_ptr<const PlannedStep>, StepValues>> decode_plans_;
  // Prefill plans by (first, last, n, n_segments, with_lse), and their keys oldest first.
  static constexpr size_t kMaxKeptPrefillPlans = 128;
  using PrefillPlanKey = std::array<int, 5>;
  mutable std::map<PrefillPlanKey, std::pair<std::shared_ptr<const PlannedStep>, StepValues>>
      prefill_plans_;
  mutable std::deque<PrefillPlanKey> prefill_plan_order_;
  mutable int64_t prefill_plans_made_ = 0;  // guarded by plans_mu_
};

}  // namespace hap
