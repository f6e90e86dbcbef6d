/* cli.h: the warren program's subcommands (one cli_<area>.c each) and the
 * conventions they share. Each takes argv with argv[0] = the command name. */
#ifndef WARREN_CLI_H
#define WARREN_CLI_H

#include <signal.h>

#include <warren/config.h>
#include <warren/error.h>
#include <warren/log.h>

/* Exit codes (docs/operations.md, "The command line"). */
#define WARREN_EXIT_OK 0
#define WARREN_EXIT_FAIL 1
#define WARREN_EXIT_USAGE 2
#define WARREN_EXIT_UNAVAILABLE 69 /* a server is unreachable (EX_UNAVAILABLE) */

/* cli_common.c */
/* The config path: -c/--config FILE if given, else $WARREN_CONFIG, else "warren.cfg". */
const char *cli_config_path(const char *given);
/* Loads the config, printing every error to stderr. Returns NULL on error. */
warren_config *cli_load_config(const char *path);
/* Maps a library error code to an exit code (connection errors -> 69). */
int cli_exit_code(int rc);
/* A logger writing to stderr at level (WARREN_LOG_INFO unless $WARREN_LOG=debug). */
warren_logger cli_logger(void);
/* 1 if argv has -h or --help. */
int cli_wants_help(int argc, char **argv);
/* The long-running commands' stop signals: SIGTERM and SIGINT set *flag to 1
 * (and do nothing else; the loop watching *flag stops), and with
 * ignore_sigpipe SIGPIPE is ignored (writes to a closed peer fail with EPIPE
 * instead of killing the process). flag must outlive the process's signal
 * handling (a static); one flag per process, the last call wins. */
void cli_stop_signals(volatile sig_atomic_t *flag, int ignore_sigpipe);

/* The subcommands, by owning file. */
int cli_check(int argc, char **argv);           /* cli_config.c */
int cli_cron(int argc, char **argv);            /* cli_cron.c */
int cli_migrate(int argc, char **argv);         /* cli_store.c */
int cli_sync(int argc, char **argv);            /* cli_store.c */
int cli_topology(int argc, char **argv);        /* cli_broker.c */
int cli_planner(int argc, char **argv);         /* cli_planner.c */
int cli_trigger(int argc, char **argv);         /* cli_planner.c */
int cli_pause(int argc, char **argv);           /* cli_planner.c */
int cli_resume(int argc, char **argv);          /* cli_planner.c */
int cli_backfill(int argc, char **argv);        /* cli_planner.c */
int cli_worker(int argc, char **argv);          /* cli_worker.c */
int cli_run(int argc, char **argv);             /* cli_worker.c */
int cli_replay(int argc, char **argv);          /* cli_worker.c */
int cli_runs(int argc, char **argv);            /* cli_worker.c */
int cli_show(int argc, char **argv);            /* cli_worker.c */
int cli_grant(int argc, char **argv);           /* cli_grant.c */
int cli_revoke(int argc, char **argv);          /* cli_grant.c */
int cli_grant_producer(int argc, char **argv);  /* cli_grant.c */
int cli_revoke_producer(int argc, char **argv); /* cli_grant.c */
int cli_tenant_cap(int argc, char **argv);      /* cli_grant.c */
int cli_jobs(int argc, char **argv);            /* cli_jobs.c */
int cli_enqueue(int argc, char **argv);         /* cli_enqueue.c */

#endif
