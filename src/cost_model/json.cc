// The cost model's JSON reader and writer on nlohmann-json (see json.h).
#include "cost_model/json.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <utility>

#include "cost_model/checked.h"

namespace tenet {
namespace detail {

namespace {

constexpr size_t kMaxDepth = 64;

// An error text safe to hand to Python: bytes outside printable ASCII as \xNN (a message
// quoting the input may hold invalid UTF-8).
std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

// nlohmann's reason without its "[json.exception...] parse error at line L, column C: ".
std::string Reason(const std::string& what) {
  std::string r = what;
  const size_t tag = r.find("] ");
  if (tag != std::string::npos) r = r.substr(tag + 2);
  const size_t at = r.find("parse error at line ");
  if (at == 0) {
    const size_t colon = r.find(": ");
    if (colon != std::string::npos) r = r.substr(colon + 2);
  }
  return Printable(r);
}

// Builds the DOM as nlohmann's own SAX-to-DOM parser does, and refuses what that one lets
// through: a repeated key (nlohmann keeps the last one silently) and deep nesting.
class StrictDomBuilder : public nlohmann::json_sax<JsonValue> {
 public:
  explicit StrictDomBuilder(std::string what) : what_(std::move(what)) {}

  JsonValue root;
  std::string error;  // set when parsing stopped

  bool null() override { return Put(nullptr); }
  bool boolean(bool v) override { return Put(v); }
  bool number_integer(number_integer_t v) override { return Put(v); }
  bool number_unsigned(number_unsigned_t v) override { return Put(v); }
  bool number_float(number_float_t v, const string_t&) override { return Put(v); }
  bool string(string_t& v) override { return Put(std::move(v)); }
  bool binary(binary_t&) override { return Fail(what_ + ": binary values are not JSON"); }
  bool start_object(std::size_t) override { return Open(JsonValue::object()); }
  bool start_array(std::size_t) override { return Open(JsonValue::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    JsonValue& obj = *stack_.back();
    path_.back() = "";  // the object's own path, without its previous key
    if (obj.contains(k)) return Fail(Path() + " has the key '" + Printable(k) + "' twice");
    key_ = k;
    path_.back() = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error = "JSON at character " + Str(static_cast<int64_t>(position > 0 ? position - 1 : 0)) +
            ": " + Reason(ex.what());
    return false;
  }

 private:
  bool Fail(const std::string& message) {
    error = message;
    return false;
  }
  // Where the value being read sits, e.g. "JSON.hardware" (for messages).
  std::string Path() const {
    std::string p = what_;
    for (size_t i = 0; i < path_.size(); ++i)
      if (!path_[i].empty()) p += path_[i][0] == '[' ? path_[i] : "." + path_[i];
    return p;
  }
  // The slot for the next value: the root, the end of the open array, or the open object's
  // current key.
  JsonValue* Slot() {
    if (stack_.empty()) return &root;
    JsonValue& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(nullptr);
      return &top.back();
    }
    return &top[key_];
  }
  template <typename T>
  bool Put(T&& v) {
    *Slot() = JsonValue(std::forward<T>(v));
    return true;
  }
  bool Open(JsonValue v) {
    if (stack_.size() >= kMaxDepth)
      return Fail(what_ + ": nesting deeper than " + Str(static_cast<int64_t>(kMaxDepth)));
    JsonValue* slot = Slot();
    *slot = std::move(v);
    stack_.push_back(slot);
    path_.emplace_back(slot->is_array() ? "[]" : "");
    return true;
  }
  bool Close() {
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  std::string what_;
  std::vector<JsonValue*> stack_;
  std::vector<std::string> path_;
  std::string key_;
};

}  // namespace

JsonValue ParseJson(const std::string& text, const std::string& what) {
  StrictDomBuilder builder(what);
  const bool ok = JsonValue::sax_parse(text, &builder);
  if (!ok || !builder.error.empty())
    throw std::invalid_argument(builder.error.empty() ? what + ": invalid JSON" : builder.error);
  return std::move(builder.root);
}

const JsonValue& Member(const JsonValue& obj, const std::string& key, const std::string& where) {
  if (!obj.is_object()) throw std::invalid_argument(where + " must be a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) throw std::invalid_argument(where + " has no field '" + key + "'");
  return *it;
}

std::string StringMember(const JsonValue& obj, const std::string& key, const std::string& where) {
  const JsonValue& v = Member(obj, key, where);
  if (!v.is_string()) throw std::invalid_argument(where + "." + key + " must be a string");
  return v.get<std::string>();
}

double NumberMember(const JsonValue& obj, const std::string& key, const std::string& where) {
  const JsonValue& v = Member(obj, key, where);
  if (!v.is_number()) throw std::invalid_argument(where + "." + key + " must be a number");
  return v.get<double>();
}

int64_t AsInteger(const JsonValue& v, const std::string& what) {
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.get<uint64_t>());
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  throw std::invalid_argument(what + " must be an integer (below 2^63)");
}

int64_t IntegerMember(const JsonValue& obj, const std::string& key, const std::string& where) {
  return AsInteger(Member(obj, key, where), where + "." + key);
}

bool BoolMember(const JsonValue& obj, const std::string& key, const std::string& where) {
  const JsonValue& v = Member(obj, key, where);
  if (!v.is_boolean()) throw std::invalid_argument(where + "." + key + " must be true or false");
  return v.get<bool>();
}

void ExpectKeys(const JsonValue& obj, const std::vector<std::string>& known,
                const std::string& where) {
  if (!obj.is_object()) throw std::invalid_argument(where + " must be a JSON object");
  for (const auto& kv : obj.items()) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == kv.key();
    if (!ok) throw std::invalid_argument(where + " has an unknown field '" + kv.key() + "'");
  }
}

std::string Dump(const OrderedJson& v, const std::string& what) {
  // nlohmann writes a non-finite double as null, which would read back as a wrong type.
  std::vector<const OrderedJson*> todo{&v};
  while (!todo.empty()) {
    const OrderedJson* x = todo.back();
    todo.pop_back();
    if (x->is_number_float() && !std::isfinite(x->get<double>()))
      throw std::invalid_argument(what + ": JSON has no form for a non-finite number");
    if (x->is_structured())
      for (const auto& item : *x) todo.push_back(&item);
  }
  try {
    return v.dump();
  } catch (const nlohmann::json::type_error& e) {
    throw std::invalid_argument(what + ": " + Reason(e.what()));
  }
}

std::string JsonQuote(const std::string& s) {
  return JsonValue(s).dump(-1, ' ', false, JsonValue::error_handler_t::replace);
}

}  // namespace detail
}  // namespace tenet
