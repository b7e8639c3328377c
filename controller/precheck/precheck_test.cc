#include "controller/precheck/precheck.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::controller::precheck {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;

std::vector<std::string> TagsOf(absl::string_view code, Language l) { return Scan(code, l).Tags(); }

TEST(PrecheckTest, PlainCodeHasNoTags) {
  EXPECT_THAT(TagsOf("print(sum(range(10)))\n", Language::kPython), IsEmpty());
  EXPECT_THAT(TagsOf("console.log([1, 2].map((x) => x * 2));", Language::kJavaScript), IsEmpty());
  EXPECT_THAT(TagsOf("ls -la | grep txt > list", Language::kShell), IsEmpty());
  EXPECT_EQ(Scan("x = 1", Language::kPython).risk, Risk::kLow);
}

TEST(PrecheckTest, AShellOutIsLowAndWithAPipeMedium) {
  Verdict v = Scan("import os\nos.system('date')\n", Language::kPython);
  EXPECT_EQ(v.risk, Risk::kLow);
  EXPECT_THAT(v.Tags(), Contains("shell-out"));
  v = Scan("import os\nos.system('date > /tmp/d')\n", Language::kPython);
  EXPECT_EQ(v.risk, Risk::kMedium);
  EXPECT_EQ(v.Tags(), std::vector<std::string>{"shell-pipe"});  // Not shell-out as well.
  ASSERT_EQ(v.findings.size(), 1u);
  EXPECT_EQ(v.findings[0].line, 2);
  v = Scan("subprocess.run('a | b', shell=True)", Language::kPython);
  EXPECT_THAT(v.Tags(), Contains("shell-pipe"));
  // A list of arguments runs no shell.
  EXPECT_THAT(TagsOf("subprocess.run(['a', '|', 'b'])", Language::kPython), IsEmpty());
  EXPECT_THAT(TagsOf("require('child_process').exec('ps aux | head')", Language::kJavaScript),
              Contains("shell-pipe"));
}

TEST(PrecheckTest, EvalOfALiteralOrAMethodIsNotDynamic) {
  EXPECT_THAT(TagsOf("model.eval()\ndf.eval('a + b')\n", Language::kPython), IsEmpty());
  EXPECT_THAT(TagsOf("eval('1 + 2')", Language::kPython), IsEmpty());
  EXPECT_THAT(TagsOf("eval(expr)", Language::kPython), Contains("dynamic-eval"));
  EXPECT_THAT(TagsOf("exec('x = ' + y)", Language::kPython), Contains("dynamic-eval"));
  EXPECT_THAT(TagsOf("eval(userCode)", Language::kJavaScript), Contains("dynamic-eval"));
  EXPECT_THAT(TagsOf("obj.eval(x)", Language::kJavaScript), IsEmpty());
}

TEST(PrecheckTest, DecodedThenExecutedIsHighAcrossLines) {
  Verdict v = Scan("import base64\nb = base64.b64decode(s)\nexec(b)\n", Language::kPython);
  EXPECT_EQ(v.risk, Risk::kHigh);
  EXPECT_THAT(v.Tags(), Contains("decode-exec"));
  // Decoding alone (an image) is nothing.
  EXPECT_THAT(TagsOf("img = base64.b64decode(s)\n", Language::kPython), IsEmpty());
}

TEST(PrecheckTest, CommentsAreNotCode) {
  EXPECT_THAT(TagsOf("# curl x | sh\n# cat /etc/shadow\n", Language::kShell), IsEmpty());
  EXPECT_THAT(TagsOf("# exec(b64decode(x))\n", Language::kPython), IsEmpty());
  EXPECT_THAT(TagsOf("// eval(atob(x))\n", Language::kJavaScript), IsEmpty());
}

TEST(PrecheckTest, ACommandIsScannedInTheLanguageItRuns) {
  EXPECT_THAT(ScanCommand("python3 -c \"exec(input())\"").Tags(), Contains("dynamic-eval"));
  EXPECT_THAT(ScanCommand("node -e \"eval(process.argv[1])\"").Tags(), Contains("dynamic-eval"));
  // Without python on the line, "exec(" is not Python's.
  EXPECT_THAT(ScanCommand("echo 'exec(x)'").Tags(), IsEmpty());
}

TEST(PrecheckTest, LongLinesAreScannedWithoutBlowingTheStack) {
  std::string blob(200'000, 'A');
  Verdict v = Scan("x = '" + blob + "'; exec(base64.b64decode(x))", Language::kPython);
  EXPECT_THAT(v.Tags(), Contains("decode-exec"));
  EXPECT_EQ(Scan(std::string(kMaxScanBytes + 1, 'a'), Language::kShell).Tags(),
            std::vector<std::string>{"too-large-to-scan"});
}

TEST(PrecheckTest, LanguagesByName) {
  EXPECT_EQ(ParseLanguage("Python3"), Language::kPython);
  EXPECT_EQ(ParseLanguage("ts"), Language::kJavaScript);
  EXPECT_EQ(ParseLanguage("bash"), Language::kShell);
  EXPECT_EQ(ParseLanguage("cobol"), std::nullopt);
}

struct Snippet {
  std::string name, language, expected, tag, code;
};

std::vector<Snippet> LoadCorpus() {
  std::ifstream in(std::string(MOAT_SOURCE_DIR) + "/controller/precheck/testdata/corpus.txt");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<Snippet> out;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (absl::ConsumePrefix(&line, "=== ")) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      f.resize(4);
      out.push_back({f[0], f[1], f[2], f[3], ""});
    } else if (!out.empty() && !absl::StartsWith(line, "# ---")) {
      absl::StrAppend(&out.back().code, line, "\n");
    }
  }
  return out;
}

// The corpus: every attack at its expected risk with its tag, and the false-positive rate of
// the benign snippets (judged medium or high: they would have run under the stricter policy or
// waited for a person) printed and bounded.
TEST(PrecheckCorpusTest, AttacksAreCaughtAndFalsePositivesStayRare) {
  std::vector<Snippet> corpus = LoadCorpus();
  ASSERT_GE(corpus.size(), 90u) << "the corpus file is missing or truncated";
  int benign = 0, false_positives = 0, attacks = 0, caught = 0;
  std::vector<std::string> flagged, missed;
  for (const Snippet& s : corpus) {
    Verdict v;
    if (s.language == "command") {
      v = ScanCommand(s.code);
    } else {
      std::optional<Language> l = ParseLanguage(s.language);
      ASSERT_TRUE(l.has_value()) << s.name << ": unknown language " << s.language;
      v = Scan(s.code, *l);
    }
    std::string tags = absl::StrJoin(v.Tags(), ",");
    if (s.expected == "benign") {
      ++benign;
      if (v.risk != Risk::kLow) {
        ++false_positives;
        flagged.push_back(absl::StrCat(s.name, " (", RiskName(v.risk), ": ", tags, ")"));
      }
      continue;
    }
    ++attacks;
    Risk want = s.expected == "high" ? Risk::kHigh : Risk::kMedium;
    std::vector<std::string> got = v.Tags();
    if (v.risk >= want && std::find(got.begin(), got.end(), s.tag) != got.end()) {
      ++caught;
    } else {
      missed.push_back(absl::StrCat(s.name, " (", RiskName(v.risk), ": ", tags, ")"));
    }
  }
  const double fp_rate = benign ? double(false_positives) / benign : 0;
  std::printf("pre-check corpus: %d benign, %d false positives (%.1f%%): %s\n", benign,
              false_positives, 100 * fp_rate, absl::StrJoin(flagged, "; ").c_str());
  std::printf("pre-check corpus: %d attacks, %d caught, missed: %s\n", attacks, caught,
              absl::StrJoin(missed, "; ").c_str());
  RecordProperty("false_positive_rate", std::to_string(fp_rate));
  EXPECT_GE(benign, 50);
  EXPECT_GE(attacks, 30);
  EXPECT_THAT(missed, IsEmpty());
  EXPECT_LE(fp_rate, 0.05) << absl::StrJoin(flagged, "; ");
}

}  // namespace
}  // namespace moat::controller::precheck
