/* cron.h: cron expressions (5 or 6 fields, macros, L/W/#/H extensions) and
 * their next fire instants in an IANA zone under warren's DST rules
 * (docs/cron.md has the syntax and the rules with examples). */
#ifndef WARREN_CRON_H
#define WARREN_CRON_H

#include <stdint.h>

#include <warren/error.h>
#include <warren/timefmt.h>
#include <warren/tz.h>

typedef struct warren_cron warren_cron;

/* Flags describing why a fire instant is where it is (for --local and notes). */
#define WARREN_FIRE_GAP_SHIFTED 0x1u    /* local time was in a spring-forward gap: moved */
#define WARREN_FIRE_OVERLAP_FIRST 0x2u  /* local time repeats (fall back); this is the 1st */
#define WARREN_FIRE_OVERLAP_SECOND 0x4u /* ... and this is the 2nd (interval-like only) */

/* Longest expression accepted (bytes); longer input is WARREN_ECRON. */
#define WARREN_CRON_MAX_LEN 256

/* Parses expr. job_name seeds the H forms (may be NULL when expr has no H:
 * then an H is an error). *out is new; free with warren_cron_free. Errors:
 * WARREN_ECRON with a message naming the field and token, e.g.
 * `field 2 (hour): "25" is out of range 0-23`; WARREN_ENEVER when the
 * expression can never fire. */
int warren_cron_parse(const char *expr, const char *job_name, warren_cron **out, warren_error *err);
void warren_cron_free(warren_cron *c);

/* 1 if the hour field starts with '*' (or '?'): interval-like; else 0 (fixed-hour).
 * Macros count as fixed-hour except @hourly. */
int warren_cron_interval_like(const warren_cron *c);

/* 1 if the expression has a seconds field (6 fields). */
int warren_cron_has_seconds(const warren_cron *c);

/* 1 if the wall-clock time `local` (seconds since 1970-01-01T00:00:00 of the
 * local calendar, i.e. UTC instant + UTC offset) matches the expression,
 * ignoring time zones. Used by tests and --local explanations. */
int warren_cron_matches(const warren_cron *c, int64_t local);

/* The first fire instant strictly after `from` (UTC microseconds), in whole
 * UTC seconds, in zone tz (NULL: UTC); *flags (may be NULL) gets WARREN_FIRE_*
 * bits. Errors: WARREN_ENEVER if there is none before year 10000. */
int warren_cron_next(const warren_cron *c, const warren_tz *tz, warren_us from, int64_t *next,
                     unsigned *flags, warren_error *err);

/* The stable hash behind H: FNV-1a 32-bit over the bytes of job_name followed
 * by one byte, the field kind (0 second, 1 minute, 2 hour, 3 day of month,
 * 4 month, 5 day of week). H in a field with range lo-hi is lo + hash % (hi-lo+1)
 * (day of month uses 1-28 so it exists in every month); H(a-b) is
 * a + hash % (b-a+1); H/n and H(a-b)/n start at lo + hash % n. */
uint32_t warren_cron_hash(const char *job_name, int field_kind);

/* Interval schedules (`every`): the first instant anchor + k*period_s (k any
 * integer) strictly after from, in whole seconds. period_s must be > 0. */
int64_t warren_interval_next(int64_t anchor_s, int64_t period_s, warren_us from);

#endif
