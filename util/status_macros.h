// Debian's Abseil (20220623) ships neither absl/log nor the status macros; these are the two we
// use.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MOAT_STATUS_CONCAT_INNER_(a, b) a##b
#define MOAT_STATUS_CONCAT_(a, b) MOAT_STATUS_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr): returns the status of `expr` from the enclosing function if it is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status moat_status_ = (expr);        \
    if (!moat_status_.ok()) return moat_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr; on error returns it, else moves the value
// into `lhs` (which may be a declaration such as `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  MOAT_ASSIGN_OR_RETURN_IMPL_(MOAT_STATUS_CONCAT_(moat_statusor_, __LINE__), lhs, expr)
#define MOAT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)   \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
