// Stop requests by signal: SIGTERM and SIGUSR1 (Slurm's `--signal=USR1@SECONDS`, `scancel --signal`,
// preemption) and SIGINT (Ctrl-C on a run started by hand) ask a training run to finish its current step,
// write one checkpoint and exit with kExitPreempted (docs/checkpoints.md, "Preemption"). The handler only records the request; the
// trainer polls it once per step and the ranks agree on it, so every rank stops after the same step.
// A signal that arrives while the checkpoint is written is counted and reported, never acted on: the
// write completes and stays intact.
#pragma once

namespace lorabench::stop {

// The exit code of a run stopped by a signal after writing its checkpoint: 75 (EX_TEMPFAIL in
// sysexits.h, "try again later"); the batch scripts requeue the job on it.
constexpr int kExitPreempted = 75;

// Installs the handlers for SIGTERM, SIGUSR1 and SIGINT (SA_RESTART: an interrupted read or write resumes);
// a SIGINT ignored on entry (a background job of a non-interactive shell, nohup) stays ignored.
void install_handlers();
// The first signal received since install_handlers() or reset(), 0 when none.
int requested();
// How many stop signals arrived in all.
int count();
// "SIGTERM", "SIGUSR1", "SIGINT", or "a signal".
const char* signal_name(int sig);
// Forgets what arrived (tests).
void reset();

}  // namespace lorabench::stop
