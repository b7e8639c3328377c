// A Resolver for egress tests: a fixed map from names to answers, counting lookups. A name can
// have a sequence of answers, one per lookup (the last repeats), to play a rebinding DNS server.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sandbox/egress/resolver.h"

namespace moat::egress::testing {

class FakeResolver : public Resolver {
 public:
  // `name` answers `addresses` (strict text forms, see IpAddress::Parse) on every lookup.
  void Set(const std::string& name, const std::vector<std::string>& addresses) {
    SetSequence(name, {addresses});
  }
  // Lookup i of `name` answers answers[min(i, size - 1)].
  void SetSequence(const std::string& name, std::vector<std::vector<std::string>> answers) {
    absl::MutexLock lock(&mu_);
    answers_[name] = std::move(answers);
  }

  absl::StatusOr<std::vector<IpAddress>> Resolve(absl::string_view name) override {
    absl::MutexLock lock(&mu_);
    const int n = calls_[std::string(name)]++;
    auto it = answers_.find(std::string(name));
    if (it == answers_.end()) return absl::NotFoundError("NXDOMAIN (fake resolver)");
    const std::vector<std::string>& texts = it->second[std::min<size_t>(n, it->second.size() - 1)];
    std::vector<IpAddress> out;
    for (const std::string& text : texts) out.push_back(*IpAddress::Parse(text));
    return out;
  }

  int calls(const std::string& name) {
    absl::MutexLock lock(&mu_);
    return calls_[name];
  }
  int total_calls() {
    absl::MutexLock lock(&mu_);
    int total = 0;
    for (const auto& [name, n] : calls_) total += n;
    return total;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<std::vector<std::string>>> answers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moat::egress::testing
