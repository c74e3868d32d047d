#pragma once
// CurveZMQ keys (docs/security.md): Z85 text, 40 characters per key.
// `dueq keygen NAME` writes NAME.key (the pair; mode 0600) and NAME.pub (the
// public key, to hand to whoever must recognise NAME). Both are TOML:
//   public = "..."
//   secret = "..."   (NAME.key only)
#include <zmq.hpp>

#include <string>
#include <string_view>

#include "common/error.hpp"

namespace dueq {

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

bool is_z85_key(std::string_view text);

Result<CurveKeyPair> generate_curve_key_pair();

// Writes BASE.key (0600, refused if it exists) and BASE.pub.
Result<void> write_curve_key_files(const std::string& base, const CurveKeyPair& keys);

// The pair in a .key file. Errors name the file, never a key.
Result<CurveKeyPair> read_curve_key_file(const std::string& path);

// A public key given as Z85 text, or as the path of a .pub or .key file.
Result<std::string> read_curve_public_key(const std::string& text_or_path);

// The CurveZMQ settings of a client socket: the broker's public key and the
// client's own pair. Both empty: plaintext.
struct ClientCurve {
  std::string broker_public_key;
  CurveKeyPair own;
  bool enabled() const { return !broker_public_key.empty(); }
};

// From the options users give: the broker's key (Z85 or a file) and this
// client's .key file. Both or neither must be given.
Result<ClientCurve> load_client_curve(const std::string& broker_key, const std::string& key_file);

// Makes `socket` a CURVE client (call before connect); no-op when disabled.
void apply_client_curve(zmq::socket_t& socket, const ClientCurve& curve);

}  // namespace dueq
