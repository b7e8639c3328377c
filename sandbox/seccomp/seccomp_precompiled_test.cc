#include <gtest/gtest.h>

#include <utility>

#include "sandbox/seccomp/bpf_interpreter.h"
#include "sandbox/seccomp/seccomp_filter.h"

namespace moat::sandbox {
namespace {

// The build-time programs must be exactly what libseccomp builds from today's rules, for both
// architectures and all three modes; a stale or mis-generated table would change the filter
// silently.
TEST(SeccompPrecompiledTest, EqualsAFreshBuild) {
  for (Arch arch : {Arch::kX86_64, Arch::kAarch64}) {
    for (auto [notify, guard] :
         {std::pair{true, false}, std::pair{true, true}, std::pair{false, false}}) {
      SeccompOptions options{arch, notify, guard};
      absl::StatusOr<SeccompProgram> built = SeccompProgram::Build(options);
      absl::StatusOr<SeccompProgram> pre = SeccompProgram::Precompiled(options);
      ASSERT_TRUE(built.ok()) << built.status();
      ASSERT_TRUE(pre.ok()) << pre.status();
      EXPECT_EQ(pre->arch(), arch);
      EXPECT_EQ(pre->notifies(), notify);
      EXPECT_EQ(pre->guards_creation(), guard);
      ASSERT_EQ(pre->instructions().size(), built->instructions().size());
      for (size_t i = 0; i < built->instructions().size(); ++i) {
        const struct sock_filter& a = pre->instructions()[i];
        const struct sock_filter& b = built->instructions()[i];
        ASSERT_TRUE(a.code == b.code && a.jt == b.jt && a.jf == b.jf && a.k == b.k)
            << ArchName(arch) << " notify=" << notify << " guard=" << guard << " instruction " << i;
      }
      EXPECT_EQ(pre->fprog()->len, built->instructions().size());
      EXPECT_TRUE(ValidateSeccompBpf(pre->instructions()).ok());
    }
  }
}

}  // namespace
}  // namespace moat::sandbox
