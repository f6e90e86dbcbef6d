/* internal.h: small helpers the library's modules share (not public API). */
#ifndef WARREN_INTERNAL_H
#define WARREN_INTERNAL_H

#include <stdint.h>

/* The monotonic clock, for "how long since" only (every due/late decision
 * uses PostgreSQL's clock). */
int64_t warren__mono_ms(void);
int64_t warren__mono_us(void);
/* Sleeps ms milliseconds, resuming after signals. */
void warren__sleep_ms(int64_t ms);
/* Makes s valid UTF-8 in place: each byte of an invalid, truncated, overlong
 * or surrogate sequence becomes '?' (PostgreSQL refuses such text, e.g. a
 * handler's output cut in the middle of a character). */
void warren__utf8_clean(char *s);

#endif
