// Status propagation macros. Debian's Abseil (20220623) ships neither RETURN_IF_ERROR nor
// ASSIGN_OR_RETURN, so they are defined once here for the whole project.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HAP_STATUS_CONCAT_INNER(a, b) a##b
#define HAP_STATUS_CONCAT(a, b) HAP_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the enclosing function if not OK.
#define HAP_RETURN_IF_ERROR(expr)                    \
  do {                                               \
    ::absl::Status hap_status_ = (expr);             \
    if (!hap_status_.ok()) return hap_status_;       \
  } while (0)

// HAP_ASSIGN_OR_RETURN(auto x, MakeX()); declares/assigns `lhs` from an absl::StatusOr<T> or
// returns its error status.
#define HAP_ASSIGN_OR_RETURN(lhs, expr) \
  HAP_ASSIGN_OR_RETURN_IMPL(HAP_STATUS_CONCAT(hap_statusor_, __LINE__), lhs, expr)
#define HAP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()
