/* check_cron.c: the cron parser and next-instant search: data-driven valid and
 * invalid cases (tests/data/cron/), the DST contract in every zone the issue
 * names, and a brute-force property test over random expressions. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <warren/cron.h>
#include <warren/timefmt.h>
#include <warren/tz.h>

#include "tzpin.h"
#include "testenv.h"

static warren_tzdb *db;

static void setup(void)
{
    db = warren_tzdb_new(NULL);
    ck_assert_ptr_nonnull(db);
}

static void teardown(void)
{
    warren_tzdb_free(db);
    db = NULL;
}

static const warren_tz *zone(const char *name)
{
    const warren_tz *tz = NULL;
    warren_error err = {0};
    ck_assert_msg(warren_tzdb_get(db, name, &tz, &err) == 0, "%s: %s", name, err.message);
    return tz;
}

static warren_cron *parse_ok(const char *expr, const char *job)
{
    warren_cron *c = NULL;
    warren_error err = {0};
    ck_assert_msg(warren_cron_parse(expr, job, &c, &err) == 0, "\"%s\": %s", expr, err.message);
    return c;
}

static void fmt(int64_t s, char *buf)
{
    warren_time_format(s * WARREN_US_PER_S, buf, WARREN_TIME_BUF);
}

/* Asserts the instants (and, if given, flags) after from. */
static void expect_next(const char *expr, const char *zn, const char *from, const char *const *want,
                        const unsigned *flags)
{
    warren_cron *c = parse_ok(expr, "job");
    const warren_tz *tz = zone(zn);
    warren_us t = testenv_at(from);
    for (int i = 0; want[i]; i++) {
        int64_t n;
        unsigned fl;
        warren_error err = {0};
        char buf[WARREN_TIME_BUF];
        ck_assert_msg(warren_cron_next(c, tz, t, &n, &fl, &err) == 0, "%s: %s", expr, err.message);
        fmt(n, buf);
        ck_assert_msg(strcmp(buf, want[i]) == 0, "\"%s\" in %s after %s: #%d is %s, want %s", expr,
                      zn, from, i + 1, buf, want[i]);
        if (flags)
            ck_assert_msg(fl == flags[i], "\"%s\" in %s: #%d flags %u, want %u", expr, zn, i + 1,
                          fl, flags[i]);
        t = n * WARREN_US_PER_S;
    }
    warren_cron_free(c);
}

/* ---- data-driven --------------------------------------------------------- */

static char *data_path(const char *name)
{
    static char buf[1024];
    snprintf(buf, sizeof buf, "%s/cron/%s", WARREN_TEST_DATA, name);
    return buf;
}

static int split_tabs(char *line, char **cols, int max)
{
    int n = 0;
    line[strcspn(line, "\n")] = '\0';
    cols[n++] = line;
    for (char *p = line; *p && n < max; p++)
        if (*p == '\t') {
            *p = '\0';
            cols[n++] = p + 1;
        }
    return n;
}

START_TEST(test_cron_valid_cases_fire_at_expected_instants)
{
    FILE *f = fopen(data_path("valid.txt"), "r");
    char line[4096];
    int cases = 0, instants = 0;
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f)) {
        char *cols[6];
        if (line[0] == '#' || line[0] == '\n')
            continue;
        int n = split_tabs(line, cols, 6);
        ck_assert_int_ge(n, 4);
        warren_cron *c = parse_ok(cols[0], n >= 5 ? cols[4] : NULL);
        const warren_tz *tz = zone(cols[1]);
        warren_us t = testenv_at(cols[2]);
        char *save = NULL;
        int here = 0;
        for (char *w = strtok_r(cols[3], " ", &save); w; w = strtok_r(NULL, " ", &save), here++) {
            int64_t next;
            char buf[WARREN_TIME_BUF];
            warren_error err = {0};
            ck_assert_msg(warren_cron_next(c, tz, t, &next, NULL, &err) == 0, "%s: %s", cols[0],
                          err.message);
            fmt(next, buf);
            ck_assert_msg(strcmp(buf, w) == 0, "\"%s\" in %s from %s: got %s, want %s", cols[0],
                          cols[1], cols[2], buf, w);
            t = next * WARREN_US_PER_S;
            instants++;
        }
        ck_assert_msg(here > 0, "\"%s\" in valid.txt lists no expected instants", cols[0]);
        warren_cron_free(c);
        cases++;
    }
    fclose(f);
    ck_assert_int_ge(cases, 100);
    ck_assert_int_ge(instants, 200);
}
END_TEST

START_TEST(test_cron_invalid_cases_are_rejected_with_their_message)
{
    FILE *f = fopen(data_path("invalid.txt"), "r");
    char line[4096];
    int cases = 0;
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f)) {
        char *cols[4];
        if (line[0] == '#' || line[0] == '\n')
            continue;
        int n = split_tabs(line, cols, 4);
        ck_assert_int_eq(n, 3);
        /* An empty expected message would be a substring of any message. */
        ck_assert_msg(cols[2][0] != '\0', "\"%s\" in invalid.txt has no expected message", cols[0]);
        warren_cron *c = NULL;
        warren_error err = {0};
        int rc = warren_cron_parse(cols[0], NULL, &c, &err);
        int want = strcmp(cols[1], "ENEVER") == 0 ? WARREN_ENEVER : WARREN_ECRON;
        ck_assert_msg(rc == want, "\"%s\": rc %d, want %s (%s)", cols[0], rc, cols[1], err.message);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(err.message, cols[2]) != NULL, "\"%s\": message \"%s\" lacks \"%s\"",
                      cols[0], err.message, cols[2]);
        cases++;
    }
    fclose(f);
    ck_assert_int_ge(cases, 100);
}
END_TEST

/* ---- parser specifics ------------------------------------------------------ */

static void expect_error(const char *expr, int code, const char *substr)
{
    warren_cron *c = NULL;
    warren_error err = {0};
    ck_assert_int_eq(warren_cron_parse(expr, NULL, &c, &err), code);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(err.message, substr) != NULL, "\"%s\": \"%s\" lacks \"%s\"", expr,
                  err.message, substr);
}

START_TEST(test_cron_rejects_hour_24)
{
    expect_error("0 24 * * *", WARREN_ECRON, "field 2 (hour): \"24\" is out of range 0-23");
    expect_error("0 0 24 * * *", WARREN_ECRON, "field 3 (hour): \"24\" is out of range 0-23");
}
END_TEST

START_TEST(test_cron_rejects_values_that_wrap_c_integers)
{
    expect_error("4294967296 * * * *", WARREN_ECRON, "\"4294967296\" is out of range 0-59");
    expect_error("* * * * 4294967303", WARREN_ECRON, "out of range 0-7");
    expect_error("*/4294967297 * * * *", WARREN_ECRON, "step \"4294967297\"");
    expect_error("* * 18446744073709551617 * *", WARREN_ECRON, "out of range 1-31");
}
END_TEST

START_TEST(test_cron_rejects_long_input_and_control_characters)
{
    char buf[WARREN_CRON_MAX_LEN + 64];
    memset(buf, ' ', sizeof buf);
    memcpy(buf, "* * * * *", 9);
    buf[WARREN_CRON_MAX_LEN + 1] = '\0';
    expect_error(buf, WARREN_ECRON, "longer than 256");
    buf[WARREN_CRON_MAX_LEN] = '\0'; /* exactly at the limit: fine */
    warren_cron_free(parse_ok(buf, NULL));
    expect_error("* * * * *\n", WARREN_ECRON, "control character");
    expect_error(NULL, WARREN_ECRON, "missing");
}
END_TEST

START_TEST(test_cron_accepts_tabs_and_surrounding_spaces)
{
    warren_cron *c = parse_ok("  0\t9  * *\tMON ", NULL);
    int64_t n;
    ck_assert_int_eq(warren_cron_next(c, NULL, testenv_at("2026-01-01T00:00:00Z"), &n, NULL, NULL),
                     0);
    char buf[WARREN_TIME_BUF];
    fmt(n, buf);
    ck_assert_str_eq(buf, "2026-01-05T09:00:00Z");
    warren_cron_free(c);
}
END_TEST

START_TEST(test_cron_interval_like_is_the_first_character_of_hour)
{
    static const struct {
        const char *expr;
        int interval;
    } cases[] = {
        {"* * * * *", 1}, {"*/15 * * * *", 1}, {"0 */2 * * *", 1},   {"0 ? * * *", 1},
        {"* 2 * * *", 0}, {"*/15 2 * * *", 0}, {"30 0-23 * * *", 0}, {"0 H * * *", 0},
        {"@hourly", 1},   {"@daily", 0},       {"@weekly", 0},       {"@monthly", 0},
        {"@yearly", 0},   {"0 0 * * * *", 1},  {"0 0 1 * * *", 0},   {"0 1,*/2 * * *", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        warren_cron *c = parse_ok(cases[i].expr, "job");
        ck_assert_msg(warren_cron_interval_like(c) == cases[i].interval, "%s", cases[i].expr);
        warren_cron_free(c);
    }
}
END_TEST

START_TEST(test_cron_vixie_rule_looks_at_the_first_character)
{
    /* 5,*\/3 is restricted (does not start with *): either day field may match. */
    const char *or_rule[] = {"2026-01-04T00:00:00Z", "2026-01-05T00:00:00Z", "2026-01-07T00:00:00Z",
                             "2026-01-10T00:00:00Z", "2026-01-11T00:00:00Z", NULL};
    expect_next("0 0 5,*/3 * SUN", "UTC", "2026-01-01T00:00:00Z", or_rule, NULL);
    /* *\/2 starts with *: both must match (odd days that are Mondays). */
    const char *and_rule[] = {"2026-01-05T00:00:00Z", "2026-01-19T00:00:00Z",
                              "2026-02-09T00:00:00Z", NULL};
    expect_next("0 0 */2 * MON", "UTC", "2026-01-01T00:00:00Z", and_rule, NULL);
}
END_TEST

START_TEST(test_cron_h_is_stable_and_documented)
{
    /* FNV-1a 32-bit of "backup-db" + field byte; values pinned so any change shows. */
    ck_assert_uint_eq(warren_cron_hash("", 0), 0x050c5d1fu);
    uint32_t h = warren_cron_hash("backup-db", 1);
    warren_cron *c = parse_ok("H * * * *", "backup-db");
    int64_t n;
    ck_assert_int_eq(warren_cron_next(c, NULL, testenv_at("2026-01-01T00:00:00Z"), &n, NULL, NULL),
                     0);
    ck_assert_int_eq(n % 3600 / 60, (int64_t)(h % 60));
    warren_cron_free(c);
    /* Different names spread. */
    int seen[60] = {0}, distinct = 0;
    for (int i = 0; i < 200; i++) {
        char name[32];
        snprintf(name, sizeof name, "job-%d", i);
        int v = (int)(warren_cron_hash(name, 1) % 60);
        distinct += !seen[v];
        seen[v] = 1;
    }
    ck_assert_int_ge(distinct, 45);
}
END_TEST

START_TEST(test_cron_never_firing_is_an_error_not_a_hang)
{
    expect_error("0 0 30 2 *", WARREN_ENEVER, "can never fire");
    expect_error("0 0 31 4,6,9,11 *", WARREN_ENEVER, "can never fire");
    expect_error("0 0 30W 2 *", WARREN_ENEVER, "can never fire");
    /* Sparse but possible: found decades ahead, 2100 is not a leap year. */
    const char *feb29[] = {"2096-02-29T00:00:00Z", "2104-02-29T00:00:00Z", NULL};
    expect_next("0 0 29 2 *", "UTC", "2095-01-01T00:00:00Z", feb29, NULL);
    const char *fifth_sunday_feb[] = {"2032-02-29T00:00:00Z", "2060-02-29T00:00:00Z", NULL};
    expect_next("0 0 * 2 SUN#5", "UTC", "2026-01-01T00:00:00Z", fifth_sunday_feb, NULL);
    /* Past year 9999: ENEVER, promptly. */
    warren_cron *c = parse_ok("0 0 29 2 *", NULL);
    int64_t n;
    warren_error err = {0};
    ck_assert_int_eq(warren_cron_next(c, zone("Europe/Berlin"), testenv_at("9996-03-01T00:00:00Z"),
                                      &n, NULL, &err),
                     WARREN_ENEVER);
    warren_cron_free(c);
}
END_TEST

START_TEST(test_cron_from_is_strictly_after_and_may_be_fractional)
{
    const char *a[] = {"2026-01-01T00:01:00Z", NULL};
    expect_next("* * * * *", "UTC", "2026-01-01T00:00:00Z", a, NULL);
    expect_next("* * * * *", "UTC", "2026-01-01T00:00:59.999999Z", a, NULL);
    const char *b[] = {"2026-01-01T00:00:01Z", NULL};
    expect_next("* * * * * *", "UTC", "2026-01-01T00:00:00.000001Z", b, NULL);
    const char *c[] = {"2026-01-01T00:00:00Z", NULL};
    expect_next("* * * * *", "UTC", "2025-12-31T23:59:59.5Z", c, NULL);
    const char *d[] = {"1969-12-31T23:59:00Z", NULL};
    expect_next("* * * * *", "UTC", "1969-12-31T23:58:00.5Z", d, NULL);
}
END_TEST

START_TEST(test_cron_interval_next_is_anchored)
{
    ck_assert_int_eq(warren_interval_next(0, 90, 0), 90);
    ck_assert_int_eq(warren_interval_next(0, 90, 89 * WARREN_US_PER_S + 999999), 90);
    ck_assert_int_eq(warren_interval_next(0, 90, 90 * WARREN_US_PER_S), 180);
    ck_assert_int_eq(warren_interval_next(100, 90, 0), 10);
    ck_assert_int_eq(warren_interval_next(0, 90, -1), 0);
}
END_TEST

/* ---- DST contract -------------------------------------------------------- */

#define G WARREN_FIRE_GAP_SHIFTED
#define O1 WARREN_FIRE_OVERLAP_FIRST
#define O2 WARREN_FIRE_OVERLAP_SECOND

START_TEST(test_cron_dst_new_york_2026)
{
    /* 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z); 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z). */
    const char *gap[] = {"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", NULL};
    const unsigned gapf[] = {G, 0};
    expect_next("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", gap, gapf);
    const char *gap6[] = {"2026-03-08T07:00:00Z", "2026-03-09T06:30:45Z", NULL};
    expect_next("45 30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", gap6, gapf);
    const char *skip[] = {"2026-03-08T06:30:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z",
                          NULL};
    const unsigned skipf[] = {0, 0, 0};
    expect_next("*/30 * * * *", "America/New_York", "2026-03-08T06:00:00Z", skip, skipf);
    const char *over[] = {"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z", NULL};
    const unsigned overf[] = {O1, 0};
    expect_next("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", over, overf);
    const char *both[] = {"2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z",
                          "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z", NULL};
    const unsigned bothf[] = {O1, O1, O2, O2, 0};
    expect_next("*/30 * * * *", "America/New_York", "2026-11-01T04:45:00Z", both, bothf);
    /* "* 1 * * *" starts with a digit: fixed-hour, so the repeated hour runs once. */
    const char *fixed[] = {"2026-11-01T05:59:00Z", "2026-11-02T06:00:00Z", NULL};
    expect_next("* 1 * * *", "America/New_York", "2026-11-01T05:58:30Z", fixed, NULL);
}
END_TEST

START_TEST(test_cron_dst_footer_years_2045_2060)
{
    /* Past 2037 the instants come from the POSIX footer. */
    const char *ny[] = {"2050-03-13T07:00:00Z", "2050-03-14T06:30:00Z", NULL};
    const unsigned nyf[] = {G, 0};
    expect_next("30 2 * * *", "America/New_York", "2050-03-12T12:00:00Z", ny, nyf);
    const char *ber[] = {"2048-03-29T01:00:00Z", "2048-03-30T00:00:00Z", NULL};
    expect_next("0 2 * * *", "Europe/Berlin", "2048-03-28T12:00:00Z", ber, nyf);
    const char *ber2[] = {"2060-10-31T00:30:00Z", "2060-11-01T01:30:00Z", NULL};
    const unsigned ber2f[] = {O1, 0};
    expect_next("30 2 * * *", "Europe/Berlin", "2060-10-30T12:00:00Z", ber2, ber2f);
    const char *dub[] = {"2052-10-27T00:30:00Z", "2052-10-28T01:30:00Z", NULL};
    expect_next("30 1 * * *", "Europe/Dublin", "2052-10-26T12:00:00Z", dub, ber2f);
    const char *lhi[] = {"2046-10-06T15:30:00Z", "2046-10-07T15:15:00Z", NULL};
    expect_next("15 2 * * *", "Australia/Lord_Howe", "2046-10-06T00:00:00Z", lhi, nyf);
    const char *scl[] = {"2050-09-04T04:00:00Z", "2050-09-05T03:00:00Z", NULL};
    expect_next("0 0 * * *", "America/Santiago", "2050-09-03T12:00:00Z", scl, nyf);
    const char *hav[] = {"2049-03-14T05:00:00Z", "2049-03-15T04:30:00Z", NULL};
    expect_next("30 0 * * *", "America/Havana", "2049-03-13T12:00:00Z", hav, nyf);
    const char *cht[] = {"2053-09-27T14:00:00Z", "2053-09-28T13:15:00Z", NULL};
    expect_next("0 3 * * *", "Pacific/Chatham", "2053-09-27T00:00:00Z", cht, nyf);
    const char *ktm[] = {"2055-06-01T03:15:00Z", NULL};
    expect_next("0 9 * * *", "Asia/Kathmandu", "2055-06-01T00:00:00Z", ktm, NULL);
}
END_TEST

START_TEST(test_cron_dst_half_hour_lord_howe_2026)
{
    /* 2026-10-04 02:00 +1030 -> 02:30 +11 (15:30Z Oct 3); 2026-04-05 02:00 +11 -> 01:30 +1030. */
    const char *gap[] = {"2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z", NULL};
    const unsigned gapf[] = {G, 0};
    expect_next("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z", gap, gapf);
    const char *over[] = {"2026-04-04T14:15:00Z", "2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z",
                          "2026-04-04T15:00:00Z", "2026-04-04T15:15:00Z", NULL};
    const unsigned overf[] = {0, O1, O1, O2, O2};
    expect_next("*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T14:00:00Z", over, overf);
}
END_TEST

START_TEST(test_cron_dst_midnight_transitions_santiago_havana_2026)
{
    /* Santiago: 2026-09-06 00:00 -04 -> 01:00 -03; 2026-04-05 00:00 -03 -> 23:00 -04. */
    const char *scl[] = {"2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z", NULL};
    const unsigned g[] = {G, 0};
    expect_next("0 0 * * *", "America/Santiago", "2026-09-05T12:00:00Z", scl, g);
    const char *scl2[] = {"2026-04-05T02:30:00Z", "2026-04-06T03:30:00Z", NULL};
    const unsigned o[] = {O1, 0};
    expect_next("30 23 * * *", "America/Santiago", "2026-04-04T12:00:00Z", scl2, o);
    /* Midnight-anchored daily job on the skipped midnight's date: day still fires once. */
    const char *hav[] = {"2026-03-08T05:00:00Z", "2026-03-09T04:30:00Z", NULL};
    expect_next("30 0 * * *", "America/Havana", "2026-03-07T12:00:00Z", hav, g);
    /* tzdata 2026f keeps Cuba on CDT through November 2026; it falls back 2027-11-07. */
    const char *hav2[] = {"2026-11-01T04:30:00Z", "2026-11-02T04:30:00Z", NULL};
    const unsigned none[] = {0, 0};
    expect_next("30 0 * * *", "America/Havana", "2026-10-31T12:00:00Z", hav2, none);
    const char *hav3[] = {"2027-11-07T04:30:00Z", "2027-11-08T05:30:00Z", NULL};
    expect_next("30 0 * * *", "America/Havana", "2027-11-06T12:00:00Z", hav3, o);
}
END_TEST

START_TEST(test_cron_dst_negative_dublin_and_odd_offsets_2026)
{
    /* Dublin's winter time is the "DST" (negative save) in the TZif data; rules are by offset. */
    const char *dub[] = {"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z", NULL};
    const unsigned g[] = {G, 0};
    expect_next("0 1 * * *", "Europe/Dublin", "2026-03-28T12:00:00Z", dub, g);
    const char *dub2[] = {"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", NULL};
    const unsigned o[] = {O1, 0};
    expect_next("30 1 * * *", "Europe/Dublin", "2026-10-24T12:00:00Z", dub2, o);
    const char *ktm[] = {"2026-01-01T03:15:00Z", "2026-01-02T03:15:00Z", NULL};
    expect_next("0 9 * * *", "Asia/Kathmandu", "2026-01-01T00:00:00Z", ktm, NULL);
    /* Chatham +1245/+1345: 2026-09-27 02:45 -> 03:45; 2026-04-05 03:45 -> 02:45. */
    const char *cht[] = {"2026-09-26T14:00:00Z", "2026-09-27T13:15:00Z", NULL};
    expect_next("0 3 * * *", "Pacific/Chatham", "2026-09-26T00:00:00Z", cht, g);
    const char *cht2[] = {"2026-04-04T13:15:00Z", "2026-04-05T14:15:00Z", NULL};
    expect_next("0 3 * * *", "Pacific/Chatham", "2026-04-04T00:00:00Z", cht2, o);
}
END_TEST

START_TEST(test_cron_dst_abolished_zones_have_no_shift)
{
    const char *sao[] = {"2026-11-01T05:30:00Z", "2026-11-02T05:30:00Z", NULL};
    const unsigned none[] = {0, 0};
    expect_next("30 2 * * *", "America/Sao_Paulo", "2026-10-31T12:00:00Z", sao, none);
    const char *msk[] = {"2026-03-28T23:30:00Z", "2026-03-29T23:30:00Z", NULL};
    expect_next("30 2 * * *", "Europe/Moscow", "2026-03-28T00:00:00Z", msk, none);
    const char *ist[] = {"2050-03-26T23:30:00Z", "2050-03-27T23:30:00Z", NULL};
    expect_next("30 2 * * *", "Europe/Istanbul", "2050-03-26T00:00:00Z", ist, none);
    /* Apia dropped DST in 2021: its old last-Sunday-of-September change is gone. */
    const char *apia[] = {"2026-09-26T13:30:00Z", "2026-09-27T13:30:00Z", NULL};
    expect_next("30 2 * * *", "Pacific/Apia", "2026-09-26T00:00:00Z", apia, none);
    const char *apia2[] = {"2050-04-02T13:30:00Z", "2050-04-03T13:30:00Z", NULL};
    expect_next("30 2 * * *", "Pacific/Apia", "2050-04-02T00:00:00Z", apia2, none);
    const char *sao2[] = {"2055-11-01T03:00:00Z", NULL};
    expect_next("0 0 * * *", "America/Sao_Paulo", "2055-11-01T00:00:00Z", sao2, none);
}
END_TEST

START_TEST(test_cron_dst_apia_skipped_day_2011)
{
    /* 2011-12-29 24:00 -10 -> 2011-12-31 00:00 +14 at 10:00Z: every fixed-hour time of the
     * 30th fires once, at the transition. */
    const char *d[] = {"2011-12-29T19:00:00Z", "2011-12-30T03:00:00Z", "2011-12-30T10:00:00Z",
                       "2011-12-30T19:00:00Z", "2011-12-31T03:00:00Z", NULL};
    const unsigned f[] = {0, 0, G, 0, 0};
    expect_next("0 9,17 * * *", "Pacific/Apia", "2011-12-29T12:00:00Z", d, f);
    const char *date[] = {"2011-12-30T10:00:00Z", "2012-12-29T10:00:00Z", NULL};
    expect_next("0 0 30 12 *", "Pacific/Apia", "2011-12-01T00:00:00Z", date, NULL);
    /* Interval-like: the hours of the 30th are skipped. */
    const char *hourly[] = {"2011-12-30T09:00:00Z", "2011-12-30T10:00:00Z", "2011-12-30T11:00:00Z",
                            NULL};
    expect_next("0 * * * *", "Pacific/Apia", "2011-12-30T08:30:00Z", hourly, NULL);
}
END_TEST

/* ---- property test --------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

#define PICK(arr) (arr[testenv_xorshift(&rng_state) % (sizeof arr / sizeof arr[0])])

static int32_t off_at(const warren_tz *tz, int64_t t)
{
    int32_t o;
    warren_tz_lookup(tz, t, &o, NULL, NULL);
    return o;
}

/* Fire instants in (from, end] by stepping every UTC second and applying the
 * contract literally; independent of the span walk in cron.c. */
static int brute(const warren_cron *c, const warren_tz *tz, int64_t from, int64_t end, int64_t *out,
                 int cap)
{
    int n = 0, fixed = !warren_cron_interval_like(c);
    int64_t maxlocal = INT64_MIN;
    for (int64_t u = from - 2 * 86400; u <= from; u++) {
        int64_t l = u + off_at(tz, u);
        if (l > maxlocal)
            maxlocal = l;
    }
    int32_t prev = off_at(tz, from);
    for (int64_t u = from + 1; u <= end; u++) {
        int32_t o = off_at(tz, u);
        int64_t l = u + o;
        int fire = 0;
        if (o > prev && fixed) {
            /* Gap: local times [u-1+prev+1, u+o) were skipped. */
            for (int64_t w = u + prev; w < u + o && !fire; w++)
                fire = warren_cron_matches(c, w);
        }
        if (!fire && warren_cron_matches(c, l))
            fire = !(fixed && l <= maxlocal);
        if (fire && n < cap)
            out[n++] = u;
        if (l > maxlocal)
            maxlocal = l;
        prev = o;
    }
    return n;
}

START_TEST(test_cron_property_random_expressions_match_brute_force)
{
    static const char *const secs[] = {"0", "0", "0", "*/20", "15,45", "59"};
    static const char *const mins[] = {"*", "*/7", "0",  "5,35", "10-20/5",
                                       "H", "59",  "30", "0",    "*/15"};
    static const char *const hours[] = {"*",      "*/3", "2", "1-3", "0,12", "23",
                                        "H(1-3)", "*/2", "0", "2-3", "1"};
    static const char *const doms[] = {"*", "*", "*", "1-15", "L", "15W", "?", "*/2", "1W"};
    static const char *const mons[] = {"*", "*", "*", "*/2", "3,10", "MAR-NOV"};
    static const char *const dows[] = {"*", "*", "*", "MON-FRI", "0", "5L", "1#2", "SAT,SUN", "?"};
    static const char *const zones[] = {"America/New_York",
                                        "Europe/Berlin",
                                        "Australia/Lord_Howe",
                                        "America/Santiago",
                                        "America/Havana",
                                        "Europe/Dublin",
                                        "Asia/Kathmandu",
                                        "Pacific/Chatham",
                                        "Pacific/Apia",
                                        "America/Sao_Paulo",
                                        "UTC",
                                        "Asia/Tehran",
                                        "Europe/London",
                                        "America/St_Johns",
                                        "Antarctica/Troll",
                                        "America/Nuuk"};
    int64_t *exp = malloc(sizeof(int64_t) * 300000);
    int cases = 0, compared = 0;
    ck_assert_ptr_nonnull(exp);
    /* WARREN_CRON_PROPERTY_ITER=N runs more cases (default 120, ~5 s). */
    const char *env = getenv("WARREN_CRON_PROPERTY_ITER");
    long want = env ? strtol(env, NULL, 10) : 0;
    int iters = want > 120 && want <= 1000000 ? (int)want : 120;
    for (int iter = 0; iter < iters; iter++) {
        char expr[128];
        if (testenv_xorshift(&rng_state) % 4 == 0)
            snprintf(expr, sizeof expr, "%s %s %s %s %s %s", PICK(secs), PICK(mins), PICK(hours),
                     PICK(doms), PICK(mons), PICK(dows));
        else
            snprintf(expr, sizeof expr, "%s %s %s %s %s", PICK(mins), PICK(hours), PICK(doms),
                     PICK(mons), PICK(dows));
        warren_cron *c = NULL;
        if (warren_cron_parse(expr, "prop-job", &c, NULL) != 0)
            continue;
        const char *zn = PICK(zones);
        const warren_tz *tz = zone(zn);
        /* Half the windows straddle a transition. */
        int64_t from =
            (int64_t)(testenv_xorshift(&rng_state) % (UINT64_C(4102444800))); /* 1970..2100 */
        if (testenv_xorshift(&rng_state) % 2) {
            warren_tz_span sp;
            warren_tz_span_at(tz, from, &sp);
            if (sp.end != INT64_MAX)
                from = sp.end - 86400 + (int64_t)(testenv_xorshift(&rng_state) % 86400);
        }
        if (strcmp(zn, "Pacific/Apia") == 0 && testenv_xorshift(&rng_state) % 2)
            from = 1325196000 -
                   (int64_t)(testenv_xorshift(&rng_state) % 86400); /* around the skipped day */
        int64_t end = from + 3 * 86400;
        int n = brute(c, tz, from, end, exp, 300000);
        int64_t t = from, got;
        int i = 0;
        for (;;) {
            warren_error err = {0};
            int rc = warren_cron_next(c, tz, t * WARREN_US_PER_S, &got, NULL, &err);
            ck_assert_msg(rc == 0, "%s in %s: %s", expr, zn, err.message);
            if (got > end)
                break;
            ck_assert_msg(i < n && exp[i] == got,
                          "\"%s\" in %s from %" PRId64 ": result %d is %" PRId64
                          ", brute force says %" PRId64,
                          expr, zn, from, i, got, i < n ? exp[i] : -1);
            i++;
            t = got;
        }
        ck_assert_msg(i == n, "\"%s\" in %s from %" PRId64 ": next skipped %" PRId64, expr, zn,
                      from, exp[i < n ? i : 0]);
        compared += n;
        cases++;
        warren_cron_free(c);
    }
    free(exp);
    ck_assert_int_ge(cases, 100);
    ck_assert_int_ge(compared, 1000);
}
END_TEST

/* ---- the command ------------------------------------------------------------ */

typedef struct run_result {
    int status;
    char out[8192], err[4096];
} run_result;

/* Runs `warren cron ARGS` (ARGS already shell-quoted). */
static void run_cli(const char *args, run_result *r)
{
    char *cmd = testenv_fmt("%s cron %s", WARREN_BINARY, args);
    r->status = testenv_run_split(cmd, r->out, sizeof r->out, r->err, sizeof r->err);
    ck_assert_int_ge(r->status, 0);
    free(cmd);
}

START_TEST(test_cron_cli_prints_instants_one_a_line)
{
    run_result r;
    run_cli("next --tz America/New_York --from 2026-03-07T12:00:00.5-05:00 --count 3 '30 2 * * *'",
            &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "2026-03-08T07:00:00Z\n2026-03-09T06:30:00Z\n2026-03-10T06:30:00Z\n");
    ck_assert_str_eq(r.err, "");
    run_cli("next --from=2026-01-01T00:00:00Z --job backup-db 'H H * * *'", &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "2026-01-01T10:47:00Z\n");
    /* Unquoted fields are joined. */
    run_cli("next --from 2026-01-01T00:00:00Z 0 9 1 1 '?'", &r);
    ck_assert_str_eq(r.out, "2026-01-01T09:00:00Z\n");
    /* Default from is now: the instant is in the future. */
    run_cli("next '* * * * *'", &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_int_eq((int)strlen(r.out), 21);
}
END_TEST

START_TEST(test_cron_cli_local_explains_dst_moves)
{
    run_result r;
    run_cli("next --local --tz America/New_York --from 2026-03-07T12:00:00Z --count 2 "
            "'30 2 * * *'",
            &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "2026-03-08T07:00:00Z  2026-03-08T03:00:00-04:00 EDT  (DST gap") ==
                      r.out,
                  "%s", r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "\n2026-03-09T06:30:00Z  2026-03-09T02:30:00-04:00 EDT\n"));
    run_cli("next --local --tz America/New_York --from 2026-11-01T05:45:00Z '*/30 * * * *'", &r);
    ck_assert_ptr_nonnull(strstr(r.out, "-05:00 EST  (DST overlap"));
    ck_assert_ptr_nonnull(strstr(r.out, "second"));
    run_cli("next --local --tz Asia/Kathmandu --from 2026-01-01T00:00:00Z '0 9 * * *'", &r);
    ck_assert_str_eq(r.out, "2026-01-01T03:15:00Z  2026-01-01T09:00:00+05:45 +0545\n");
}
END_TEST

START_TEST(test_cron_cli_errors_exit_2_with_nothing_on_stdout)
{
    static const struct {
        const char *args, *msg;
    } cases[] = {
        {"next '0 25 * * *'", "field 2 (hour): \"25\" is out of range 0-23"},
        {"next '0 0 30 2 *'", "can never fire"},
        {"next --tz Mars/Olympus '* * * * *'", "unknown time zone \"Mars/Olympus\""},
        {"next --tz /etc/localtime '* * * * *'", "absolute path"},
        {"next --tz 'Europe/Berlin ' '* * * * *'", "trailing spaces"},
        {"next --tz 'CET-1CEST,M3.5.0,M10.5.0/3' '* * * * *'", "POSIX TZ string"},
        {"next --from yesterday '* * * * *'", "--from"},
        {"next --count 0 '* * * * *'", "--count"},
        {"next --count 1x '* * * * *'", "--count"},
        {"next --tz", "needs a value"},
        {"next --bogus '* * * * *'", "unknown option"},
        {"next", "missing cron expression"},
        {"next 'H * * * *'", "needs a job name"},
        {"later '* * * * *'", "unknown subcommand"},
        {"next --from 9999-12-31T00:00:00Z --count 2 '0 0 1 1 *'", "before year 10000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r;
        run_cli(cases[i].args, &r);
        ck_assert_msg(r.status == 2, "%s: exit %d", cases[i].args, r.status);
        ck_assert_msg(r.out[0] == '\0', "%s: stdout \"%s\"", cases[i].args, r.out);
        ck_assert_msg(strstr(r.err, cases[i].msg) != NULL, "%s: stderr \"%s\" lacks \"%s\"",
                      cases[i].args, r.err, cases[i].msg);
    }
    run_result r;
    run_cli("next --help", &r);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: warren cron next"));
}
END_TEST

static Suite *cron_suite(void)
{
    Suite *s = suite_create("cron");
    TCase *tc = tcase_create("data");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_cron_valid_cases_fire_at_expected_instants);
    tcase_add_test(tc, test_cron_invalid_cases_are_rejected_with_their_message);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_cron_rejects_hour_24);
    tcase_add_test(tc, test_cron_rejects_values_that_wrap_c_integers);
    tcase_add_test(tc, test_cron_rejects_long_input_and_control_characters);
    tcase_add_test(tc, test_cron_accepts_tabs_and_surrounding_spaces);
    tcase_add_test(tc, test_cron_interval_like_is_the_first_character_of_hour);
    tcase_add_test(tc, test_cron_vixie_rule_looks_at_the_first_character);
    tcase_add_test(tc, test_cron_h_is_stable_and_documented);
    suite_add_tcase(s, tc);

    tc = tcase_create("next");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_cron_never_firing_is_an_error_not_a_hang);
    tcase_add_test(tc, test_cron_from_is_strictly_after_and_may_be_fractional);
    tcase_add_test(tc, test_cron_interval_next_is_anchored);
    suite_add_tcase(s, tc);

    tc = tcase_create("dst");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_cron_dst_new_york_2026);
    tcase_add_test(tc, test_cron_dst_footer_years_2045_2060);
    tcase_add_test(tc, test_cron_dst_half_hour_lord_howe_2026);
    tcase_add_test(tc, test_cron_dst_midnight_transitions_santiago_havana_2026);
    tcase_add_test(tc, test_cron_dst_negative_dublin_and_odd_offsets_2026);
    tcase_add_test(tc, test_cron_dst_abolished_zones_have_no_shift);
    tcase_add_test(tc, test_cron_dst_apia_skipped_day_2011);
    suite_add_tcase(s, tc);

    tc = tcase_create("cli");
    tcase_add_test(tc, test_cron_cli_prints_instants_one_a_line);
    tcase_add_test(tc, test_cron_cli_local_explains_dst_moves);
    tcase_add_test(tc, test_cron_cli_errors_exit_2_with_nothing_on_stdout);
    suite_add_tcase(s, tc);

    tc = tcase_create("property");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_cron_property_random_expressions_match_brute_force);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    tzpin_require(); /* every expected instant here is a fact of the pinned release */
    SRunner *sr = srunner_create(cron_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
