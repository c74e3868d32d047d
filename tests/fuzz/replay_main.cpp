// Runs a fuzz target over every file of its committed corpus, without
// libFuzzer: `make test` replays what `make fuzz` found on the ordinary
// sanitizer build. An empty or missing corpus is a failure, not a pass.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  std::error_code ec;
  size_t inputs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1], ec)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++inputs;
  }
  if (ec || inputs == 0) {
    std::fprintf(stderr, "no corpus in %s%s%s\n", argv[1], ec ? ": " : "", ec ? ec.message().c_str() : "");
    return 1;
  }
  std::printf("%zu inputs replayed from %s\n", inputs, argv[1]);
  return 0;
}
