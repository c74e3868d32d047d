#include "common/json_bytes.hpp"

#include <array>
#include <cstdint>

namespace dueq {

namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The length of the UTF-8 sequence `bytes` starts with, or 0 when it is not one.
size_t sequence_length(std::string_view bytes) {
  const auto at = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  const uint8_t lead = at(0);
  if (lead < 0x80) return 1;
  size_t n = 0;
  uint8_t low = 0x80, high = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) n = 2;
  else if (lead == 0xE0) n = 3, low = 0xA0;  // no overlong 3-byte form
  else if (lead == 0xED) n = 3, high = 0x9F;  // no surrogates
  else if (lead >= 0xE1 && lead <= 0xEF) n = 3;
  else if (lead == 0xF0) n = 4, low = 0x90;  // no overlong 4-byte form
  else if (lead == 0xF4) n = 4, high = 0x8F;  // nothing past U+10FFFF
  else if (lead >= 0xF1 && lead <= 0xF3) n = 4;
  else return 0;
  if (bytes.size() < n || at(1) < low || at(1) > high) return 0;
  for (size_t i = 2; i < n; ++i)
    if (at(i) < 0x80 || at(i) > 0xBF) return 0;
  return n;
}

constexpr std::array<int8_t, 256> decoding_table() {
  std::array<int8_t, 256> table{};
  table.fill(-1);
  for (size_t i = 0; i < kAlphabet.size(); ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}

}  // namespace

bool is_utf8(std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t n = sequence_length(bytes);
    if (n == 0) return false;
    bytes.remove_prefix(n);
  }
  return true;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t left = bytes.size() - i;
    uint32_t group = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (left > 1) group |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    if (left > 2) group |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(group >> 18) & 63];
    out += kAlphabet[(group >> 12) & 63];
    out += left > 1 ? kAlphabet[(group >> 6) & 63] : '=';
    out += left > 2 ? kAlphabet[group & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  static constexpr auto kTable = decoding_table();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    uint32_t group = 0;
    for (size_t j = 0; j < 4; ++j) {
      const int8_t v = j >= 4 - padding ? 0 : kTable[static_cast<uint8_t>(text[i + j])];
      if (v < 0) return std::nullopt;
      group = (group << 6) | static_cast<uint32_t>(v);
    }
    out += static_cast<char>((group >> 16) & 0xFF);
    if (padding < 2) out += static_cast<char>((group >> 8) & 0xFF);
    if (padding < 1) out += static_cast<char>(group & 0xFF);
  }
  return out;
}

nlohmann::json bytes_json(std::string_view bytes) {
  if (is_utf8(bytes)) return std::string(bytes);
  return nlohmann::json{{"encoding", "base64"}, {"data", base64_encode(bytes)}};
}

std::optional<std::string> bytes_from_json(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_object() || value.size() != 2) return std::nullopt;
  const auto encoding = value.find("encoding");
  const auto data = value.find("data");
  if (encoding == value.end() || data == value.end() || *encoding != "base64" || !data->is_string()) return std::nullopt;
  return base64_decode(data->get_ref<const std::string&>());
}

nlohmann::json bytes_json(const std::map<std::string, std::string>& fields) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : fields) out[name] = bytes_json(value);
  return out;
}

std::string dump_json(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dueq
