// A small JSON reader and writer for the cost model's own serialized values (the
// accelerator), so the pure C++ core needs no JSON library.
//
// Numbers keep their text until a caller asks for an integer or a double, so an int64 and
// a double written with 17 significant digits both read back exactly. Errors throw
// std::invalid_argument naming the 0-based character position.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tenet {
namespace detail {

struct JsonValue {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  std::string text;  // kString: the string; kNumber: the number as written
  std::vector<JsonValue> items;
  std::map<std::string, JsonValue> members;
};

JsonValue ParseJson(const std::string& text);

// Readers of an object's members; `where` names the object in messages ("hardware").
const JsonValue& Member(const JsonValue& obj, const std::string& key, const std::string& where);
std::string StringMember(const JsonValue& obj, const std::string& key, const std::string& where);
double NumberMember(const JsonValue& obj, const std::string& key, const std::string& where);
int64_t IntegerMember(const JsonValue& obj, const std::string& key, const std::string& where);
int64_t AsInteger(const JsonValue& v, const std::string& what);
// Throws when `obj` is not an object or has a key not in `known`.
void ExpectKeys(const JsonValue& obj, const std::vector<std::string>& known,
                const std::string& where);

// Writers.
std::string JsonQuote(const std::string& s);
std::string JsonNumber(double v);  // %.17g: reads back to the same double

}  // namespace detail
}  // namespace tenet
