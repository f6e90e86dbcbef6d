/* check_tz_oracle.c: the TZif reader against an independent oracle, PostgreSQL's
 * own tz code (src/timezone, over the same zone files on Debian, which builds
 * it --with-system-tzdata): UTC offset and abbreviation for >= 100,000 random
 * instants 1970-2100 across every zone and link tzdata.zi lists, plus every
 * transition instant and the second before it. Zero differences allowed.
 * Both sides read the system's /usr/share/zoneinfo, whatever TZDIR the suite
 * sets (the server cannot be pointed elsewhere), so the comparison holds for
 * any tzdata release the machine carries.
 * Needs WARREN_TEST_PG_URL (only SELECTs run); fails when it is unset. */
#include <check.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/tz.h>

#include "testenv.h"
#include "tzpin.h"

#define T_MIN INT64_C(0)          /* 1970-01-01 */
#define T_MAX INT64_C(4102444800) /* 2100-01-01 */
#define RANDOM_PER_ZONE 180

static uint64_t rng = 0x243f6a8885a308d3u;

static char **zone_names(size_t *n)
{
    char path[1024], line[1024];
    snprintf(path, sizeof path, "%s/tzdata.zi", TZPIN_SYSTEM_DIR);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t cap = 1024;
    char **names = malloc(cap * sizeof *names);
    *n = 0;
    while (fgets(line, sizeof line, f)) {
        char a[512], b[512];
        if (line[0] == 'Z' && sscanf(line, "Z %511s", a) == 1)
            names[(*n)++] = strdup(a);
        else if (line[0] == 'L' && sscanf(line, "L %511s %511s", a, b) == 2)
            names[(*n)++] = strdup(b);
        ck_assert_uint_lt(*n, cap);
    }
    fclose(f);
    return names;
}

START_TEST(test_tz_oracle_offsets_and_abbreviations_match_postgresql)
{
    const char *url = testenv_pg_admin_url();
    PGconn *conn = PQconnectdb(url);
    ck_assert_msg(PQstatus(conn) == CONNECTION_OK, "%s", PQerrorMessage(conn));
    warren_tzdb *db = warren_tzdb_new(TZPIN_SYSTEM_DIR);
    size_t nz;
    char **names = zone_names(&nz);
    ck_assert_uint_ge(nz, 400);

    size_t cap = 4096;
    int64_t *ts = malloc(cap * sizeof *ts);
    char *arr = malloc(cap * 24 + 16);
    long total = 0, random_total = 0, diffs = 0, zones = 0;
    for (size_t z = 0; z < nz; z++) {
        const warren_tz *tz;
        warren_error err = {0};
        ck_assert_msg(warren_tzdb_get(db, names[z], &tz, &err) == 0, "%s", err.message);
        size_t n = 0;
        for (int i = 0; i < RANDOM_PER_ZONE; i++)
            ts[n++] = T_MIN + (int64_t)(testenv_xorshift(&rng) % (uint64_t)(T_MAX - T_MIN));
        random_total += RANDOM_PER_ZONE;
        /* Every offset change in range, and the second before it. */
        int64_t t = T_MIN;
        while (n + 2 < cap) {
            warren_tz_span sp;
            warren_tz_span_at(tz, t, &sp);
            if (sp.end == INT64_MAX || sp.end >= T_MAX)
                break;
            ts[n++] = sp.end - 1;
            ts[n++] = sp.end;
            t = sp.end;
        }
        size_t len = 0;
        arr[len++] = '{';
        for (size_t i = 0; i < n; i++)
            len +=
                (size_t)snprintf(arr + len, cap * 24 + 16 - len, "%s%" PRId64, i ? "," : "", ts[i]);
        arr[len++] = '}';
        arr[len] = '\0';

        const char *p1[1] = {names[z]};
        PGresult *r = PQexecParams(conn, "SELECT set_config('TimeZone', $1, false)", 1, NULL, p1,
                                   NULL, NULL, 0);
        ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", names[z],
                      PQerrorMessage(conn));
        PQclear(r);
        const char *p2[1] = {arr};
        r = PQexecParams(conn,
                         "SELECT x, extract(timezone FROM to_timestamp(x))::int, "
                         "to_char(to_timestamp(x), 'TZ') FROM unnest($1::bigint[]) x",
                         1, NULL, p2, NULL, NULL, 0);
        ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", names[z],
                      PQerrorMessage(conn));
        ck_assert_int_eq(PQntuples(r), (int)n);
        for (int i = 0; i < PQntuples(r); i++) {
            int64_t x = strtoll(PQgetvalue(r, i, 0), NULL, 10);
            int32_t off;
            const char *abbr;
            warren_tz_lookup(tz, x, &off, NULL, &abbr);
            long pg_off = strtol(PQgetvalue(r, i, 1), NULL, 10);
            const char *pg_abbr = PQgetvalue(r, i, 2);
            if (off != pg_off || strcmp(abbr, pg_abbr) != 0) {
                if (diffs < 20)
                    fprintf(stderr, "DIFF %s at %" PRId64 ": warren %d %s, postgresql %ld %s\n",
                            names[z], x, off, abbr, pg_off, pg_abbr);
                diffs++;
            }
        }
        total += PQntuples(r);
        PQclear(r);
        zones++;
    }
    fprintf(stderr, "tz oracle: %ld zones, %ld instants (%ld random), %ld differences\n", zones,
            total, random_total, diffs);
    ck_assert_int_ge(random_total, 100000);
    ck_assert_int_eq(diffs, 0);
    for (size_t z = 0; z < nz; z++)
        free(names[z]);
    free(names);
    free(ts);
    free(arr);
    warren_tzdb_free(db);
    PQfinish(conn);
}
END_TEST

static Suite *tz_oracle_suite(void)
{
    Suite *s = suite_create("tz_oracle");
    TCase *tc = tcase_create("postgresql");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_tz_oracle_offsets_and_abbreviations_match_postgresql);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tz_oracle_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
