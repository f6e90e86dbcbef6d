/* log.h: the library never prints; it logs through a callback the program installs. */
#ifndef WARREN_LOG_H
#define WARREN_LOG_H

typedef enum {
    WARREN_LOG_DEBUG = 0,
    WARREN_LOG_INFO = 1,
    WARREN_LOG_WARN = 2,
    WARREN_LOG_ERROR = 3,
} warren_log_level;

/* msg is borrowed (valid during the call only). */
typedef void (*warren_log_fn)(void *ud, warren_log_level level, const char *msg);

/* A logger is a callback, its user data and a minimum level. Modules that
 * log take a `const warren_logger *` (NULL = silent); there is no global. */
typedef struct warren_logger {
    warren_log_fn fn;
    void *ud;
    warren_log_level min_level;
} warren_logger;

void warren_log(const warren_logger *lg, warren_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A ready-made callback writing "TIME LEVEL msg" lines to the FILE* in ud
 * (for programs, not for the library's own use). */
void warren_log_stderr(void *ud, warren_log_level level, const char *msg);

#endif
