/* cli_common.c: conventions every subcommand shares: config path, config
 * loading with every error printed, exit codes, the stderr logger, the stop
 * signals. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *cli_config_path(const char *given)
{
    const char *env;

    if (given != NULL && given[0] != '\0')
        return given;
    env = getenv("WARREN_CONFIG");
    if (env != NULL && env[0] != '\0')
        return env;
    return "warren.cfg";
}

warren_config *cli_load_config(const char *path)
{
    warren_config *cfg = NULL;
    warren_diags diags = {0};
    warren_error err = {0};

    if (warren_config_load(path, &cfg, &diags, &err) != 0) {
        if (diags.count == 0)
            fprintf(stderr, "warren: %s\n", err.message);
        for (size_t i = 0; i < diags.count; i++)
            fprintf(stderr, "%s\n", diags.items[i]);
        warren_diags_free(&diags);
        return NULL;
    }
    warren_diags_free(&diags);
    return cfg;
}

int cli_exit_code(int rc)
{
    switch (rc) {
    case WARREN_OK:
        return WARREN_EXIT_OK;
    case WARREN_EDBCONN:
    case WARREN_EBROKERCONN:
        return WARREN_EXIT_UNAVAILABLE;
    case WARREN_ECONFIG:
    case WARREN_EINVAL:
    case WARREN_ECRON:
    case WARREN_ETZ:
    case WARREN_EPARSE:
        return WARREN_EXIT_USAGE;
    default:
        return WARREN_EXIT_FAIL;
    }
}

warren_logger cli_logger(void)
{
    warren_logger lg = {warren_log_stderr, stderr, WARREN_LOG_INFO};
    const char *lvl = getenv("WARREN_LOG");

    if (lvl != NULL && strcmp(lvl, "debug") == 0)
        lg.min_level = WARREN_LOG_DEBUG;
    else if (lvl != NULL && strcmp(lvl, "warn") == 0)
        lg.min_level = WARREN_LOG_WARN;
    return lg;
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0)
            return 1;
    return 0;
}

/* Set before the handlers are installed, read only by them. */
static volatile sig_atomic_t *stop_flag;

/* An atomic store (lock-free, so async-signal-safe): `warren run` reads the
 * flag on its planner thread too, and a plain store would race with that
 * read (ThreadSanitizer). */
static void on_stop_signal(int sig)
{
    (void)sig;
    __atomic_store_n(stop_flag, 1, __ATOMIC_RELAXED);
}

void cli_stop_signals(volatile sig_atomic_t *flag, int ignore_sigpipe)
{
    struct sigaction sa;

    stop_flag = flag;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (ignore_sigpipe) {
        sa.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &sa, NULL);
    }
}
