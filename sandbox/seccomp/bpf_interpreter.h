// A small classic-BPF interpreter with the kernel's seccomp rules, so tests can ask "what does
// this filter do with syscall N on arch A with these arguments?" without loading it. Loading is
// one-way (a filter cannot be removed) and can only ever test the machine's own architecture;
// the interpreter checks an aarch64 program on an x86-64 host just as well.
#pragma once

#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace moat::sandbox {

// Builds the record the kernel passes to a filter. Unlisted arguments are zero.
struct seccomp_data MakeSeccompData(uint32_t audit_arch, int nr,
                                    std::initializer_list<uint64_t> args = {},
                                    uint64_t instruction_pointer = 0);

// Checks what the kernel checks when the filter is attached (bpf_check_classic plus
// seccomp_check_filter): 1..BPF_MAXINSNS instructions, only the opcodes seccomp accepts,
// aligned word loads inside struct seccomp_data, jumps that land inside the program,
// no division by a constant zero, and a return as the last instruction.
absl::Status ValidateSeccompBpf(absl::Span<const struct sock_filter> program);

// Validates, then runs the program on `data` and returns the filter's 32-bit verdict
// (SECCOMP_RET_* action | data). As in the kernel, a division by X == 0 returns 0, which is
// SECCOMP_RET_KILL_THREAD. Reading scratch memory never written on the path taken is an error
// (the kernel rejects such programs at load time).
absl::StatusOr<uint32_t> RunSeccompBpf(absl::Span<const struct sock_filter> program,
                                       const struct seccomp_data& data);

// "ALLOW", "ERRNO(1)", "USER_NOTIF", "KILL_PROCESS", ... for readable test failures.
std::string SeccompActionName(uint32_t verdict);

}  // namespace moat::sandbox
