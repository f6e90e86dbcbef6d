/* log.c: formatting for the logging callback (the library never prints itself). */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include <warren/log.h>

void warren_log(const warren_logger *lg, warren_log_level level, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;

    if (lg == NULL || lg->fn == NULL || level < lg->min_level)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    lg->fn(lg->ud, level, buf);
}

void warren_log_stderr(void *ud, warren_log_level level, const char *msg)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    FILE *f = ud ? (FILE *)ud : stderr;
    struct timespec ts;
    struct tm tm;
    char when[32];

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(f, "%s.%03ldZ %-5s %s\n", when, ts.tv_nsec / 1000000L,
            names[level >= 0 && level <= 3 ? level : 3], msg);
    fflush(f);
}
