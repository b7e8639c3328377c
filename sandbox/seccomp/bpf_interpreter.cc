#include "sandbox/seccomp/bpf_interpreter.h"

#include <array>
#include <bitset>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moat::sandbox {
namespace {

constexpr uint32_t kDataSize = sizeof(struct seccomp_data);

// Opcodes seccomp accepts (kernel/seccomp.c, seccomp_check_filter); anything else is refused
// when the filter is attached, so the interpreter refuses it too.
bool SeccompAllows(uint16_t code) {
  switch (code) {
    case BPF_LD | BPF_W | BPF_ABS:
    case BPF_LD | BPF_W | BPF_LEN:
    case BPF_LDX | BPF_W | BPF_LEN:
    case BPF_RET | BPF_K:
    case BPF_RET | BPF_A:
    case BPF_ALU | BPF_ADD | BPF_K:
    case BPF_ALU | BPF_ADD | BPF_X:
    case BPF_ALU | BPF_SUB | BPF_K:
    case BPF_ALU | BPF_SUB | BPF_X:
    case BPF_ALU | BPF_MUL | BPF_K:
    case BPF_ALU | BPF_MUL | BPF_X:
    case BPF_ALU | BPF_DIV | BPF_K:
    case BPF_ALU | BPF_DIV | BPF_X:
    case BPF_ALU | BPF_AND | BPF_K:
    case BPF_ALU | BPF_AND | BPF_X:
    case BPF_ALU | BPF_OR | BPF_K:
    case BPF_ALU | BPF_OR | BPF_X:
    case BPF_ALU | BPF_XOR | BPF_K:
    case BPF_ALU | BPF_XOR | BPF_X:
    case BPF_ALU | BPF_LSH | BPF_K:
    case BPF_ALU | BPF_LSH | BPF_X:
    case BPF_ALU | BPF_RSH | BPF_K:
    case BPF_ALU | BPF_RSH | BPF_X:
    case BPF_ALU | BPF_NEG:
    case BPF_LD | BPF_IMM:
    case BPF_LDX | BPF_IMM:
    case BPF_MISC | BPF_TAX:
    case BPF_MISC | BPF_TXA:
    case BPF_LD | BPF_MEM:
    case BPF_LDX | BPF_MEM:
    case BPF_ST:
    case BPF_STX:
    case BPF_JMP | BPF_JA:
    case BPF_JMP | BPF_JEQ | BPF_K:
    case BPF_JMP | BPF_JEQ | BPF_X:
    case BPF_JMP | BPF_JGE | BPF_K:
    case BPF_JMP | BPF_JGE | BPF_X:
    case BPF_JMP | BPF_JGT | BPF_K:
    case BPF_JMP | BPF_JGT | BPF_X:
    case BPF_JMP | BPF_JSET | BPF_K:
    case BPF_JMP | BPF_JSET | BPF_X:
      return true;
    default:
      return false;
  }
}

absl::Status Invalid(size_t pc, const struct sock_filter& insn, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrFormat("seccomp BPF instruction %d {code=0x%04x jt=%d jf=%d k=0x%08x}: %s", pc,
                      insn.code, insn.jt, insn.jf, insn.k, why));
}

uint32_t Alu(uint16_t op, uint32_t a, uint32_t operand) {
  switch (op) {
    case BPF_ADD:
      return a + operand;
    case BPF_SUB:
      return a - operand;
    case BPF_MUL:
      return a * operand;
    case BPF_DIV:
      return a / operand;  // the caller has ruled out zero
    case BPF_AND:
      return a & operand;
    case BPF_OR:
      return a | operand;
    case BPF_XOR:
      return a ^ operand;
    // The kernel runs classic filters as 32-bit eBPF, whose shifts use the low five bits.
    case BPF_LSH:
      return a << (operand & 31);
    case BPF_RSH:
      return a >> (operand & 31);
    case BPF_NEG:
      return 0u - a;
  }
  return a;  // unreachable for validated programs
}

bool JumpTaken(uint16_t op, uint32_t a, uint32_t operand) {
  switch (op) {
    case BPF_JEQ:
      return a == operand;
    case BPF_JGT:
      return a > operand;
    case BPF_JGE:
      return a >= operand;
    case BPF_JSET:
      return (a & operand) != 0;
  }
  return false;  // unreachable for validated programs
}

}  // namespace

struct seccomp_data MakeSeccompData(uint32_t audit_arch, int nr,
                                    std::initializer_list<uint64_t> args,
                                    uint64_t instruction_pointer) {
  struct seccomp_data data;
  std::memset(&data, 0, sizeof(data));
  data.nr = nr;
  data.arch = audit_arch;
  data.instruction_pointer = instruction_pointer;
  size_t i = 0;
  for (uint64_t arg : args) {
    if (i == 6) break;  // syscalls have six argument registers; extra values are ignored
    data.args[i++] = arg;
  }
  return data;
}

absl::Status ValidateSeccompBpf(absl::Span<const struct sock_filter> program) {
  if (program.empty() || program.size() > BPF_MAXINSNS) {
    return absl::InvalidArgumentError(absl::StrCat("seccomp BPF program has ", program.size(),
                                                   " instructions; the kernel accepts 1 to ",
                                                   BPF_MAXINSNS));
  }
  const size_t len = program.size();
  for (size_t pc = 0; pc < len; ++pc) {
    const struct sock_filter& insn = program[pc];
    if (!SeccompAllows(insn.code)) return Invalid(pc, insn, "opcode not allowed in seccomp");
    switch (BPF_CLASS(insn.code)) {
      case BPF_LD:
      case BPF_LDX:
      case BPF_ST:
      case BPF_STX:
        if (BPF_MODE(insn.code) == BPF_ABS && (insn.k >= kDataSize || insn.k % 4 != 0)) {
          return Invalid(pc, insn, "load outside struct seccomp_data or not word-aligned");
        }
        if ((BPF_CLASS(insn.code) == BPF_ST || BPF_CLASS(insn.code) == BPF_STX ||
             BPF_MODE(insn.code) == BPF_MEM) &&
            insn.k >= BPF_MEMWORDS) {
          return Invalid(pc, insn, "scratch memory index out of range");
        }
        break;
      case BPF_ALU:
        if (BPF_SRC(insn.code) == BPF_K && BPF_OP(insn.code) == BPF_DIV && insn.k == 0) {
          return Invalid(pc, insn, "division by constant zero");
        }
        if (BPF_SRC(insn.code) == BPF_K &&
            (BPF_OP(insn.code) == BPF_LSH || BPF_OP(insn.code) == BPF_RSH) && insn.k >= 32) {
          return Invalid(pc, insn, "shift by 32 or more");
        }
        break;
      case BPF_JMP:
        if (BPF_OP(insn.code) == BPF_JA) {
          if (insn.k >= len - pc - 1) return Invalid(pc, insn, "jump past the end");
        } else if (pc + 1 + insn.jt >= len || pc + 1 + insn.jf >= len) {
          return Invalid(pc, insn, "jump past the end");
        }
        break;
      default:
        break;
    }
  }
  if (BPF_CLASS(program.back().code) != BPF_RET) {
    return Invalid(len - 1, program.back(), "last instruction is not a return");
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> RunSeccompBpf(absl::Span<const struct sock_filter> program,
                                       const struct seccomp_data& data) {
  absl::Status valid = ValidateSeccompBpf(program);
  if (!valid.ok()) return valid;

  // Word loads read the record as the kernel lays it out in memory, in host byte order.
  std::array<uint32_t, kDataSize / 4> words;
  std::memcpy(words.data(), &data, kDataSize);

  uint32_t a = 0;
  uint32_t x = 0;
  std::array<uint32_t, BPF_MEMWORDS> mem{};
  std::bitset<BPF_MEMWORDS> written;
  // Every jump goes forward, so the loop ends within program.size() steps.
  for (size_t pc = 0; pc < program.size(); ++pc) {
    const struct sock_filter& insn = program[pc];
    const uint16_t code = insn.code;
    switch (BPF_CLASS(code)) {
      case BPF_RET:
        return BPF_RVAL(code) == BPF_A ? a : insn.k;
      case BPF_LD:
      case BPF_LDX: {
        uint32_t value = 0;
        switch (BPF_MODE(code)) {
          case BPF_ABS:
            value = words[insn.k / 4];
            break;
          case BPF_LEN:
            value = kDataSize;
            break;
          case BPF_IMM:
            value = insn.k;
            break;
          case BPF_MEM:
            if (!written[insn.k]) return Invalid(pc, insn, "reads scratch memory never written");
            value = mem[insn.k];
            break;
        }
        (BPF_CLASS(code) == BPF_LD ? a : x) = value;
        break;
      }
      case BPF_ST:
      case BPF_STX:
        mem[insn.k] = BPF_CLASS(code) == BPF_ST ? a : x;
        written.set(insn.k);
        break;
      case BPF_ALU: {
        const uint32_t operand = BPF_SRC(code) == BPF_X ? x : insn.k;
        if (BPF_OP(code) == BPF_DIV && operand == 0) return 0u;  // the kernel's answer
        a = Alu(BPF_OP(code), a, operand);
        break;
      }
      case BPF_JMP:
        if (BPF_OP(code) == BPF_JA) {
          pc += insn.k;
        } else {
          const uint32_t operand = BPF_SRC(code) == BPF_X ? x : insn.k;
          pc += JumpTaken(BPF_OP(code), a, operand) ? insn.jt : insn.jf;
        }
        break;
      case BPF_MISC:
        if (BPF_MISCOP(code) == BPF_TAX) {
          x = a;
        } else {
          a = x;
        }
        break;
    }
  }
  // Unreachable: validation guarantees the last instruction returns and jumps stay inside.
  return absl::InternalError("seccomp BPF program ran past its end");
}

std::string SeccompActionName(uint32_t verdict) {
  const uint32_t data = verdict & SECCOMP_RET_DATA;
  switch (verdict & SECCOMP_RET_ACTION_FULL) {
    case SECCOMP_RET_KILL_PROCESS:
      return "KILL_PROCESS";
    case SECCOMP_RET_KILL_THREAD:
      return "KILL_THREAD";
    case SECCOMP_RET_TRAP:
      return absl::StrCat("TRAP(", data, ")");
    case SECCOMP_RET_ERRNO:
      return absl::StrCat("ERRNO(", data, ")");
    case SECCOMP_RET_USER_NOTIF:
      return "USER_NOTIF";
    case SECCOMP_RET_TRACE:
      return absl::StrCat("TRACE(", data, ")");
    case SECCOMP_RET_LOG:
      return "LOG";
    case SECCOMP_RET_ALLOW:
      return "ALLOW";
  }
  return absl::StrFormat("UNKNOWN(0x%08x)", verdict);
}

}  // namespace moat::sandbox
