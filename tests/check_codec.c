/* check_codec.c: run messages round-trip through JSON, malformed bodies are
 * rejected with a reason, run keys build and parse in their one canonical form. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/codec.h>

#include "internal.h"

/* 2026-11-30T14:00:00Z */
#define T0 (INT64_C(1796047200) * WARREN_US_PER_S)

START_TEST(test_codec_name_rule)
{
    ck_assert(warren_name_valid("a"));
    ck_assert(warren_name_valid("nightly-report"));
    ck_assert(warren_name_valid("A.b_c-9"));
    ck_assert(warren_name_valid("0start"));
    ck_assert(!warren_name_valid(""));
    ck_assert(!warren_name_valid(NULL));
    ck_assert(!warren_name_valid("-lead"));
    ck_assert(!warren_name_valid(".hidden"));
    ck_assert(!warren_name_valid("_x"));
    ck_assert(!warren_name_valid("has space"));
    ck_assert(!warren_name_valid("at@sign"));
    ck_assert(!warren_name_valid("slash/x"));
    ck_assert(!warren_name_valid("caf\xc3\xa9"));
    char n63[64], n64[65];
    memset(n63, 'a', 63);
    n63[63] = '\0';
    memset(n64, 'a', 64);
    n64[64] = '\0';
    ck_assert(warren_name_valid(n63));
    ck_assert(!warren_name_valid(n64));
}
END_TEST

START_TEST(test_codec_run_key_builds_canonical_form)
{
    char key[WARREN_RUN_KEY_MAX];
    warren_error err = {0};
    ck_assert_int_eq(warren_run_key_build("nightly-report", T0, key, sizeof(key), &err), 0);
    ck_assert_str_eq(key, "nightly-report@2026-11-30T14:00:00Z");
    ck_assert_int_eq(warren_run_key_build("j", 0, key, sizeof(key), NULL), 0);
    ck_assert_str_eq(key, "j@1970-01-01T00:00:00Z");
    ck_assert_int_eq(warren_run_key_build("j", -WARREN_US_PER_S, key, sizeof(key), NULL), 0);
    ck_assert_str_eq(key, "j@1969-12-31T23:59:59Z");
}
END_TEST

START_TEST(test_codec_run_key_build_rejects_bad_input)
{
    char key[WARREN_RUN_KEY_MAX], small[10];
    warren_error err = {0};
    ck_assert_int_eq(warren_run_key_build("bad name", T0, key, sizeof(key), &err), WARREN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "\"bad name\""));
    warren_error_clear(&err);
    ck_assert_int_eq(warren_run_key_build("j", T0 + 1, key, sizeof(key), &err), WARREN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "whole seconds"));
    ck_assert_int_eq(warren_run_key_build("j", T0, small, sizeof(small), NULL), WARREN_EINVAL);
    ck_assert_int_eq(
        warren_run_key_build("j", INT64_C(253402300800) * WARREN_US_PER_S, key, sizeof(key), NULL),
        WARREN_EINVAL);
    /* The extremes of warren_us: rejected, without overflowing on the way. */
    warren_error_clear(&err);
    ck_assert_int_eq(warren_run_key_build("j", INT64_MIN, key, sizeof(key), &err), WARREN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "outside years 1-9999"));
    ck_assert_int_eq(warren_run_key_build("j", INT64_MAX, key, sizeof(key), NULL), WARREN_EINVAL);
}
END_TEST

START_TEST(test_codec_run_key_parses_back)
{
    char job[WARREN_JOB_NAME_MAX + 1];
    warren_us t = 0;
    warren_error err = {0};
    ck_assert_int_eq(
        warren_run_key_parse("nightly-report@2026-11-30T14:00:00Z", job, sizeof(job), &t, &err), 0);
    ck_assert_str_eq(job, "nightly-report");
    ck_assert_int_eq(t, T0);
    ck_assert_int_eq(warren_run_key_parse("a.b@1970-01-01T00:00:00Z", NULL, 0, NULL, NULL), 0);
}
END_TEST

static const char *const bad_keys[] = {
    "",
    "nightly",
    "@2026-11-30T14:00:00Z",
    "bad name@2026-11-30T14:00:00Z",
    "job@2026-11-30T14:00:00",
    "job@2026-11-30T14:00:00+01:00",
    "job@2026-11-30T14:00:00.000Z",
    "job@2026-11-30 14:00:00Z",
    "job@2026-11-30T14:00:00z",
    "job@2026-02-30T14:00:00Z",
    "job@2026-11-30T14:00:00Z ",
    "job@@2026-11-30T14:00:00Z",
    "job@2026-11-30T24:00:00Z",
};

START_TEST(test_codec_run_key_rejects_noncanonical)
{
    warren_error err = {0};
    ck_assert_msg(warren_run_key_parse(bad_keys[_i], NULL, 0, NULL, &err) == WARREN_EPARSE,
                  "accepted \"%s\"", bad_keys[_i]);
    ck_assert_ptr_nonnull(strstr(err.message, "run key"));
}
END_TEST

START_TEST(test_codec_round_trips_a_run)
{
    warren_run_msg m = {0}, back;
    char *body = NULL;
    size_t len = 0;
    warren_error err = {0};

    m.job = "nightly-report";
    m.scheduled_at = T0;
    m.due_at = T0 + 7250000; /* +7.25 s of jitter */
    m.attempt = 3;
    m.payload_json = "{\"kind\":\"usage\",\"n\":[1,2.5,true,null,{\"x\":\"\\u00e9\"}]}";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, &len, &err), 0);
    ck_assert_uint_eq(len, strlen(body));
    ck_assert_str_eq(body, "{\"run_key\":\"nightly-report@2026-11-30T14:00:00Z\","
                           "\"job\":\"nightly-report\",\"scheduled_at\":\"2026-11-30T14:00:00Z\","
                           "\"due_at\":\"2026-11-30T14:00:07.250Z\",\"attempt\":3,"
                           "\"payload\":{\"kind\":\"usage\",\"n\":[1,2.5,true,null,{\"x\":"
                           "\"\xc3\xa9\"}]}}");
    ck_assert_int_eq(warren_run_msg_decode(body, len, &back, &err), 0);
    ck_assert_str_eq(back.run_key, "nightly-report@2026-11-30T14:00:00Z");
    ck_assert_str_eq(back.job, "nightly-report");
    ck_assert_int_eq(back.scheduled_at, T0);
    ck_assert_int_eq(back.due_at, T0 + 7250000);
    ck_assert_int_eq(back.attempt, 3);
    ck_assert_str_eq(back.payload_json, "{\"kind\":\"usage\",\"n\":[1,2.5,true,null,{\"x\":"
                                        "\"\xc3\xa9\"}]}");
    warren_run_msg_clear(&back);
    ck_assert_ptr_null(back.job);
    free(body);
}
END_TEST

START_TEST(test_codec_encode_defaults_payload_and_checks_key)
{
    warren_run_msg m = {0};
    char *body = NULL;
    warren_error err = {0};
    m.job = "j";
    m.scheduled_at = T0;
    m.due_at = T0;
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(body, "\"payload\":{}"));
    ck_assert_ptr_nonnull(strstr(body, "\"attempt\":0"));
    free(body);

    m.run_key = "j@2026-11-30T14:00:01Z";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    ck_assert_ptr_null(body);
    ck_assert_ptr_nonnull(strstr(err.message, "does not match"));

    warren_error_clear(&err);
    m.run_key = NULL;
    m.payload_json = "[1,2]";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.message, "payload is not a JSON object"));

    warren_error_clear(&err);
    m.payload_json = NULL;
    m.attempt = -1;
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
}
END_TEST

/* What a message cannot carry is refused with the real reason: jansson's
 * words and position for a number beyond int64 or double, the range for a
 * due time outside years 1-9999 (no RFC 3339 spelling). */
START_TEST(test_codec_encode_names_what_a_message_cannot_carry)
{
    warren_run_msg m = {0};
    char *body = NULL;
    warren_error err = {0};
    m.job = "j";
    m.scheduled_at = T0;
    m.due_at = T0;
    m.payload_json = "{\"n\": 18446744073709551616}";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    ck_assert_ptr_null(body);
    ck_assert_msg(strstr(err.message, "too big integer near '18446744073709551616' (line 1, "
                                      "column 26)") != NULL,
                  "%s", err.message);
    ck_assert_ptr_null(strstr(err.message, "not a JSON object"));

    warren_error_clear(&err);
    m.payload_json = "{\"r\": 1e400}";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "real number overflow") != NULL, "%s", err.message);

    warren_error_clear(&err);
    m.payload_json = NULL;
    m.due_at = INT64_C(-65322000000) * WARREN_US_PER_S; /* year 101 BC */
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    ck_assert_msg(strstr(err.message, "\"due_at\" is outside years 1-9999") != NULL, "%s",
                  err.message);
    warren_error_clear(&err);
    m.due_at = INT64_C(253402300800) * WARREN_US_PER_S; /* 10000-01-01 */
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    m.due_at = INT64_C(253402300799) * WARREN_US_PER_S; /* 9999-12-31T23:59:59Z: fine */
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), 0);
    free(body);
}
END_TEST

/* Malformed bodies and the reason each must give (a substring). */
#define GOOD_HEAD "\"run_key\":\"j@2026-11-30T14:00:00Z\",\"job\":\"j\","
#define GOOD_TIMES "\"scheduled_at\":\"2026-11-30T14:00:00Z\",\"due_at\":\"2026-11-30T14:00:00Z\","
static const struct {
    const char *body;
    const char *reason;
} malformed[] = {
    {"", "the body is empty"},
    {"not json", "not JSON"},
    {"{\"run_key\":", "not JSON"},
    {"[1,2,3]", "not a JSON object"},
    {"\"string\"", "not JSON"},
    {"42", "not JSON"},
    {"null", "not JSON"},
    {"{}", "\"run_key\" is missing"},
    {"{\"run_key\":5}", "\"run_key\" must be a string"},
    {"{\"run_key\":\"j@2026-11-30T14:00:00Z\"}", "\"job\" is missing"},
    {"{" GOOD_HEAD "\"due_at\":\"2026-11-30T14:00:00Z\",\"attempt\":0,\"payload\":{}}",
     "\"scheduled_at\" is missing"},
    {"{" GOOD_HEAD "\"scheduled_at\":\"2026-11-30T14:00:00Z\",\"attempt\":0,\"payload\":{}}",
     "\"due_at\" is missing"},
    {"{" GOOD_HEAD GOOD_TIMES "\"payload\":{}}", "\"attempt\" is missing"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":0}", "\"payload\" is missing"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":-1,\"payload\":{}}", "non-negative integer"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":1.5,\"payload\":{}}", "non-negative integer"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":\"1\",\"payload\":{}}", "non-negative integer"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":99999999999,\"payload\":{}}", "non-negative integer"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":0,\"payload\":[]}", "\"payload\" must be a JSON object"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":0,\"payload\":\"{}\"}",
     "\"payload\" must be a JSON object"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":0,\"payload\":null}",
     "\"payload\" must be a JSON object"},
    {"{" GOOD_HEAD "\"scheduled_at\":\"yesterday\",\"due_at\":\"2026-11-30T14:00:00Z\","
     "\"attempt\":0,\"payload\":{}}",
     "\"scheduled_at\" is not an RFC 3339 time"},
    {"{" GOOD_HEAD "\"scheduled_at\":\"2026-11-30T14:00:00Z\",\"due_at\":17,"
     "\"attempt\":0,\"payload\":{}}",
     "\"due_at\" must be a string"},
    {"{" GOOD_HEAD
     "\"scheduled_at\":\"2026-11-30T14:00:00.5Z\",\"due_at\":\"2026-11-30T14:00:00Z\","
     "\"attempt\":0,\"payload\":{}}",
     "whole seconds"},
    {"{\"run_key\":\"j@2026-11-30T14:00:00Z\",\"job\":\"other\"," GOOD_TIMES
     "\"attempt\":0,\"payload\":{}}",
     "does not match"},
    {"{\"run_key\":\"j@2026-11-30T15:00:00+01:00\",\"job\":\"j\"," GOOD_TIMES
     "\"attempt\":0,\"payload\":{}}",
     "does not match"},
    {"{\"run_key\":\"x y@2026-11-30T14:00:00Z\",\"job\":\"x y\"," GOOD_TIMES
     "\"attempt\":0,\"payload\":{}}",
     "not a valid job name"},
    {"{" GOOD_HEAD "\"run_key\":\"dup\"," GOOD_TIMES "\"attempt\":0,\"payload\":{}}", "not JSON"},
    {"{\"run_key\":\"j\\u0000@2026-11-30T14:00:00Z\",\"job\":\"j\"," GOOD_TIMES
     "\"attempt\":0,\"payload\":{}}",
     "NUL"},
    {"{" GOOD_HEAD GOOD_TIMES "\"attempt\":0,\"payload\":{}} trailing", "not JSON"},
    {"\xff\xfe{}", "not JSON"},
};

START_TEST(test_utf8_clean_replaces_only_invalid_bytes)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain ascii", "plain ascii"},
        {"gr\xc3\xbc\xc3\x9f \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", /* kept */
         "gr\xc3\xbc\xc3\x9f \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"},
        {"\xff\xfe", "??"},           /* never valid */
        {"\x9c\xac tail", "?? tail"}, /* cut before a character's end */
        {"head \xe6\x97", "head ??"}, /* cut after its start */
        {"\xc0\xaf", "??"},           /* overlong '/' */
        {"\xe0\x80\xaf", "???"},      /* overlong, 3 bytes */
        {"\xed\xa0\x80", "???"},      /* UTF-16 surrogate */
        {"\xf4\x90\x80\x80", "????"}, /* above U+10FFFF */
        {"a\xc3(b", "a?(b"},          /* bad continuation */
        {"", ""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%s", cases[i].in);
        warren__utf8_clean(buf);
        ck_assert_msg(strcmp(buf, cases[i].want) == 0, "case %zu: got \"%s\"", i, buf);
    }
    warren__utf8_clean(NULL); /* no-op */
}
END_TEST

START_TEST(test_codec_rejects_malformed_body)
{
    warren_run_msg m;
    warren_error err = {0};
    const char *b = malformed[_i].body;
    ck_assert_msg(warren_run_msg_decode(b, strlen(b), &m, &err) == WARREN_EMSG, "accepted #%d: %s",
                  _i, b);
    ck_assert_int_eq(err.code, WARREN_EMSG);
    ck_assert_msg(strstr(err.message, malformed[_i].reason) != NULL,
                  "#%d: reason \"%s\" lacks \"%s\"", _i, err.message, malformed[_i].reason);
    ck_assert_ptr_nonnull(strstr(err.message, "malformed run message"));
    ck_assert_ptr_null(m.run_key);
    ck_assert_ptr_null(m.payload_json);
}
END_TEST

START_TEST(test_codec_accepts_unknown_fields_and_offsets)
{
    const char *b = "{\"future\":[1],\"run_key\":\"j@2026-11-30T14:00:00Z\",\"job\":\"j\","
                    "\"scheduled_at\":\"2026-11-30T15:00:00+01:00\",\"due_at\":\"2026-11-30T14:"
                    "00:01.5Z\",\"attempt\":0,\"payload\":{\"a\":1}}";
    warren_run_msg m;
    warren_error err = {0};
    ck_assert_int_eq(warren_run_msg_decode(b, strlen(b), &m, &err), 0);
    ck_assert_int_eq(m.scheduled_at, T0);
    ck_assert_int_eq(m.due_at, T0 + 1500000);
    ck_assert_str_eq(m.payload_json, "{\"a\":1}");
    warren_run_msg_clear(&m);
}
END_TEST

START_TEST(test_codec_rejects_oversized_and_unterminated_bodies)
{
    warren_run_msg m;
    warren_error err = {0};
    size_t n = WARREN_MSG_MAX_BODY + 1;
    char *big = malloc(n);
    memset(big, ' ', n);
    ck_assert_int_eq(warren_run_msg_decode(big, n, &m, &err), WARREN_EMSG);
    ck_assert_ptr_nonnull(strstr(err.message, "limit"));
    free(big);

    /* decode must honour len, not look for a NUL */
    const char *b = "{" GOOD_HEAD GOOD_TIMES "\"attempt\":0,\"payload\":{}}GARBAGE";
    ck_assert_int_eq(warren_run_msg_decode(b, strlen(b) - 7, &m, NULL), 0);
    warren_run_msg_clear(&m);
    ck_assert_int_eq(warren_run_msg_decode(NULL, 0, &m, NULL), WARREN_EMSG);
}
END_TEST

START_TEST(test_codec_json_object_check)
{
    char *c = NULL;
    warren_error err = {0};
    ck_assert_int_eq(warren_json_object_check(" { \"a\" : [1, 2] } ", &c, &err), 0);
    ck_assert_str_eq(c, "{\"a\":[1,2]}");
    free(c);
    ck_assert_int_eq(warren_json_object_check("[1]", &c, &err), WARREN_EPARSE);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(strstr(err.message, "JSON object"));
    warren_error_clear(&err);
    ck_assert_int_eq(warren_json_object_check("{\"a\":", NULL, &err), WARREN_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.message, "line 1"));
    ck_assert_int_eq(warren_json_object_check("{\"a\":1,\"a\":2}", NULL, NULL), WARREN_EPARSE);
}
END_TEST

/* Random byte edits of a valid body: decode either accepts (then the result
 * re-encodes) or rejects with a reason; it never crashes (run under ASan). */
START_TEST(test_codec_survives_mutated_bodies)
{
    warren_run_msg m = {0}, back;
    char *body = NULL;
    size_t len = 0;
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    int accepted = 0, rejected = 0;

    m.job = "mutant";
    m.scheduled_at = T0;
    m.due_at = T0;
    m.attempt = 1;
    m.payload_json = "{\"a\":[1,{\"b\":\"c\"}],\"d\":true}";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, &len, NULL), 0);
    char *buf = malloc(len + 16);
    for (int i = 0; i < 20000; i++) {
        size_t n = len;
        memcpy(buf, body, len);
        for (int k = 0; k < 1 + (int)(x % 3); k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t at = (size_t)(x >> 8) % n;
            switch (x % 4) {
            case 0:
                buf[at] = (char)(x >> 40);
                break; /* replace */
            case 1:
                n = at + 1;
                break; /* truncate */
            case 2:
                buf[at] = "{}[]\",:0-9eE\\"[(x >> 32) % 13];
                break; /* syntax char */
            default:
                buf[at] = buf[(at * 7) % n];
                break; /* copy */
            }
        }
        warren_error err = {0};
        int rc = warren_run_msg_decode(buf, n, &back, &err);
        if (rc == 0) {
            char *again = NULL;
            ck_assert_int_eq(warren_run_msg_encode(&back, &again, NULL, NULL), 0);
            free(again);
            warren_run_msg_clear(&back);
            accepted++;
        } else {
            ck_assert_int_eq(rc, WARREN_EMSG);
            ck_assert_ptr_nonnull(strstr(err.message, "malformed run message"));
            rejected++;
        }
    }
    ck_assert_int_gt(rejected, 1000);
    free(buf);
    free(body);
    (void)accepted;
}
END_TEST

START_TEST(test_codec_job_names_reach_200_characters)
{
    char n200[201], n201[202];
    memset(n200, 'a', 200);
    n200[200] = '\0';
    memset(n201, 'a', 201);
    n201[201] = '\0';
    ck_assert(warren_job_name_valid(n200));
    ck_assert(!warren_job_name_valid(n201));
    ck_assert(warren_job_name_valid("usage-report.tenant-4711"));
    ck_assert(!warren_job_name_valid("at@sign"));
    ck_assert(!warren_job_name_valid(""));
    ck_assert(!warren_job_name_valid(NULL));
    /* queue and handler names keep 63 */
    ck_assert(!warren_name_valid(n200));
}
END_TEST

START_TEST(test_codec_enqueue_key_grammar)
{
    static const char *const good[] = {"welcome:user-42",         "a",          "0",
                                       "x/y=z+w@v.u_t-s",         "2026-11-30", "2026-11-30T14:00",
                                       "at:2026-11-30T14:00:00Z", "A.B"};
    static const char *const bad[] = {"",
                                      "-lead",
                                      ".x",
                                      ":x",
                                      "has space",
                                      "caf\xc3\xa9",
                                      "semi;colon",
                                      "q\"uote",
                                      "2026-11-30T14:00:00Z",
                                      "2026-11-30T14:00:00.000Z",
                                      "2026-11-30T15:00:00+01:00",
                                      "2026-11-30T14:00:00",
                                      "x\ny",
                                      "star*"};
    char k200[201], k201[202];
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_msg(warren_enqueue_key_valid(good[i]), "refused \"%s\"", good[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(!warren_enqueue_key_valid(bad[i]), "accepted \"%s\"", bad[i]);
    memset(k200, 'k', 200);
    k200[200] = '\0';
    memset(k201, 'k', 201);
    k201[201] = '\0';
    ck_assert(warren_enqueue_key_valid(k200));
    ck_assert(!warren_enqueue_key_valid(k201));
    ck_assert(!warren_enqueue_key_valid(NULL));
    ck_assert(warren_tenant_valid("acme:eu@1"));
    ck_assert(!warren_tenant_valid("acme/eu"));
    ck_assert(!warren_tenant_valid("-acme"));
}
END_TEST

START_TEST(test_codec_run_key_check_takes_both_forms)
{
    char job[WARREN_JOB_NAME_MAX + 1];
    int enq = -1;
    warren_error err = {0};
    char big[300];

    ck_assert_int_eq(warren_run_key_check("welcome@user:42", job, sizeof(job), &enq, &err), 0);
    ck_assert_str_eq(job, "welcome");
    ck_assert_int_eq(enq, 1);
    ck_assert_int_eq(
        warren_run_key_check("nightly@2026-11-30T14:00:00Z", job, sizeof(job), &enq, &err), 0);
    ck_assert_str_eq(job, "nightly");
    ck_assert_int_eq(enq, 0);
    /* a key with '@' in it: the job is up to the first '@' */
    ck_assert_int_eq(warren_run_key_check("j@a@b", job, sizeof(job), &enq, &err), 0);
    ck_assert_str_eq(job, "j");
    ck_assert_int_eq(warren_run_key_check("j@2026-11-30T14:00:00.5Z", NULL, 0, NULL, &err),
                     WARREN_EPARSE);
    warren_error_clear(&err);
    ck_assert_int_eq(warren_run_key_check("j@bad key", NULL, 0, NULL, &err), WARREN_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.message, "enqueue key"));
    ck_assert_int_eq(warren_run_key_check("no-at-sign", NULL, 0, NULL, NULL), WARREN_EPARSE);
    ck_assert_int_eq(warren_run_key_check("@k", NULL, 0, NULL, NULL), WARREN_EPARSE);
    /* 100-character job + '@' + 200-character key: 301 bytes */
    memset(big, 'a', 100);
    big[100] = '@';
    memset(big + 101, 'k', 198);
    big[299] = '\0';
    warren_error_clear(&err);
    ck_assert_int_eq(warren_run_key_check(big, NULL, 0, NULL, &err), WARREN_EPARSE);
    ck_assert_ptr_nonnull(strstr(err.message, "at most 255"));
}
END_TEST

START_TEST(test_codec_round_trips_an_enqueued_run)
{
    warren_run_msg m = {0}, back;
    char *body = NULL;
    size_t len = 0;
    warren_error err = {0};

    m.run_key = "welcome@user:42";
    m.job = "welcome";
    m.scheduled_at = T0 + 250000; /* .250 s */
    m.due_at = T0 + 250000;
    m.template_name = "welcome-tmpl";
    m.tenant = "acme";
    ck_assert_msg(warren_run_msg_encode(&m, &body, &len, &err) == 0, "%s", err.message);
    ck_assert_str_eq(body, "{\"run_key\":\"welcome@user:42\",\"job\":\"welcome\","
                           "\"scheduled_at\":\"2026-11-30T14:00:00.250Z\","
                           "\"due_at\":\"2026-11-30T14:00:00.250Z\",\"attempt\":0,\"payload\":{},"
                           "\"template\":\"welcome-tmpl\",\"tenant\":\"acme\"}");
    ck_assert_int_eq(warren_run_msg_decode(body, len, &back, &err), 0);
    ck_assert_str_eq(back.run_key, "welcome@user:42");
    ck_assert_int_eq(back.scheduled_at, T0 + 250000);
    ck_assert_str_eq(back.template_name, "welcome-tmpl");
    ck_assert_str_eq(back.tenant, "acme");
    warren_run_msg_clear(&back);
    ck_assert_ptr_null(back.template_name);
    free(body);

    /* whole seconds stay whole; no template, no tenant: the fields are absent */
    m.scheduled_at = T0;
    m.template_name = NULL;
    m.tenant = NULL;
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, &len, &err), 0);
    ck_assert_ptr_nonnull(strstr(body, "\"scheduled_at\":\"2026-11-30T14:00:00Z\""));
    ck_assert_ptr_null(strstr(body, "template"));
    ck_assert_ptr_null(strstr(body, "tenant"));
    ck_assert_int_eq(warren_run_msg_decode(body, len, &back, &err), 0);
    ck_assert_ptr_null(back.template_name);
    ck_assert_ptr_null(back.tenant);
    warren_run_msg_clear(&back);
    free(body);

    /* encode refuses what decode would */
    m.scheduled_at = T0 + 1; /* a microsecond */
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    m.scheduled_at = T0;
    m.run_key = "welcome@bad key";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    m.run_key = "other@k";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    m.run_key = "welcome@k";
    m.tenant = "bad tenant";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    m.tenant = NULL;
    m.template_name = "bad@tmpl";
    ck_assert_int_eq(warren_run_msg_encode(&m, &body, NULL, &err), WARREN_EINVAL);
    ck_assert_ptr_null(body);
}
END_TEST

/* Enqueued runs' malformed bodies and their reasons. */
#define ENQ_TIMES                                                                                  \
    "\"scheduled_at\":\"2026-11-30T14:00:00.250Z\",\"due_at\":\"2026-11-30T14:00:00.250Z\","
static const struct {
    const char *body;
    const char *reason;
} malformed_enqueued[] = {
    {"{\"run_key\":\"j@bad key\",\"job\":\"j\"," ENQ_TIMES "\"attempt\":0,\"payload\":{}}",
     "neither a time nor an enqueue key"},
    {"{\"run_key\":\"j@-k\",\"job\":\"j\"," ENQ_TIMES "\"attempt\":0,\"payload\":{}}",
     "neither a time nor an enqueue key"},
    {"{\"run_key\":\"k@x\",\"job\":\"j\"," ENQ_TIMES "\"attempt\":0,\"payload\":{}}",
     "does not match"},
    {"{\"run_key\":\"jj@x\",\"job\":\"j\"," ENQ_TIMES "\"attempt\":0,\"payload\":{}}",
     "does not match"},
    {"{\"run_key\":\"j@x\",\"job\":\"j\",\"scheduled_at\":\"2026-11-30T14:00:00.2501Z\","
     "\"due_at\":\"2026-11-30T14:00:00Z\",\"attempt\":0,\"payload\":{}}",
     "whole milliseconds"},
    {"{\"run_key\":\"j@2026-11-30T14:00:00Z\",\"job\":\"j\"," ENQ_TIMES
     "\"attempt\":0,\"payload\":{}}",
     "whole seconds"},
    {"{\"run_key\":\"j@x\",\"job\":\"j\"," ENQ_TIMES "\"attempt\":0,\"payload\":{},\"template\":5}",
     "\"template\" must be a string"},
    {"{\"run_key\":\"j@x\",\"job\":\"j\"," ENQ_TIMES
     "\"attempt\":0,\"payload\":{},\"template\":\"a b\"}",
     "\"template\" is not a job name"},
    {"{\"run_key\":\"j@x\",\"job\":\"j\"," ENQ_TIMES
     "\"attempt\":0,\"payload\":{},\"tenant\":\"a/b\"}",
     "\"tenant\" is not a tenant name"},
    {"{\"run_key\":\"j@x\",\"job\":\"j\"," ENQ_TIMES "\"attempt\":0,\"payload\":{},\"tenant\":[]}",
     "\"tenant\" must be a string"},
};

START_TEST(test_codec_rejects_malformed_enqueued_body)
{
    warren_run_msg m;
    warren_error err = {0};
    const char *b = malformed_enqueued[_i].body;
    ck_assert_msg(warren_run_msg_decode(b, strlen(b), &m, &err) == WARREN_EMSG, "accepted #%d: %s",
                  _i, b);
    ck_assert_msg(strstr(err.message, malformed_enqueued[_i].reason) != NULL,
                  "#%d: reason \"%s\" lacks \"%s\"", _i, err.message,
                  malformed_enqueued[_i].reason);
    ck_assert_ptr_null(m.run_key);
    ck_assert_ptr_null(m.template_name);
}
END_TEST

START_TEST(test_codec_decodes_a_255_byte_enqueued_key_and_refuses_256)
{
    /* a 200-character job, '@', a 54-character key: 255 bytes */
    char job[201], key[300], body[1200];
    warren_run_msg m;
    warren_error err = {0};
    memset(job, 'j', 200);
    job[200] = '\0';
    snprintf(key, sizeof(key), "%s@%054d", job, 7);
    ck_assert_uint_eq(strlen(key), 255);
    snprintf(body, sizeof(body),
             "{\"run_key\":\"%s\",\"job\":\"%s\"," ENQ_TIMES "\"attempt\":0,\"payload\":{}}", key,
             job);
    ck_assert_msg(warren_run_msg_decode(body, strlen(body), &m, &err) == 0, "%s", err.message);
    ck_assert_str_eq(m.run_key, key);
    warren_run_msg_clear(&m);
    snprintf(key, sizeof(key), "%s@%055d", job, 7);
    snprintf(body, sizeof(body),
             "{\"run_key\":\"%s\",\"job\":\"%s\"," ENQ_TIMES "\"attempt\":0,\"payload\":{}}", key,
             job);
    ck_assert_int_eq(warren_run_msg_decode(body, strlen(body), &m, &err), WARREN_EMSG);
    ck_assert_ptr_nonnull(strstr(err.message, "at most 255"));
}
END_TEST

static Suite *codec_suite(void)
{
    Suite *s = suite_create("codec");
    TCase *tc = tcase_create("run_key");
    tcase_add_test(tc, test_codec_name_rule);
    tcase_add_test(tc, test_codec_run_key_builds_canonical_form);
    tcase_add_test(tc, test_codec_run_key_build_rejects_bad_input);
    tcase_add_test(tc, test_codec_run_key_parses_back);
    tcase_add_loop_test(tc, test_codec_run_key_rejects_noncanonical, 0,
                        (int)(sizeof(bad_keys) / sizeof(bad_keys[0])));
    suite_add_tcase(s, tc);
    tc = tcase_create("message");
    tcase_add_test(tc, test_codec_round_trips_a_run);
    tcase_add_test(tc, test_codec_encode_defaults_payload_and_checks_key);
    tcase_add_test(tc, test_codec_encode_names_what_a_message_cannot_carry);
    tcase_add_loop_test(tc, test_codec_rejects_malformed_body, 0,
                        (int)(sizeof(malformed) / sizeof(malformed[0])));
    tcase_add_test(tc, test_codec_accepts_unknown_fields_and_offsets);
    tcase_add_test(tc, test_codec_rejects_oversized_and_unterminated_bodies);
    tcase_add_test(tc, test_codec_json_object_check);
    tcase_add_test(tc, test_codec_survives_mutated_bodies);
    tcase_add_test(tc, test_utf8_clean_replaces_only_invalid_bytes);
    suite_add_tcase(s, tc);
    tc = tcase_create("enqueued");
    tcase_add_test(tc, test_codec_job_names_reach_200_characters);
    tcase_add_test(tc, test_codec_enqueue_key_grammar);
    tcase_add_test(tc, test_codec_run_key_check_takes_both_forms);
    tcase_add_test(tc, test_codec_round_trips_an_enqueued_run);
    tcase_add_loop_test(tc, test_codec_rejects_malformed_enqueued_body, 0,
                        (int)(sizeof(malformed_enqueued) / sizeof(malformed_enqueued[0])));
    tcase_add_test(tc, test_codec_decodes_a_255_byte_enqueued_key_and_refuses_256);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(codec_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
