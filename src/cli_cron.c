/* cli_cron.c: `warren cron next`: prints the next fire instants of a cron
 * expression in a zone, optionally with the local time and the DST rule that
 * moved or doubled each one. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <warren/cron.h>
#include <warren/timefmt.h>
#include <warren/tz.h>

#include "cli.h"

#define COUNT_MAX 100000

static void usage(FILE *f)
{
    fprintf(f,
            "usage: warren cron next [--tz ZONE] [--from TIME] [--count N] [--job NAME] [--local] "
            "EXPR\n"
            "\n"
            "Prints the next N fire instants of the cron expression EXPR strictly after TIME,\n"
            "ascending, one a line, as RFC 3339 UTC (2026-03-08T07:00:00Z).\n"
            "\n"
            "  --tz ZONE     IANA time zone the expression is read in (default UTC)\n"
            "  --from TIME   RFC 3339 instant, fractional seconds allowed (default now)\n"
            "  --count N     how many instants (default 1, at most %d)\n"
            "  --job NAME    job name that seeds the H forms (H, H/n, H(a-b))\n"
            "  --local       also print the local time with its offset and abbreviation, and\n"
            "                a note when a DST rule moved (gap) or doubled (overlap) it\n"
            "\n"
            "EXPR: 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first),\n"
            "or a macro (@yearly @annually @monthly @weekly @daily @midnight @hourly).\n"
            "Quote it: warren cron next --tz Europe/Berlin '30 2 * * *'. See docs/cron.md.\n"
            "Exit: 0 ok, 2 bad expression, zone or usage (message on stderr).\n",
            COUNT_MAX);
}

/* Option value for "--opt VALUE" or "--opt=VALUE"; NULL if argv[*i] is not opt. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt, int *missing)
{
    size_t n = strlen(opt);
    if (strncmp(argv[*i], opt, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static void format_local(int64_t t, int32_t off, char *buf, size_t len)
{
    char tmp[WARREN_TIME_BUF];
    int32_t a = off < 0 ? -off : off;
    warren_time_format((t + off) * WARREN_US_PER_S, tmp, sizeof tmp);
    tmp[strlen(tmp) - 1] = '\0'; /* drop the Z */
    if (a % 60)
        snprintf(buf, len, "%s%c%02d:%02d:%02d", tmp, off < 0 ? '-' : '+', (int)(a / 3600),
                 (int)(a / 60 % 60), (int)(a % 60));
    else
        snprintf(buf, len, "%s%c%02d:%02d", tmp, off < 0 ? '-' : '+', (int)(a / 3600),
                 (int)(a / 60 % 60));
}

static int cron_next(int argc, char **argv)
{
    const char *zone = "UTC", *from_text = NULL, *count_text = NULL, *job = NULL;
    int local = 0, rc, ret = WARREN_EXIT_USAGE;
    char expr[WARREN_CRON_MAX_LEN * 2 + 2];
    size_t elen = 0;
    int nexpr = 0, only_args = 0;
    warren_error err = {0};
    warren_tzdb *db = NULL;
    warren_cron *c = NULL;
    const warren_tz *tz;
    warren_us from;
    long count = 1;
    int64_t *out = NULL;
    unsigned *flags = NULL;

    expr[0] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *v;
        int missing = 0;
        if (!only_args && strcmp(argv[i], "--") == 0) {
            only_args = 1;
        } else if (!only_args && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
            usage(stdout);
            return WARREN_EXIT_OK;
        } else if (!only_args && strcmp(argv[i], "--local") == 0) {
            local = 1;
        } else if (!only_args && ((v = opt_value(argc, argv, &i, "--tz", &missing)) || missing)) {
            zone = v;
        } else if (!only_args && ((v = opt_value(argc, argv, &i, "--from", &missing)) || missing)) {
            from_text = v;
        } else if (!only_args &&
                   ((v = opt_value(argc, argv, &i, "--count", &missing)) || missing)) {
            count_text = v;
        } else if (!only_args && ((v = opt_value(argc, argv, &i, "--job", &missing)) || missing)) {
            job = v;
        } else if (!only_args && argv[i][0] == '-' && argv[i][1] != '\0' &&
                   strchr(argv[i], ' ') == NULL && !(argv[i][1] >= '0' && argv[i][1] <= '9')) {
            fprintf(stderr, "warren cron next: unknown option \"%s\" (see --help)\n", argv[i]);
            return WARREN_EXIT_USAGE;
        } else {
            /* Unquoted fields are joined with single spaces. */
            size_t n = strlen(argv[i]);
            if (elen + n + 2 > sizeof expr) {
                fprintf(stderr, "warren cron next: cron expression is longer than %d characters\n",
                        WARREN_CRON_MAX_LEN);
                return WARREN_EXIT_USAGE;
            }
            if (nexpr++)
                expr[elen++] = ' ';
            memcpy(expr + elen, argv[i], n + 1);
            elen += n;
        }
        if (missing) {
            fprintf(stderr, "warren cron next: option \"%s\" needs a value\n", argv[i]);
            return WARREN_EXIT_USAGE;
        }
    }
    if (nexpr == 0) {
        fprintf(stderr, "warren cron next: missing cron expression (see --help)\n");
        return WARREN_EXIT_USAGE;
    }
    if (count_text) {
        char *end;
        count = strtol(count_text, &end, 10);
        if (*count_text == '\0' || *end != '\0' || count < 1 || count > COUNT_MAX) {
            fprintf(stderr, "warren cron next: --count \"%s\" must be a number from 1 to %d\n",
                    count_text, COUNT_MAX);
            return WARREN_EXIT_USAGE;
        }
    }
    if (from_text) {
        if (warren_time_parse(from_text, &from, &err) != 0) {
            fprintf(stderr, "warren cron next: --from: %s\n", err.message);
            return WARREN_EXIT_USAGE;
        }
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        from = (warren_us)ts.tv_sec * WARREN_US_PER_S + ts.tv_nsec / 1000;
    }
    db = warren_tzdb_new(NULL);
    out = calloc((size_t)count, sizeof *out);
    flags = calloc((size_t)count, sizeof *flags);
    if (db == NULL || out == NULL || flags == NULL) {
        fprintf(stderr, "warren cron next: out of memory\n");
        ret = WARREN_EXIT_FAIL;
        goto done;
    }
    if (warren_tzdb_get(db, zone, &tz, &err) != 0) {
        fprintf(stderr, "warren cron next: %s\n", err.message);
        goto done;
    }
    if (warren_cron_parse(expr, job, &c, &err) != 0) {
        fprintf(stderr, "warren cron next: %s\n", err.message);
        goto done;
    }
    /* Compute everything first so an error leaves stdout empty. */
    for (long i = 0; i < count; i++) {
        warren_us at = i == 0 ? from : out[i - 1] * WARREN_US_PER_S;
        rc = warren_cron_next(c, tz, at, &out[i], &flags[i], &err);
        if (rc != 0) {
            fprintf(stderr, "warren cron next: \"%s\": %s\n", expr, err.message);
            goto done;
        }
    }
    for (long i = 0; i < count; i++) {
        char buf[WARREN_TIME_BUF], lbuf[64];
        warren_time_format(out[i] * WARREN_US_PER_S, buf, sizeof buf);
        if (!local) {
            printf("%s\n", buf);
            continue;
        }
        int32_t off;
        const char *abbr;
        warren_tz_lookup(tz, out[i], &off, NULL, &abbr);
        format_local(out[i], off, lbuf, sizeof lbuf);
        const char *note = "";
        if (flags[i] & WARREN_FIRE_GAP_SHIFTED)
            note = "  (DST gap: the scheduled local time did not exist; fired at the transition)";
        else if (flags[i] & WARREN_FIRE_OVERLAP_SECOND)
            note = "  (DST overlap: this local time happens twice; this is the second)";
        else if (flags[i] & WARREN_FIRE_OVERLAP_FIRST)
            note = warren_cron_interval_like(c)
                       ? "  (DST overlap: this local time happens twice; this is the first)"
                       : "  (DST overlap: this local time happens twice; fixed-hour fires only "
                         "this first one)";
        printf("%s  %s %s%s\n", buf, lbuf, abbr, note);
    }
    ret = WARREN_EXIT_OK;
done:
    free(out);
    free(flags);
    warren_cron_free(c);
    warren_tzdb_free(db);
    return ret;
}

int cli_cron(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? WARREN_EXIT_USAGE : WARREN_EXIT_OK;
    }
    if (strcmp(argv[1], "next") == 0)
        return cron_next(argc - 1, argv + 1);
    fprintf(stderr, "warren cron: unknown subcommand \"%s\" (known: next)\n", argv[1]);
    return WARREN_EXIT_USAGE;
}
