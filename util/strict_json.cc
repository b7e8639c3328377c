#include "util/strict_json.h"

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/units.h"

namespace moat {
namespace {

// JSON: nlohmann's SAX interface, so duplicate keys and excessive nesting can be refused (its DOM
// parser silently keeps the last duplicate).

template <typename Json>
class StrictJsonBuilder final : public nlohmann::json_sax<Json> {
 public:
  using typename nlohmann::json_sax<Json>::number_integer_t;
  using typename nlohmann::json_sax<Json>::number_unsigned_t;
  using typename nlohmann::json_sax<Json>::number_float_t;
  using typename nlohmann::json_sax<Json>::string_t;
  using typename nlohmann::json_sax<Json>::binary_t;

  bool null() override { return Add(Json(nullptr)) != nullptr; }
  bool boolean(bool value) override { return Add(Json(value)) != nullptr; }
  bool number_integer(number_integer_t value) override { return Add(Json(value)) != nullptr; }
  bool number_unsigned(number_unsigned_t value) override { return Add(Json(value)) != nullptr; }
  bool number_float(number_float_t value, const string_t& /*text*/) override {
    return Add(Json(value)) != nullptr;
  }
  bool string(string_t& value) override { return Add(Json(std::move(value))) != nullptr; }
  bool binary(binary_t& /*value*/) override {
    error_ = "binary values are not allowed";
    return false;
  }
  bool start_object(std::size_t /*size*/) override { return Open(Json::object()); }
  bool start_array(std::size_t /*size*/) override { return Open(Json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& key) override {
    if (open_.back().value->contains(key)) {
      error_ =
          absl::StrCat("duplicate key ", QuoteForMessage(JsonChildPath(open_.back().path, key)));
      return false;
    }
    key_ = key;
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 2, column 3: ..." -> from "parse".
    absl::string_view what = ex.what();
    size_t end_of_id = what.find("] ");
    error_ = std::string(end_of_id == absl::string_view::npos ? what : what.substr(end_of_id + 2));
    return false;
  }

  Json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct OpenContainer {
    Json* value;
    std::string path;
  };

  // Puts `value` where the parser is (the root, the next array item, or under key_) and returns
  // it. Containers above the current one are not touched while it is open, so pointers held in
  // open_ stay valid.
  Json* Add(Json value, std::string* path = nullptr) {
    if (open_.empty()) {
      root_ = std::move(value);
      if (path) path->clear();
      return &root_;
    }
    Json& parent = *open_.back().value;
    if (parent.is_array()) {
      if (path) *path = JsonItemPath(open_.back().path, parent.size());
      parent.push_back(std::move(value));
      return &parent.back();
    }
    if (path) *path = JsonChildPath(open_.back().path, key_);
    Json& slot = parent[key_];
    slot = std::move(value);
    return &slot;
  }

  bool Open(Json container) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      error_ = absl::StrCat("nested more than ", kMaxJsonDepth, " levels deep");
      return false;
    }
    std::string path;
    Json* value = Add(std::move(container), &path);
    open_.push_back({value, std::move(path)});
    return true;
  }

  bool Close() {
    open_.pop_back();
    return true;
  }

  Json root_;
  std::vector<OpenContainer> open_;
  std::string key_;
  std::string error_;
};

}  // namespace

std::string JsonChildPath(absl::string_view parent, absl::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(parent, ".", key);
}

std::string JsonItemPath(absl::string_view parent, size_t index) {
  return absl::StrCat(parent, "[", index, "]");
}

template <typename Json>
absl::StatusOr<Json> ParseStrictJson(absl::string_view text) {
  StrictJsonBuilder<Json> builder;
  bool ok = false;
  try {
    ok = Json::sax_parse(text.data(), text.data() + text.size(), &builder);
  } catch (const std::exception& e) {  // the SAX path reports through parse_error; be safe anyway
    return absl::InvalidArgumentError(e.what());
  }
  if (!ok) return absl::InvalidArgumentError(builder.error());
  return std::move(builder.root());
}

template absl::StatusOr<nlohmann::json> ParseStrictJson<nlohmann::json>(absl::string_view);
template absl::StatusOr<nlohmann::ordered_json> ParseStrictJson<nlohmann::ordered_json>(
    absl::string_view);

}  // namespace moat
