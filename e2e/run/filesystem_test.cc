// Writes: everything of the host is read-only inside (including what file permissions would allow),
// /tmp, /dev/shm and the default /workspace are writable and private to one run, and a
// --workspace directory is writable with files landing on the host, owned by a non-root uid.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "e2e/run/harness.h"

namespace moat::e2e {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A shell snippet that tries `command` and prints "ESCAPED <label>" or "blocked <label>".
std::string Attempt(absl::string_view label, absl::string_view command) {
  return absl::StrCat("if ", command, " 2>/dev/null; then echo 'ESCAPED ", label,
                      "'; else echo 'blocked ", label, "'; fi\n");
}

struct stat Stat(const std::string& path) {
  struct stat st = {};
  if (::lstat(path.c_str(), &st) != 0) ADD_FAILURE() << "stat " << path;
  return st;
}

TEST_F(E2eTest, HostDirectoriesAreReadOnly) {
  const std::string marker = UniqueMarker("moat-e2e-write");
  std::vector<std::string> dirs = {"/",    "/etc", "/usr",  "/usr/bin",  "/var",
                                   "/opt", "/srv", "/home", dir().path()};
  // Made world-writable on the host: only the read-only mount can stop the writes.
  const std::string open_dir = dir().Path("world-writable");
  MakeDirs(open_dir, 0777);
  dirs.push_back(open_dir);
  std::string script;
  for (const std::string& d : dirs) {
    if (!PathExists(d)) continue;
    std::string base = absl::StrCat(d == "/" ? "" : d, "/", marker);
    script += Attempt(absl::StrCat("touch ", base), absl::StrCat("touch '", base, "'"));
    script += Attempt(absl::StrCat("mkdir ", base), absl::StrCat("mkdir '", base, ".d'"));
    script += Attempt(absl::StrCat("symlink ", base), absl::StrCat("ln -s x '", base, ".l'"));
  }
  // moat itself and the attack programs: replacing them would run code on the host later.
  script += Attempt("replace moat", absl::StrCat("cp /bin/true '", MoatBinary(), "'"));
  script +=
      Attempt("replace attack program", absl::StrCat("cp /bin/true '", Attack("id_probe"), "'"));
  // The host's working directory, through a relative path.
  script +=
      Attempt("cwd-relative", absl::StrCat("cd '", dir().path(), "' && touch ", marker, ".rel"));
  MoatOptions options;
  options.cwd = dir().path();
  nlohmann::json r = RunJson({}, Sh(script), options);
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, Not(HasSubstr("ESCAPED"))) << Describe(r);
  EXPECT_THAT(out, HasSubstr("blocked touch /" + marker)) << Describe(r);
  EXPECT_THAT(out, HasSubstr("blocked replace moat")) << Describe(r);
  for (const std::string& d : dirs) {
    std::string base = absl::StrCat(d == "/" ? "" : d, "/", marker);
    for (const char* suffix : {"", ".d", ".l", ".rel"}) {
      EXPECT_FALSE(PathExists(base + suffix)) << base + suffix << " appeared on the host";
    }
  }
}

TEST_F(E2eTest, WorldWritableHostFileCannotBeChanged) {
  const std::string file = dir().Path("shared.txt");
  WriteFile(file, "original\n", 0666);
  ASSERT_EQ(::chmod(file.c_str(), 0666), 0);
  struct stat before = Stat(file);
  std::string script = absl::StrCat(
      "f='", file, "'\n",
      "cat \"$f\" | grep -q original && echo 'ok read'\n",  // control: the file is visible
      Attempt("append", "echo pwned >> \"$f\""), Attempt("truncate", ": > \"$f\""),
      Attempt("chmod", "chmod 4777 \"$f\""), Attempt("touch-time", "touch -d 2001-01-01 \"$f\""),
      Attempt("rename", "mv \"$f\" \"$f.moved\""),
      Attempt("unlink", "rm -f \"$f\" && ! test -e \"$f\""));
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("ok read")) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
  EXPECT_EQ(ReadFile(file), "original\n");
  struct stat after = Stat(file);
  EXPECT_EQ(after.st_mode, before.st_mode);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_FALSE(PathExists(file + ".moved"));
}

TEST_F(E2eTest, DeviceFilesCannotBeChangedOrCreated) {
  struct stat null_before = Stat("/dev/null");
  // chmod to the mode it has: a success shows the attack works without breaking the host.
  std::string script =
      absl::StrCat(Attempt("chmod /dev/null", "chmod 666 /dev/null"),
                   Attempt("rm /dev/null", "rm -f /dev/null && ! test -e /dev/null"),
                   Attempt("touch /dev/x", "touch /dev/moat-e2e"),
                   "echo ok > /dev/null && echo 'ok write /dev/null'\n");
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("ok write /dev/null")) << Describe(r);
  EXPECT_EQ(Stat("/dev/null").st_mode, null_before.st_mode);

  // Device nodes: neither in the writable areas nor in a host workspace.
  TempDir workspace;
  ASSERT_EQ(::chown(workspace.path().c_str(), 65534, 65534), 0);
  for (const char* where : {"/tmp", "/workspace", "/dev/shm"}) {
    nlohmann::json m =
        RunJson({"--workspace", workspace.path()}, {Attack("misc_probe"), "mknod", where});
    ASSERT_TRUE(m.is_object());
    EXPECT_EQ(m["exit_code"], 0) << where << "\n" << Describe(m);
    EXPECT_THAT(m["stdout"].get<std::string>(), HasSubstr("blocked mknod mem")) << Describe(m);
    EXPECT_THAT(m["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(m);
  }
}

TEST_F(E2eTest, ProcAndSysWritesFail) {
  const std::string hostname = ReadFile("/proc/sys/kernel/hostname");
  const std::string core_pattern = ReadFile("/proc/sys/kernel/core_pattern");
  std::string script =
      absl::StrCat(Attempt("hostname", "echo pwned > /proc/sys/kernel/hostname"),
                   Attempt("core_pattern", "echo '|/tmp/pwn' > /proc/sys/kernel/core_pattern"),
                   Attempt("drop_caches", "echo 1 > /proc/sys/vm/drop_caches"),
                   // The mask is a read-only bind of /dev/null (docs/security.md): a write to
                   // it succeeds and reaches no kernel code. Only a write to anything else
                   // there (the kernel's own file) is an escape.
                   Attempt("sysrq",
                           "test -e /proc/sysrq-trigger && "
                           "[ \"$(stat -c %F-%t:%T /proc/sysrq-trigger)\" != "
                           "'character special file-1:3' ] && echo h > /proc/sysrq-trigger"),
                   "[ \"$(stat -c %F-%t:%T /proc/sysrq-trigger 2>/dev/null)\" = "
                   "'character special file-1:3' ] && echo 'ok sysrq masked'\n",
                   Attempt("binfmt_misc",
                           "echo ':moat:E::moate2e::/tmp/x:' > /proc/sys/fs/binfmt_misc/register"),
                   Attempt("modprobe path", "echo /tmp/x > /proc/sys/kernel/modprobe"),
                   // Writing back the current value: harmless on the host even if it worked.
                   Attempt("uevent_helper",
                           "v=$(cat /sys/kernel/uevent_helper) && echo \"$v\" > "
                           "/sys/kernel/uevent_helper"),
                   Attempt("sys kernel mm",
                           "v=$(cat /sys/kernel/mm/transparent_hugepage/defrag | "
                           "sed 's/.*\\[\\(.*\\)\\].*/\\1/') && echo \"$v\" > "
                           "/sys/kernel/mm/transparent_hugepage/defrag"),
                   Attempt("cgroup mkdir", "mkdir /sys/fs/cgroup/moat-e2e"),
                   Attempt("cgroup release_agent", "echo /tmp/x > /sys/fs/cgroup/release_agent"),
                   Attempt("proc mkdir", "mkdir /proc/moat-e2e"),
                   "test -r /proc/sys/kernel/hostname && echo 'ok read /proc/sys'\n");
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("ok read /proc/sys")) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
  if (PathExists("/proc/sysrq-trigger")) {  // this kernel has one: the sandbox sees the mask
    EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("ok sysrq masked")) << Describe(r);
  }
  EXPECT_EQ(ReadFile("/proc/sys/kernel/hostname"), hostname);
  EXPECT_EQ(ReadFile("/proc/sys/kernel/core_pattern"), core_pattern);
  EXPECT_FALSE(PathExists("/proc/sys/fs/binfmt_misc/moat"));
}

TEST_F(E2eTest, KernelSecretsInProcAreMasked) {
  // Kernel addresses, keys of every user, the kernel log, timers of host processes: empty or
  // unreadable inside.
  std::string script;
  for (const char* f : {"/proc/kallsyms", "/proc/keys", "/proc/key-users", "/proc/timer_list",
                        "/proc/sched_debug", "/proc/kmsg", "/proc/kcore", "/proc/sysrq-trigger"}) {
    absl::StrAppend(&script, "echo \"", f, " $(head -c 4096 ", f, " 2>/dev/null | wc -c)\"\n");
  }
  absl::StrAppend(&script, "echo \"dmesg $(dmesg 2>/dev/null | wc -c)\"\n",
                  "echo \"control $(head -c 100 /proc/cpuinfo | wc -c)\"\n");
  nlohmann::json r = RunJson({}, Sh(script));
  ASSERT_TRUE(r.is_object());
  std::string out = r["stdout"];
  EXPECT_THAT(out, HasSubstr("control 100")) << Describe(r);
  for (const char* f : {"/proc/kallsyms", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                        "/proc/kmsg", "/proc/kcore", "dmesg"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat(f, " 0\n"))) << "readable inside: " << f << "\n" << out;
  }
}

TEST_F(E2eTest, TmpShmAndWorkspaceAreWritableAndPrivate) {
  const std::string m = UniqueMarker("moat-e2e-private");
  // Host files in the host's /tmp and /dev/shm must not show inside either.
  const std::string host_tmp = absl::StrCat("/tmp/", m, "-host");
  const std::string host_shm = absl::StrCat("/dev/shm/", m, "-host");
  WriteFile(host_tmp, "host", 0644);
  bool have_shm = PathExists("/dev/shm");
  if (have_shm) WriteFile(host_shm, "host", 0644);

  std::string write =
      absl::StrCat("set -e\n", "for d in /tmp /dev/shm /workspace; do echo data-", m, " > $d/", m,
                   "; grep -q data-", m, " $d/", m, "; echo \"ok wrote $d\"; done\n", "pwd\n",
                   Attempt("see host /tmp", absl::StrCat("test -e ", host_tmp)),
                   Attempt("see host /dev/shm", absl::StrCat("test -e ", host_shm)));
  nlohmann::json first = RunJson({}, Sh(write));
  ASSERT_TRUE(first.is_object());
  std::string out = first["stdout"];
  for (const char* d : {"/tmp", "/dev/shm", "/workspace"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("ok wrote ", d))) << Describe(first);
  }
  EXPECT_THAT(out, HasSubstr("/workspace\n")) << "the command starts in /workspace";
  EXPECT_THAT(out, Not(HasSubstr("ESCAPED"))) << Describe(first);
  EXPECT_FALSE(PathExists(absl::StrCat("/tmp/", m)));
  EXPECT_FALSE(PathExists(absl::StrCat("/dev/shm/", m)));
  EXPECT_FALSE(PathExists(absl::StrCat("/workspace/", m)));

  nlohmann::json second = RunJson(
      {}, Sh(absl::StrCat(
              Attempt("see /tmp of the last run", absl::StrCat("test -e /tmp/", m)),
              Attempt("see /dev/shm of the last run", absl::StrCat("test -e /dev/shm/", m)),
              Attempt("see /workspace of the last run", absl::StrCat("test -e /workspace/", m)))));
  ASSERT_TRUE(second.is_object());
  EXPECT_THAT(second["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(second);
  EXPECT_THAT(second["stdout"].get<std::string>(), HasSubstr("blocked see /tmp"));
  ::unlink(host_tmp.c_str());
  if (have_shm) ::unlink(host_shm.c_str());
}

TEST_F(E2eTest, ConcurrentSandboxesDoNotShareTmp) {
  const std::string m = UniqueMarker("moat-e2e-concurrent");
  TempDir signal_dir;
  ASSERT_EQ(::chown(signal_dir.path().c_str(), 65534, 65534), 0);
  MoatProcess first({"run", "--json", "--workspace", signal_dir.path(), "--", "/bin/sh", "-c",
                     absl::StrCat("echo a > /tmp/", m, "; echo a > /dev/shm/", m,
                                  "; touch /workspace/ready; sleep ", Scaled(3))},
                    {});
  ASSERT_TRUE(Eventually([&] { return PathExists(signal_dir.Path("ready")); }, 10))
      << "the first sandbox never started";
  nlohmann::json second = RunJson(
      {}, Sh(absl::StrCat(
              Attempt("see /tmp of a concurrent run", absl::StrCat("test -e /tmp/", m)),
              Attempt("see /dev/shm of a concurrent run", absl::StrCat("test -e /dev/shm/", m)),
              Attempt("see a concurrent run's workspace", "test -e /workspace/ready"))));
  ASSERT_TRUE(second.is_object());
  EXPECT_THAT(second["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(second);
  EXPECT_THAT(second["stdout"].get<std::string>(), HasSubstr("blocked see /tmp"));
  MoatResult r = first.Wait();
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

class WorkspaceTest : public E2eTest {
 protected:
  // A --workspace directory owned by `uid` (65534 is the sandbox's own host uid, so moat binds it
  // as it is; any other owner makes moat use an idmapped mount).
  std::string Workspace(uid_t uid) {
    ws_ = std::make_unique<TempDir>();
    EXPECT_EQ(::chown(ws_->path().c_str(), uid, uid), 0);
    return ws_->path();
  }
  std::unique_ptr<TempDir> ws_;
};

TEST_F(WorkspaceTest, FilesLandInTheDirectoryOwnedByTheSandboxUid) {
  const std::string ws = Workspace(65534);
  nlohmann::json r = RunJson({"--workspace", ws},
                             Sh("pwd; echo hello > /workspace/out.txt && mkdir -p sub/deeper && "
                                "echo deep > sub/deeper/f && echo ok"));
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stdout"], "/workspace\nok\n") << Describe(r);
  EXPECT_EQ(ReadFile(ws + "/out.txt"), "hello\n");
  EXPECT_EQ(ReadFile(ws + "/sub/deeper/f"), "deep\n");
  struct stat st = Stat(ws + "/out.txt");
  EXPECT_EQ(st.st_uid, 65534u) << "root inside must be the unprivileged uid outside";
  EXPECT_NE(st.st_uid, 0u);
  EXPECT_NE(st.st_gid, 0u);
}

TEST_F(WorkspaceTest, RootOwnedDirectoryIsIdmappedToItsOwner) {
  // idmap.h: a directory of another owner is shown as the sandbox's root, and new files get the
  // directory owner's uid, as if the owner had written them (here: root, who owns the directory).
  const std::string ws = Workspace(0);
  nlohmann::json r = RunJson({"--workspace", ws}, Sh("echo hi > f && stat -c '%u' f"));
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["stdout"], "0\n") << Describe(r);
  EXPECT_EQ(ReadFile(ws + "/f"), "hi\n");
  EXPECT_EQ(Stat(ws + "/f").st_uid, Stat(ws).st_uid);
}

// A setuid or setgid executable created in the workspace is a setuid program on the host: with a
// root-owned workspace (idmapped, see above) it is setuid root, a privilege escalation for any
// host user who can reach the directory.
TEST_F(WorkspaceTest, SandboxCannotPlantSetuidFilesOnTheHost) {
  for (uid_t owner : {0u, 65534u}) {
    SCOPED_TRACE(absl::StrCat("workspace owned by uid ", owner));
    const std::string ws = Workspace(owner);
    nlohmann::json r =
        RunJson({"--workspace", ws},
                Sh("cp /bin/true suid && chmod 4755 suid; cp /bin/true sgid && chmod 2755 sgid; "
                   "mkdir d && chmod 2777 d; ls -ln"));
    ASSERT_TRUE(r.is_object());
    for (const char* name : {"suid", "sgid", "d"}) {
      std::string path = absl::StrCat(ws, "/", name);
      if (!PathExists(path)) continue;
      struct stat st = Stat(path);
      EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u)
          << "ATTACK SUCCEEDED: \"" << path << "\" is mode " << std::oct << (st.st_mode & 07777)
          << std::dec << " owned by uid " << st.st_uid << " on the host";
    }
  }
}

// Files that make host tools run code later (the same list moat protects under writable policy
// roots): git hooks and config, editor task files.
TEST_F(WorkspaceTest, SandboxCannotPlantHooksForHostTools) {
  const std::string ws = Workspace(65534);
  MakeDirs(ws + "/.git/hooks");
  MakeDirs(ws + "/.vscode");
  WriteFile(ws + "/.git/config", "[core]\n\tbare = false\n", 0644);
  for (const char* d : {"/.git", "/.git/hooks", "/.vscode"}) {
    ASSERT_EQ(::chown((ws + d).c_str(), 65534, 65534), 0);
  }
  ASSERT_EQ(::chown((ws + "/.git/config").c_str(), 65534, 65534), 0);
  std::string script = absl::StrCat(
      Attempt(".git/hooks",
              "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit && "
              "chmod +x .git/hooks/pre-commit"),
      Attempt(".git/config", "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config"),
      Attempt(".vscode", "echo '{\"tasks\":[]}' > .vscode/tasks.json"),
      "echo ok > regular.txt && echo 'ok write regular file'\n");
  nlohmann::json r = RunJson({"--workspace", ws}, Sh(script));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("ok write regular file")) << Describe(r);
  EXPECT_FALSE(PathExists(ws + "/.git/hooks/pre-commit"))
      << "ATTACK SUCCEEDED: a git hook was planted in the host workspace";
  EXPECT_EQ(ReadFile(ws + "/.git/config"), "[core]\n\tbare = false\n")
      << "ATTACK SUCCEEDED: the workspace's .git/config was changed";
  EXPECT_FALSE(PathExists(ws + "/.vscode/tasks.json"))
      << "ATTACK SUCCEEDED: an editor task file was planted in the host workspace";
}

// A run leaves a symlink in its workspace; a later run is given a path through it. moat resolves
// the path on the host, so the second sandbox gets whatever the link points to, read-write (and
// as its owner, through the idmapped mount, when that is root, like /etc).
TEST_F(WorkspaceTest, WorkspacePathThroughAPlantedSymlinkStaysInside) {
  const std::string ws = Workspace(65534);
  const std::string victim = dir().Path("victim");  // stands for /etc: root-owned, elsewhere
  MakeDirs(victim);
  WriteFile(victim + "/config", "original\n", 0644);
  nlohmann::json plant = RunJson({"--workspace", ws}, {"/bin/ln", "-s", victim, "/workspace/sub"});
  ASSERT_TRUE(plant.is_object());
  ASSERT_TRUE(PathExists(ws + "/sub")) << Describe(plant);
  MoatResult second = RunPlain({"--workspace", ws + "/sub"},
                               Sh("echo pwned > /workspace/planted; echo x >> /workspace/config"));
  EXPECT_FALSE(PathExists(victim + "/planted"))
      << "ATTACK SUCCEEDED: the second run wrote into \"" << victim
      << "\", the target of a symlink the first run planted (exit " << second.exit_code << ")";
  EXPECT_EQ(ReadFile(victim + "/config"), "original\n");
}

TEST_F(WorkspaceTest, HardLinksToHostFilesFail) {
  const std::string ws = Workspace(0);  // idmapped: a link would be writable as root's file
  const std::string target = dir().Path("host-owned.txt");
  WriteFile(target, "host\n", 0644);
  nlohmann::json r =
      RunJson({"--workspace", ws}, {Attack("misc_probe"), "link", target, "/workspace/linked"});
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("blocked link")) << Describe(r);
  EXPECT_FALSE(PathExists(ws + "/linked"));
  EXPECT_EQ(ReadFile(target), "host\n");
}

// Writable policy roots (filesystem.allowWrite) keep the files that make host tools run code later
// read-only (policy.h: MandatoryDenyWrite), whether or not they exist yet.
class PolicyWriteTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    home_ = dir().Path("home");
    project_ = dir().Path("project");
    for (const std::string& d : {home_ + "/.ssh", project_ + "/.git/hooks"}) MakeDirs(d);
    WriteFile(home_ + "/.bashrc", "# bashrc\n", 0644);
    WriteFile(project_ + "/.git/config", "[core]\n", 0644);
    for (const std::string& p :
         {home_, home_ + "/.ssh", home_ + "/.bashrc", project_, project_ + "/.git",
          project_ + "/.git/hooks", project_ + "/.git/config"}) {
      EXPECT_EQ(::chown(p.c_str(), 65534, 65534), 0) << p;
    }
    policy_ = dir().Path("policy.yaml");
    WriteFile(policy_,
              absl::StrCat("filesystem:\n  hideHome: false\n  allowWrite: [\"", home_, "\", \"",
                           project_, "\"]\n"),
              0644);
    options_.home = home_;
  }

  nlohmann::json Run(const std::string& script) {
    return RunJson({"--policy", policy_}, Sh(script), options_);
  }

  std::string home_, project_, policy_;
  MoatOptions options_;
};

TEST_F(PolicyWriteTest, ExistingProtectedFilesStayReadOnly) {
  nlohmann::json r =
      Run(absl::StrCat("cd '", home_, "'\n", Attempt(".bashrc", "echo evil >> .bashrc"),
                       Attempt(".ssh/authorized_keys", "echo key > .ssh/authorized_keys"), "cd '",
                       project_, "'\n", Attempt(".git/hooks", "echo evil > .git/hooks/pre-commit"),
                       Attempt(".git/config", "echo evil >> .git/config"),
                       "echo ok > normal.txt && echo 'ok write normal file'\n"));
  ASSERT_TRUE(r.is_object());
  EXPECT_THAT(r["stdout"].get<std::string>(), HasSubstr("ok write normal file")) << Describe(r);
  EXPECT_THAT(r["stdout"].get<std::string>(), Not(HasSubstr("ESCAPED"))) << Describe(r);
  EXPECT_EQ(ReadFile(home_ + "/.bashrc"), "# bashrc\n");
  EXPECT_EQ(ReadFile(project_ + "/normal.txt"), "ok\n");
}

TEST_F(PolicyWriteTest, MissingProtectedFilesCannotBeCreated) {
  std::string script = absl::StrCat("cd '", home_, "'\n");
  const std::vector<std::string> home_files = {".profile",
                                               ".bash_profile",
                                               ".zshrc",
                                               ".config/autostart/moat-e2e.desktop",
                                               ".config/systemd/user/moat-e2e.service",
                                               ".config/moat/policy.yaml",
                                               ".gitconfig"};
  for (const std::string& f : home_files) {
    script += Attempt(f, absl::StrCat("mkdir -p \"$(dirname ", f, ")\" && echo evil > ", f));
  }
  absl::StrAppend(&script, "cd '", project_, "'\n");
  const std::vector<std::string> project_files = {".vscode/tasks.json", ".idea/workspace.xml"};
  for (const std::string& f : project_files) {
    script += Attempt(f, absl::StrCat("mkdir -p \"$(dirname ", f, ")\" && echo evil > ", f));
  }
  nlohmann::json r = Run(script);
  ASSERT_TRUE(r.is_object());
  for (const std::string& f : home_files) {
    EXPECT_FALSE(PathExists(absl::StrCat(home_, "/", f)))
        << "ATTACK SUCCEEDED: created ~/" << f << " (a protected start-up file that did not exist)";
  }
  for (const std::string& f : project_files) {
    EXPECT_FALSE(PathExists(absl::StrCat(project_, "/", f)))
        << "ATTACK SUCCEEDED: created " << f << " in a writable project root";
  }
}

TEST_F(PolicyWriteTest, DenyReadAndDenyWriteAreEnforced) {
  WriteFile(project_ + "/secret.env", "TOKEN=moat-e2e-deny-read\n", 0644);
  MakeDirs(project_ + "/vendor");
  WriteFile(project_ + "/vendor/lib.txt", "vendored\n", 0644);
  ASSERT_EQ(::chown((project_ + "/vendor").c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown((project_ + "/vendor/lib.txt").c_str(), 65534, 65534), 0);
  WriteFile(policy_,
            absl::StrCat("filesystem:\n  allowWrite: [\"", project_, "\"]\n  denyRead: [\"",
                         project_, "/secret.env\"]\n  denyWrite: [\"", project_, "/vendor\"]\n"),
            0644);
  MoatResult r =
      RunPlain({"--policy", policy_},
               Sh(absl::StrCat("cd '", project_, "'; cat secret.env; cat vendor/lib.txt; ",
                               Attempt("vendor write", "echo evil >> vendor/lib.txt"))),
               options_);
  EXPECT_THAT(r.out, HasSubstr("vendored")) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("moat-e2e-deny-read")))
      << "ATTACK SUCCEEDED: denyRead file read";
  EXPECT_THAT(r.out, HasSubstr("blocked vendor write")) << r.out;
  EXPECT_EQ(ReadFile(project_ + "/vendor/lib.txt"), "vendored\n");
}

}  // namespace
}  // namespace moat::e2e
