#include "common/curve.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <toml++/toml.h>

#include <filesystem>

namespace dueq {

namespace {

constexpr size_t kZ85KeyChars = 40;

Result<toml::table> parse_key_file(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return fail(Errc::bad_argument, fmt::format("key file {}: not a dueq key file ({}, line {})", path,
                                                e.description(), e.source().begin.line));
  }
}

Result<std::string> key_field(const toml::table& file, const std::string& path, const char* field) {
  auto value = file[field].value<std::string>();
  if (!value) return fail(Errc::bad_argument, fmt::format("key file {}: no '{}' key", path, field));
  if (!is_z85_key(*value)) return fail(Errc::bad_argument, fmt::format("key file {}: '{}' is not a 40-character Z85 key", path, field));
  return *value;
}

Result<void> write_file(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return fail(Errc::bad_argument, fmt::format("cannot create {}: {}", path, errno_text(errno)));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written) return fail(Errc::internal, fmt::format("cannot write {}", path));
  return {};
}

}  // namespace

bool is_z85_key(std::string_view text) {
  if (text.size() != kZ85KeyChars) return false;
  uint8_t decoded[32];
  const std::string copy(text);
  return zmq_z85_decode(decoded, copy.c_str()) != nullptr;
}

Result<CurveKeyPair> generate_curve_key_pair() {
  char public_key[41] = {};
  char secret_key[41] = {};
  if (zmq_curve_keypair(public_key, secret_key) != 0)
    return fail(Errc::internal, "this libzmq cannot make CURVE keys (built without libsodium?)");
  return CurveKeyPair{public_key, secret_key};
}

Result<void> write_curve_key_files(const std::string& base, const CurveKeyPair& keys) {
  const std::string pub = fmt::format("# dueq public key: give it to whoever must recognise this peer\npublic = \"{}\"\n", keys.public_key);
  const std::string both = fmt::format("# dueq key pair: keep secret\npublic = \"{}\"\nsecret = \"{}\"\n", keys.public_key, keys.secret_key);
  if (auto ok = write_file(base + ".key", both, 0600); !ok) return ok;
  return write_file(base + ".pub", pub, 0644);
}

Result<CurveKeyPair> read_curve_key_file(const std::string& path) {
  auto file = parse_key_file(path);
  if (!file) return std::unexpected(file.error());
  auto public_key = key_field(*file, path, "public");
  if (!public_key) return std::unexpected(public_key.error());
  auto secret_key = key_field(*file, path, "secret");
  if (!secret_key) return std::unexpected(secret_key.error());
  return CurveKeyPair{*public_key, *secret_key};
}

Result<std::string> read_curve_public_key(const std::string& text_or_path) {
  if (is_z85_key(text_or_path) && !std::filesystem::exists(text_or_path)) return text_or_path;
  if (!std::filesystem::exists(text_or_path))
    return fail(Errc::bad_argument, "a public key must be 40 Z85 characters or the path of a .pub or .key file");
  auto file = parse_key_file(text_or_path);
  if (!file) return std::unexpected(file.error());
  return key_field(*file, text_or_path, "public");
}

Result<ClientCurve> load_client_curve(const std::string& broker_key, const std::string& key_file) {
  if (broker_key.empty() && key_file.empty()) return ClientCurve{};
  if (broker_key.empty() || key_file.empty())
    return fail(Errc::bad_argument, "CURVE needs both the broker's public key (--broker-key, DUEQ_BROKER_KEY) and "
                                    "this client's key file (--key, DUEQ_KEY)");
  ClientCurve curve;
  auto server = read_curve_public_key(broker_key);
  if (!server) return std::unexpected(server.error());
  curve.broker_public_key = *server;
  auto own = read_curve_key_file(key_file);
  if (!own) return std::unexpected(own.error());
  curve.own = *own;
  return curve;
}

void apply_client_curve(zmq::socket_t& socket, const ClientCurve& curve) {
  if (!curve.enabled()) return;
  socket.set(zmq::sockopt::curve_serverkey, curve.broker_public_key);
  socket.set(zmq::sockopt::curve_publickey, curve.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, curve.own.secret_key);
}

}  // namespace dueq
