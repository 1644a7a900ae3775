// A miniature prefill for the pruning-method tests: per layer, Q/K for the tokens still present
// (each token's vectors fixed by its layer and original identity), the exact causal softmax maps
// and LSE computed directly, a LayerAttention handed to the pruner, and its decision applied.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/prune/model_dims.h"
#include "runtime/prune/pruner.h"
#include "tests/prune/reference.h"

namespace hap::testref {

struct SimSpec {
  ModelDims dims;  // n_layers, n_heads, n_kv_heads, head_dim, n_visual_tokens are used
  int prefix = 5;  // text tokens before the image
  int text = 7;    // query text after the image
  int d_embed = 16;
  int d_hidden = 24;  // width of the layers' output hidden states (LayerAttention::hidden)
  uint64_t seed = 1;
};

// What the reference sees at one layer.
struct LayerView {
  int layer = 0;
  int n_tokens = 0, vis_begin = 0, n_vis = 0, text_begin = 0;
  std::vector<std::vector<std::vector<double>>> p;  // [H][n][n] causal softmax
  std::vector<int> present;                         // original visual ids present
  std::vector<float> k;                             // F32 [n, KVH·hd] the layer's keys
  std::vector<float> hidden;                        // F32 [n, d_hidden] its output states
  int d_hidden = 0;
};

// The reference's verdict for a layer: nullopt = no pruning here; else the reference scores of
// the present tokens and how many to keep.
struct RefPrune {
  std::vector<double> scores;
  int keep = 0;
};
using RefFn = std::function<std::optional<RefPrune>(const LayerView&, const Pruner&)>;

class Sim {
 public:
  explicit Sim(const SimSpec& s) : s_(s) {
    const ModelDims& d = s.dims;
    const int n = s.prefix + d.n_visual_tokens + s.text;
    q_.resize(d.n_layers);
    k_.resize(d.n_layers);
    for (int l = 0; l < d.n_layers; ++l) {
      q_[l] = RandomNormal(size_t(n) * d.n_heads * d.head_dim, s.seed * 1000 + 2 * l, 1.6f);
      k_[l] = RandomNormal(size_t(n) * d.n_kv_heads * d.head_dim, s.seed * 1000 + 2 * l + 1, 1.6f);
      // Head 0 of every layer is "dispersed": the query text has zero queries, so it spreads
      // its attention evenly over the visual tokens (PAQ = 0). Head 1 is a "sink": every text
      // row has the same query, so all rows favour the same visual tokens (PAQ = 0 although the
      // rows are peaked). The mean over heads and PAQ weighting then rank tokens differently.
      const size_t row = size_t(d.n_heads) * d.head_dim;
      const size_t first_text = s.prefix + d.n_visual_tokens;
      for (int t = 0; t < s.text; ++t) {
        float* qt = q_[l].data() + (first_text + t) * row;
        for (int e = 0; e < d.head_dim; ++e) {
          qt[e] = 0;
          if (d.n_heads > 1) qt[d.head_dim + e] = q_[l][first_text * row + d.head_dim + e];
        }
      }
    }
    embed_ = RandomNormal(size_t(n) * s.d_embed, s.seed * 7 + 3, 1.f);
    // Output hidden states: random, except that every third visual token nearly duplicates the
    // one before it (so DART's cosines have near-ties between the copies to order consistently).
    h_.resize(d.n_layers);
    for (int l = 0; l < d.n_layers; ++l) {
      h_[l] = RandomNormal(size_t(n) * s.d_hidden, s.seed * 1000 + 500 + l, 1.f);
      const std::vector<float> noise =
          RandomNormal(size_t(n) * s.d_hidden, s.seed * 1000 + 700 + l, 0.05f);
      for (int v = 1; v < d.n_visual_tokens; v += 3) {
        const size_t row = size_t(s.prefix + v) * s.d_hidden;
        for (int c = 0; c < s.d_hidden; ++c) {
          h_[l][row + c] = 1.5f * h_[l][row - s.d_hidden + c] + noise[row + c];
        }
      }
    }
  }

  const std::vector<float>& embeddings() const { return embed_; }
  int total_tokens() const { return s_.prefix + s_.dims.n_visual_tokens + s_.text; }

  PrefillInput Input() const {
    PrefillInput in;
    in.embeddings = embed_.data();
    in.n_tokens = total_tokens();
    in.d_model = s_.d_embed;
    in.vis_begin = s_.prefix;
    in.n_vis = s_.dims.n_visual_tokens;
    in.n_layers = s_.dims.n_layers;
    return in;
  }

  // Runs every layer through `pruner`, checking each decision against `ref`. Returns the
  // visual tokens present at each layer; *swaps counts near-tie swaps accepted.
  std::vector<int> Run(Pruner& pruner, const RefFn& ref, int* swaps = nullptr) {
    const ModelDims& d = s_.dims;
    const int H = d.n_heads, KVH = d.n_kv_heads, hd = d.head_dim;
    std::vector<int> present(d.n_visual_tokens);
    for (int i = 0; i < d.n_visual_tokens; ++i) present[i] = i;
    std::vector<int> per_layer;
    for (int l = 0; l < d.n_layers; ++l) {
      // Sequence ids in original numbering: prefix, present visual, text.
      std::vector<int> ids;
      for (int i = 0; i < s_.prefix; ++i) ids.push_back(i);
      for (int v : present) ids.push_back(s_.prefix + v);
      for (int t = 0; t < s_.text; ++t) ids.push_back(s_.prefix + d.n_visual_tokens + t);
      const int n = static_cast<int>(ids.size());
      std::vector<float> q(size_t(n) * H * hd), k(size_t(n) * KVH * hd), lse(size_t(H) * n);
      std::vector<float> hidden(size_t(n) * s_.d_hidden);
      for (int r = 0; r < n; ++r) {
        std::copy_n(q_[l].begin() + size_t(ids[r]) * H * hd, H * hd,
                    q.begin() + size_t(r) * H * hd);
        std::copy_n(k_[l].begin() + size_t(ids[r]) * KVH * hd, KVH * hd,
                    k.begin() + size_t(r) * KVH * hd);
        std::copy_n(h_[l].begin() + size_t(ids[r]) * s_.d_hidden, s_.d_hidden,
                    hidden.begin() + size_t(r) * s_.d_hidden);
      }
      LayerView view;
      view.layer = l;
      view.n_tokens = n;
      view.vis_begin = s_.prefix;
      view.n_vis = static_cast<int>(present.size());
      view.text_begin = s_.prefix + view.n_vis;
      view.present = present;
      view.k = k;
      view.hidden = hidden;
      view.d_hidden = s_.d_hidden;
      view.p.resize(H);
      const double scale = 1.0 / std::sqrt(double(hd));
      for (int h = 0; h < H; ++h) {
        std::vector<double> row_lse;
        CausalAttention(q, k, n, H, KVH, hd, h, scale, &view.p[h], &row_lse);
        for (int r = 0; r < n; ++r) lse[size_t(h) * n + r] = static_cast<float>(row_lse[r]);
      }
      LayerAttention att;
      att.layer = l;
      att.n_tokens = n;
      att.n_heads = H;
      att.n_kv_heads = KVH;
      att.head_dim = hd;
      att.scale = static_cast<float>(scale);
      att.q = q.data();
      att.k = k.data();
      att.lse = lse.data();
      att.vis_begin = s_.prefix;
      att.n_vis = view.n_vis;
      att.hidden = hidden.data();
      att.d_model = s_.d_hidden;
      per_layer.push_back(view.n_vis);

      auto got = pruner.AfterLayer(att);
      EXPECT_TRUE(got.ok()) << "layer " << l << ": " << got.status();
      if (!got.ok()) return per_layer;
      const std::optional<RefPrune> want = ref(view, pruner);
      if (!want.has_value()) {
        EXPECT_FALSE(got->has_value()) << "layer " << l << ": pruned where the reference does not";
        continue;
      }
      EXPECT_TRUE(got->has_value()) << "layer " << l << ": the reference prunes here";
      if (!got->has_value()) return per_layer;
      const int s =
          ExpectKeptSet(**got, want->scores, want->keep, 1e-6, "layer " + std::to_string(l));
      if (swaps) *swaps += s;
      std::vector<int> next;
      for (int i : **got) next.push_back(present[i]);
      present = next;
    }
    return per_layer;
  }

 private:
  SimSpec s_;
  std::vector<std::vector<float>> q_, k_;  // [L] F32 [n_orig, H·hd] / [n_orig, KVH·hd]
  std::vector<std::vector<float>> h_;      // [L] F32 [n_orig, d_hidden]
  std::vector<float> embed_;               // F32 [n_orig, d_embed]
};

}  // namespace hap::testref
