/* bench_cron.c: cron-next computations per second over a mix of expressions
 * and zones (instants 2020-2060, so both listed transitions and POSIX footer
 * rules are used), and memory per cached zone. Prints JSON lines.
 *   cmake -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel --target bench_cron
 *   build-rel/tests/bench_cron [COMPUTATIONS] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <warren/cron.h>
#include <warren/tz.h>

#include "testenv.h"

int main(int argc, char **argv)
{
    static const char *const exprs[] = {
        "*/5 * * * *",     "0 9 * * MON-FRI",   "30 2 * * *", "0 0 1 * *",
        "H H * * *",       "*/15 9-17 * * 1-5", "0 0 L * *",  "0 12 * * 5L",
        "15 30 */2 * * *", "@hourly",           "0 0 29 2 *", "0 8 1W * *",
    };
    static const char *const zones[] = {"UTC",
                                        "Europe/Berlin",
                                        "America/New_York",
                                        "Australia/Lord_Howe",
                                        "Asia/Kathmandu",
                                        "America/Santiago",
                                        "Pacific/Chatham",
                                        "Asia/Tokyo"};
    enum { NE = sizeof exprs / sizeof exprs[0], NZ = sizeof zones / sizeof zones[0], NF = 4096 };
    long n = argc > 1 ? atol(argv[1]) : 3000000;
    warren_cron *c[NE];
    const warren_tz *tz[NZ];
    warren_tzdb *db = warren_tzdb_new(NULL);
    warren_error err = {0};

    for (int i = 0; i < NE; i++)
        if (warren_cron_parse(exprs[i], "bench-job", &c[i], &err) != 0) {
            fprintf(stderr, "%s: %s\n", exprs[i], err.message);
            return 1;
        }
    for (int i = 0; i < NZ; i++)
        if (warren_tzdb_get(db, zones[i], &tz[i], &err) != 0) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
    /* Start instants spread over 2020-2060. */
    static warren_us froms[NF];
    uint64_t r = 88172645463325252u;
    for (int i = 0; i < NF; i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        froms[i] = (warren_us)(1577836800 + (int64_t)(r % 1262304000u)) * 1000000 +
                   (warren_us)(r % 1000000);
    }
    int64_t sink = 0;
    double t0 = testenv_mono_s();
    for (long i = 0; i < n; i++) {
        int64_t next;
        if (warren_cron_next(c[i % NE], tz[(i / NE) % NZ], froms[i % NF], &next, NULL, NULL) != 0)
            return 1;
        sink += next;
    }
    double dt = testenv_mono_s() - t0;
    printf("{\"bench\":\"cron_next\",\"computations\":%ld,\"seconds\":%.3f,\"per_second\":%.0f,"
           "\"ns_per_call\":%.1f,\"expressions\":%d,\"zones\":%d,\"years\":\"2020-2060\","
           "\"checksum\":%" PRId64 "}\n",
           n, dt, (double)n / dt, dt * 1e9 / (double)n, NE, NZ, sink % 1000003);

    /* Sequential: the next 1000 fire times of each pair (the planner's pattern). */
    long m = 0;
    t0 = testenv_mono_s();
    for (int e = 0; e < NE; e++)
        for (int z = 0; z < NZ; z++) {
            warren_us t = froms[e * NZ + z];
            for (int k = 0; k < 1000; k++) {
                int64_t next;
                if (warren_cron_next(c[e], tz[z], t, &next, NULL, NULL) != 0)
                    return 1;
                t = next * 1000000;
                m++;
            }
        }
    dt = testenv_mono_s() - t0;
    printf("{\"bench\":\"cron_next_sequential\",\"computations\":%ld,\"seconds\":%.3f,"
           "\"per_second\":%.0f}\n",
           m, dt, (double)m / dt);

    /* Memory per cached zone, over every zone and link in tzdata.zi. */
    warren_tzdb *all = warren_tzdb_new(NULL);
    char zi[1024];
    const char *zdir = getenv("TZDIR"); /* the directory warren_tzdb_new(NULL) reads */
    snprintf(zi, sizeof zi, "%s/tzdata.zi", zdir && *zdir ? zdir : "/usr/share/zoneinfo");
    FILE *f = fopen(zi, "r");
    char line[1024];
    size_t count = 0, total = 0, max = 0;
    const char *maxname = "";
    static char maxbuf[256];
    t0 = testenv_mono_s();
    while (f && fgets(line, sizeof line, f)) {
        char a[256], b[256];
        const char *name = NULL;
        const warren_tz *z;
        if (line[0] == 'Z' && sscanf(line, "Z %255s", a) == 1)
            name = a;
        else if (line[0] == 'L' && sscanf(line, "L %255s %255s", a, b) == 2)
            name = b;
        if (name == NULL || warren_tzdb_get(all, name, &z, NULL) != 0)
            continue;
        size_t mem = warren_tz_memory(z);
        total += mem;
        count++;
        if (mem > max) {
            max = mem;
            snprintf(maxbuf, sizeof maxbuf, "%s", name);
            maxname = maxbuf;
        }
    }
    dt = testenv_mono_s() - t0;
    if (f)
        fclose(f);
    printf("{\"bench\":\"tz_memory\",\"zones\":%zu,\"bytes_per_zone_avg\":%zu,"
           "\"bytes_per_zone_max\":%zu,\"max_zone\":\"%s\",\"europe_berlin_bytes\":%zu,"
           "\"load_all_seconds\":%.3f}\n",
           count, count ? total / count : 0, max, maxname, warren_tz_memory(tz[1]), dt);
    warren_tzdb_free(all);
    for (int i = 0; i < NE; i++)
        warren_cron_free(c[i]);
    warren_tzdb_free(db);
    return 0;
}
