/* fuzz_cron.c: libFuzzer harness for the cron parser and next-instant search.
 * Checks invariants as well as memory safety: results are strictly after the
 * start, and each one matches the expression in local time or is a DST gap
 * transition. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <warren/cron.h>
#include <warren/tz.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static warren_tzdb *db;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char expr[600];
    warren_cron *c = NULL;
    const warren_tz *tz = NULL;
    static const char *const zones[] = {"UTC", "America/New_York", "Australia/Lord_Howe",
                                        "Pacific/Apia", "Europe/Dublin"};

    if (size > sizeof expr - 1)
        size = sizeof expr - 1;
    memcpy(expr, data, size);
    expr[size] = '\0';
    if (db == NULL)
        db = warren_tzdb_new(NULL);
    if (warren_cron_parse(expr, "fuzz-job", &c, NULL) != 0)
        return 0;
    warren_tzdb_get(db, zones[size % 5], &tz, NULL);
    int64_t from = 1700000000 + (int64_t)(size * 7919) % 400000000;
    for (int i = 0; i < 4; i++) {
        int64_t next;
        unsigned flags;
        if (warren_cron_next(c, tz, from * 1000000, &next, &flags, NULL) != 0)
            break;
        if (next <= from)
            abort();
        int32_t off;
        warren_tz_lookup(tz, next, &off, NULL, NULL);
        if (!(flags & WARREN_FIRE_GAP_SHIFTED) && !warren_cron_matches(c, next + off))
            abort();
        from = next;
    }
    warren_cron_free(c);
    return 0;
}
