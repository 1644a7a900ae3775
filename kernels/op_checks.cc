#include "kernels/op_checks.h"

#include <string>

#include "absl/strings/str_format.h"

namespace hap {
namespace {

absl::Status ValidateOne(const DecodeAttentionArgs& a) {
  int rows = 0;
  for (int i = 0; i < a.n_spans; ++i) {
    if (a.spans[i].rows < 0 || (a.spans[i].rows > 0 && (!a.spans[i].k || !a.spans[i].v))) {
      return absl::InvalidArgumentError(absl::StrFormat("DecodeAttention: bad span %d", i));
    }
    rows += a.spans[i].rows;
  }
  if (!a.q || !a.out || (a.n_spans > 0 && !a.spans) || rows <= 0 || a.n_heads <= 0 ||
      a.n_kv_heads <= 0 || a.head_dim <= 0 || a.n_heads % a.n_kv_heads != 0 ||
      (a.kv_dtype != DType::kF32 && a.kv_dtype != DType::kBF16)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "DecodeAttention: bad arguments rows=%d heads=%d kv_heads=%d head_dim=%d dtype=%s", rows,
        a.n_heads, a.n_kv_heads, a.head_dim, std::string(DTypeName(a.kv_dtype))));
  }
  return absl::OkStatus();
}

}  // namespace

DecodeAttentionArgs DecodeAttentionSequence(const DecodeAttentionArgs& a, int i) {
  DecodeAttentionArgs s = a;
  const int64_t row = int64_t{a.n_heads} * a.head_dim;
  s.q = a.q + i * row;
  s.out = a.out + i * row;
  if (a.span_begin != nullptr) {
    s.spans = a.spans + a.span_begin[i];
    s.n_spans = a.span_begin[i + 1] - a.span_begin[i];
  }
  s.n_seqs = 1;
  s.span_begin = nullptr;
  return s;
}

absl::Status ValidateDecodeAttention(const DecodeAttentionArgs& a) {
  if (a.n_seqs < 1 || (a.n_seqs > 1 && a.span_begin == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("DecodeAttention: %d sequences %s span_begin", a.n_seqs,
                        a.span_begin == nullptr ? "without" : "with"));
  }
  if (a.span_begin != nullptr) {
    if (a.span_begin[0] != 0 || a.span_begin[a.n_seqs] != a.n_spans) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "DecodeAttention: span_begin runs from %d to %d, expected 0 to n_spans = %d",
          a.span_begin[0], a.span_begin[a.n_seqs], a.n_spans));
    }
    for (int i = 0; i < a.n_seqs; ++i) {
      if (a.span_begin[i + 1] < a.span_begin[i]) {
        return absl::InvalidArgumentError(
            absl::StrFormat("DecodeAttention: span_begin decreases after sequence %d", i));
      }
    }
  }
  for (int i = 0; i < a.n_seqs; ++i) {
    if (absl::Status s = ValidateOne(DecodeAttentionSequence(a, i)); !s.ok()) {
      if (a.n_seqs == 1) return s;
      return absl::InvalidArgumentError(
          absl::StrFormat("sequence %d of %d: %s", i, a.n_seqs, s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace hap
