// Parity rows: VisionZip's merge of contextual tokens against kernels/cpu/prune/visionzip_merge.h.
// The rows are compared with kF32Tol (the kernels do the reference's F64 arithmetic in its order:
// 0 on the emulation), the merged counts exactly. VisionZip's CLS attention is the
// TextVisualAttention rows of rows_prune.cc (one query row over every token).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/prune/visionzip_merge.h"
#include "kernels/cuda/parity/rows.h"
#include "kernels/cuda/visionzip_merge.h"

namespace hap::cuda::parity {
namespace {

struct MergeShape {
  int n_tokens, n_heads, head_dim, d_model, n_targets, n_sources;
  bool ties;  // duplicated and zero keys: exact ties between targets
};

std::string MergeName(const MergeShape& s) {
  return "VisionZipMerge n" + std::to_string(s.n_tokens) + " h" + std::to_string(s.n_heads) + " d" +
         std::to_string(s.head_dim) + " D" + std::to_string(s.d_model) + " " +
         std::to_string(s.n_targets) + "<-" + std::to_string(s.n_sources) + (s.ties ? " ties" : "");
}

// VisionZip's lists: token 0 and every 11th token are dominant (left out); of the rest, targets at
// a uniform stride and the other tokens sources, in token order.
void Lists(const MergeShape& s, std::vector<int>* targets, std::vector<int>* sources) {
  std::vector<int> rest;
  for (int t = 1; t < s.n_tokens; ++t) {
    if (t % 11 != 0) rest.push_back(t);
  }
  const int n_rest = s.n_targets + s.n_sources;
  rest.resize(std::min<size_t>(rest.size(), n_rest));
  const int step = std::max(1, n_rest / s.n_targets);
  std::vector<char> is_target(rest.size(), 0);
  for (int c = 0; c < s.n_targets; ++c) {
    targets->push_back(rest[c * step]);
    is_target[c * step] = 1;
  }
  for (size_t r = 0; r < rest.size(); ++r) {
    if (!is_target[r]) sources->push_back(rest[r]);
  }
}

CaseResult MergeCase(const MergeShape& s) {
  const uint64_t seed = 1300 + s.n_tokens + s.head_dim + s.d_model;
  const int64_t kw = int64_t{s.n_heads} * s.head_dim;
  std::vector<float> k = RandomFloats(s.n_tokens * kw, seed);
  const std::vector<float> hidden =
      RandomFloats(int64_t{s.n_tokens} * s.d_model, seed + 1, -3.f, 3.f);
  std::vector<int> targets, sources;
  Lists(s, &targets, &sources);
  Checker c;
  if (static_cast<int>(targets.size()) != s.n_targets ||
      static_cast<int>(sources.size()) != s.n_sources) {
    c.Fail("the case's token lists do not have the sizes it names");
    return c.Result(0);
  }
  if (s.ties && s.n_targets >= 3 && s.n_sources >= 2) {
    // Target 2 has target 1's key (every source equally close to both: 1 must win), source 0 is
    // target 2's key scaled (similarity 1 with targets 1 and 2: 1 wins), source 1 a zero key
    // (similarity 0 with every target: target 0 wins).
    auto row = [&](int t) { return k.begin() + t * kw; };
    std::copy(row(targets[1]), row(targets[1]) + kw, row(targets[2]));
    std::transform(row(targets[2]), row(targets[2]) + kw, row(sources[0]),
                   [](float v) { return 0.5f * v; });
    std::fill(row(sources[1]), row(sources[1]) + kw, 0.f);
  }

  VisionZipMergeArgs a{.n_tokens = s.n_tokens,
                       .n_heads = s.n_heads,
                       .head_dim = s.head_dim,
                       .d_model = s.d_model,
                       .n_targets = s.n_targets,
                       .n_sources = s.n_sources};
  std::vector<float> want(int64_t{s.n_targets} * s.d_model);
  std::vector<int> want_count(s.n_targets);
  VisionZipMergeArgs ref = a;
  ref.k = k.data();
  ref.hidden = hidden.data();
  ref.targets = targets.data();
  ref.sources = sources.data();
  ref.out = want.data();
  ref.merged_count = want_count.data();
  if (!c.Reference(kernels::VisionZipMerge(ref))) return c.Result(0);
  if (s.ties && s.n_sources >= 2 && (want_count[2] != 0 || want_count[1] == 0)) {
    c.Fail("the reference broke a tie towards the later target");
  }

  DeviceBuffer dk = DeviceBuffer::Of(k), dh = DeviceBuffer::Of(hidden);
  DeviceBuffer dt = DeviceBuffer::Of(targets), ds = DeviceBuffer::Of(sources);
  DeviceBuffer dout(want.size() * sizeof(float)), dcount(want_count.size() * sizeof(int));
  DeviceBuffer work(VisionZipMergeWorkspaceBytes(s.n_targets, s.n_sources, s.head_dim));
  a.k = dk.as<float>();
  a.hidden = dh.as<float>();
  a.targets = dt.as<int>();
  a.sources = s.n_sources > 0 ? ds.as<int>() : nullptr;
  a.out = dout.as<float>();
  a.merged_count = dcount.as<int>();
  KernelStatus st;
  const double ms = TimedMs([&] { return VisionZipMerge(a, work.data(), nullptr); }, &st);
  c.Status(st);
  c.Output("out", dout, want, kF32Tol);
  c.Exact("merged_count", dcount, want_count.data());
  c.Guards("workspace", work);
  c.Unchanged("k", dk, k.data());
  c.Unchanged("hidden", dh, hidden.data());
  c.Unchanged("targets", dt, targets.data());
  c.Unchanged("sources", ds, sources.data());
  return c.Result(ms);
}

// Indices the backend would have refused: a target outside [0, n) gives a NaN row, a source
// outside it a NaN key (so it goes to target 0) and a NaN row 0; the other rows are unaffected.
CaseResult MergeBadIndexCase() {
  const int n = 20, heads = 2, hd = 8, d = 5;
  const std::vector<float> k = RandomFloats(n * heads * hd, 1401);
  const std::vector<float> hidden = RandomFloats(n * d, 1402);
  const std::vector<int> targets = {3, 99, 7, 11};
  const std::vector<int> sources = {1, 2, -4, 5, 6, 8, 9, 10, 12, 13};
  Checker c;
  DeviceBuffer dk = DeviceBuffer::Of(k), dh = DeviceBuffer::Of(hidden);
  DeviceBuffer dt = DeviceBuffer::Of(targets), ds = DeviceBuffer::Of(sources);
  DeviceBuffer dout(targets.size() * d * sizeof(float));
  DeviceBuffer work(VisionZipMergeWorkspaceBytes(4, 10, hd));
  VisionZipMergeArgs a;
  a.k = dk.as<float>();
  a.hidden = dh.as<float>();
  a.n_tokens = n;
  a.n_heads = heads;
  a.head_dim = hd;
  a.d_model = d;
  a.targets = dt.as<int>();
  a.n_targets = 4;
  a.sources = ds.as<int>();
  a.n_sources = 10;
  a.out = dout.as<float>();
  KernelStatus st;
  const double ms = TimedMs([&] { return VisionZipMerge(a, work.data(), nullptr); }, &st);
  c.Status(st);
  c.Guards("out", dout);
  const std::vector<float> got = dout.Download<float>();
  for (int r = 0; r < 4; ++r) {
    for (int e = 0; e < d; ++e) {
      if (std::isnan(got[r * d + e]) != (r < 2)) {
        c.Fail("row " + std::to_string(r) + (r < 2 ? " is not NaN" : " is NaN"));
        return c.Result(ms);
      }
    }
  }
  return c.Result(ms);
}

CaseResult MergeRejectsCase() {
  DeviceBuffer buf(4096);
  VisionZipMergeArgs a;
  a.k = a.hidden = a.out = buf.as<float>();
  a.targets = a.sources = buf.as<int>();
  a.n_tokens = a.n_heads = a.head_dim = a.d_model = a.n_targets = a.n_sources = 2;
  Checker c;
  auto expect_error = [&](const char* what, const VisionZipMergeArgs& bad, void* work) {
    if (VisionZipMerge(bad, work, nullptr).ok) c.Fail(std::string(what) + " was accepted");
  };
  VisionZipMergeArgs bad = a;
  expect_error("a null workspace", a, nullptr);
  bad.targets = nullptr;
  expect_error("null targets", bad, buf.data());
  bad = a;
  bad.n_targets = 0;
  expect_error("0 targets", bad, buf.data());
  bad = a;
  bad.n_sources = -1;
  expect_error("-1 sources", bad, buf.data());
  bad = a;
  bad.head_dim = 0;
  expect_error("head_dim 0", bad, buf.data());
  return c.Result(0);
}

}  // namespace

void AddVisionZipCases(std::vector<Case>& cases) {
  const std::vector<std::string> all = {"VisionZipKeysKernel", "VisionZipAssignKernel",
                                        "VisionZipMergeKernel"};
  // CLIP-L/14-336 at R = 64 (54 dominant, 10 targets over 513 sources) and R = 192 (162 + 30
  // over 385); odd sizes: head_dim above a block of 64, a row over two column blocks, one target.
  for (const MergeShape& s :
       {MergeShape{577, 16, 64, 1024, 10, 513, false},
        MergeShape{577, 16, 64, 1024, 30, 385, false}, MergeShape{41, 3, 8, 37, 5, 27, true},
        MergeShape{65, 2, 100, 130, 7, 50, true}, MergeShape{30, 1, 5, 3, 1, 20, false}}) {
    cases.push_back({MergeName(s), all, [=] { return MergeCase(s); }});
  }
  // No sources: the targets' own rows (only the last kernel runs).
  const MergeShape none{50, 4, 16, 33, 6, 0, false};
  cases.push_back({MergeName(none), {"VisionZipMergeKernel"}, [=] { return MergeCase(none); }});
  cases.push_back({"VisionZipMerge indices outside [0, n) give NaN rows", all,
                   [] { return MergeBadIndexCase(); }});
  cases.push_back({"VisionZipMerge rejects bad arguments", {}, [] { return MergeRejectsCase(); }});
}

}  // namespace hap::cuda::parity
