// The parity table's rows, one function per kernel family (rows_<family>.cc); AllCases
// (harness.cc) calls each in turn. A __global__ kernel without a case fails
// tests/kernels/cuda/coverage_test.cc.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cuda/parity/harness.h"

namespace hap::cuda::parity {

void AddNormCases(std::vector<Case>& cases);         // rows_norm.cc
void AddElementwiseCases(std::vector<Case>& cases);  // rows_elementwise.cc
void AddAttentionCases(std::vector<Case>& cases);    // rows_attention.cc
void AddPruneCases(std::vector<Case>& cases);        // rows_prune.cc
void AddGemmCases(std::vector<Case>& cases);         // rows_gemm.cc
void AddVisionZipCases(std::vector<Case>& cases);    // rows_visionzip.cc
void AddSamplingCases(std::vector<Case>& cases);     // rows_sampling.cc

// Values ranking code gets wrong: ±0 (equal under ==), ±inf, the smallest subnormals and the
// largest finite floats. Shared by the top-k and sampling rows.
inline constexpr float kSpecialFloats[8] = {0.f,
                                            -0.f,
                                            INFINITY,
                                            -INFINITY,
                                            std::numeric_limits<float>::denorm_min(),
                                            -std::numeric_limits<float>::denorm_min(),
                                            std::numeric_limits<float>::max(),
                                            -std::numeric_limits<float>::max()};

}  // namespace hap::cuda::parity
