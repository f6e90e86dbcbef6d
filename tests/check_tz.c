/* check_tz.c: the TZif reader, its POSIX footer rules, zone-name validation
 * and the per-database cache (no server needed; check_tz_oracle.c compares
 * with PostgreSQL). */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <warren/timefmt.h>
#include <warren/tz.h>

#include "tzpin.h"
#include "testenv.h"

static int64_t sec(const char *text)
{
    return testenv_at(text) / WARREN_US_PER_S;
}

static void expect_zone(const warren_tz *tz, const char *when, int32_t off, const char *abbr)
{
    int32_t o;
    const char *a;
    warren_tz_lookup(tz, sec(when), &o, NULL, &a);
    ck_assert_msg(o == off && strcmp(a, abbr) == 0, "%s at %s: %d %s, want %d %s",
                  warren_tz_name(tz), when, o, a, off, abbr);
}

/* ---- real zones ------------------------------------------------------------ */

START_TEST(test_tz_berlin_listed_and_footer_years)
{
    warren_tzdb *db = warren_tzdb_new(NULL);
    const warren_tz *tz;
    ck_assert_int_eq(warren_tzdb_get(db, "Europe/Berlin", &tz, NULL), 0);
    ck_assert_str_eq(warren_tz_name(tz), "Europe/Berlin");
    expect_zone(tz, "2026-03-29T00:59:59Z", 3600, "CET");
    expect_zone(tz, "2026-03-29T01:00:00Z", 7200, "CEST");
    expect_zone(tz, "2026-10-25T00:59:59Z", 7200, "CEST");
    expect_zone(tz, "2026-10-25T01:00:00Z", 3600, "CET");
    /* 2055: past the last listed transition (2037), from "CET-1CEST,M3.5.0,M10.5.0/3". */
    expect_zone(tz, "2055-03-28T00:59:59Z", 3600, "CET");
    expect_zone(tz, "2055-03-28T01:00:00Z", 7200, "CEST");
    expect_zone(tz, "2055-10-31T00:59:59Z", 7200, "CEST");
    expect_zone(tz, "2055-10-31T01:00:00Z", 3600, "CET");
    expect_zone(tz, "1890-01-01T00:00:00Z", 3208, "LMT");
    warren_tz_span sp;
    warren_tz_span_at(tz, sec("2055-06-01T00:00:00Z"), &sp);
    ck_assert_int_eq(sp.start, sec("2055-03-28T01:00:00Z"));
    ck_assert_int_eq(sp.end, sec("2055-10-31T01:00:00Z"));
    ck_assert_int_eq(sp.offset, 7200);
    ck_assert_int_eq(sp.prev_offset, 3600);
    ck_assert_int_eq(sp.next_offset, 3600);
    ck_assert_uint_gt(warren_tz_memory(tz), 100);
    ck_assert_uint_lt(warren_tz_memory(tz), 16384);
    warren_tzdb_free(db);
}
END_TEST

START_TEST(test_tz_named_zones_have_their_rules)
{
    warren_tzdb *db = warren_tzdb_new(NULL);
    const warren_tz *tz;
    ck_assert_int_eq(warren_tzdb_get(db, "Europe/Dublin", &tz, NULL), 0);
    int dst;
    warren_tz_lookup(tz, sec("2026-01-15T00:00:00Z"), NULL, &dst, NULL);
    ck_assert_int_eq(dst, 1); /* negative DST: GMT in winter is the "DST" */
    expect_zone(tz, "2026-01-15T00:00:00Z", 0, "GMT");
    expect_zone(tz, "2050-07-01T00:00:00Z", 3600, "IST");
    ck_assert_int_eq(warren_tzdb_get(db, "Australia/Lord_Howe", &tz, NULL), 0);
    expect_zone(tz, "2026-01-01T00:00:00Z", 39600, "+11");
    expect_zone(tz, "2050-07-01T00:00:00Z", 37800, "+1030");
    ck_assert_int_eq(warren_tzdb_get(db, "Asia/Kathmandu", &tz, NULL), 0);
    expect_zone(tz, "2060-01-01T00:00:00Z", 20700, "+0545");
    ck_assert_int_eq(warren_tzdb_get(db, "Pacific/Chatham", &tz, NULL), 0);
    expect_zone(tz, "2026-01-01T00:00:00Z", 49500, "+1345");
    ck_assert_int_eq(warren_tzdb_get(db, "Pacific/Apia", &tz, NULL), 0);
    expect_zone(tz, "2011-12-30T09:59:59Z", -36000, "-10");
    expect_zone(tz, "2011-12-30T10:00:00Z", 50400, "+14");
    ck_assert_int_eq(warren_tzdb_get(db, "Asia/Jerusalem", &tz, NULL), 0);
    /* Footer "IST-2IDT,M3.4.4/26,M10.5.0": a transition time past 24h. */
    expect_zone(tz, "2050-03-24T23:59:59Z", 7200, "IST");
    expect_zone(tz, "2050-03-25T00:00:00Z", 10800, "IDT");
    ck_assert_int_eq(warren_tzdb_get(db, "America/Nuuk", &tz, NULL), 0);
    /* Footer "<-02>2<-01>,M3.5.0/-1,M10.5.0/0": a negative transition time. */
    expect_zone(tz, "2050-03-27T00:59:59Z", -7200, "-02");
    expect_zone(tz, "2050-03-27T01:00:00Z", -3600, "-01");
    ck_assert_int_eq(warren_tzdb_get(db, "UTC", &tz, NULL), 0);
    expect_zone(tz, "2026-06-01T00:00:00Z", 0, "UTC");
    ck_assert_int_eq(warren_tzdb_get(db, "EST5EDT", &tz, NULL), 0);
    ck_assert_int_eq(warren_tzdb_get(db, "Etc/GMT+5", &tz, NULL), 0);
    expect_zone(tz, "2026-06-01T00:00:00Z", -18000, "-05");
    warren_tzdb_free(db);
}
END_TEST

START_TEST(test_tz_zones_are_parsed_once_and_cached)
{
    warren_tzdb *db = warren_tzdb_new(NULL);
    const warren_tz *a, *b;
    ck_assert_int_eq(warren_tzdb_get(db, "America/New_York", &a, NULL), 0);
    ck_assert_int_eq(warren_tzdb_get(db, "America/New_York", &b, NULL), 0);
    ck_assert_ptr_eq(a, b);
    ck_assert_uint_eq(warren_tzdb_count(db), 1);
    /* Many zones: the table grows, earlier pointers stay valid. */
    static const char *const more[] = {
        "Europe/Berlin", "Asia/Tokyo",   "UTC",           "Africa/Abidjan", "America/Santiago",
        "Pacific/Apia",  "Asia/Kolkata", "Europe/London", "America/Havana", "Australia/Sydney"};
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            ck_assert_int_eq(warren_tzdb_get(db, more[i], &b, NULL), 0);
    ck_assert_uint_eq(warren_tzdb_count(db), 11);
    ck_assert_int_eq(warren_tzdb_get(db, "America/New_York", &b, NULL), 0);
    ck_assert_ptr_eq(a, b);
    warren_tzdb_free(db);
    warren_tzdb_free(NULL);
}
END_TEST

/* ---- names ------------------------------------------------------------------ */

static void expect_bad_name(warren_tzdb *db, const char *name, const char *substr)
{
    const warren_tz *tz = NULL;
    warren_error err = {0};
    ck_assert_int_eq(warren_tzdb_get(db, name, &tz, &err), WARREN_ETZ);
    ck_assert_msg(strstr(err.message, substr) != NULL, "\"%s\": \"%s\" lacks \"%s\"",
                  name ? name : "(null)", err.message, substr);
}

START_TEST(test_tz_rejects_names_that_are_not_iana_zones)
{
    warren_tzdb *db = warren_tzdb_new(NULL);
    expect_bad_name(db, "/usr/share/zoneinfo/UTC", "absolute path");
    expect_bad_name(db, "/etc/localtime", "absolute path");
    expect_bad_name(db, "../zoneinfo/UTC", "\"..\"");
    expect_bad_name(db, "Europe/../Europe/Berlin", "\"..\"");
    expect_bad_name(db, "./UTC", "\"..\"");
    expect_bad_name(db, "Europe//Berlin", "empty");
    expect_bad_name(db, "zone.tab", "unknown time zone \"zone.tab\"");
    expect_bad_name(db, "zone1970.tab", "unknown time zone");
    expect_bad_name(db, "tzdata.zi", "unknown time zone");
    expect_bad_name(db, "leapseconds", "unknown time zone");
    expect_bad_name(db, "leap-seconds.list", "unknown time zone");
    expect_bad_name(db, "posixrules", "unknown time zone");
    expect_bad_name(db, "localtime", "unknown time zone");
    expect_bad_name(db, "iso3166.tab", "unknown time zone");
    expect_bad_name(db, "right/UTC", "unknown time zone");
    expect_bad_name(db, "posix/Europe/Berlin", "unknown time zone");
    expect_bad_name(db, "Europe", "unknown time zone");
    expect_bad_name(db, "Europe/", "ends with");
    expect_bad_name(db, "CET-1CEST,M3.5.0,M10.5.0/3", "POSIX TZ string");
    expect_bad_name(db, "<+03>-3", "POSIX TZ string");
    expect_bad_name(db, "EST5EDT,M3.2.0,M11.1.0", "POSIX TZ string");
    expect_bad_name(db, "CET-1CEST", "unknown time zone");
    expect_bad_name(db, "UTC0", "unknown time zone");
    expect_bad_name(db, "Europe/Berlin ", "trailing spaces");
    expect_bad_name(db, " Europe/Berlin", "leading or trailing");
    expect_bad_name(db, "Europe/Berlin\t", "leading or trailing");
    expect_bad_name(db, "europe/berlin", "unknown time zone");
    expect_bad_name(db, "Europe/Berlín", "invalid character");
    expect_bad_name(db, "Europe/Berlin\n", "invalid character");
    expect_bad_name(db, "", "empty");
    expect_bad_name(db, NULL, "missing");
    ck_assert_uint_eq(warren_tzdb_count(db), 0);
    warren_tzdb_free(db);
}
END_TEST

START_TEST(test_tz_directory_without_tzdata_zi_checks_magic)
{
    char dir[] = "/tmp/warren-tz-XXXXXX";
    char path[512], zpath[1024];
    size_t len;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    unsigned char *berlin =
        (unsigned char *)testenv_read_file(tzpin_path(zpath, sizeof zpath, "Europe/Berlin"), &len);
    snprintf(path, sizeof path, "%s/Europe", dir);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/Europe/Berlin", dir);
    testenv_write_bytes(path, berlin, len, 0644);
    snprintf(path, sizeof path, "%s/notes", dir);
    testenv_write_bytes(path, "this is not a zone file, just some text here to pass size", 57,
                        0644);
    snprintf(path, sizeof path, "%s/zone.tab", dir);
    testenv_write_bytes(path, berlin, len, 0644);

    warren_tzdb *db = warren_tzdb_new(dir);
    const warren_tz *tz;
    warren_error err = {0};
    ck_assert_int_eq(warren_tzdb_get(db, "Europe/Berlin", &tz, &err), 0);
    expect_zone(tz, "2026-07-01T00:00:00Z", 7200, "CEST");
    expect_bad_name(db, "notes", "no TZif magic");
    expect_bad_name(db, "Europe", "not a zone file");
    expect_bad_name(db, "zone.tab", "unknown time zone");
    expect_bad_name(db, "Asia/Tokyo", "unknown time zone");
    warren_tzdb_free(db);

    /* $TZDIR is honoured when dir is NULL. */
    setenv("TZDIR", dir, 1);
    db = warren_tzdb_new(NULL);
    ck_assert_int_eq(warren_tzdb_get(db, "Europe/Berlin", &tz, NULL), 0);
    expect_bad_name(db, "UTC", "unknown time zone");
    warren_tzdb_free(db);
    unsetenv("TZDIR");
    free(berlin);
}
END_TEST

/* ---- TZif parsing ------------------------------------------------------------ */

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A v2 TZif with no transitions, one type (off, abbr) and footer, in buf
 * (TZIF_BUF bytes). */
#define TZIF_BUF 512
static size_t build_tzif(unsigned char *buf, int32_t off, const char *abbr, const char *footer)
{
    size_t n = 0, al = strlen(abbr) + 1;
    for (int block = 0; block < 2; block++) {
        memset(buf + n, 0, 44);
        memcpy(buf + n, "TZif2", 5);
        put32(buf + n + 36, 1);            /* typecnt */
        put32(buf + n + 40, (uint32_t)al); /* charcnt */
        n += 44;
        put32(buf + n, (uint32_t)off);
        buf[n + 4] = 0;
        buf[n + 5] = 0;
        n += 6;
        memcpy(buf + n, abbr, al);
        n += al;
    }
    int w = snprintf((char *)buf + n, TZIF_BUF - n, "\n%s\n", footer);
    ck_assert(w > 0 && (size_t)w < TZIF_BUF - n);
    return n + (size_t)w;
}

static warren_tz *synthetic(const char *footer)
{
    unsigned char buf[TZIF_BUF];
    warren_tz *tz = NULL;
    warren_error err = {0};
    size_t n = build_tzif(buf, 0, "XXX", footer);
    ck_assert_msg(warren_tz_parse_tzif(footer, buf, n, &tz, &err) == 0, "%s: %s", footer,
                  err.message);
    return tz;
}

START_TEST(test_tz_footer_rule_forms)
{
    /* Jn: day n of 365 (Feb 29 never counted); time past 24h. */
    warren_tz *tz = synthetic("AAA3BBB,J60/0,J300/25");
    expect_zone(tz, "2048-03-01T02:59:59Z", -10800, "AAA");
    expect_zone(tz, "2048-03-01T03:00:00Z", -7200, "BBB");
    expect_zone(tz, "2050-10-28T02:59:59Z", -7200, "BBB");
    expect_zone(tz, "2050-10-28T03:00:00Z", -10800, "AAA");
    warren_tz_free(tz);
    /* n: zero-based day counting Feb 29 (day 59 is Feb 29 in leap years). */
    tz = synthetic("<+01>-1<+02>,59/1,300");
    expect_zone(tz, "2048-02-29T00:00:00Z", 7200, "+02");
    expect_zone(tz, "2048-02-28T23:59:59Z", 3600, "+01");
    expect_zone(tz, "2049-03-01T00:00:00Z", 7200, "+02");
    warren_tz_free(tz);
    /* Southern hemisphere: DST across the new year. */
    tz = synthetic("<-03>3<-02>,M10.1.0/0,M2.3.0/0");
    expect_zone(tz, "2050-01-01T00:00:00Z", -7200, "-02");
    expect_zone(tz, "2050-06-01T00:00:00Z", -10800, "-03");
    warren_tz_free(tz);
    /* Permanent DST idiom: all year on the DST side. */
    tz = synthetic("EST5EDT,0/0,J365/25");
    expect_zone(tz, "2050-01-01T04:59:59Z", -14400, "EDT");
    expect_zone(tz, "2050-01-01T05:00:00Z", -14400, "EDT");
    expect_zone(tz, "2050-07-01T00:00:00Z", -14400, "EDT");
    warren_tz_free(tz);
    /* No rule: the US default M3.2.0,M11.1.0. */
    tz = synthetic("EST5EDT");
    expect_zone(tz, "2050-03-13T06:59:59Z", -18000, "EST");
    expect_zone(tz, "2050-03-13T07:00:00Z", -14400, "EDT");
    warren_tz_free(tz);
    /* Offsets with minutes and seconds, no DST. */
    tz = synthetic("<+0545>-5:45");
    expect_zone(tz, "2050-03-13T07:00:00Z", 20700, "+0545");
    warren_tz_free(tz);
    tz = synthetic("LMT-0:53:28");
    expect_zone(tz, "2050-03-13T07:00:00Z", 3208, "LMT");
    warren_tz_free(tz);
    /* An empty footer: the last type stays in force. */
    tz = synthetic("");
    expect_zone(tz, "2050-03-13T07:00:00Z", 0, "XXX");
    warren_tz_free(tz);
}
END_TEST

START_TEST(test_tz_rejects_malformed_footers)
{
    static const char *const bad[] = {
        "AB3",
        "<+03-3",
        "CET-1CEST,M3.5.0",
        "CET-1CEST,M13.5.0,M10.5.0",
        "CET-1CEST,M3.6.0,M10.5.0",
        "CET-1CEST,M3.5.7,M10.5.0",
        "CET-1CEST,J0,J100",
        "CET-1CEST,366,J100",
        "CET25",
        "CET-1CEST,M3.5.0/168,M10.5.0",
        "CET-1 ",
        "<>0",
        "CET-1CEST,M3.5.0,M10.5.0,",
        "ABCDEFGHIJKLMNOPQRSTU1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char buf[TZIF_BUF];
        warren_tz *tz = NULL;
        warren_error err = {0};
        size_t n = build_tzif(buf, 0, "XXX", bad[i]);
        ck_assert_msg(warren_tz_parse_tzif("x", buf, n, &tz, &err) == WARREN_ETZ, "%s", bad[i]);
        ck_assert_ptr_null(tz);
        ck_assert_ptr_nonnull(strstr(err.message, "time zone \"x\""));
    }
}
END_TEST

START_TEST(test_tz_version1_file_and_every_truncation)
{
    char zpath[1024];
    size_t len;
    unsigned char *b = (unsigned char *)testenv_read_file(
        tzpin_path(zpath, sizeof zpath, "America/New_York"), &len);
    warren_tz *tz = NULL;
    ck_assert_int_eq(warren_tz_parse_tzif("ny", b, len, &tz, NULL), 0);
    int32_t full_off;
    warren_tz_lookup(tz, sec("2030-07-01T00:00:00Z"), &full_off, NULL, NULL);
    ck_assert_int_eq(full_off, -14400);
    warren_tz_free(tz);

    /* The v1 block alone, labelled version 1: 32-bit data, no footer. */
    uint32_t cnt[6];
    for (int i = 0; i < 6; i++)
        cnt[i] = (uint32_t)b[20 + 4 * i] << 24 | (uint32_t)b[21 + 4 * i] << 16 |
                 (uint32_t)b[22 + 4 * i] << 8 | b[23 + 4 * i];
    size_t v1 = 44 + cnt[3] * 5 + cnt[4] * 6 + cnt[5] + cnt[2] * 8 + cnt[1] + cnt[0];
    unsigned char *one = malloc(v1);
    memcpy(one, b, v1);
    one[4] = 0;
    ck_assert_int_eq(warren_tz_parse_tzif("ny1", one, v1, &tz, NULL), 0);
    int32_t off;
    const char *abbr;
    warren_tz_lookup(tz, sec("2030-07-01T00:00:00Z"), &off, NULL, &abbr);
    ck_assert_int_eq(off, -14400);
    ck_assert_str_eq(abbr, "EDT");
    warren_tz_lookup(tz, sec("2030-01-01T00:00:00Z"), &off, NULL, &abbr);
    ck_assert_str_eq(abbr, "EST");
    warren_tz_free(tz);

    /* Every strict prefix of the v2 file is rejected without reading past it. */
    for (size_t n = 0; n < len; n++) {
        unsigned char *copy = malloc(n ? n : 1);
        memcpy(copy, b, n);
        tz = NULL;
        int rc = warren_tz_parse_tzif("cut", copy, n, &tz, NULL);
        ck_assert_msg(rc == WARREN_ETZ, "prefix of %zu bytes accepted", n);
        ck_assert_ptr_null(tz);
        free(copy);
    }
    /* Bad magic, bad version, out-of-order transitions, a bad type index (leap
     * seconds: test_tz_rejects_leap_second_zones). */
    unsigned char *m = malloc(len);
    memcpy(m, b, len);
    m[0] = 'X';
    ck_assert_int_eq(warren_tz_parse_tzif("m", m, len, &tz, NULL), WARREN_ETZ);
    memcpy(m, b, len);
    m[4] = '9';
    ck_assert_int_eq(warren_tz_parse_tzif("m", m, len, &tz, NULL), WARREN_ETZ);
    /* The 64-bit block's second transition equal to its first. */
    uint32_t timecnt2 = (uint32_t)b[v1 + 32] << 24 | (uint32_t)b[v1 + 33] << 16 |
                        (uint32_t)b[v1 + 34] << 8 | b[v1 + 35];
    ck_assert_uint_ge(timecnt2, 2);
    memcpy(m, b, len);
    memcpy(m + v1 + 44 + 8, m + v1 + 44, 8);
    ck_assert_int_eq(warren_tz_parse_tzif("m", m, len, &tz, NULL), WARREN_ETZ);
    /* A transition naming a type that does not exist. */
    memcpy(m, b, len);
    m[v1 + 44 + 8 * timecnt2] = 0xff;
    ck_assert_int_eq(warren_tz_parse_tzif("m", m, len, &tz, NULL), WARREN_ETZ);
    free(m);
    free(one);
    free(b);
}
END_TEST

START_TEST(test_tz_rejects_leap_second_zones)
{
    char zpath[1024];
    size_t len;
    unsigned char *b =
        (unsigned char *)testenv_read_file(tzpin_path(zpath, sizeof zpath, "right/UTC"), &len);
    warren_tz *tz = NULL;
    warren_error err = {0};
    ck_assert_int_eq(warren_tz_parse_tzif("right/UTC", b, len, &tz, &err), WARREN_ETZ);
    ck_assert_ptr_nonnull(strstr(err.message, "leap-second"));
    free(b);
}
END_TEST

START_TEST(test_tz_fuzz_regressions)
{
    /* Inputs found by tests/fuzz (tests/fuzz/regressions/tzif/case-NNN): no crash, no UB. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions/tzif", WARREN_SOURCE_DIR);
    int seen = 0;
    for (int i = 0; i < 1000; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/case-%03d", dir, i);
        if (access(path, R_OK) != 0)
            continue;
        size_t len;
        unsigned char *b = (unsigned char *)testenv_read_file(path, &len);
        warren_tz *tz = NULL;
        if (warren_tz_parse_tzif("fuzz", b, len, &tz, NULL) == 0) {
            static const int64_t probes[] = {INT64_MIN, -5000000000, 0, 2200000000, INT64_MAX};
            for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
                warren_tz_span sp;
                int32_t off;
                warren_tz_span_at(tz, probes[k], &sp);
                warren_tz_lookup(tz, probes[k], &off, NULL, NULL);
                ck_assert_msg(sp.start <= probes[k] &&
                                  (sp.end == INT64_MAX || sp.end > probes[k]) && sp.offset == off,
                              "case-%03d at %lld", i, (long long)probes[k]);
            }
            warren_tz_free(tz);
        }
        free(b);
        seen++;
    }
    ck_assert_int_ge(seen, 3);
}
END_TEST

START_TEST(test_tz_spans_agree_with_lookups_in_every_zone)
{
    /* Walk every zone's spans 1900-2200: the offsets at and around each edge,
     * and sampled instants inside, are those the lookup gives. */
    char zpath[1024];
    warren_tzdb *db = warren_tzdb_new(NULL);
    FILE *f = fopen(tzpin_path(zpath, sizeof zpath, "tzdata.zi"), "r");
    char line[1024];
    long spans = 0;
    uint64_t r = 12345;
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof line, f)) {
        char a[256], b[256];
        const char *name = NULL;
        const warren_tz *tz;
        if (line[0] == 'Z' && sscanf(line, "Z %255s", a) == 1)
            name = a;
        else if (line[0] == 'L' && sscanf(line, "L %255s %255s", a, b) == 2)
            name = b;
        if (name == NULL)
            continue;
        ck_assert_int_eq(warren_tzdb_get(db, name, &tz, NULL), 0);
        int64_t t = sec("1900-01-01T00:00:00Z"), stop = sec("2200-01-01T00:00:00Z");
        while (t < stop) {
            warren_tz_span sp;
            int32_t o;
            warren_tz_span_at(tz, t, &sp);
            ck_assert(sp.start <= t && t < sp.end);
            warren_tz_lookup(tz, t, &o, NULL, NULL);
            ck_assert_int_eq(o, sp.offset);
            if (sp.start != INT64_MIN) {
                warren_tz_lookup(tz, sp.start, &o, NULL, NULL);
                ck_assert_int_eq(o, sp.offset);
                warren_tz_lookup(tz, sp.start - 1, &o, NULL, NULL);
                ck_assert_msg(o == sp.prev_offset && o != sp.offset, "%s at %lld", name,
                              (long long)sp.start);
            }
            if (sp.end == INT64_MAX)
                break;
            warren_tz_lookup(tz, sp.end - 1, &o, NULL, NULL);
            ck_assert_int_eq(o, sp.offset);
            warren_tz_lookup(tz, sp.end, &o, NULL, NULL);
            ck_assert_msg(o == sp.next_offset && o != sp.offset, "%s at %lld", name,
                          (long long)sp.end);
            for (int k = 0; k < 4; k++) {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                int64_t lo = sp.start == INT64_MIN ? t : sp.start;
                int64_t x = lo + (int64_t)(r % (uint64_t)(sp.end - lo));
                warren_tz_lookup(tz, x, &o, NULL, NULL);
                ck_assert_msg(o == sp.offset, "%s at %lld inside span", name, (long long)x);
            }
            t = sp.end;
            spans++;
        }
    }
    fclose(f);
    ck_assert_int_ge(spans, 50000);
    warren_tzdb_free(db);
}
END_TEST

/* ---- the system's tz database ------------------------------------------------ */

START_TEST(test_tz_system_zoneinfo_is_the_default_and_has_settled_rules)
{
    /* Every other test reads the pinned release; this one reads what warren
     * reads by default in production, and checks only facts that every tz
     * release since 2022 agrees on (rules in force since 2007 or earlier). */
    unsetenv("TZDIR");
    warren_tzdb *db = warren_tzdb_new(NULL);
    const warren_tz *tz;
    warren_error err = {0};
    ck_assert_msg(warren_tzdb_get(db, "Europe/Berlin", &tz, &err) == 0, "%s", err.message);
    expect_zone(tz, "2026-03-29T00:59:59Z", 3600, "CET");
    expect_zone(tz, "2026-03-29T01:00:00Z", 7200, "CEST");
    expect_zone(tz, "2026-10-25T00:59:59Z", 7200, "CEST");
    expect_zone(tz, "2026-10-25T01:00:00Z", 3600, "CET");
    ck_assert_msg(warren_tzdb_get(db, "America/New_York", &tz, &err) == 0, "%s", err.message);
    expect_zone(tz, "2026-03-08T06:59:59Z", -18000, "EST");
    expect_zone(tz, "2026-03-08T07:00:00Z", -14400, "EDT");
    expect_zone(tz, "2026-11-01T05:59:59Z", -14400, "EDT");
    expect_zone(tz, "2026-11-01T06:00:00Z", -18000, "EST");
    ck_assert_msg(warren_tzdb_get(db, "Asia/Tokyo", &tz, &err) == 0, "%s", err.message);
    expect_zone(tz, "2026-07-01T00:00:00Z", 32400, "JST");
    ck_assert_msg(warren_tzdb_get(db, "UTC", &tz, &err) == 0, "%s", err.message);
    expect_zone(tz, "2026-07-01T00:00:00Z", 0, "UTC");
    expect_bad_name(db, "Mars/Olympus_Mons", "unknown time zone");
    warren_tzdb_free(db);
}
END_TEST

static Suite *tz_suite(void)
{
    Suite *s = suite_create("tz");
    TCase *tc = tcase_create("zones");
    tcase_add_test(tc, test_tz_berlin_listed_and_footer_years);
    tcase_add_test(tc, test_tz_named_zones_have_their_rules);
    tcase_add_test(tc, test_tz_zones_are_parsed_once_and_cached);
    tcase_add_test(tc, test_tz_spans_agree_with_lookups_in_every_zone);
    suite_add_tcase(s, tc);
    tc = tcase_create("names");
    tcase_add_test(tc, test_tz_rejects_names_that_are_not_iana_zones);
    tcase_add_test(tc, test_tz_directory_without_tzdata_zi_checks_magic);
    suite_add_tcase(s, tc);
    tc = tcase_create("tzif");
    tcase_add_test(tc, test_tz_footer_rule_forms);
    tcase_add_test(tc, test_tz_rejects_malformed_footers);
    tcase_add_test(tc, test_tz_version1_file_and_every_truncation);
    tcase_add_test(tc, test_tz_rejects_leap_second_zones);
    tcase_add_test(tc, test_tz_fuzz_regressions);
    suite_add_tcase(s, tc);
    tc = tcase_create("system");
    tcase_add_test(tc, test_tz_system_zoneinfo_is_the_default_and_has_settled_rules);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    tzpin_require();
    SRunner *sr = srunner_create(tz_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
