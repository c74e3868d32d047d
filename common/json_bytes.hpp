#pragma once
// Bytes in JSON. Payloads, error texts, ids and names may hold any bytes,
// and JSON strings hold only Unicode: a value that is valid UTF-8 is shown
// as a JSON string, any other as {"encoding": "base64", "data": "..."}
// (RFC 4648 base64), so every view carries the bytes exactly.
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dueq {

// Well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates, at most U+10FFFF.
bool is_utf8(std::string_view bytes);

std::string base64_encode(std::string_view bytes);
// The bytes of RFC 4648 base64 with padding; nullopt for anything else.
std::optional<std::string> base64_decode(std::string_view text);

// A string when `bytes` is UTF-8, else {"encoding": "base64", "data": ...}.
nlohmann::json bytes_json(std::string_view bytes);
// The bytes a bytes_json value stands for; nullopt when it is neither form.
std::optional<std::string> bytes_from_json(const nlohmann::json& value);
// A map's values each through bytes_json (its keys are the broker's own names).
nlohmann::json bytes_json(const std::map<std::string, std::string>& fields);

// json::dump that never throws: values are already safe through bytes_json;
// a key that is not UTF-8 is written with U+FFFD in place of its bad bytes.
std::string dump_json(const nlohmann::json& value, int indent = -1);

}  // namespace dueq
