/* duration.h: durations as operators write them: "250ms", "90s", "5m", "1h30m", "2d". */
#ifndef WARREN_DURATION_H
#define WARREN_DURATION_H

#include <stddef.h>
#include <stdint.h>

#include <warren/error.h>

/* Parses a sequence of <digits><unit> with units ms, s, m, h, d (largest
 * first, each at most once: "1h30m", "1m30s500ms"); "0" alone is zero.
 * *ms gets milliseconds. Errors: WARREN_EPARSE, message
 * `"10x" is not a duration (use e.g. "10s", "5m")`; WARREN_ERANGE on overflow. */
int warren_duration_parse(const char *text, int64_t *ms, warren_error *err);

/* Writes the shortest form ("1h30m", "250ms", "0s") into buf. */
char *warren_duration_format(int64_t ms, char *buf, size_t len);

#endif
