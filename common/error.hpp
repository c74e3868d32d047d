#pragma once
// Error values returned on hot paths instead of exceptions.
#include <expected>
#include <string>
#include <system_error>

namespace dueq {

enum class Errc {
  bad_frame,        // undecodable or invalid frame
  bad_argument,     // a value out of range or malformed
  unavailable,      // a dependency (Redis, the broker) cannot be reached
  overloaded,       // refused by admission control; retry later
  timeout,
  not_found,
  refused,          // a dependency refused our credentials or permissions
  internal,
  not_leader,       // this broker stands by: another one leads (clients try their next endpoint)
  fenced,           // a newer leader took over: Redis refuses this broker's writes
  conflict,         // the job is not in a state the command applies to (running, finished), or it changed
                    // since the caller read it (a version mismatch)
  not_master,       // the Redis server reached is not a writable master (READONLY, or ROLE says replica);
                    // clients hear it as unavailable
};

struct Error {
  Errc code;
  std::string message;
};

template <typename T>
using Result = std::expected<T, Error>;

// The text of an errno value (thread-safe, unlike std::strerror).
inline std::string errno_text(int error) { return std::system_category().message(error); }

inline std::unexpected<Error> fail(Errc code, std::string message) {
  return std::unexpected(Error{code, std::move(message)});
}

const char* errc_name(Errc code);

}  // namespace dueq
