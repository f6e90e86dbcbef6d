/* codec.c: the run message body (docs/design.md §4.3) in and out of JSON, and run keys.
 * All of warren's jansson use outside config.c lives here. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <warren/codec.h>

#include "internal.h"

/* 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z: what the canonical key can spell. */
#define KEY_MIN_S INT64_C(-62135596800)
#define KEY_MAX_S INT64_C(253402300799)

/* [A-Za-z0-9] then up to max - 1 of [A-Za-z0-9] and the bytes of more. */
static int word_valid(const char *s, size_t max, const char *more)
{
    size_t n;

    if (s == NULL)
        return 0;
    for (n = 0; s[n] != '\0'; n++) {
        char c = s[n];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && (n == 0 || strchr(more, c) == NULL))
            return 0;
        if (n >= max)
            return 0;
    }
    return n > 0;
}

int warren_name_valid(const char *s)
{
    return word_valid(s, 63, "._-");
}

int warren_job_name_valid(const char *s)
{
    return word_valid(s, WARREN_JOB_NAME_MAX, "._-");
}

int warren_tenant_valid(const char *s)
{
    return word_valid(s, 200, "._:@-");
}

/* 1 if s begins with YYYY-MM-DDTHH:MM:SS (digits where the letters are). */
static int begins_with_time(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";

    for (size_t i = 0; shape[i] != '\0'; i++) {
        if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
            return 0;
    }
    return 1;
}

int warren_enqueue_key_valid(const char *s)
{
    return word_valid(s, WARREN_ENQUEUE_KEY_MAX, "._:/=+@-") && !begins_with_time(s);
}

int warren_run_key_build(const char *job, warren_us scheduled_at, char *buf, size_t len,
                         warren_error *err)
{
    char when[WARREN_TIME_BUF];
    int64_t s = warren_us_to_s(scheduled_at);
    size_t need;

    if (!warren_job_name_valid(job))
        return warren_error_set(err, WARREN_EINVAL,
                                "\"%.80s\" cannot be a job name in a run key "
                                "(allowed: [A-Za-z0-9][A-Za-z0-9._-]{0,199})",
                                job ? job : "(null)");
    /* The range first: s * WARREN_US_PER_S overflows for s near INT64_MIN. */
    if (s < KEY_MIN_S || s > KEY_MAX_S)
        return warren_error_set(err, WARREN_EINVAL,
                                "run key of job \"%s\": scheduled_at is outside years 1-9999", job);
    if (s * WARREN_US_PER_S != scheduled_at)
        return warren_error_set(err, WARREN_EINVAL,
                                "run key of job \"%s\": scheduled_at must be whole seconds", job);
    warren_time_format(scheduled_at, when, sizeof(when));
    need = strlen(job) + 1 + strlen(when) + 1;
    if (buf == NULL || len < need)
        return warren_error_set(err, WARREN_EINVAL, "run key buffer too small (%zu < %zu)", len,
                                need);
    memcpy(buf, job, strlen(job));
    buf[strlen(job)] = '@';
    memcpy(buf + strlen(job) + 1, when, strlen(when) + 1);
    return 0;
}

int warren_run_key_parse(const char *key, char *job, size_t job_len, warren_us *scheduled_at,
                         warren_error *err)
{
    const char *at;
    char name[WARREN_JOB_NAME_MAX + 1];
    char canon[WARREN_RUN_KEY_MAX];
    warren_us t;
    size_t n;

    if (key == NULL)
        return warren_error_set(err, WARREN_EPARSE, "missing run key");
    at = strchr(key, '@');
    if (at == NULL)
        return warren_error_set(err, WARREN_EPARSE,
                                "\"%.100s\" is not a run key (expected JOB@YYYY-MM-DDTHH:MM:SSZ)",
                                key);
    n = (size_t)(at - key);
    if (n == 0 || n > WARREN_JOB_NAME_MAX)
        return warren_error_set(err, WARREN_EPARSE,
                                "\"%.100s\" is not a run key: the job name is empty or too long",
                                key);
    memcpy(name, key, n);
    name[n] = '\0';
    if (!warren_job_name_valid(name))
        return warren_error_set(err, WARREN_EPARSE,
                                "\"%.100s\" is not a run key: \"%.100s\" is not a valid job name",
                                key, name);
    if (warren_time_parse(at + 1, &t, NULL) != 0 ||
        warren_run_key_build(name, t, canon, sizeof(canon), NULL) != 0 || strcmp(canon, key) != 0)
        return warren_error_set(err, WARREN_EPARSE,
                                "\"%.100s\" is not a run key: the time must be UTC with whole "
                                "seconds, as in JOB@2026-11-30T14:00:00Z",
                                key);
    if (job != NULL) {
        if (job_len < n + 1)
            return warren_error_set(err, WARREN_EINVAL, "job name buffer too small");
        memcpy(job, name, n + 1);
    }
    if (scheduled_at != NULL)
        *scheduled_at = t;
    return 0;
}

int warren_run_key_check(const char *key, char *job, size_t job_len, int *enqueued,
                         warren_error *err)
{
    const char *at = key ? strchr(key, '@') : NULL;
    size_t n;

    if (enqueued != NULL)
        *enqueued = 0;
    if (at == NULL || begins_with_time(at + 1))
        return warren_run_key_parse(key, job, job_len, NULL, err);
    n = (size_t)(at - key);
    if (strlen(key) > WARREN_RUN_KEY_LEN_MAX)
        return warren_error_set(err, WARREN_EPARSE,
                                "\"%.100s...\" is not a run key: %zu bytes, at most %d", key,
                                strlen(key), WARREN_RUN_KEY_LEN_MAX);
    if (n == 0 || n > WARREN_JOB_NAME_MAX)
        return warren_error_set(err, WARREN_EPARSE,
                                "\"%.100s\" is not a run key: the job name is empty or too long",
                                key);
    {
        char name[WARREN_JOB_NAME_MAX + 1];
        memcpy(name, key, n);
        name[n] = '\0';
        if (!warren_job_name_valid(name))
            return warren_error_set(err, WARREN_EPARSE,
                                    "\"%.100s\" is not a run key: \"%.100s\" is not a valid job "
                                    "name",
                                    key, name);
        if (!warren_enqueue_key_valid(at + 1))
            return warren_error_set(err, WARREN_EPARSE,
                                    "\"%.100s\" is not a run key: \"%.100s\" is neither a time "
                                    "(JOB@2026-11-30T14:00:00Z) nor an enqueue key (1-200 of "
                                    "[A-Za-z0-9._:/=+@-], first a letter or digit)",
                                    key, at + 1);
        if (job != NULL) {
            if (job_len < n + 1)
                return warren_error_set(err, WARREN_EINVAL, "job name buffer too small");
            memcpy(job, name, n + 1);
        }
    }
    if (enqueued != NULL)
        *enqueued = 1;
    return 0;
}

void warren_run_msg_clear(warren_run_msg *m)
{
    if (m == NULL)
        return;
    free(m->run_key);
    free(m->job);
    free(m->payload_json);
    free(m->template_name);
    free(m->tenant);
    memset(m, 0, sizeof(*m));
}

/* The run key of a message against its job and scheduled_at. A key whose
 * part after "JOB@" begins with a time is a scheduled run's and must be
 * exactly the one built from scheduled_at; any other is an enqueued run's
 * JOB@KEY, whose scheduled_at has at most milliseconds. 0, or -1 with the
 * reason in why. */
static int key_matches(const char *job, const char *run_key, warren_us scheduled_at, char *why,
                       size_t len)
{
    char canon[WARREN_RUN_KEY_MAX];
    size_t n = strlen(job);
    int64_t s = warren_us_to_s(scheduled_at);

    if (strncmp(run_key, job, n) != 0 || run_key[n] != '@') {
        snprintf(why, len,
                 "\"run_key\" \"%.100s\" does not match job \"%.100s\" (its run keys start with "
                 "\"%.100s@\")",
                 run_key, job, job);
        return -1;
    }
    if (begins_with_time(run_key + n + 1)) {
        if (warren_run_key_build(job, scheduled_at, canon, sizeof(canon), NULL) != 0) {
            snprintf(why, len, "\"%s\" must be whole seconds within years 1-9999", "scheduled_at");
            return -1;
        }
        if (strcmp(canon, run_key) != 0) {
            snprintf(why, len,
                     "\"run_key\" \"%.100s\" does not match job and scheduled_at (%.100s)", run_key,
                     canon);
            return -1;
        }
        return 0;
    }
    if (!warren_enqueue_key_valid(run_key + n + 1)) {
        snprintf(why, len,
                 "\"run_key\" \"%.100s\": \"%.100s\" is neither a time nor an enqueue key (1-200 "
                 "of [A-Za-z0-9._:/=+@-], first a letter or digit)",
                 run_key, run_key + n + 1);
        return -1;
    }
    if (strlen(run_key) > WARREN_RUN_KEY_LEN_MAX) {
        snprintf(why, len, "\"run_key\" is %zu bytes; at most %d", strlen(run_key),
                 WARREN_RUN_KEY_LEN_MAX);
        return -1;
    }
    if (s < KEY_MIN_S || s > KEY_MAX_S || scheduled_at % 1000 != 0) {
        snprintf(why, len,
                 "\"%s\" of an enqueued run must be whole milliseconds within years 1-9999",
                 "scheduled_at");
        return -1;
    }
    return 0;
}

int warren_run_msg_encode(const warren_run_msg *m, char **body, size_t *len, warren_error *err)
{
    char key[WARREN_RUN_KEY_MAX], sched[WARREN_TIME_BUF], due[WARREN_TIME_BUF], why[512];
    json_t *obj = NULL, *payload = NULL;
    json_error_t jerr;
    const char *rk;
    char *out;
    int rc;

    *body = NULL;
    if (m->run_key == NULL) {
        rc = warren_run_key_build(m->job, m->scheduled_at, key, sizeof(key), err);
        if (rc != 0)
            return rc;
        rk = key;
    } else {
        if (!warren_job_name_valid(m->job))
            return warren_error_set(err, WARREN_EINVAL,
                                    "\"%.80s\" cannot be a job name in a run key "
                                    "(allowed: [A-Za-z0-9][A-Za-z0-9._-]{0,199})",
                                    m->job ? m->job : "(null)");
        if (key_matches(m->job, m->run_key, m->scheduled_at, why, sizeof(why)) != 0)
            return warren_error_set(err, WARREN_EINVAL, "run key \"%.100s\": %s", m->run_key, why);
        rk = m->run_key;
    }
    if (m->attempt < 0)
        return warren_error_set(err, WARREN_EINVAL, "run %s: attempt %d is negative", rk,
                                m->attempt);
    /* A consumer parses due_at as RFC 3339: a year outside 1-9999 has no
     * such spelling (the key's scheduled_at was checked above). */
    if (warren_us_to_s(m->due_at) < KEY_MIN_S || warren_us_to_s(m->due_at) > KEY_MAX_S)
        return warren_error_set(err, WARREN_EINVAL,
                                "run %s: \"due_at\" is outside years 1-9999 (UTC), which a "
                                "message cannot spell (RFC 3339)",
                                rk);
    if (m->template_name != NULL && !warren_job_name_valid(m->template_name))
        return warren_error_set(err, WARREN_EINVAL, "run %s: \"%.80s\" is not a template name", rk,
                                m->template_name);
    if (m->tenant != NULL && !warren_tenant_valid(m->tenant))
        return warren_error_set(err, WARREN_EINVAL, "run %s: \"%.80s\" is not a tenant name", rk,
                                m->tenant);
    if (m->payload_json == NULL) {
        payload = json_object();
    } else {
        payload = json_loads(m->payload_json, JSON_REJECT_DUPLICATES, &jerr);
        /* jansson's own words and position: "too big integer near
         * '18446744073709551616'" says what to fix, where a generic "not a
         * JSON object" sends the reader looking for brackets. */
        if (payload == NULL)
            return warren_error_set(err, WARREN_EINVAL,
                                    "run %s: the payload cannot be carried in a message: %s (line "
                                    "%d, column %d); a message carries integers within int64, "
                                    "reals within double and at most 2048 levels of nesting",
                                    rk, jerr.text, jerr.line, jerr.column);
        if (!json_is_object(payload)) {
            json_decref(payload);
            return warren_error_set(err, WARREN_EINVAL, "run %s: payload is not a JSON object", rk);
        }
    }
    /* Whole seconds as before; an enqueued run's fractional instant with ms. */
    if (m->scheduled_at % WARREN_US_PER_S == 0)
        warren_time_format(m->scheduled_at, sched, sizeof(sched));
    else
        warren_time_format_ms(m->scheduled_at, sched, sizeof(sched));
    warren_time_format_ms(m->due_at, due, sizeof(due));
    obj = json_pack("{s:s, s:s, s:s, s:s, s:i, s:o}", "run_key", rk, "job", m->job, "scheduled_at",
                    sched, "due_at", due, "attempt", m->attempt, "payload", payload);
    if (obj != NULL && m->template_name != NULL &&
        json_object_set_new(obj, "template", json_string(m->template_name)) != 0) {
        json_decref(obj);
        obj = NULL;
    }
    if (obj != NULL && m->tenant != NULL &&
        json_object_set_new(obj, "tenant", json_string(m->tenant)) != 0) {
        json_decref(obj);
        obj = NULL;
    }
    if (obj == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory encoding run %s", rk);
    out = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(obj);
    if (out == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory encoding run %s", rk);
    *body = out;
    if (len != NULL)
        *len = strlen(out);
    return 0;
}

static int malformed(warren_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Every decode failure reads "malformed run message: ..." (a dead-letter reason). */
static int malformed(warren_error *err, const char *fmt, ...)
{
    char what[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return warren_error_set(err, WARREN_EMSG, "malformed run message: %s", what);
}

/* A required string field; *s borrowed from obj. */
static int get_string(json_t *obj, const char *field, const char **s, warren_error *err)
{
    json_t *v = json_object_get(obj, field);
    if (v == NULL)
        return malformed(err, "\"%s\" is missing", field);
    if (!json_is_string(v))
        return malformed(err, "\"%s\" must be a string", field);
    if (strlen(json_string_value(v)) != json_string_length(v))
        return malformed(err, "\"%s\" contains a NUL character", field);
    *s = json_string_value(v);
    return 0;
}

static int get_time(json_t *obj, const char *field, warren_us *t, warren_error *err)
{
    const char *s;
    int rc = get_string(obj, field, &s, err);
    if (rc != 0)
        return rc;
    if (warren_time_parse(s, t, NULL) != 0)
        return malformed(err, "\"%s\" is not an RFC 3339 time (\"%.60s\")", field, s);
    return 0;
}

/* An optional string field that must pass valid() when present (JSON null
 * counts as absent); *s borrowed from obj, NULL when absent. */
static int get_optional_name(json_t *obj, const char *field, int (*valid)(const char *),
                             const char *what, const char **s, warren_error *err)
{
    json_t *v = json_object_get(obj, field);
    int rc;

    *s = NULL;
    if (v == NULL || json_is_null(v))
        return 0;
    if ((rc = get_string(obj, field, s, err)) != 0)
        return rc;
    if (!valid(*s)) {
        *s = NULL;
        return malformed(err, "\"%s\" is not %s", field, what);
    }
    return 0;
}

int warren_run_msg_decode(const char *body, size_t len, warren_run_msg *out, warren_error *err)
{
    json_t *root = NULL, *v;
    json_error_t jerr;
    const char *key, *job, *tmpl = NULL, *tenant = NULL;
    warren_us sched, due;
    char why[512];
    json_int_t attempt;
    int rc = WARREN_EMSG;

    memset(out, 0, sizeof(*out));
    if (body == NULL || len == 0)
        return warren_error_set(err, WARREN_EMSG, "malformed run message: the body is empty");
    if (len > WARREN_MSG_MAX_BODY)
        return warren_error_set(err, WARREN_EMSG,
                                "malformed run message: the body is %zu bytes (limit %d)", len,
                                WARREN_MSG_MAX_BODY);
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return warren_error_set(err, WARREN_EMSG,
                                "malformed run message: not JSON (line %d, column %d: %s)",
                                jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        rc = warren_error_set(err, WARREN_EMSG,
                              "malformed run message: the body is not a JSON "
                              "object");
        goto fail;
    }
    if ((rc = get_string(root, "run_key", &key, err)) != 0 ||
        (rc = get_string(root, "job", &job, err)) != 0 ||
        (rc = get_time(root, "scheduled_at", &sched, err)) != 0 ||
        (rc = get_time(root, "due_at", &due, err)) != 0)
        goto fail;
    /* What encode writes: RFC 3339 spells years 1-9999 (UTC) only, and other
     * languages' consumers parse no other (found by tests/fuzz/fuzz_codec.c:
     * "0000-12-31T23:59:59.999Z" was accepted, then refused by encode). The
     * run key's check below bounds scheduled_at. */
    if (warren_us_to_s(due) < KEY_MIN_S || warren_us_to_s(due) > KEY_MAX_S) {
        rc = malformed(err, "\"%s\" is outside years 1-9999 (UTC)", "due_at");
        goto fail;
    }
    if (!warren_job_name_valid(job)) {
        rc = malformed(err, "\"job\" is not a valid job name (allowed: %s)",
                       "[A-Za-z0-9][A-Za-z0-9._-]{0,199}");
        goto fail;
    }
    if (key_matches(job, key, sched, why, sizeof(why)) != 0) {
        rc = malformed(err, "%s", why);
        goto fail;
    }
    if ((rc = get_optional_name(root, "template", warren_job_name_valid, "a job name", &tmpl,
                                err)) != 0 ||
        (rc = get_optional_name(root, "tenant", warren_tenant_valid, "a tenant name", &tenant,
                                err)) != 0)
        goto fail;
    v = json_object_get(root, "attempt");
    if (v == NULL) {
        rc = malformed(err, "\"%s\" is missing", "attempt");
        goto fail;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
        rc = malformed(err, "\"%s\" must be a non-negative integer", "attempt");
        goto fail;
    }
    attempt = json_integer_value(v);
    v = json_object_get(root, "payload");
    if (v == NULL) {
        rc = malformed(err, "\"%s\" is missing", "payload");
        goto fail;
    }
    if (!json_is_object(v)) {
        rc = malformed(err, "\"%s\" must be a JSON object", "payload");
        goto fail;
    }
    out->payload_json = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
    out->run_key = strdup(key);
    out->job = strdup(job);
    out->template_name = tmpl ? strdup(tmpl) : NULL;
    out->tenant = tenant ? strdup(tenant) : NULL;
    if (out->payload_json == NULL || out->run_key == NULL || out->job == NULL ||
        (tmpl != NULL && out->template_name == NULL) || (tenant != NULL && out->tenant == NULL)) {
        warren_run_msg_clear(out);
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory decoding a run message");
        goto fail;
    }
    out->scheduled_at = sched;
    out->due_at = due;
    out->attempt = (int)attempt;
    json_decref(root);
    return 0;
fail:
    json_decref(root);
    return rc;
}

int warren_json_object_check(const char *text, char **compact, warren_error *err)
{
    json_error_t jerr;
    json_t *v;

    if (compact != NULL)
        *compact = NULL;
    if (text == NULL)
        return warren_error_set(err, WARREN_EPARSE, "missing JSON");
    v = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (v == NULL)
        return warren_error_set(err, WARREN_EPARSE, "not valid JSON (line %d, column %d: %s)",
                                jerr.line, jerr.column, jerr.text);
    if (!json_is_object(v)) {
        json_decref(v);
        return warren_error_set(err, WARREN_EPARSE, "the payload must be a JSON object ({...})");
    }
    if (compact != NULL) {
        *compact = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (*compact == NULL) {
            json_decref(v);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        }
    }
    json_decref(v);
    return 0;
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if it is not one. */
static size_t utf8_seq(const unsigned char *p)
{
    size_t n;
    uint32_t cp;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2;
        cp = p[0] & 0x1f;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        cp = p[0] & 0x0f;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        cp = p[0] & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) /* also stops at the terminating NUL */
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

void warren__utf8_clean(char *s)
{
    unsigned char *p = (unsigned char *)s;

    if (p == NULL)
        return;
    while (*p != '\0') {
        size_t n = utf8_seq(p);
        if (n == 0)
            *p++ = '?';
        else
            p += n;
    }
}
