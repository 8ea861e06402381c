// job.cpp: see job.hpp.
#include "job.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>

namespace capuchin::cli {

namespace {

// The job's process group; the handler forwards to it (0: none, or already reaped).
volatile sig_atomic_t g_job_group = 0;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The job is in a group of its own, so whatever reaches capuchin did not reach the job: pass
// it on, once. (Terminal signals go to the job's foreground group, not to capuchin.)
void forward_signal(int sig) {
  const int saved = errno;
  if (g_job_group > 0) ::kill(-static_cast<pid_t>(g_job_group), sig);
  errno = saved;
}

// Hands the terminal to `group` (capuchin's own or the job's) when capuchin has one.
void give_terminal(int tty, pid_t group) {
  if (tty < 0) return;
  struct sigaction ignore{}, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTTOU, &ignore, &old);  // a background group may not change it otherwise
  (void)::tcsetpgrp(tty, group);
  ::sigaction(SIGTTOU, &old, nullptr);
}

}  // namespace

int run_job(std::vector<char*>& argv) {
  // The terminal is ours to hand over only if we are its foreground group.
  const int tty = ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp() ? STDIN_FILENO : -1;
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &old);  // no signal may fall between fork and the handlers
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    fmt::print(stderr, "capuchin run: fork: {}\n", std::strerror(errno));
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return 2;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(137);  // capuchin died before the line above
    ::setpgid(0, 0);
    give_terminal(tty, ::getpid());
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execvp(argv[0], argv.data());
    fmt::print(stderr, "capuchin run: cannot run {}: {}\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // both sides: whichever runs first
  give_terminal(tty, pid);
  g_job_group = pid;
  struct sigaction sa{};
  sa.sa_handler = forward_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigaction saved[std::size(kForwarded)]{};
  for (std::size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &saved[i]);
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  int status = 1;
  for (;;) {
    // WNOWAIT: the job stays a zombie (its pid not reusable) until forwarding is off.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WSTOPPED | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (info.si_code == CLD_STOPPED || info.si_code == CLD_TRAPPED) {
      int st = 0;
      (void)::waitpid(pid, &st, WUNTRACED | WNOHANG);  // consume the stop report
      if (tty < 0) continue;  // no job control here: whoever stopped it will continue it
      // Ctrl-Z: stop with the job, so the shell gets the terminal back; on `fg` both go on.
      give_terminal(tty, ::getpgrp());
      ::raise(SIGSTOP);
      give_terminal(tty, pid);
      ::kill(-pid, SIGCONT);
      continue;
    }
    g_job_group = 0;
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st)) status = WEXITSTATUS(st);
    else if (WIFSIGNALED(st)) status = 128 + WTERMSIG(st);
    break;
  }
  give_terminal(tty, ::getpgrp());
  // The job is gone: what comes now (the summary) is capuchin's own, and a Ctrl-C or a
  // scheduler's SIGTERM must act on it as they did before the job started.
  for (std::size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &saved[i], nullptr);
  return status;
}

}  // namespace capuchin::cli
