#include "sandbox/egress/sandbox_egress.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sandbox/egress/netns_sockets.h"
#include "sandbox/egress/rate_limiter.h"
#include "sandbox/egress/sk_lookup.h"
#include "sandbox/egress/target.h"
#include "sandbox/netns/net.h"
#include "util/errno_status.h"
#include "util/status_macros.h"

namespace moat::egress {
namespace {

// Transparent mode hands out 127.77.0.1, 127.77.0.2, ...: inside the sandbox every 127/8 address
// is local, so connections to them stay in the sandbox's namespace, where the supervisor's
// listener takes them on every port (sk_lookup.h).
constexpr uint32_t kTransparentBase = (127u << 24) | (77u << 16);
constexpr uint32_t kTransparentMax = 0xfffe;
const IpAddress kLocalhost = IpAddress::V4(0x7f000001);

absl::Status MakeStateDir() {
  if (::mkdir(kStateDir, 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("egress: create \"", kStateDir, "\""));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view content) {
  const std::string tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return ErrnoStatus(absl::StrCat("egress: create \"", tmp, "\""));
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    ::unlink(tmp.c_str());
    return ErrnoStatus(absl::StrCat("egress: write \"", tmp, "\""));
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return ErrnoStatus(absl::StrCat("egress: rename \"", tmp, "\""));
  }
  return absl::OkStatus();
}

std::string Describe(const AuditRecord& r) {
  std::string target = r.port != 0 ? absl::StrCat(r.host, ":", r.port) : r.host;
  return absl::StrCat(r.method, " ", target, " (", r.protocol, ") denied: ", r.reason);
}

}  // namespace

// Writes the records to the audit log and keeps the denials for the run's violations. The log is on
// the host's disk and sandboxed code decides how many requests it makes (denied ones are not rate
// limited), so lines are limited too: past `lines_per_minute` they are counted, not written, and
// one line at the end says how many were left out.
class EgressSession::Recorder : public AuditSink {
 public:
  Recorder(std::unique_ptr<AuditLog> log, size_t max_violations, uint32_t lines_per_minute,
           std::string sandbox_id,
           std::function<void(bool allowed, const std::string& detail)> observer)
      : log_(std::move(log)),
        max_violations_(max_violations),
        lines_(lines_per_minute),
        sandbox_id_(std::move(sandbox_id)),
        observer_(std::move(observer)) {}

  void Record(const AuditRecord& record) override {
    if (observer_) observer_(record.allowed, Describe(record));
    const bool written = lines_.TryAcquire();
    if (written) log_->Record(record);
    absl::MutexLock lock(&mu_);
    if (!written) ++unwritten_;
    if (record.allowed) return;
    if (violations_.size() < max_violations_) {
      violations_.push_back({"network", Describe(record)});
    } else {
      ++dropped_;
    }
  }

  // Counts a DNS question refused for the rate (not written one by one).
  void CountRefusedQuestion() {
    absl::MutexLock lock(&mu_);
    ++refused_questions_;
  }

  std::vector<sandbox::Violation> Take() {
    absl::MutexLock lock(&mu_);
    if (unwritten_ > 0 || refused_questions_ > 0) {
      AuditRecord summary;
      summary.time = absl::Now();
      summary.sandbox = sandbox_id_;
      summary.protocol = "audit";
      summary.reason =
          absl::StrCat(unwritten_, " records not written (more than ", lines_.per_minute(),
                       " a minute); ", refused_questions_, " DNS questions refused for the rate");
      log_->Record(summary);
    }
    std::vector<sandbox::Violation> out = std::move(violations_);
    if (dropped_ > 0) {
      out.push_back({"network", absl::StrCat(dropped_, " more network denials")});
    }
    if (refused_questions_ > 0) {
      out.push_back({"network", absl::StrCat(refused_questions_,
                                             " DNS questions refused: over the rate limit")});
    }
    violations_.clear();
    dropped_ = unwritten_ = refused_questions_ = 0;
    return out;
  }

 private:
  std::unique_ptr<AuditLog> log_;
  const size_t max_violations_;
  RateLimiter lines_;
  const std::string sandbox_id_;
  const std::function<void(bool allowed, const std::string& detail)> observer_;
  absl::Mutex mu_;
  std::vector<sandbox::Violation> violations_ ABSL_GUARDED_BY(mu_);
  size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unwritten_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_questions_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::StatusOr<std::unique_ptr<EgressSession>> EgressSession::Create(const EgressOptions& options) {
  if (options.rootless && options.transparent) {
    return absl::FailedPreconditionError(
        "egress: network.transparent is not available to an ordinary user's run: its steering "
        "(sk_lookup) needs CAP_BPF on the host, and its per-name listeners are made in the "
        "sandbox's network namespace while the command runs, which moat may enter only as root. "
        "Leave network.transparent out (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and the DNS stub "
        "still work for allowedDomains), or run moat as root");
  }
  std::unique_ptr<EgressSession> s(new EgressSession(options));
  ASSIGN_OR_RETURN(EgressRules rules,
                   EgressRules::Create(options.allowed_domains, options.denied_domains));
  s->rules_ = std::make_unique<EgressRules>(std::move(rules));

  std::vector<Cidr> cidrs = options.allowed_cidrs;
  absl::StatusOr<std::vector<IpAddress>> host_addresses = HostAddresses();
  if (!host_addresses.ok()) {
    return absl::Status(
        host_addresses.status().code(),
        absl::StrCat("egress: list this host's addresses: ", host_addresses.status().message()));
  }
  s->addresses_ = std::make_unique<AddressPolicy>(std::move(cidrs), *std::move(host_addresses));

  std::vector<DnsServer> servers;
  if (options.dns_servers.empty()) {
    absl::StatusOr<std::vector<DnsServer>> host = HostDnsServers();
    if (!host.ok()) {
      return absl::Status(host.status().code(),
                          absl::StrCat("egress: ", host.status().message(),
                                       " (or set network.dnsServers in the policy)"));
    }
    servers = *std::move(host);
  } else {
    servers = options.dns_servers;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<DnsResolver> resolver, DnsResolver::Create(std::move(servers)));
  s->resolver_ = std::move(resolver);

  if (options.audit_log == kDefaultAuditLog) RETURN_IF_ERROR(MakeStateDir());
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(options.audit_log);
  if (!log.ok()) {
    return absl::Status(log.status().code(),
                        absl::StrCat("egress: open the audit log: ", log.status().message()));
  }
  // Generous next to the request rate: each request is a line, and most need a DNS question or
  // two first.
  const uint32_t rate =
      static_cast<uint32_t>(std::min<uint64_t>(options.requests_per_minute, 1000000));
  s->recorder_ = std::make_unique<Recorder>(*std::move(log), options.max_violations,
                                            std::max<uint32_t>(10 * rate, 1000), options.sandbox_id,
                                            options.observer);
  s->dns_limiter_ = std::make_unique<RateLimiter>(std::max<uint32_t>(4 * rate, 600));

  ProxyConfig config;
  config.sandbox_id = options.sandbox_id;
  config.max_request_body_bytes = options.max_request_body_bytes;
  config.requests_per_minute = static_cast<uint32_t>(options.requests_per_minute);
  s->proxy_ = std::make_unique<EgressProxy>(config, *s->rules_, *s->addresses_, s->resolver_.get(),
                                            s->recorder_.get());
  s->stop_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->stop_) return ErrnoStatus("egress: create an eventfd");
  return s;
}

EgressSession::EgressSession(const EgressOptions& options) : options_(options) {}

EgressSession::~EgressSession() { Finish(); }

std::vector<std::pair<std::string, std::string>> EgressSession::Env() const {
  const std::string http = absl::StrCat("http://127.0.0.1:", kHttpProxyPort);
  // socks5h: the proxy resolves names, so clients never need an answer for a name they may not
  // reach.
  const std::string socks = absl::StrCat("socks5h://127.0.0.1:", kSocksPort);
  const std::string no_proxy = "localhost,127.0.0.1,::1";
  return {{"HTTP_PROXY", http},   {"http_proxy", http},  {"HTTPS_PROXY", http},
          {"https_proxy", http},  {"ALL_PROXY", socks},  {"all_proxy", socks},
          {"NO_PROXY", no_proxy}, {"no_proxy", no_proxy}};
}

absl::StatusOr<std::string> EgressSession::ResolvConf(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/resolv.conf");
  constexpr absl::string_view kContent =
      "# Written by moat: the sandbox's DNS stub, run by its supervisor.\n"
      "nameserver 127.0.0.1\n";
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(
        absl::StrCat("egress: create \"", dir, "\" (for the sandbox's resolv.conf)"));
  }
  char buf[256];
  UniqueFd existing(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (existing) {
    ssize_t n = ::read(existing.get(), buf, sizeof(buf));
    if (n == static_cast<ssize_t>(kContent.size()) && absl::string_view(buf, n) == kContent) {
      return path;
    }
  }
  RETURN_IF_ERROR(WriteFileAtomically(path, kContent));
  return path;
}

const std::vector<ListenerSpec>& EgressSession::Listeners() {
  static const std::vector<ListenerSpec> kListeners = {
      {SOCK_STREAM, kHttpProxyPort, "127.0.0.1:3128 (tcp)"},
      {SOCK_STREAM, kSocksPort, "127.0.0.1:1080 (tcp)"},
      {SOCK_DGRAM, kDnsPort, "127.0.0.1:53 (udp)"},
      {SOCK_STREAM, kDnsPort, "127.0.0.1:53 (tcp)"}};
  return kListeners;
}

absl::Status EgressSession::Attach(int pidfd) {
  if (options_.rootless) {
    return absl::FailedPreconditionError(
        "egress: a rootless session takes its listeners from the sandbox (AttachListeners)");
  }
  pidfd_ = pidfd;
  std::vector<UniqueFd> listeners;
  RETURN_IF_ERROR(InNetworkNamespace(pidfd, [&]() -> absl::Status {
    RETURN_IF_ERROR(sandbox::BringUpLoopbackInThisThread());
    for (const ListenerSpec& spec : Listeners()) {
      ASSIGN_OR_RETURN(UniqueFd fd, spec.type == SOCK_DGRAM ? BindUdp(kLocalhost, spec.port)
                                                            : ListenTcp(kLocalhost, spec.port));
      listeners.push_back(std::move(fd));
    }
    return absl::OkStatus();
  }));
  return Serve(std::move(listeners));
}

absl::Status EgressSession::AttachListeners(std::vector<UniqueFd> listeners) {
  const std::vector<ListenerSpec>& specs = Listeners();
  if (listeners.size() != specs.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "egress: the sandbox handed over ", listeners.size(), " listeners, not ", specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    RETURN_IF_ERROR(CheckListener(listeners[i].get(), specs[i].type, kLocalhost, specs[i].port));
  }
  return Serve(std::move(listeners));
}

absl::Status EgressSession::Serve(std::vector<UniqueFd> listeners) {
  proxy_->AddHttpListener(std::move(listeners[0]));
  proxy_->AddSocksListener(std::move(listeners[1]));
  if (options_.transparent) RETURN_IF_ERROR(SteerTransparentAddresses());
  RETURN_IF_ERROR(proxy_->Start());
  auto stub = std::make_shared<DnsStub>(std::move(listeners[2]), std::move(listeners[3]),
                                        [this](const DnsQuestion& q) { return Answer(q); });
  dns_thread_ = std::thread([stub, stop = stop_.get()] { stub->Serve(stop); });
  return absl::OkStatus();
}

absl::Status EgressSession::SteerTransparentAddresses() {
  // One listener takes every port of every transparent address (sk_lookup.h). Without BPF
  // (older kernels) TransparentAddress() falls back to listeners on the allowed ports.
  UniqueFd listener, netns;
  RETURN_IF_ERROR(InNetworkNamespace(pidfd_, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(listener, ListenTcp(kLocalhost, 0));
    netns.reset(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!netns) return ErrnoStatus("egress: open the sandbox's network namespace");
    return absl::OkStatus();
  }));
  absl::StatusOr<SkLookupSteering> steering =
      SkLookupSteering::Attach(netns.get(), listener.get(), kTransparentBase, 0xffff0000);
  if (!steering.ok()) return absl::OkStatus();
  steering_ = std::make_unique<SkLookupSteering>(*std::move(steering));
  proxy_->SetTransparentNames([this](const IpAddress& local) -> std::string {
    absl::MutexLock lock(&mu_);
    auto it = transparent_names_.find(local);
    return it == transparent_names_.end() ? "" : it->second;
  });
  proxy_->AddTransparentListener(std::move(listener), "");
  return absl::OkStatus();
}

StubAnswer EgressSession::Answer(const DnsQuestion& question) {
  if (!dns_limiter_->TryAcquire()) {
    // Every allowed question costs upstream queries and every question a log line: bounded.
    recorder_->CountRefusedQuestion();
    return StubAnswer{.rcode = kDnsRefused};
  }
  AuditRecord record;
  record.time = absl::Now();
  record.sandbox = options_.sandbox_id;
  record.protocol = "dns";
  record.method = question.type == kDnsTypeA      ? "A"
                  : question.type == kDnsTypeAaaa ? "AAAA"
                                                  : absl::StrCat("TYPE", question.type);
  StubAnswer answer;
  auto deny = [&](std::string reason) {
    record.allowed = false;
    record.reason = std::move(reason);
    recorder_->Record(record);
    answer.rcode = kDnsNxDomain;
    return answer;
  };
  absl::StatusOr<CanonicalHost> host = CanonicalizeHost(question.name);
  if (!host.ok()) {
    record.host = absl::CHexEscape(question.name);
    return deny(std::string(host.status().message()));
  }
  record.host = host->text;
  Decision decision = rules_->DecideName(*host);
  if (!decision.allowed) return deny(decision.reason);
  record.allowed = true;
  record.reason = decision.reason;
  if (question.type != kDnsTypeA && question.type != kDnsTypeAaaa) {
    recorder_->Record(record);
    return answer;  // NOERROR, no data: only addresses are ever answered
  }
  if (options_.transparent) {
    if (question.type == kDnsTypeA) {
      absl::StatusOr<IpAddress> local = TransparentAddress(*host);
      if (!local.ok()) {
        record.allowed = false;
        record.reason = std::string(local.status().message());
        recorder_->Record(record);
        answer.rcode = kDnsServFail;
        return answer;
      }
      record.address = local->ToString();
      answer.addresses.push_back(*local);
    }
    recorder_->Record(record);
    return answer;
  }
  absl::StatusOr<std::vector<IpAddress>> resolved =
      host->literal ? absl::StatusOr<std::vector<IpAddress>>(std::vector{*host->literal})
                    : resolver_->Resolve(host->text);
  if (!resolved.ok()) {
    record.reason = std::string(resolved.status().message());
    recorder_->Record(record);
    answer.rcode = absl::IsNotFound(resolved.status()) ? kDnsNxDomain : kDnsServFail;
    return answer;
  }
  // Only addresses the proxy would dial: the answer never tells the sandbox about internal ones.
  for (const IpAddress& address : *resolved) {
    if (addresses_->Check(address).ok()) answer.addresses.push_back(address);
  }
  if (!answer.addresses.empty()) record.address = answer.addresses.front().ToString();
  recorder_->Record(record);
  return answer;
}

absl::StatusOr<IpAddress> EgressSession::TransparentAddress(const CanonicalHost& host) {
  absl::MutexLock lock(&mu_);
  if (auto it = transparent_.find(host.text); it != transparent_.end()) return it->second;
  if (next_transparent_ > kTransparentMax) {
    return absl::ResourceExhaustedError("egress: too many names for transparent mode");
  }
  const IpAddress local = IpAddress::V4(kTransparentBase + next_transparent_);
  if (!steering_) {
    // No sk_lookup: a listener per allowed port (80 and 443 when the entry names none).
    bool any_port = false;
    std::vector<uint16_t> ports = rules_->AllowedPorts(host, &any_port);
    if (any_port) ports = {80, 443};
    std::vector<UniqueFd> listeners;
    RETURN_IF_ERROR(InNetworkNamespace(pidfd_, [&]() -> absl::Status {
      for (uint16_t port : ports) {
        ASSIGN_OR_RETURN(UniqueFd fd, ListenTcp(local, port));
        listeners.push_back(std::move(fd));
      }
      return absl::OkStatus();
    }));
    for (UniqueFd& fd : listeners) proxy_->AddTransparentListener(std::move(fd), host.text);
  }
  ++next_transparent_;
  transparent_.emplace(host.text, local);
  transparent_names_.emplace(local, host.text);
  return local;
}

bool EgressSession::AwaitIdle(absl::Duration timeout) {
  return proxy_ == nullptr || proxy_->AwaitIdle(timeout);
}

std::vector<sandbox::Violation> EgressSession::Finish() {
  if (finished_) return {};
  finished_ = true;
  if (stop_) {
    uint64_t one = 1;
    (void)!::write(stop_.get(), &one, sizeof(one));
  }
  if (dns_thread_.joinable()) dns_thread_.join();
  if (proxy_) proxy_->Stop();
  steering_.reset();
  return recorder_ ? recorder_->Take() : std::vector<sandbox::Violation>{};
}

}  // namespace moat::egress
