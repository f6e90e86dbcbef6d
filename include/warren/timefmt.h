/* timefmt.h: RFC 3339 instants in and out. Instants are int64 microseconds
 * since the Unix epoch, UTC (warren_us); seconds where a field says _s. */
#ifndef WARREN_TIMEFMT_H
#define WARREN_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>

#include <warren/error.h>

typedef int64_t warren_us;

#define WARREN_US_PER_S INT64_C(1000000)
#define WARREN_TIME_BUF 40

/* Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)" (a space or 't' may
 * stand for 'T', 'z' for 'Z'). Fractions beyond microseconds are truncated.
 * Errors: WARREN_EPARSE with a message naming the text and the fix. */
int warren_time_parse(const char *text, warren_us *out, warren_error *err);

/* Writes "YYYY-MM-DDTHH:MM:SSZ" (whole seconds, floor) into buf (>= WARREN_TIME_BUF). */
char *warren_time_format(warren_us t, char *buf, size_t len);
/* Same with milliseconds: "YYYY-MM-DDTHH:MM:SS.mmmZ". */
char *warren_time_format_ms(warren_us t, char *buf, size_t len);

/* Days since 1970-01-01 for a proleptic Gregorian date, and back. */
int64_t warren_days_from_civil(int64_t y, unsigned m, unsigned d);
void warren_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);

/* Floor division of t by WARREN_US_PER_S (correct for negative instants). */
int64_t warren_us_to_s(warren_us t);

#endif
