/* fuzz_codec.c: libFuzzer harness for codec.c, which decodes what anyone who
 * can publish to a ready queue sends. Each input goes, as a message body,
 * through warren_run_msg_decode and, as text, through the run key checks,
 * warren_json_object_check and warren__utf8_clean. Beyond memory safety it
 * checks that:
 *   - a decoded message satisfies the contract (codec.h): a valid job name,
 *     a run key warren_run_key_check accepts and that starts with "JOB@",
 *     valid template and tenant names, attempt >= 0, payload an object;
 *   - a decoded message encodes (every message a worker accepts is one
 *     warren could have written), and decoding that again gives the same
 *     fields (due_at at millisecond precision: the encoding's), and encoding
 *     the result again gives the same bytes;
 *   - a key that warren_run_key_parse accepts is rebuilt identically;
 *   - warren__utf8_clean leaves valid UTF-8 (jansson's json_string accepts
 *     it) of the same length.
 * The body is fed as it is (not NUL terminated: the broker's bytes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <warren/codec.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static void check_decoded(const warren_run_msg *m)
{
    char job[WARREN_JOB_NAME_MAX + 1];
    size_t n;

    if (m->run_key == NULL || m->job == NULL || m->payload_json == NULL)
        abort();
    n = strlen(m->job);
    if (!warren_job_name_valid(m->job) || strncmp(m->run_key, m->job, n) != 0 ||
        m->run_key[n] != '@' || strlen(m->run_key) > WARREN_RUN_KEY_LEN_MAX)
        abort();
    if (warren_run_key_check(m->run_key, job, sizeof(job), NULL, NULL) != 0 ||
        strcmp(job, m->job) != 0)
        abort();
    if ((m->template_name != NULL && !warren_job_name_valid(m->template_name)) ||
        (m->tenant != NULL && !warren_tenant_valid(m->tenant)) || m->attempt < 0)
        abort();
    if (warren_json_object_check(m->payload_json, NULL, NULL) != 0)
        abort();
}

/* decode -> encode -> decode -> encode: the fields survive, the bytes settle. */
static void round_trip(const warren_run_msg *m)
{
    char *body = NULL, *again = NULL;
    size_t len = 0, len2 = 0;
    warren_run_msg back;
    warren_error err = {0};

    if (warren_run_msg_encode(m, &body, &len, &err) != 0)
        abort(); /* decode accepted what encode refuses: err.message says what */
    if (warren_run_msg_decode(body, len, &back, &err) != 0)
        abort();
    if (!same(back.run_key, m->run_key) || !same(back.job, m->job) ||
        back.scheduled_at != m->scheduled_at || back.attempt != m->attempt ||
        !same(back.payload_json, m->payload_json) || !same(back.template_name, m->template_name) ||
        !same(back.tenant, m->tenant))
        abort();
    /* due_at is encoded at milliseconds (truncated toward the past) */
    if (back.due_at > m->due_at || m->due_at - back.due_at >= 1000 || back.due_at % 1000 != 0)
        abort();
    if (warren_run_msg_encode(&back, &again, &len2, &err) != 0 || len2 != len ||
        memcmp(again, body, len) != 0)
        abort();
    free(again);
    free(body);
    warren_run_msg_clear(&back);
}

static void check_text(const char *s, size_t size)
{
    char job[WARREN_JOB_NAME_MAX + 1], canon[WARREN_RUN_KEY_MAX];
    warren_us at;
    int enqueued = 0;
    char *compact = NULL;

    if (warren_run_key_parse(s, job, sizeof(job), &at, NULL) == 0) {
        if (warren_run_key_build(job, at, canon, sizeof(canon), NULL) != 0 || strcmp(canon, s) != 0)
            abort();
    }
    if (warren_run_key_check(s, job, sizeof(job), &enqueued, NULL) == 0 &&
        (!warren_job_name_valid(job) || strlen(s) > WARREN_RUN_KEY_LEN_MAX))
        abort();
    if (warren_json_object_check(s, &compact, NULL) == 0) {
        if (compact == NULL || warren_json_object_check(compact, NULL, NULL) != 0)
            abort();
        free(compact);
    }
    /* warren__utf8_clean: the text up to its first NUL, as handler output */
    char *copy = malloc(size + 1);
    if (copy == NULL)
        return;
    memcpy(copy, s, size + 1);
    size_t before = strlen(copy);
    warren__utf8_clean(copy);
    json_t *j = json_string(copy);
    if (strlen(copy) != before || j == NULL)
        abort();
    json_decref(j);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    warren_run_msg m;
    warren_error err = {0};

    if (warren_run_msg_decode((const char *)data, size, &m, &err) == 0) {
        check_decoded(&m);
        round_trip(&m);
        warren_run_msg_clear(&m);
    } else if (err.message[0] == '\0') {
        abort(); /* every failure says why (the dead-letter reason) */
    }
    if (size > 65536)
        return 0; /* the text checks are linear; long inputs only slow the run */
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    check_text(s, size);
    free(s);
    return 0;
}
