#include "sandbox/seccomp/bpf_interpreter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/audit.h>

#include <cstddef>
#include <vector>

namespace moat::sandbox {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kNr = offsetof(struct seccomp_data, nr);
constexpr uint32_t kArch = offsetof(struct seccomp_data, arch);
// Little-endian hosts (x86-64, aarch64): the low word of a 64-bit field comes first.
constexpr uint32_t ArgLo(int i) { return offsetof(struct seccomp_data, args) + 8 * i; }
constexpr uint32_t ArgHi(int i) { return ArgLo(i) + 4; }

sock_filter Stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) {
  return BPF_JUMP(code, k, jt, jf);
}

uint32_t Evaluate(const std::vector<sock_filter>& program, const seccomp_data& data) {
  absl::StatusOr<uint32_t> verdict = RunSeccompBpf(program, data);
  EXPECT_TRUE(verdict.ok()) << verdict.status();
  return verdict.value_or(0xdeadbeef);
}

TEST(BpfInterpreterTest, ReturnsConstant) {
  std::vector<sock_filter> program = {Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  EXPECT_EQ(Evaluate(program, MakeSeccompData(AUDIT_ARCH_X86_64, 0)), SECCOMP_RET_ALLOW);
}

TEST(BpfInterpreterTest, DispatchesOnArchAndSyscallNumber) {
  std::vector<sock_filter> program = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, kArch),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      Stmt(BPF_LD | BPF_W | BPF_ABS, kNr),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, 39, 0, 1),
      Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      Stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1),
  };
  EXPECT_EQ(Evaluate(program, MakeSeccompData(AUDIT_ARCH_X86_64, 39)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(Evaluate(program, MakeSeccompData(AUDIT_ARCH_X86_64, 40)), SECCOMP_RET_ERRNO | 1);
  EXPECT_EQ(Evaluate(program, MakeSeccompData(AUDIT_ARCH_I386, 39)), SECCOMP_RET_KILL_PROCESS);
}

TEST(BpfInterpreterTest, ReadsBothHalvesOfEveryArgument) {
  for (int i = 0; i < 6; ++i) {
    std::vector<sock_filter> program = {
        Stmt(BPF_LD | BPF_W | BPF_ABS, ArgHi(i)), Jump(BPF_JMP | BPF_JEQ | BPF_K, 0x11223344, 0, 3),
        Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLo(i)), Jump(BPF_JMP | BPF_JEQ | BPF_K, 0x55667788, 0, 1),
        Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW), Stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_THREAD),
    };
    seccomp_data data = MakeSeccompData(AUDIT_ARCH_X86_64, 0);
    data.args[i] = 0x1122334455667788ull;
    EXPECT_EQ(Evaluate(program, data), SECCOMP_RET_ALLOW) << "arg " << i;
    data.args[i] = 0x5566778811223344ull;  // halves swapped
    EXPECT_EQ(Evaluate(program, data), SECCOMP_RET_KILL_THREAD) << "arg " << i;
  }
}

TEST(BpfInterpreterTest, MakeSeccompDataFillsFields) {
  seccomp_data data = MakeSeccompData(AUDIT_ARCH_AARCH64, 56, {1, 2, 3}, 0x400000);
  EXPECT_EQ(data.arch, AUDIT_ARCH_AARCH64);
  EXPECT_EQ(data.nr, 56);
  EXPECT_EQ(data.instruction_pointer, 0x400000u);
  EXPECT_EQ(data.args[0], 1u);
  EXPECT_EQ(data.args[2], 3u);
  EXPECT_EQ(data.args[3], 0u);
}

TEST(BpfInterpreterTest, ConditionalJumps) {
  // Returns the arg0 low word's relation to 10: JGT -> 3, JGE (so equal) -> 2, else JSET 1 -> 1.
  std::vector<sock_filter> program = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, ArgLo(0)),
      Jump(BPF_JMP | BPF_JGT | BPF_K, 10, 3, 0),
      Jump(BPF_JMP | BPF_JGE | BPF_K, 10, 3, 0),
      Jump(BPF_JMP | BPF_JSET | BPF_K, 1, 3, 0),
      Stmt(BPF_RET | BPF_K, 0),
      Stmt(BPF_RET | BPF_K, 3),
      Stmt(BPF_RET | BPF_K, 2),
      Stmt(BPF_RET | BPF_K, 1),
  };
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 0, {11})), 3u);
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 0, {10})), 2u);
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 0, {7})), 1u);
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 0, {6})), 0u);
}

TEST(BpfInterpreterTest, UnconditionalJumpSkipsInstructions) {
  std::vector<sock_filter> program = {
      Stmt(BPF_JMP | BPF_JA, 1),
      Stmt(BPF_RET | BPF_K, 1),
      Stmt(BPF_RET | BPF_K, 2),
  };
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 0)), 2u);
}

TEST(BpfInterpreterTest, AluRegistersAndScratchMemory) {
  // ((nr + 5) * 3 - 1) / 2, then & 0xff | 0x100 ^ 0x1, << 4 >> 2, via X and scratch memory.
  std::vector<sock_filter> program = {
      Stmt(BPF_LD | BPF_W | BPF_ABS, kNr),
      Stmt(BPF_ALU | BPF_ADD | BPF_K, 5),
      Stmt(BPF_ALU | BPF_MUL | BPF_K, 3),
      Stmt(BPF_ALU | BPF_SUB | BPF_K, 1),
      Stmt(BPF_ALU | BPF_DIV | BPF_K, 2),
      Stmt(BPF_ALU | BPF_AND | BPF_K, 0xff),
      Stmt(BPF_ALU | BPF_OR | BPF_K, 0x100),
      Stmt(BPF_ALU | BPF_XOR | BPF_K, 0x1),
      Stmt(BPF_ALU | BPF_LSH | BPF_K, 4),
      Stmt(BPF_ALU | BPF_RSH | BPF_K, 2),
      Stmt(BPF_ST, 3),
      Stmt(BPF_LDX | BPF_MEM, 3),
      Stmt(BPF_LD | BPF_IMM, 1),
      Stmt(BPF_ALU | BPF_ADD | BPF_X, 0),
      Stmt(BPF_MISC | BPF_TAX, 0),
      Stmt(BPF_STX, 4),
      Stmt(BPF_LD | BPF_MEM, 4),
      Stmt(BPF_RET | BPF_A, 0),
  };
  // nr = 7: (12 * 3 - 1) / 2 = 17; & 0xff = 17; | 0x100 = 0x111; ^ 1 = 0x110; << 4 >> 2 = 0x440.
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 7)), 0x441u);
}

TEST(BpfInterpreterTest, NegateLengthAndTxa) {
  std::vector<sock_filter> program = {
      Stmt(BPF_LDX | BPF_W | BPF_LEN, 0),
      Stmt(BPF_MISC | BPF_TXA, 0),
      Stmt(BPF_ALU | BPF_NEG, 0),
      Stmt(BPF_RET | BPF_A, 0),
  };
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 0)), static_cast<uint32_t>(-64));  // -sizeof(data)
}

TEST(BpfInterpreterTest, DivisionByZeroRegisterReturnsZeroLikeTheKernel) {
  std::vector<sock_filter> program = {
      Stmt(BPF_LDX | BPF_IMM, 0),
      Stmt(BPF_LD | BPF_IMM, 10),
      Stmt(BPF_ALU | BPF_DIV | BPF_X, 0),
      Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  EXPECT_EQ(Evaluate(program, MakeSeccompData(0, 0)), 0u);
}

TEST(BpfInterpreterTest, RejectsProgramsTheKernelRejects) {
  const sock_filter ret = Stmt(BPF_RET | BPF_K, 0);
  struct Case {
    const char* what;
    std::vector<sock_filter> program;
    const char* message;
  };
  const Case cases[] = {
      {"empty", {}, "0 instructions"},
      {"too long", std::vector<sock_filter>(BPF_MAXINSNS + 1, ret), "instructions"},
      {"byte load", {Stmt(BPF_LD | BPF_B | BPF_ABS, 0), ret}, "opcode not allowed"},
      {"misaligned", {Stmt(BPF_LD | BPF_W | BPF_ABS, 2), ret}, "word-aligned"},
      {"past data", {Stmt(BPF_LD | BPF_W | BPF_ABS, sizeof(seccomp_data)), ret}, "outside"},
      {"jump out", {Jump(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0), ret}, "past the end"},
      {"ja out", {Stmt(BPF_JMP | BPF_JA, 1), ret}, "past the end"},
      {"no return", {ret, Stmt(BPF_LD | BPF_IMM, 0)}, "not a return"},
      {"div zero", {Stmt(BPF_ALU | BPF_DIV | BPF_K, 0), ret}, "constant zero"},
      {"big shift", {Stmt(BPF_ALU | BPF_LSH | BPF_K, 32), ret}, "shift"},
      {"mem index", {Stmt(BPF_ST, BPF_MEMWORDS), ret}, "scratch memory"},
  };
  for (const Case& c : cases) {
    absl::Status status = ValidateSeccompBpf(c.program);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.what;
    EXPECT_FALSE(RunSeccompBpf(c.program, MakeSeccompData(0, 0)).ok()) << c.what;
  }
}

TEST(BpfInterpreterTest, RejectsReadingUnwrittenScratchMemory) {
  std::vector<sock_filter> program = {Stmt(BPF_LD | BPF_MEM, 0), Stmt(BPF_RET | BPF_A, 0)};
  EXPECT_TRUE(ValidateSeccompBpf(program).ok());
  absl::StatusOr<uint32_t> verdict = RunSeccompBpf(program, MakeSeccompData(0, 0));
  EXPECT_FALSE(verdict.ok());
  EXPECT_THAT(verdict.status().message(), HasSubstr("never written"));
}

TEST(BpfInterpreterTest, NamesActions) {
  EXPECT_EQ(SeccompActionName(SECCOMP_RET_ALLOW), "ALLOW");
  EXPECT_EQ(SeccompActionName(SECCOMP_RET_ERRNO | 38), "ERRNO(38)");
  EXPECT_EQ(SeccompActionName(SECCOMP_RET_USER_NOTIF), "USER_NOTIF");
  EXPECT_EQ(SeccompActionName(SECCOMP_RET_KILL_PROCESS), "KILL_PROCESS");
  EXPECT_EQ(SeccompActionName(SECCOMP_RET_KILL_THREAD), "KILL_THREAD");
  EXPECT_EQ(SeccompActionName(SECCOMP_RET_TRACE | 7), "TRACE(7)");
}

}  // namespace
}  // namespace moat::sandbox
