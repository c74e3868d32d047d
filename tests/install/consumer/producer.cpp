// A producer built out of the dueq tree: enqueues one "greet" job and
// waits for its end; prints the result (exit 0) or why not (exit 1).
#include <dueq/client.hpp>

#include <chrono>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  dueq::Client client(argv[1]);
  auto accepted = client.enqueue({.queue = "installed", .type = "greet", .payload = argv[2], .id = argv[3]});
  if (!accepted) {
    std::fprintf(stderr, "enqueue: %s\n", accepted.error().message.c_str());
    return 1;
  }
  auto end = client.wait(argv[3], "installed", std::chrono::seconds(30));
  if (!end || end->state != dueq::JobEnd::State::done) {
    std::fprintf(stderr, "the job did not end done\n");
    return 1;
  }
  std::printf("%s\n", end->result.c_str());
  return 0;
}
