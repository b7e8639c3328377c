#include "sandbox/egress/sk_lookup.h"

#include <arpa/inet.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/errno_status.h"

namespace moat::egress {
namespace {

long Bpf(int cmd, union bpf_attr* attr) { return ::syscall(SYS_bpf, cmd, attr, sizeof(*attr)); }

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i = {};
  i.code = code;
  i.dst_reg = dst;
  i.src_reg = src;
  i.off = off;
  i.imm = imm;
  return i;
}

}  // namespace

absl::StatusOr<SkLookupSteering> SkLookupSteering::Attach(int netns_fd, int listener,
                                                          uint32_t prefix, uint32_t mask) {
  union bpf_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.map_type = BPF_MAP_TYPE_SOCKMAP;
  attr.key_size = sizeof(uint32_t);
  attr.value_size = sizeof(uint64_t);
  attr.max_entries = 1;
  UniqueFd map(static_cast<int>(Bpf(BPF_MAP_CREATE, &attr)));
  if (!map) return ErrnoStatus("egress transparent mode: create a BPF socket map");

  uint32_t key = 0;
  uint64_t value = static_cast<uint64_t>(listener);
  std::memset(&attr, 0, sizeof(attr));
  attr.map_fd = static_cast<uint32_t>(map.get());
  attr.key = reinterpret_cast<uint64_t>(&key);
  attr.value = reinterpret_cast<uint64_t>(&value);
  attr.flags = BPF_ANY;
  if (Bpf(BPF_MAP_UPDATE_ELEM, &attr) != 0) {
    return ErrnoStatus("egress transparent mode: put the listener in the BPF socket map");
  }

  // The context fields are 32-bit loads; addresses are in network byte order, so the constants
  // are too (compared as 32-bit values, which holds on either endianness).
  const int32_t want = static_cast<int32_t>(htonl(prefix & mask));
  const int32_t netmask = static_cast<int32_t>(htonl(mask));
  constexpr int16_t kFamily = offsetof(struct bpf_sk_lookup, family);
  constexpr int16_t kProtocol = offsetof(struct bpf_sk_lookup, protocol);
  constexpr int16_t kLocalIp4 = offsetof(struct bpf_sk_lookup, local_ip4);
  // Jump offsets count the instructions after the jump; `kPass` is the end.
  constexpr int kPass = 22;
  auto to_pass = [](int from) { return static_cast<int16_t>(kPass - (from + 1)); };
  const std::vector<bpf_insn> prog = {
      Insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0),                // 0 r6 = ctx
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_6, kProtocol, 0),          // 1
      Insn(BPF_JMP32 | BPF_JNE | BPF_K, BPF_REG_2, 0, to_pass(2), IPPROTO_TCP),     // 2
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_6, kFamily, 0),            // 3
      Insn(BPF_JMP32 | BPF_JNE | BPF_K, BPF_REG_2, 0, to_pass(4), AF_INET),         // 4
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_6, kLocalIp4, 0),          // 5
      Insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, netmask),                    // 6
      Insn(BPF_JMP32 | BPF_JNE | BPF_K, BPF_REG_2, 0, to_pass(7), want),            // 7
      Insn(BPF_ST | BPF_W | BPF_MEM, BPF_REG_10, 0, -4, 0),                         // 8 key = 0
      Insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0),               // 9
      Insn(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -4),                       // 10 &key
      Insn(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, map.get()),  // 11 map
      Insn(0, 0, 0, 0, 0),                                                          // 12
      Insn(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem),                  // 13
      Insn(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_0, 0, to_pass(14), 0),                // 14
      Insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_7, BPF_REG_0, 0, 0),                // 15 r7 = sk
      Insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_6, 0, 0),                // 16
      Insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_7, 0, 0),                // 17
      Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_3, 0, 0, 0),                        // 18
      Insn(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_sk_assign),                        // 19
      Insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_7, 0, 0),                // 20
      Insn(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_sk_release),                       // 21
      Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, SK_PASS),                  // 22 kPass
      Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),                                         // 23
  };
  std::vector<char> log(16384, '\0');
  static const char kLicense[] = "MIT";
  std::memset(&attr, 0, sizeof(attr));
  attr.prog_type = BPF_PROG_TYPE_SK_LOOKUP;
  attr.expected_attach_type = BPF_SK_LOOKUP;
  attr.insns = reinterpret_cast<uint64_t>(prog.data());
  attr.insn_cnt = static_cast<uint32_t>(prog.size());
  attr.license = reinterpret_cast<uint64_t>(kLicense);
  attr.log_buf = reinterpret_cast<uint64_t>(log.data());
  attr.log_size = static_cast<uint32_t>(log.size());
  attr.log_level = 1;
  UniqueFd program(static_cast<int>(Bpf(BPF_PROG_LOAD, &attr)));
  if (!program) {
    const int e = errno;
    return ErrnoStatus(
        absl::StrCat("egress transparent mode: load the sk_lookup program (verifier: ",
                     absl::string_view(log.data()).substr(0, 400), ")"),
        e);
  }

  std::memset(&attr, 0, sizeof(attr));
  attr.link_create.prog_fd = static_cast<uint32_t>(program.get());
  attr.link_create.target_fd = static_cast<uint32_t>(netns_fd);
  attr.link_create.attach_type = BPF_SK_LOOKUP;
  UniqueFd link(static_cast<int>(Bpf(BPF_LINK_CREATE, &attr)));
  if (!link) {
    return ErrnoStatus(
        "egress transparent mode: attach the sk_lookup program to the sandbox's network namespace");
  }
  return SkLookupSteering(std::move(map), std::move(program), std::move(link));
}

}  // namespace moat::egress
