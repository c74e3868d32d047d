/* A wall clock the nemesis suite can step: preloaded (LD_PRELOAD) into a
 * broker, it adds to CLOCK_REALTIME (clock_gettime, gettimeofday, time) the
 * milliseconds stored as a little-endian int64 at the start of the file
 * named by $DUEQ_CLOCK_SHIFT_FILE, which the suite rewrites to step the
 * clock forward or back. The steady clock is left alone, as a real clock
 * step leaves it.
 *
 * Why not libfaketime: it allocates from inside its clock calls and clashes
 * with the broker's jemalloc (the broker fails at start). This one calls the
 * kernel directly and reads a shared mapping: no allocation, no lock. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <ctime>

namespace {

volatile const int64_t* shift_ms = nullptr;


__attribute__((constructor)) void map_shift() {
  const char* path = getenv("DUEQ_CLOCK_SHIFT_FILE");
  if (path == nullptr) return;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  void* map = mmap(nullptr, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map != MAP_FAILED) shift_ms = static_cast<volatile const int64_t*>(map);
}

int64_t shift() { return shift_ms == nullptr ? 0 : *shift_ms; }

}  // namespace

extern "C" {

int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
  const long rc = syscall(SYS_clock_gettime, id, ts);
  if (rc != 0 || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE)) return static_cast<int>(rc);
  const int64_t ns = int64_t{ts->tv_sec} * 1'000'000'000 + ts->tv_nsec + shift() * 1'000'000;
  ts->tv_sec = ns / 1'000'000'000;
  ts->tv_nsec = ns % 1'000'000'000;
  return 0;
}

int gettimeofday(struct timeval* tv, void* tz) noexcept {
  (void)tz;
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}

time_t time(time_t* out) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out != nullptr) *out = ts.tv_sec;
  return ts.tv_sec;
}

}  // extern "C"
