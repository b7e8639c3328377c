#include "sandbox/egress/http_message.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moat::egress {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(HttpHeadLengthTest, CountsThroughTheEmptyLine) {
  EXPECT_EQ(HttpHeadLength("GET / HTTP/1.1\r\nHost: a\r\n\r\nbody"), 27u);
  EXPECT_EQ(HttpHeadLength("GET / HTTP/1.1\r\nHost: a\r\n"), 0u);
  EXPECT_EQ(HttpHeadLength(""), 0u);
}

TEST(ParseHttpRequestHeadTest, ReadsRequestLineAndHeaders) {
  absl::StatusOr<HttpRequestHead> head = ParseHttpRequestHead(
      "POST http://example.com/x?y=1 HTTP/1.0\r\nHost: example.com\r\nX-A:  one \r\n"
      "x-a: two\r\n\r\n");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->method, "POST");
  EXPECT_EQ(head->target, "http://example.com/x?y=1");
  EXPECT_EQ(head->minor_version, 0);
  EXPECT_THAT(head->Values("X-A"), ElementsAre("one", "two"));
  EXPECT_THAT(head->Values("host"), ElementsAre("example.com"));
  EXPECT_TRUE(head->Values("Missing").empty());
}

TEST(ParseHttpRequestHeadTest, RefusesWhatParsersDisagreeAbout) {
  const char* bad[] = {
      "GET / HTTP/1.1\nHost: a\r\n\r\n",       // bare LF
      "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n",  // bare CR
      "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",  // folded line
      "GET  / HTTP/1.1\r\n\r\n",               // double space
      "GET / HTTP/2.0\r\n\r\n",                // version
      "GET / HTTP/1.1 \r\n\r\n",               // trailing space
      "G@T / HTTP/1.1\r\n\r\n",                // method not a token
      "GET /\x01 HTTP/1.1\r\n\r\n",            // control byte in target
      "GET /\xc3\xa9 HTTP/1.1\r\n\r\n",        // non-ASCII target
      "GET / HTTP/1.1\r\nX Y: a\r\n\r\n",      // space in a name
      "GET / HTTP/1.1\r\nHost : a\r\n\r\n",    // space before the colon
      "GET / HTTP/1.1\r\nNoColon\r\n\r\n",     // no colon
      "GET / HTTP/1.1\r\nHost: a\r\n",         // no empty line
  };
  for (const char* text : bad) {
    EXPECT_FALSE(ParseHttpRequestHead(text).ok()) << text;
  }
  std::string nul = "GET / HTTP/1.1\r\nX: a";
  nul.push_back('\0');
  nul += "b\r\n\r\n";
  EXPECT_FALSE(ParseHttpRequestHead(nul).ok());
}

HttpRequestHead Head(const std::string& headers) {
  absl::StatusOr<HttpRequestHead> head =
      ParseHttpRequestHead("POST http://a/ HTTP/1.1\r\n" + headers + "\r\n");
  EXPECT_TRUE(head.ok()) << head.status();
  return head.ok() ? *head : HttpRequestHead{};
}

TEST(RequestBodyFramingTest, NoneLengthAndChunked) {
  absl::StatusOr<BodyFraming> none = RequestBodyFraming(Head(""));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->kind, BodyFraming::Kind::kNone);

  absl::StatusOr<BodyFraming> length = RequestBodyFraming(Head("Content-Length: 12\r\n"));
  ASSERT_TRUE(length.ok());
  EXPECT_EQ(length->kind, BodyFraming::Kind::kLength);
  EXPECT_EQ(length->length, 12u);

  absl::StatusOr<BodyFraming> same_twice =
      RequestBodyFraming(Head("Content-Length: 5, 5\r\nContent-Length: 5\r\n"));
  ASSERT_TRUE(same_twice.ok());
  EXPECT_EQ(same_twice->length, 5u);

  absl::StatusOr<BodyFraming> chunked =
      RequestBodyFraming(Head("Transfer-Encoding: Chunked\r\nExpect: 100-continue\r\n"));
  ASSERT_TRUE(chunked.ok());
  EXPECT_EQ(chunked->kind, BodyFraming::Kind::kChunked);
  EXPECT_TRUE(chunked->expect_continue);
}

TEST(RequestBodyFramingTest, RefusesAmbiguousFraming) {
  const char* bad[] = {
      "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
      "Transfer-Encoding: gzip, chunked\r\n",
      "Transfer-Encoding: identity\r\n",
      "Content-Length: 5\r\nContent-Length: 6\r\n",
      "Content-Length: +5\r\n",
      "Content-Length: -1\r\n",
      "Content-Length: 0x10\r\n",
      "Content-Length: \r\n",
      "Content-Length: 99999999999999999999999\r\n",
  };
  for (const char* headers : bad) {
    absl::StatusOr<BodyFraming> framing = RequestBodyFraming(Head(headers));
    EXPECT_TRUE(absl::IsInvalidArgument(framing.status())) << headers << framing.status();
  }
  EXPECT_TRUE(absl::IsFailedPrecondition(RequestBodyFraming(Head("Expect: magic\r\n")).status()));
}

TEST(ParseAbsoluteFormTest, SplitsAuthorityAndPath) {
  struct Case {
    const char* target;
    const char* authority;
    const char* path;
  } cases[] = {
      {"http://example.com/a/b?c", "example.com", "/a/b?c"},
      {"HTTP://Example.com:8080", "Example.com:8080", "/"},
      {"http://example.com?q=1", "example.com", "/?q=1"},
      {"http://[::1]:80/x", "[::1]:80", "/x"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<AbsoluteForm> form = ParseAbsoluteForm(c.target);
    ASSERT_TRUE(form.ok()) << c.target << form.status();
    EXPECT_EQ(form->authority, c.authority);
    EXPECT_EQ(form->path, c.path);
  }
  EXPECT_THAT(ParseAbsoluteForm("https://example.com/").status().message(), HasSubstr("CONNECT"));
  EXPECT_FALSE(ParseAbsoluteForm("/relative").ok());
  EXPECT_FALSE(ParseAbsoluteForm("http://example.com#frag").ok());
  EXPECT_FALSE(ParseAbsoluteForm("ftp://example.com/").ok());
}

TEST(BuildOriginRequestHeadTest, KeepsEndToEndHeadersOnly) {
  const HttpRequestHead head = Head(
      "Host: a\r\nUser-Agent: t/1\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: "
      "keep-alive\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\n"
      "TE: trailers\r\nUpgrade: h2c\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n"
      "Accept: */*\r\n");
  EXPECT_EQ(BuildOriginRequestHead(head, "/p?q", "a.example:8080", 3),
            "POST /p?q HTTP/1.1\r\nHost: a.example:8080\r\nUser-Agent: t/1\r\nAccept: */*\r\n"
            "Content-Length: 3\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(BuildOriginRequestHead(head, "/", "a", std::nullopt),
              Not(HasSubstr("Content-Length")));
}

TEST(ChunkedDecoderTest, DecodesInOneGoAndByteByByte) {
  const std::string body =
      "4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n"
      "Trailer: x\r\n\r\nNEXT";
  {
    ChunkedDecoder decoder;
    std::string out;
    absl::StatusOr<size_t> used = decoder.Feed(body, &out);
    ASSERT_TRUE(used.ok()) << used.status();
    EXPECT_TRUE(decoder.done());
    EXPECT_EQ(out, "Wikipedia in\r\n\r\nchunks.");
    EXPECT_EQ(body.substr(*used), "NEXT");
  }
  {
    ChunkedDecoder decoder;
    std::string out;
    size_t i = 0;
    while (!decoder.done()) {
      ASSERT_LT(i, body.size());
      absl::StatusOr<size_t> used = decoder.Feed(body.substr(i, 1), &out);
      ASSERT_TRUE(used.ok()) << used.status();
      i += *used;
    }
    EXPECT_EQ(out, "Wikipedia in\r\n\r\nchunks.");
    EXPECT_EQ(body.substr(i), "NEXT");
  }
}

TEST(ChunkedDecoderTest, RefusesMalformedFraming) {
  const char* bad[] = {
      "x\r\n",                    // not hex
      "\r\n",                     // empty size
      "4\nWiki\r\n0\r\n\r\n",     // bare LF
      "4\r\nWikiX\r\n0\r\n\r\n",  // data longer than its size
      "1000000000000000\r\n",     // 16 hex digits
      "-1\r\n",
  };
  for (const char* text : bad) {
    ChunkedDecoder decoder;
    std::string out;
    EXPECT_FALSE(decoder.Feed(text, &out).ok()) << text;
  }
}

TEST(RewriteResponseHeadTest, ReadsStatusAndForcesClose) {
  absl::StatusOr<HttpResponseHead> head = RewriteResponseHead(
      "HTTP/1.1 404 Not Found\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
      "Content-Length: 3\r\n\r\n");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 404);
  EXPECT_EQ(head->rewritten,
            "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\n");
  absl::StatusOr<HttpResponseHead> bare = RewriteResponseHead("HTTP/1.0 204\r\n\r\n");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->status, 204);
  EXPECT_FALSE(RewriteResponseHead("SSH-2.0-OpenSSH\r\n\r\n").ok());
  EXPECT_FALSE(RewriteResponseHead("HTTP/1.1 2000 X\r\n\r\n").ok());
}

}  // namespace
}  // namespace moat::egress
