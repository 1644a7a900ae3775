// Trains a LLaMA-style BPE tokenizer.model with Debian's `spm_train` (used by hapctl make-tiny).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace hap {

// The spm_train options, shared with the project's Python training so that both produce the
// same vocabulary from the same corpus (N = vocab_size is appended separately):
//   --model_type=bpe                  LLaMA's tokenizer is BPE.
//   --character_coverage=1.0          every corpus character becomes a piece ...
//   --byte_fallback=true              ... and anything else falls back to <0xNN> byte pieces,
//                                     so no input is ever <unk>.
//   --split_digits=true               one piece per digit, as LLaMA.
//   --normalization_rule_name=identity --remove_extra_whitespaces=false
//                                     text is tokenised verbatim (no NFKC, spaces kept).
//   --add_dummy_prefix=true           a leading '▁' as LLaMA (prompt building relies on it).
//   --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1
//                                     LLaMA's special ids; llava-hf appends image/pad ids later.
//   --num_threads=1                   single-threaded BPE merges are deterministic.
// BPE training does not sample sentences unless --input_sentence_size is set, so no seed
// option is needed for a reproducible model.
inline constexpr const char* kSpmTrainOptions[] = {
    "--model_type=bpe",
    "--character_coverage=1.0",
    "--byte_fallback=true",
    "--split_digits=true",
    "--normalization_rule_name=identity",
    "--remove_extra_whitespaces=false",
    "--add_dummy_prefix=true",
    "--unk_id=0",
    "--bos_id=1",
    "--eos_id=2",
    "--pad_id=-1",
    "--num_threads=1",
};

// Runs `spm_train` (found on PATH) on `corpus_path` and writes the model to `out_model_path`.
// The run happens in a private temporary directory with relative paths, so the trainer spec
// stored inside the model is the same wherever the corpus lives and the output is
// byte-reproducible. Errors: NotFound for a missing corpus; FailedPrecondition when spm_train
// is not installed; Internal with spm_train's output when it fails (e.g. vocab_size too large
// for the corpus).
absl::Status TrainTokenizer(const std::string& corpus_path, const std::string& out_model_path,
                            int vocab_size);

}  // namespace hap
