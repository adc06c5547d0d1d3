// The cost model's JSON reader and writer (see json.h).
#include "cost_model/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "cost_model/checked.h"
#include "cost_model/relation.h"

namespace tenet {
namespace detail {

namespace {

class Reader {
 public:
  explicit Reader(const std::string& text) : s_(text) {}

  JsonValue Document() {
    JsonValue v = Value(0);
    Space();
    if (i_ != s_.size()) Fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw std::invalid_argument("JSON at character " + Str(static_cast<int64_t>(i_)) + ": " +
                                what);
  }

  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }

  bool Take(char c) {
    Space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  void Expect(char c) {
    if (!Take(c)) Fail(std::string("expected '") + c + "'");
  }

  bool Word(const char* w) {
    const std::string word(w);
    if (s_.compare(i_, word.size(), word) != 0) return false;
    i_ += word.size();
    return true;
  }

  JsonValue Value(int depth) {
    if (depth > 64) Fail("nesting deeper than 64");
    Space();
    if (i_ >= s_.size()) Fail("unexpected end of text");
    JsonValue v;
    const char c = s_[i_];
    if (c == '{') {
      ++i_;
      v.kind = JsonValue::kObject;
      if (Take('}')) return v;
      do {
        Space();
        std::string key = String();
        Expect(':');
        if (v.members.count(key)) Fail("duplicate key '" + key + "'");
        v.members.emplace(std::move(key), Value(depth + 1));
      } while (Take(','));
      Expect('}');
    } else if (c == '[') {
      ++i_;
      v.kind = JsonValue::kArray;
      if (Take(']')) return v;
      do v.items.push_back(Value(depth + 1));
      while (Take(','));
      Expect(']');
    } else if (c == '"') {
      v.kind = JsonValue::kString;
      v.text = String();
    } else if (Word("true")) {
      v.kind = JsonValue::kBool;
      v.boolean = true;
    } else if (Word("false")) {
      v.kind = JsonValue::kBool;
    } else if (Word("null")) {
      v.kind = JsonValue::kNull;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = i_;
      while (i_ < s_.size() && std::string("+-.eE0123456789").find(s_[i_]) != std::string::npos)
        ++i_;
      v.kind = JsonValue::kNumber;
      v.text = s_.substr(start, i_ - start);
    } else {
      Fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  std::string String() {
    if (i_ >= s_.size() || s_[i_] != '"') Fail("expected a string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      c = s_[i_++];
      switch (c) {
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) Fail("short \\u escape");
          const unsigned code = std::stoul(s_.substr(i_, 4), nullptr, 16);
          i_ += 4;
          // UTF-8 of a code point of the Basic Multilingual Plane.
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: out += c;  // \" \\ \/
      }
    }
    if (i_ >= s_.size()) Fail("unterminated string");
    ++i_;
    return out;
  }

  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

JsonValue ParseJson(const std::string& text) { return Reader(text).Document(); }

const JsonValue& Member(const JsonValue& obj, const std::string& key, const std::string& where) {
  if (obj.kind != JsonValue::kObject) throw std::invalid_argument(where + " must be a JSON object");
  auto it = obj.members.find(key);
  if (it == obj.members.end())
    throw std::invalid_argument(where + " has no field '" + key + "'");
  return it->second;
}

std::string StringMember(const JsonValue& obj, const std::string& key, const std::string& where) {
  const JsonValue& v = Member(obj, key, where);
  if (v.kind != JsonValue::kString)
    throw std::invalid_argument(where + "." + key + " must be a string");
  return v.text;
}

double NumberMember(const JsonValue& obj, const std::string& key, const std::string& where) {
  const JsonValue& v = Member(obj, key, where);
  // strtod, not stod: stod refuses subnormal numbers that %.17g writes.
  char* end = nullptr;
  const double r = v.kind == JsonValue::kNumber ? std::strtod(v.text.c_str(), &end) : 0;
  if (v.kind != JsonValue::kNumber || end != v.text.c_str() + v.text.size())
    throw std::invalid_argument(where + "." + key + " must be a number");
  return r;
}

int64_t AsInteger(const JsonValue& v, const std::string& what) {
  size_t used = 0;
  int64_t r = 0;
  if (v.kind == JsonValue::kNumber) {
    try {
      r = std::stoll(v.text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
  }
  if (v.kind != JsonValue::kNumber || v.text.empty() || used != v.text.size())
    throw std::invalid_argument(what + " must be an integer (below 2^63)");
  return r;
}

int64_t IntegerMember(const JsonValue& obj, const std::string& key, const std::string& where) {
  return AsInteger(Member(obj, key, where), where + "." + key);
}

void ExpectKeys(const JsonValue& obj, const std::vector<std::string>& known,
                const std::string& where) {
  if (obj.kind != JsonValue::kObject) throw std::invalid_argument(where + " must be a JSON object");
  for (const auto& kv : obj.members) {
    bool ok = false;
    for (const auto& k : known) ok = ok || k == kv.first;
    if (!ok) throw std::invalid_argument(where + " has an unknown field '" + kv.first + "'");
  }
}

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + '"';
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) throw std::invalid_argument("JSON has no form for a non-finite number");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace detail
}  // namespace tenet
