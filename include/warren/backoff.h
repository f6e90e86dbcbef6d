/* backoff.h: the doubling delay between attempts to reach a server again
 * (the planner's and the worker's reconnects and retried calls). A failed
 * run's retry delay is the database's (warren.wp_backoff_ms, sql/: full
 * jitter, random(0, min(cap, base * 2^attempt))). */
#ifndef WARREN_BACKOFF_H
#define WARREN_BACKOFF_H

#include <stdint.h>

/* The delay after one more failure: min_ms after the first (cur_ms < min_ms,
 * e.g. 0 for "no failure yet"), then twice cur_ms, at most max_ms. */
int64_t warren_backoff_next(int64_t cur_ms, int64_t min_ms, int64_t max_ms);

#endif
