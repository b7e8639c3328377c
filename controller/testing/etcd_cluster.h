// A real etcd cluster for tests: N members of Debian's `etcd` on 127.0.0.1, on free ports, their
// data in a temporary directory removed afterwards. Members can be killed (SIGKILL) and started
// again to test member loss and quorum loss.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moat::controller::testing {

// A port nothing listens on now (the kernel's pick for port 0).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

inline bool EtcdInstalled() { return access("/usr/bin/etcd", X_OK) == 0; }

class EtcdCluster {
 public:
  explicit EtcdCluster(int members = 1) {
    char tmpl[] = "/tmp/moat-etcd-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    for (int i = 0; i < members; ++i) {
      members_.push_back(Member{absl::StrCat("m", i), FreePort(), FreePort(), -1});
    }
  }
  ~EtcdCluster() {
    for (size_t i = 0; i < members_.size(); ++i) Kill(i);
    std::filesystem::remove_all(dir_);
  }

  // Starts every member and waits until the cluster answers.
  absl::Status Start() {
    for (size_t i = 0; i < members_.size(); ++i) StartMember(i);
    return WaitHealthy(members_.size() / 2 + 1);
  }
  void StartMember(size_t i) {
    Member& m = members_[i];
    std::vector<std::string> cluster;
    for (const Member& o : members_) {
      cluster.push_back(absl::StrCat(o.name, "=http://127.0.0.1:", o.peer_port));
    }
    std::vector<std::string> args = {"/usr/bin/etcd",
                                     "--name",
                                     m.name,
                                     "--data-dir",
                                     absl::StrCat(dir_, "/", m.name),
                                     "--listen-client-urls",
                                     ClientUrl(i),
                                     "--advertise-client-urls",
                                     ClientUrl(i),
                                     "--listen-peer-urls",
                                     absl::StrCat("http://127.0.0.1:", m.peer_port),
                                     "--initial-advertise-peer-urls",
                                     absl::StrCat("http://127.0.0.1:", m.peer_port),
                                     "--initial-cluster",
                                     absl::StrJoin(cluster, ","),
                                     "--initial-cluster-state",
                                     "new",
                                     "--heartbeat-interval",
                                     "100",
                                     "--election-timeout",
                                     "1000",
                                     "--log-level",
                                     "error",
                                     "--logger",
                                     "zap"};
    std::string log = absl::StrCat(dir_, "/", m.name, ".log");
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // A test killed on timeout leaves no member behind.
      FILE* f = freopen(log.c_str(), "a", stderr);
      (void)f;
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    m.pid = pid;
  }
  void Kill(size_t i) {
    Member& m = members_[i];
    if (m.pid <= 0) return;
    kill(m.pid, SIGKILL);
    waitpid(m.pid, nullptr, 0);
    m.pid = -1;
  }
  // Waits until `quorum` members answer /health with {"health":"true"}.
  absl::Status WaitHealthy(size_t quorum, std::chrono::seconds limit = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      size_t healthy = 0;
      for (size_t i = 0; i < members_.size(); ++i) {
        if (members_[i].pid <= 0) continue;
        std::string cmd = absl::StrCat("curl -sf -m 1 ", ClientUrl(i),
                                       "/health 2>/dev/null | grep -q '\"health\":\"true\"'");
        if (std::system(cmd.c_str()) == 0) ++healthy;
      }
      if (healthy >= quorum) return absl::OkStatus();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return absl::DeadlineExceededError(absl::StrCat("etcd did not become healthy; logs in ", dir_));
  }

  std::string ClientUrl(size_t i) const {
    return absl::StrCat("http://127.0.0.1:", members_[i].client_port);
  }
  std::vector<std::string> Endpoints() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < members_.size(); ++i) out.push_back(ClientUrl(i));
    return out;
  }
  const std::string& dir() const { return dir_; }

 private:
  struct Member {
    std::string name;
    int client_port, peer_port;
    pid_t pid;
  };
  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace moat::controller::testing
