/* cron.h: cron expressions (5 or 6 fields, macros, L/W/#/H extensions) and
 * their next fire instants in an IANA zone under warren's DST rules. */
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

/* Parses expr. job_name seeds the H forms (may be NULL when expr has no H:
 * then an H is an error). *out is new; free with warren_cron_free. Errors:
 * WARREN_ECRON with a message naming the field and token, e.g.
 * `field 2 (hour): "25" is out of range 0-23`; WARREN_ENEVER when the
 * expression can never fire. */
int warren_cron_parse(const char *expr, const char *job_name, warren_cron **out, warren_error *err);
void warren_cron_free(warren_cron *c);

/* 1 if the hour field starts with '*' (interval-like), else 0 (fixed-hour). */
int warren_cron_interval_like(const warren_cron *c);

/* The first fire instant strictly after `from` (UTC microseconds), in whole
 * UTC seconds, in zone tz; *flags (may be NULL) gets WARREN_FIRE_* bits.
 * Errors: WARREN_ENEVER if there is none before year 9999. */
int warren_cron_next(const warren_cron *c, const warren_tz *tz, warren_us from, int64_t *next,
                     unsigned *flags, warren_error *err);

#endif
