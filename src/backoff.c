/* backoff.c: the doubling reconnect backoff (backoff.h). */
#include <warren/backoff.h>

int64_t warren_backoff_next(int64_t cur_ms, int64_t min_ms, int64_t max_ms)
{
    if (cur_ms < min_ms)
        return min_ms;
    /* cur_ms > max_ms / 2 is cur_ms * 2 > max_ms, without overflowing */
    return cur_ms > max_ms / 2 ? max_ms : cur_ms * 2;
}
