// job.hpp: running the user's command for `capuchin run`, as a launcher should.
//
// Contract: run_job forks and execs argv in a process group of its own that, when capuchin
// owns the terminal, becomes the terminal's foreground group (Ctrl-C, Ctrl-Z and reads from
// the terminal reach the job, once). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to capuchin (by
// kill, timeout, a scheduler, to its pid or its group) are passed on to the job's group,
// exactly once; the job is killed if capuchin is (PR_SET_PDEATHSIG); a stopped job stops
// capuchin too, and both continue together. Once the job has ended, the signal dispositions
// capuchin had before are restored (what follows, the summary, is interruptible again).
// Returns the job's exit status, 128 + the signal that ended it, 127 when it cannot be run,
// 2 when it cannot be started.
#pragma once

#include <vector>

namespace capuchin::cli {

int run_job(std::vector<char*>& argv);

}  // namespace capuchin::cli
