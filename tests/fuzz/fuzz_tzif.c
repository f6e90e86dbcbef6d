/* fuzz_tzif.c: libFuzzer harness for the TZif reader and its POSIX footer.
 * Beyond memory safety it checks that a span contains its instant and agrees
 * with the lookup, and that cron next over the zone terminates. */
#include <stdint.h>
#include <stdlib.h>

#include <warren/cron.h>
#include <warren/tz.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static warren_cron *hourly;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    warren_tz *tz;
    static const int64_t probes[] = {INT64_MIN,    -5000000000, -1,         0,
                                     1000000000,   2147483647,  2200000000, 4000000000,
                                     253402300799, INT64_MAX};

    if (hourly == NULL && warren_cron_parse("30 2 * * *", NULL, &hourly, NULL) != 0)
        abort();
    if (warren_tz_parse_tzif("fuzz", data, size, &tz, NULL) != 0)
        return 0;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        int32_t off;
        int dst;
        const char *abbr;
        warren_tz_span sp;
        warren_tz_lookup(tz, probes[i], &off, &dst, &abbr);
        warren_tz_span_at(tz, probes[i], &sp);
        if (abbr == NULL || sp.offset != off || sp.start > probes[i] ||
            (sp.end != INT64_MAX && sp.end <= probes[i]))
            abort();
    }
    int64_t next;
    int64_t from = 1600000000;
    for (int i = 0; i < 3; i++) {
        if (warren_cron_next(hourly, tz, from * 1000000, &next, NULL, NULL) != 0)
            break;
        if (next <= from)
            abort();
        from = next;
    }
    warren_tz_free(tz);
    return 0;
}
