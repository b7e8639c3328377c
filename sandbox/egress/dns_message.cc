#include "sandbox/egress/dns_message.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "util/status_macros.h"

namespace moat::egress {
namespace {

// RFC 1035 2.3.4: labels of at most 63 bytes, names of at most 255 bytes on the wire.
constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxWireName = 255;
// A compression pointer must point strictly backwards (so a chain cannot loop), and we also bound
// the number of jumps: a legitimate name never needs more than a handful.
constexpr int kMaxPointerHops = 16;
// CNAME chains longer than this are not followed (resolvers use similar bounds, e.g. 8 to 16).
constexpr int kMaxCnameLinks = 16;

constexpr uint16_t kRcodeMask = 0xF;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed DNS message: ", what));
}

// A bounds-checked cursor over a whole message (names need the whole message for pointers).
class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> message) : message_(message) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return message_.size() - offset_; }

  absl::StatusOr<uint16_t> U16(absl::string_view what) {
    if (remaining() < 2) return Malformed(absl::StrCat("truncated in ", what));
    uint16_t value = static_cast<uint16_t>(message_[offset_] << 8 | message_[offset_ + 1]);
    offset_ += 2;
    return value;
  }

  absl::StatusOr<uint32_t> U32(absl::string_view what) {
    ASSIGN_OR_RETURN(uint32_t high, U16(what));
    ASSIGN_OR_RETURN(uint32_t low, U16(what));
    return high << 16 | low;
  }

  absl::StatusOr<absl::Span<const uint8_t>> Bytes(size_t count, absl::string_view what) {
    if (remaining() < count) return Malformed(absl::StrCat("truncated in ", what));
    absl::Span<const uint8_t> bytes = message_.subspan(offset_, count);
    offset_ += count;
    return bytes;
  }

  // Reads a possibly compressed name and leaves the cursor after its in-place part. Labels are
  // joined with '.'; a label containing a '.' byte is refused, since the joined form could not
  // tell it from two labels (and the question could not be echoed back unchanged).
  absl::StatusOr<std::string> Name(absl::string_view what) {
    std::string name;
    size_t wire_length = 0;  // as if uncompressed: length bytes, labels, the final zero
    size_t position = offset_;
    bool jumped = false;
    int hops = 0;
    for (;;) {
      if (position >= message_.size()) return Malformed(absl::StrCat("truncated name in ", what));
      const uint8_t length = message_[position];
      if ((length & 0xC0) == 0xC0) {
        if (position + 1 >= message_.size()) {
          return Malformed(absl::StrCat("truncated compression pointer in ", what));
        }
        const size_t target = static_cast<size_t>(length & 0x3F) << 8 | message_[position + 1];
        // Strictly backwards and never into the header: this is what rules out loops.
        if (target >= position || target < kDnsHeaderSize) {
          return Malformed(absl::StrCat("compression pointer not pointing back in ", what));
        }
        if (++hops > kMaxPointerHops) {
          return Malformed(absl::StrCat("too many compression pointers in ", what));
        }
        if (!jumped) offset_ = position + 2;
        jumped = true;
        position = target;
        continue;
      }
      if ((length & 0xC0) != 0) {
        // 0x40 (extended label types, RFC 6891 retired them) and 0x80 (reserved).
        return Malformed(absl::StrCat("unsupported label type in ", what));
      }
      wire_length += 1 + length;
      if (wire_length > kMaxWireName) {
        return Malformed(absl::StrCat("name longer than 255 bytes in ", what));
      }
      if (length == 0) {
        if (!jumped) offset_ = position + 1;
        return name;
      }
      if (position + 1 + length > message_.size()) {
        return Malformed(absl::StrCat("truncated label in ", what));
      }
      absl::string_view label(reinterpret_cast<const char*>(&message_[position + 1]), length);
      if (label.find('.') != absl::string_view::npos) {
        return Malformed(absl::StrCat("label containing '.' in ", what));
      }
      if (!name.empty()) name.push_back('.');
      name.append(label.data(), label.size());
      position += 1 + length;
    }
  }

 private:
  absl::Span<const uint8_t> message_;
  size_t offset_ = 0;
};

struct Header {
  uint16_t id = 0;
  uint16_t flags = 0;
  uint16_t qdcount = 0;
  uint16_t ancount = 0;
  uint16_t nscount = 0;
  uint16_t arcount = 0;
};

absl::StatusOr<Header> ReadHeader(Reader& reader) {
  if (reader.remaining() < kDnsHeaderSize) return Malformed("shorter than the 12-byte header");
  Header header;
  ASSIGN_OR_RETURN(header.id, reader.U16("header"));
  ASSIGN_OR_RETURN(header.flags, reader.U16("header"));
  ASSIGN_OR_RETURN(header.qdcount, reader.U16("header"));
  ASSIGN_OR_RETURN(header.ancount, reader.U16("header"));
  ASSIGN_OR_RETURN(header.nscount, reader.U16("header"));
  ASSIGN_OR_RETURN(header.arcount, reader.U16("header"));
  return header;
}

absl::StatusOr<DnsQuestion> ReadQuestion(Reader& reader) {
  DnsQuestion question;
  ASSIGN_OR_RETURN(question.name, reader.Name("question"));
  ASSIGN_OR_RETURN(question.type, reader.U16("question"));
  ASSIGN_OR_RETURN(question.klass, reader.U16("question"));
  return question;
}

struct Record {
  std::string name;
  uint16_t type = 0;
  uint16_t klass = 0;
  uint32_t ttl = 0;
  absl::Span<const uint8_t> data;
  size_t data_offset = 0;  // where `data` starts in the message (names in it may be compressed)
};

absl::StatusOr<Record> ReadRecord(Reader& reader) {
  Record record;
  ASSIGN_OR_RETURN(record.name, reader.Name("record"));
  ASSIGN_OR_RETURN(record.type, reader.U16("record"));
  ASSIGN_OR_RETURN(record.klass, reader.U16("record"));
  ASSIGN_OR_RETURN(record.ttl, reader.U32("record"));
  // RFC 2181 8: a TTL with the top bit set is to be taken as zero.
  if (record.ttl > 0x7FFFFFFF) record.ttl = 0;
  ASSIGN_OR_RETURN(uint16_t length, reader.U16("record"));
  record.data_offset = reader.offset();
  ASSIGN_OR_RETURN(record.data, reader.Bytes(length, "record data"));
  return record;
}

void PutU16(std::vector<uint8_t>& out, uint16_t value) {
  out.push_back(static_cast<uint8_t>(value >> 8));
  out.push_back(static_cast<uint8_t>(value));
}

void PutU32(std::vector<uint8_t>& out, uint32_t value) {
  PutU16(out, static_cast<uint16_t>(value >> 16));
  PutU16(out, static_cast<uint16_t>(value));
}

// Writes `name` uncompressed. Empty labels (a trailing dot, "a..b") are skipped and labels are cut
// at 63 bytes: callers pass names that ParseDnsQuery or CanonicalizeHost accepted, so neither
// happens in practice, and the output is always a well-formed name.
void PutName(std::vector<uint8_t>& out, absl::string_view name) {
  size_t written = 0;
  for (absl::string_view label : absl::StrSplit(name, '.', absl::SkipEmpty())) {
    if (label.size() > kMaxLabel) label = label.substr(0, kMaxLabel);
    if (written + 1 + label.size() + 1 > kMaxWireName) break;
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
    written += 1 + label.size();
  }
  out.push_back(0);
}

void PutHeader(std::vector<uint8_t>& out, const Header& header) {
  PutU16(out, header.id);
  PutU16(out, header.flags);
  PutU16(out, header.qdcount);
  PutU16(out, header.ancount);
  PutU16(out, header.nscount);
  PutU16(out, header.arcount);
}

}  // namespace

absl::StatusOr<DnsQuery> ParseDnsQuery(absl::Span<const uint8_t> message) {
  Reader reader(message);
  ASSIGN_OR_RETURN(Header header, ReadHeader(reader));
  if (header.flags & kDnsFlagQr) return Malformed("a response where a query was expected");
  if (((header.flags >> kDnsOpcodeShift) & kDnsOpcodeMask) != 0)
    return Malformed("opcode is not QUERY");
  if (header.qdcount != 1) {
    return Malformed(absl::StrCat(header.qdcount, " questions, expected exactly 1"));
  }
  if (header.ancount != 0 || header.nscount != 0) {
    return Malformed("a query with answer or authority records");
  }
  DnsQuery query;
  query.id = header.id;
  query.recursion_desired = (header.flags & kDnsFlagRd) != 0;
  ASSIGN_OR_RETURN(query.question, ReadQuestion(reader));
  // Additional records (an EDNS OPT record from most clients) are checked for bounds, not used.
  for (int i = 0; i < header.arcount; ++i) {
    ASSIGN_OR_RETURN(Record ignored, ReadRecord(reader));
    (void)ignored;
  }
  return query;
}

std::vector<uint8_t> BuildDnsResponse(const DnsQuery& query, uint8_t rcode,
                                      absl::Span<const IpAddress> answers, uint32_t ttl) {
  const bool want_v4 = query.question.type == kDnsTypeA;
  const bool want_v6 = query.question.type == kDnsTypeAaaa;
  uint16_t count = 0;
  for (const IpAddress& address : answers) {
    if ((address.is_v4() && want_v4) || (!address.is_v4() && want_v6)) ++count;
  }
  Header header;
  header.id = query.id;
  header.flags =
      kDnsFlagQr | kDnsFlagRa | (query.recursion_desired ? kDnsFlagRd : 0) | (rcode & kRcodeMask);
  header.qdcount = 1;
  header.ancount = count;
  std::vector<uint8_t> out;
  out.reserve(kDnsHeaderSize + query.question.name.size() + 6 + count * 28);
  PutHeader(out, header);
  PutName(out, query.question.name);
  PutU16(out, query.question.type);
  PutU16(out, query.question.klass);
  for (const IpAddress& address : answers) {
    if (address.is_v4() && want_v4) {
      PutU16(out, 0xC000 | kDnsHeaderSize);  // the question's name
      PutU16(out, kDnsTypeA);
      PutU16(out, kDnsClassIn);
      PutU32(out, ttl);
      PutU16(out, 4);
      PutU32(out, address.v4());
    } else if (!address.is_v4() && want_v6) {
      PutU16(out, 0xC000 | kDnsHeaderSize);
      PutU16(out, kDnsTypeAaaa);
      PutU16(out, kDnsClassIn);
      PutU32(out, ttl);
      PutU16(out, 16);
      out.insert(out.end(), address.v6().begin(), address.v6().end());
    }
  }
  return out;
}

std::vector<uint8_t> BuildDnsQuery(uint16_t id, absl::string_view name, uint16_t type) {
  Header header;
  header.id = id;
  header.flags = kDnsFlagRd;
  header.qdcount = 1;
  std::vector<uint8_t> out;
  out.reserve(kDnsHeaderSize + name.size() + 6);
  PutHeader(out, header);
  PutName(out, name);
  PutU16(out, type);
  PutU16(out, kDnsClassIn);
  return out;
}

absl::StatusOr<DnsResponse> ParseDnsResponse(absl::Span<const uint8_t> message) {
  Reader reader(message);
  ASSIGN_OR_RETURN(Header header, ReadHeader(reader));
  if (!(header.flags & kDnsFlagQr)) return Malformed("a query where a response was expected");
  if (header.qdcount != 1) {
    return Malformed(absl::StrCat(header.qdcount, " questions, expected exactly 1"));
  }
  DnsResponse response;
  response.id = header.id;
  response.rcode = header.flags & kRcodeMask;
  response.truncated = (header.flags & kDnsFlagTc) != 0;
  ASSIGN_OR_RETURN(response.question, ReadQuestion(reader));
  // A truncated response may end anywhere; its records are not to be used (RFC 2181 9), the
  // caller retries over TCP.
  if (response.truncated) return response;

  std::vector<Record> records;
  records.reserve(header.ancount);
  for (int i = 0; i < header.ancount; ++i) {
    ASSIGN_OR_RETURN(Record record, ReadRecord(reader));
    if (record.klass != kDnsClassIn) continue;
    if (record.type == kDnsTypeA && record.data.size() != 4) return Malformed("A record size");
    if (record.type == kDnsTypeAaaa && record.data.size() != 16) {
      return Malformed("AAAA record size");
    }
    records.push_back(std::move(record));
  }

  // The names the answer may be about: the question's, then each CNAME target reached from it, in
  // whatever order the records come (bounded, so a CNAME loop ends).
  std::vector<std::string> owners = {absl::AsciiStrToLower(response.question.name)};
  auto is_owner = [&owners](absl::string_view name) {
    const std::string lower = absl::AsciiStrToLower(name);
    for (const std::string& owner : owners) {
      if (owner == lower) return true;
    }
    return false;
  };
  for (int link = 0; link < kMaxCnameLinks; ++link) {
    bool grew = false;
    for (const Record& record : records) {
      if (record.type != kDnsTypeCname || !is_owner(record.name)) continue;
      Reader target_reader(message);
      ASSIGN_OR_RETURN(auto ignored, target_reader.Bytes(record.data_offset, "CNAME"));
      (void)ignored;
      ASSIGN_OR_RETURN(std::string target, target_reader.Name("CNAME target"));
      if (target_reader.offset() > record.data_offset + record.data.size()) {
        return Malformed("CNAME target overruns its record");
      }
      if (!is_owner(target)) {
        owners.push_back(absl::AsciiStrToLower(target));
        grew = true;
      }
    }
    if (!grew) break;
  }

  bool have_ttl = false;
  for (const Record& record : records) {
    if (record.type != kDnsTypeA && record.type != kDnsTypeAaaa) continue;
    if (!is_owner(record.name)) continue;
    if (record.type == kDnsTypeA) {
      response.addresses.push_back(IpAddress::V4(static_cast<uint32_t>(record.data[0]) << 24 |
                                                 static_cast<uint32_t>(record.data[1]) << 16 |
                                                 static_cast<uint32_t>(record.data[2]) << 8 |
                                                 record.data[3]));
    } else {
      std::array<uint8_t, 16> bytes;
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = record.data[i];
      response.addresses.push_back(IpAddress::V6(bytes));
    }
    if (!have_ttl || record.ttl < response.min_ttl) response.min_ttl = record.ttl;
    have_ttl = true;
  }
  return response;
}

}  // namespace moat::egress
