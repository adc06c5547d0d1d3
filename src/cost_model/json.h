// The cost model's JSON: nlohmann-json (header-only, from the nlohmann-json wheel at build
// time) with a strict reader and the member readers that name the field in their errors.
//
// Reading (ParseJson) refuses duplicate keys and nesting deeper than 64, and reports a
// syntax error as "JSON at character N: <reason>" with the 0-based character position.
// Integers are kept as int64 (or uint64) and doubles are parsed with correct rounding, so an
// int64 and a double written by Dump read back exactly. Errors throw std::invalid_argument.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tenet {
namespace detail {

// Objects read with sorted keys; the writers build OrderedJson to keep their field order.
using JsonValue = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// The one JSON value in `text`; `what` names the document in messages about its keys.
JsonValue ParseJson(const std::string& text, const std::string& what = "JSON");

// Readers of an object's members; `where` names the object in messages ("hardware").
const JsonValue& Member(const JsonValue& obj, const std::string& key, const std::string& where);
std::string StringMember(const JsonValue& obj, const std::string& key, const std::string& where);
double NumberMember(const JsonValue& obj, const std::string& key, const std::string& where);
int64_t IntegerMember(const JsonValue& obj, const std::string& key, const std::string& where);
bool BoolMember(const JsonValue& obj, const std::string& key, const std::string& where);
int64_t AsInteger(const JsonValue& v, const std::string& what);
// Throws when `obj` is not an object or has a key not in `known`.
void ExpectKeys(const JsonValue& obj, const std::vector<std::string>& known,
                const std::string& where);

// Compact text of a value; doubles in the shortest form that reads back to the same double.
// Refuses a string that is not UTF-8 and a non-finite number, naming `what`.
std::string Dump(const OrderedJson& v, const std::string& what);
// A JSON string literal of `s` (bytes that are not UTF-8 become U+FFFD).
std::string JsonQuote(const std::string& s);

}  // namespace detail
}  // namespace tenet
