// Throughput of the output sanitizer on 1 MiB streams (the default cap). Built with the rest of
// the tree as target `sanitizer_bench`:
//
//   ninja -C build -j1 sanitizer_bench && ./build/bin/sanitizer_bench
//
// Each corpus is sanitized repeatedly; the best of several rounds is reported, in MB/s of raw
// input (1 MB = 10^6 bytes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "sandbox/output/sanitizer.h"
#include "sandbox/output/secret_scanner.h"

namespace {

using moat::sandbox::FindSecrets;
using moat::sandbox::PrintableRatio;
using moat::sandbox::SanitizeOutput;
using moat::sandbox::TerminalFilter;

constexpr size_t kMiB = size_t{1} << 20;

std::string RepeatTo(const std::string& unit, size_t size) {
  std::string s;
  while (s.size() + unit.size() <= size) s += unit;
  return s;
}

std::string LogLines() {
  return RepeatTo(
      "2024-05-01T12:00:00.123Z INFO  worker-3 handled GET /api/v1/items?page=2 status=200 "
      "bytes=5120 in 12.5ms user=alice@example.com trace=4bf92f3577b34da6a3ce929d0e0e4736\n"
      "2024-05-01T12:00:00.456Z WARN  scheduler: queue depth 17 above 16, scaling out (pool=a)\n",
      kMiB);
}

std::string Prose() {
  return RepeatTo(
      "The quick brown fox jumps over the lazy dog. Sandboxes run untrusted code, and the "
      "kernel, not the program, says what it may do. Secrets such as keys and tokens must not "
      "appear in what a model reads; neither should escape sequences.\n",
      kMiB);
}

std::string ColouredCompilerOutput() {
  return RepeatTo(
      "\x1b[1m/src/app/main.cc:42:7: \x1b[0m\x1b[0;1;31merror: \x1b[0m\x1b[1muse of undeclared "
      "identifier 'foo'\x1b[0m\n   42 |   foo(bar);\n      |   \x1b[0;1;32m^~~\n\x1b[0m",
      kMiB);
}

std::string Utf8Text() {
  return RepeatTo("Grüße aus Zürich — 日本語のテキスト、中文文本，한국어 텍스트 ✓ 🎉 naïve café\n",
                  kMiB);
}

std::string SecretDense() {
  return RepeatTo(
      "export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n"
      "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
      "curl -H 'Authorization: Bearer aB3xY7kQ9mZ1pR5tW2aB3xY7' https://u:pw@example.com/\n"
      "OPENAI_API_KEY=sk-proj-aB3xY7kQ9mZ1pR5tW2aB3xY7kQ9mZ1pR5tW2\n",
      kMiB);
}

std::string RandomBinary() {
  std::mt19937 rng(1);
  std::string s(kMiB, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// Best-of-rounds throughput of `fn` over `bytes` bytes, in MB/s.
double MeasureMBps(size_t bytes, const std::function<void()>& fn) {
  constexpr int kRounds = 7;
  constexpr int kRepeats = 10;
  double best_seconds = 1e9;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < kRepeats; ++r) fn();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best_seconds = std::min(best_seconds, elapsed.count() / kRepeats);
  }
  return static_cast<double>(bytes) / best_seconds / 1e6;
}

}  // namespace

int main() {
  struct Corpus {
    const char* name;
    std::string text;
  };
  const std::vector<Corpus> corpora = {
      {"log lines", LogLines()},
      {"prose", Prose()},
      {"coloured compiler output", ColouredCompilerOutput()},
      {"UTF-8 text", Utf8Text()},
      {"secret-dense", SecretDense()},
      {"random binary", RandomBinary()},
  };
  std::printf("%-26s %12s %12s %12s %12s %12s\n", "corpus (1 MiB)", "Sanitize", "Terminal4K",
              "FindSecrets", "Ratio", "masked");
  for (const Corpus& c : corpora) {
    size_t sink = 0;
    const double sanitize =
        MeasureMBps(c.text.size(), [&] { sink += SanitizeOutput(c.text, false).text.size(); });
    const double terminal = MeasureMBps(c.text.size(), [&] {
      TerminalFilter filter;
      std::string out;
      for (size_t pos = 0; pos < c.text.size(); pos += 4096) {
        out.clear();
        filter.FilterTo(absl::string_view(c.text).substr(pos, 4096), &out);
        sink += out.size();
      }
      sink += filter.Flush().size();
    });
    const double secrets = MeasureMBps(c.text.size(), [&] { sink += FindSecrets(c.text).size(); });
    const double ratio =
        MeasureMBps(c.text.size(), [&] { sink += PrintableRatio(c.text) > 0.5 ? 1 : 0; });
    const int masked = SanitizeOutput(c.text, false).secrets_masked;
    std::printf("%-26s %9.0f MB/s %7.0f MB/s %7.0f MB/s %7.0f MB/s %12d\n", c.name, sanitize,
                terminal, secrets, ratio, masked);
    if (sink == 42) std::printf(" ");  // keeps the work observable to the optimiser
  }
  return 0;
}
