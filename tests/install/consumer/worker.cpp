// A worker built out of the dueq tree: serves queue "installed", answers
// each "greet" job with "hello " and its payload; stops on SIGTERM.
#include <dueq/worker.hpp>

#include <csignal>
#include <thread>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  dueq::Worker worker({.broker = argv[1], .queues = {"installed"}, .concurrency = 2});
  worker.handle("greet", [](const dueq::Job& job) {
    job.progress(50, "greeting");
    return dueq::HandlerResult::done("hello " + job.payload);
  });
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    worker.stop();
  });
  const int code = worker.run();
  stopper.detach();
  return code;
}
