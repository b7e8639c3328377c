// egress_bench: what the egress proxy costs, side by side with going direct, in one run on
// loopback. An HTTP origin (sandbox/testing/loopback_origin.h) and an EgressProxy run in this
// process; the proxy resolves through an in-memory resolver (so DNS time is not counted), allows
// 127.0.0.0/8, and writes a real audit log to a temporary file.
//
//   small requests: GET of a 40-odd byte body, a new TCP connection per request, one client at
//     a time; direct, through the HTTP proxy (absolute-form), and through a CONNECT tunnel.
//     Cases interleave round-robin so machine noise hits all alike. Reported: median, p90, the
//     proxy's median over direct, added latency per request, requests per second.
//   download: GET of 100 MB (1 MB = 10^6 bytes) direct, via the HTTP proxy and via CONNECT;
//     MB/s of the median run and the ratio to direct.
//
//   ninja -C build -j1 egress_bench && ./build/bin/egress_bench [--rounds=N] [--downloads=N]
//                                                              [--download-mb=N]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "bench/bench_report.h"
#include "bench/latency_stats.h"
#include "sandbox/egress/audit.h"
#include "sandbox/egress/proxy.h"
#include "sandbox/testing/fake_resolver.h"
#include "sandbox/testing/loopback_origin.h"

namespace moat::bench {
namespace {

using egress::testing::ListenTcp;

constexpr char kUsage[] = R"(usage: egress_bench [FLAGS]

Times small HTTP requests and a large download on loopback, direct and through moat's egress
proxy (plain HTTP forwarding and CONNECT), in one run, and prints them side by side.

  --rounds=N       timed rounds of small requests; each runs every case once (default 500)
  --downloads=N    timed downloads per way (default 5)
  --download-mb=N  size of the download in MB of 10^6 bytes (default 100)
)";

struct Flags {
  int rounds = 500;
  int downloads = 5;
  int download_mb = 100;
};

std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    int* target = nullptr;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (absl::ConsumePrefix(&arg, "--rounds=")) {
      target = &flags.rounds;
    } else if (absl::ConsumePrefix(&arg, "--downloads=")) {
      target = &flags.downloads;
    } else if (absl::ConsumePrefix(&arg, "--download-mb=")) {
      target = &flags.download_mb;
    }
    if (target == nullptr || !absl::SimpleAtoi(arg, target) || *target < 1) {
      std::fprintf(stderr, "egress_bench: bad argument \"%s\" (see --help)\n", argv[i]);
      return std::nullopt;
    }
  }
  return flags;
}

using Clock = std::chrono::steady_clock;

UniqueFd ConnectTo(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) fd.reset();
  return fd;
}

bool SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(n);
  }
  return true;
}

// Reads until the peer closes. Keeps the first `keep` bytes (for the status line), counts the
// rest.
uint64_t Drain(int fd, std::string* first, size_t keep = 256) {
  static thread_local std::vector<char> buffer(1 << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n <= 0) return total;
    if (first->size() < keep)
      first->append(buffer.data(), std::min<size_t>(n, keep - first->size()));
    total += n;
  }
}

// The CONNECT answer, read up to its empty line (the proxy sends nothing after it unprompted).
bool OpenTunnel(int fd, const std::string& authority) {
  if (!SendAll(fd,
               absl::StrCat("CONNECT ", authority, " HTTP/1.1\r\nHost: ", authority, "\r\n\r\n"))) {
    return false;
  }
  std::string head;
  char buf[512];
  while (head.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return false;
    head.append(buf, n);
  }
  return absl::StartsWith(head, "HTTP/1.1 200 ");
}

enum class Way { kDirect, kHttpProxy, kConnect };

struct Target {
  uint16_t origin_port;
  uint16_t proxy_port;
  std::string authority;  // origin.test:PORT
};

// One GET of `path` on a new connection, the chosen way. The bytes received, or nullopt on any
// failure (including a status other than 200).
std::optional<uint64_t> Fetch(const Target& t, Way way, const std::string& path) {
  UniqueFd fd = ConnectTo(way == Way::kDirect ? t.origin_port : t.proxy_port);
  if (!fd.valid()) return std::nullopt;
  std::string request;
  switch (way) {
    case Way::kDirect:
      request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", t.authority, "\r\n\r\n");
      break;
    case Way::kHttpProxy:
      request = absl::StrCat("GET http://", t.authority, path, " HTTP/1.1\r\nHost: ", t.authority,
                             "\r\n\r\n");
      break;
    case Way::kConnect:
      if (!OpenTunnel(fd.get(), t.authority)) return std::nullopt;
      request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", t.authority, "\r\n\r\n");
      break;
  }
  if (!SendAll(fd.get(), request)) return std::nullopt;
  std::string first;
  const uint64_t got = Drain(fd.get(), &first);
  if (!absl::StartsWith(first, "HTTP/1.1 200 ")) return std::nullopt;
  return got;
}

struct Case {
  std::string command;
  std::string runner;  // kMoatRunner or "direct"
  Way way;
  std::vector<absl::Duration> samples;
  int failed = 0;
};

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// User and system time of the whole process (origin, proxy and client threads).
absl::Duration ProcessCpuTime() {
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  return absl::DurationFromTimeval(usage.ru_utime) + absl::DurationFromTimeval(usage.ru_stime);
}

double MegabytesPerSecond(uint64_t bytes, absl::Duration d) {
  return static_cast<double>(bytes) / 1e6 / absl::ToDoubleSeconds(d);
}

int Main(int argc, char** argv) {
  std::optional<Flags> parsed = ParseFlags(argc, argv);
  if (!parsed) return 2;
  const Flags flags = *parsed;

  egress::testing::LoopbackOrigin origin;
  egress::testing::FakeResolver resolver;
  resolver.Set("origin.test", {"127.0.0.1"});
  char log_dir_template[] = "/tmp/egress_bench.XXXXXX";
  const char* log_dir = ::mkdtemp(log_dir_template);
  if (log_dir == nullptr) {
    std::perror("egress_bench: mkdtemp");
    return 1;
  }
  const std::string log_path = absl::StrCat(log_dir, "/audit.log");
  absl::StatusOr<std::unique_ptr<egress::AuditLog>> audit = egress::AuditLog::Open(log_path);
  absl::StatusOr<egress::EgressRules> rules = egress::EgressRules::Parse({"origin.test"}, {});
  if (!audit.ok() || !rules.ok()) {
    std::fprintf(stderr, "egress_bench: setup failed: %s %s\n", audit.status().ToString().c_str(),
                 rules.status().ToString().c_str());
    return 1;
  }
  egress::ProxyConfig config;
  config.sandbox_id = "bench";
  config.requests_per_minute = 0;  // no limit: the bench is a flood on purpose
  egress::EgressProxy proxy(config, *std::move(rules),
                            egress::AddressPolicy({*egress::Cidr::Parse("127.0.0.0/8")}, {}),
                            &resolver, audit->get());
  uint16_t proxy_port = 0;
  proxy.AddHttpListener(ListenTcp("127.0.0.1", 0, &proxy_port));
  if (absl::Status started = proxy.Start(); !started.ok()) {
    std::fprintf(stderr, "egress_bench: %s\n", started.ToString().c_str());
    return 1;
  }
  const Target target{origin.port(), proxy_port, absl::StrCat("origin.test:", origin.port())};

  // Small requests, round-robin with a rotating start; 20 untimed rounds first.
  const std::string kPlain = "small GET, HTTP proxy";
  const std::string kTunnel = "small GET, CONNECT";
  std::vector<Case> cases = {{kPlain, kMoatRunner, Way::kHttpProxy},
                             {kPlain, "direct", Way::kDirect},
                             {kTunnel, kMoatRunner, Way::kConnect},
                             {kTunnel, "direct", Way::kDirect}};
  const int n = static_cast<int>(cases.size());
  for (int round = -20; round < flags.rounds; ++round) {
    for (int i = 0; i < n; ++i) {
      Case& c = cases[((i + round) % n + n) % n];
      const Clock::time_point start = Clock::now();
      const std::optional<uint64_t> got = Fetch(target, c.way, "/small");
      const absl::Duration elapsed = absl::FromChrono(Clock::now() - start);
      if (round < 0) continue;
      if (got) {
        c.samples.push_back(elapsed);
      } else {
        ++c.failed;
      }
    }
  }

  // Downloads, round-robin as well.
  const uint64_t download_bytes = static_cast<uint64_t>(flags.download_mb) * 1'000'000;
  const std::string download_path = absl::StrCat("/bytes/", download_bytes);
  struct Download {
    std::string label;
    Way way;
    std::vector<absl::Duration> samples;
    int failed = 0;
    absl::Duration cpu;  // the whole process's, over the timed runs
  };
  std::vector<Download> downloads = {
      {"direct", Way::kDirect}, {"HTTP proxy", Way::kHttpProxy}, {"CONNECT", Way::kConnect}};
  for (int round = -1; round < flags.downloads; ++round) {
    for (int i = 0; i < 3; ++i) {
      Download& d = downloads[((i + round) % 3 + 3) % 3];
      const absl::Duration cpu_before = ProcessCpuTime();
      const Clock::time_point start = Clock::now();
      const std::optional<uint64_t> got = Fetch(target, d.way, download_path);
      const absl::Duration elapsed = absl::FromChrono(Clock::now() - start);
      if (round < 0) continue;
      // The response head comes on top of the body.
      if (got && *got > download_bytes) {
        d.samples.push_back(elapsed);
        d.cpu += ProcessCpuTime() - cpu_before;
      } else {
        ++d.failed;
      }
    }
  }
  proxy.Stop();

  struct utsname uts;
  ::uname(&uts);
  std::printf("moat egress proxy benchmark, loopback, in-process proxy and origin\n");
  std::printf("machine: Linux %s, %ld CPUs online, load average at the end %s\n", uts.release,
              ::sysconf(_SC_NPROCESSORS_ONLN), ReadFirstLine("/proc/loadavg").c_str());
  std::printf(
      "small requests: %d rounds (after 20 warm-up), round-robin over %d cases; each request on "
      "a new TCP connection, one at a time; runner moat = through the proxy\n\n",
      flags.rounds, n);
  std::vector<CaseResult> results;
  for (const Case& c : cases) {
    results.push_back(
        {c.command, c.runner, Summarize(c.samples), c.failed, c.failed ? "request failed" : ""});
  }
  std::printf("%s\n", FormatResultTable(results).c_str());
  for (size_t i = 0; i + 1 < results.size(); i += 2) {
    const CaseResult& proxied = results[i];
    const CaseResult& direct = results[i + 1];
    auto per_second = [](const Case& c) {
      absl::Duration total;
      for (absl::Duration d : c.samples) total += d;
      return c.samples.empty() ? 0.0 : c.samples.size() / absl::ToDoubleSeconds(total);
    };
    std::printf(
        "%-22s added latency per request (median) %.3f ms; requests/s %.0f direct, "
        "%.0f through the proxy (%.0f%%)\n",
        proxied.command.c_str(),
        absl::ToDoubleMilliseconds(proxied.summary.median - direct.summary.median),
        per_second(cases[i + 1]), per_second(cases[i]),
        100.0 * per_second(cases[i]) / per_second(cases[i + 1]));
  }

  std::printf(
      "\ndownload of %d MB (10^6 bytes), %d timed runs per way (after 1 warm-up), "
      "round-robin; MB/s of the median run\n\n",
      flags.download_mb, flags.downloads);
  std::printf("%-12s %5s %6s %10s %10s %10s %12s\n", "way", "runs", "failed", "median s", "MB/s",
              "vs direct", "CPU s per GB");
  const LatencySummary direct = Summarize(downloads[0].samples);
  for (const Download& d : downloads) {
    const LatencySummary s = Summarize(d.samples);
    if (s.runs == 0) {
      std::printf("%-12s %5d %6d %10s %10s %10s %12s\n", d.label.c_str(), 0, d.failed, "-", "-",
                  "-", "-");
      continue;
    }
    std::printf("%-12s %5d %6d %10.3f %10.0f %9.0f%% %12.3f\n", d.label.c_str(), s.runs, d.failed,
                absl::ToDoubleSeconds(s.median), MegabytesPerSecond(download_bytes, s.median),
                direct.runs ? 100.0 * absl::FDivDuration(direct.median, s.median) : 0.0,
                absl::ToDoubleSeconds(d.cpu) / (1e-9 * download_bytes * s.runs));
  }
  ::unlink(log_path.c_str());
  ::rmdir(log_dir);
  return 0;
}

}  // namespace
}  // namespace moat::bench

int main(int argc, char** argv) { return moat::bench::Main(argc, argv); }
