/* error.h: warren's error codes and the error struct every fallible call fills. */
#ifndef WARREN_ERROR_H
#define WARREN_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* One list generates the enum and warren_strerror() (libuv's UV_ERRNO_MAP).
 * Codes are negative; 0 is success. Append new codes at the end. */
#define WARREN_ERRNO_MAP(X)                                                                        \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EIO, -3, "input/output error")                                                               \
    X(ENOENT, -4, "not found")                                                                     \
    X(EPARSE, -5, "parse error")                                                                   \
    X(ERANGE, -6, "value out of range")                                                            \
    X(ECONFIG, -7, "invalid configuration")                                                        \
    X(ECRON, -8, "invalid cron expression")                                                        \
    X(ETZ, -9, "invalid time zone")                                                                \
    X(EDB, -10, "database error")                                                                  \
    X(EDBCONN, -11, "database unreachable")                                                        \
    X(EBROKER, -12, "broker error")                                                                \
    X(EBROKERCONN, -13, "broker unreachable")                                                      \
    X(ETIMEOUT, -14, "timed out")                                                                  \
    X(ECONFLICT, -15, "conflicting declaration")                                                   \
    X(ESTALE, -16, "stale fencing token")                                                          \
    X(EUNROUTABLE, -17, "message unroutable")                                                      \
    X(ENACK, -18, "message rejected by broker")                                                    \
    X(ENEVER, -19, "schedule never fires")                                                         \
    X(EMSG, -20, "malformed message")                                                              \
    X(EINTR, -21, "interrupted")                                                                   \
    X(ESYS, -22, "system call failed")

typedef enum {
    WARREN_OK = 0,
#define WARREN_ERR_ENUM(name, value, text) WARREN_##name = (value),
    WARREN_ERRNO_MAP(WARREN_ERR_ENUM)
#undef WARREN_ERR_ENUM
} warren_errno;

/* Number of codes in the map (for tests that walk the table). */
int warren_errno_count(void);
/* The code at position i of the map (0 <= i < warren_errno_count()). */
int warren_errno_at(int i);

/* A static string for a code; "unknown error" for codes outside the map. */
const char *warren_strerror(int code);
/* The code's symbolic name, e.g. "WARREN_EINVAL"; NULL if unknown. */
const char *warren_err_name(int code);

#define WARREN_ERROR_MSG_MAX 1024

/* Filled by fallible calls; pass NULL if you do not want the message.
 * The first error set wins: later calls to warren_error_set on an error
 * that already holds a code leave it unchanged. Zero-initialise before use
 * (warren_error err = {0};) or call warren_error_clear. */
typedef struct warren_error {
    int code;
    char message[WARREN_ERROR_MSG_MAX];
} warren_error;

void warren_error_clear(warren_error *err);
/* Records code and a printf-style message (if err is non-NULL and empty).
 * Returns code, so callers can write `return warren_error_set(err, ...)`. */
int warren_error_set(warren_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int warren_error_setv(warren_error *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
