/* config.c: loads the libconfig file (DESIGN §8) into warren_config and
 * validates all of it, collecting every error as "FILE:LINE: job "NAME":
 * setting "retry.base": ..." rather than stopping at the first. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>
#include <libconfig.h>

#include <warren/codec.h>
#include <warren/config.h>
#include <warren/cron.h>
#include <warren/duration.h>
#include <warren/tz.h>

/* Defaults (documented in config.h, examples/warren.cfg and docs/config.md). */
#define DEF_DATABASE_URL "postgresql://localhost/warren"
#define DEF_AMQP_URL "amqp://guest:guest@localhost:5672/%2f"
#define DEF_DELIVERY_LIMIT 5
#define DEF_HORIZON_MS (2 * 60000)
#define DEF_TICK_MS 1000
#define DEF_MISFIRE_THRESHOLD_MS 60000
#define DEF_RECONCILE_GRACE_MS 30000
#define DEF_PARTITIONS 64
#define DEF_PUBLISH_BATCH 200
#define DEF_DELAY_RING 0
#define DEF_DELAY_QUEUE_EXPIRES_MS (10 * 60000)
#define DEF_EVENT_DEFER_MS 10000
#define DEF_RELEASE_LEAD_MS 3000
#define MAX_RELEASE_LEAD_MS 10000 /* below warren.wp_max_wait() (sql/009) */
#define DEF_CONCURRENCY 4
#define DEF_SHUTDOWN_GRACE_MS 30000
#define DEF_HEARTBEAT_MARGIN_MS 5000
#define DEF_TIMEZONE "UTC"
#define DEF_RETRY_MAX_ATTEMPTS 5
#define DEF_RETRY_BASE_MS 10000
#define DEF_RETRY_CAP_MS (10 * 60000)
#define DEF_LEASE_MS 30000
#define DEF_TIMEOUT_MS (30 * 60000)

/* A payload's JSON is capped so one job cannot bloat every message. */
#define PAYLOAD_MAX_BYTES (64 * 1024)
#define NAME_RULE                                                                                  \
    "allowed: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63 "     \
    "characters"

/* ---- names ---------------------------------------------------------------------------------- */

static const char *const misfire_names[] = {"run_once", "skip", "catch_up"};
static const char *const overlap_names[] = {"skip", "allow", "queue", "cancel_previous"};
static const char *const sched_names[] = {"cron", "every", "at"};
static const char *const handler_names[] = {"none", "exec", "sql", "c"};

const char *warren_misfire_name(warren_misfire m)
{
    return (unsigned)m < 3 ? misfire_names[m] : "unknown";
}

const char *warren_overlap_name(warren_overlap o)
{
    return (unsigned)o < 4 ? overlap_names[o] : "unknown";
}

const char *warren_sched_kind_name(warren_sched_kind k)
{
    return (unsigned)k < 3 ? sched_names[k] : "unknown";
}

const char *warren_handler_kind_name(warren_handler_kind k)
{
    return (unsigned)k < 4 ? handler_names[k] : "unknown";
}

int warren_misfire_from_name(const char *s, warren_misfire *out)
{
    for (int i = 0; s != NULL && i < 3; i++)
        if (strcmp(s, misfire_names[i]) == 0) {
            *out = (warren_misfire)i;
            return 0;
        }
    return WARREN_EINVAL;
}

int warren_overlap_from_name(const char *s, warren_overlap *out)
{
    for (int i = 0; s != NULL && i < 4; i++)
        if (strcmp(s, overlap_names[i]) == 0) {
            *out = (warren_overlap)i;
            return 0;
        }
    return WARREN_EINVAL;
}

/* ---- diagnostics ---------------------------------------------------------------------------- */

typedef struct diag {
    char *text;
    int file_rank; /* order in which files were first seen */
    int line;
    size_t seq;
} diag;

typedef struct loader {
    const char *path; /* as given */
    char *dir;        /* directory of path: @include and relative exec paths */
    char *absdir;     /* the same, absolute (for exec paths) */
    diag *diags;
    size_t ndiags, cap;
    char **files; /* distinct source files, in order seen */
    size_t nfiles;
    warren_tzdb *tzdb;
    size_t *names; /* open-addressing set of job index + 1, by name (duplicates) */
    size_t names_cap;
    int oom;
} loader;

void warren_diags_free(warren_diags *d)
{
    if (d == NULL)
        return;
    for (size_t i = 0; i < d->count; i++)
        free(d->items[i]);
    free(d->items);
    d->items = NULL;
    d->count = 0;
}

/* Writes s quoted as "..." with control characters and quotes escaped, cut at
 * 80 bytes: messages quote whatever the user wrote. */
static const char *quote(char *buf, size_t len, const char *s)
{
    size_t o = 0;
    size_t n = 0;

    if (s == NULL)
        s = "";
    buf[o++] = '"';
    for (; *s != '\0' && o + 8 < len; s++, n++) {
        unsigned char c = (unsigned char)*s;
        if (n == 80) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* The file a setting came from, as a path the user can open. libconfig
 * records @include'd files by the name written in the directive, which is
 * relative to the include directory (the main file's directory). */
static int file_rank(loader *L, const config_setting_t *s, const char **name)
{
    const char *f = s ? config_setting_source_file(s) : NULL;
    char *full;
    size_t i;

    if (f == NULL || strcmp(f, L->path) == 0) {
        *name = L->path;
        return 0;
    }
    if (f[0] == '/' || strcmp(L->dir, ".") == 0) {
        full = strdup(f);
    } else {
        size_t n = strlen(L->dir) + strlen(f) + 2;
        full = malloc(n);
        if (full != NULL)
            snprintf(full, n, "%s/%s", L->dir, f);
    }
    if (full == NULL) {
        L->oom = 1;
        *name = f;
        return 0;
    }
    for (i = 0; i < L->nfiles; i++)
        if (strcmp(L->files[i], full) == 0) {
            free(full);
            *name = L->files[i];
            return (int)i + 1;
        }
    char **nf = realloc(L->files, (L->nfiles + 1) * sizeof(*nf));
    if (nf == NULL) {
        free(full);
        L->oom = 1;
        *name = f;
        return 0;
    }
    L->files = nf;
    L->files[L->nfiles++] = full;
    *name = full;
    return (int)L->nfiles;
}

static void add_diag(loader *L, int rank, int line, char *text)
{
    if (text == NULL) {
        L->oom = 1;
        return;
    }
    if (L->ndiags == L->cap) {
        size_t ncap = L->cap ? L->cap * 2 : 16;
        diag *nd = realloc(L->diags, ncap * sizeof(*nd));
        if (nd == NULL) {
            free(text);
            L->oom = 1;
            return;
        }
        L->diags = nd;
        L->cap = ncap;
    }
    L->diags[L->ndiags].text = text;
    L->diags[L->ndiags].file_rank = rank;
    L->diags[L->ndiags].line = line;
    L->diags[L->ndiags].seq = L->ndiags;
    L->ndiags++;
}

static void report(loader *L, const config_setting_t *s, const char *who, const char *setting,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* One error: FILE:LINE: [who: ][setting "SETTING": ]message. */
static void report(loader *L, const config_setting_t *s, const char *who, const char *setting,
                   const char *fmt, ...)
{
    char msg[1024], head[512], qs[200];
    const char *file;
    int rank = file_rank(L, s, &file);
    int line = s ? (int)config_setting_source_line(s) : 0;
    va_list ap;
    char *text;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(head, sizeof(head), "%s:%d: ", file, line);
    else
        snprintf(head, sizeof(head), "%s: ", file);
    size_t n = strlen(head) + (who ? strlen(who) + 2 : 0) + strlen(msg) + 1 +
               (setting ? strlen(setting) + 220 : 0);
    text = malloc(n);
    if (text != NULL)
        snprintf(text, n, "%s%s%s%s%s%s%s", head, who ? who : "", who ? ": " : "",
                 setting ? "setting " : "", setting ? quote(qs, sizeof(qs), setting) : "",
                 setting ? ": " : "", msg);
    add_diag(L, rank, line, text);
}

static int diag_cmp(const void *a, const void *b)
{
    const diag *x = a, *y = b;
    if (x->file_rank != y->file_rank)
        return x->file_rank < y->file_rank ? -1 : 1;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->seq < y->seq ? -1 : (x->seq > y->seq);
}

/* ---- typed access --------------------------------------------------------------------------- */

static const char *type_name(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP:
        return "a group { ... }";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        return "an integer";
    case CONFIG_TYPE_FLOAT:
        return "a float";
    case CONFIG_TYPE_STRING:
        return "a string";
    case CONFIG_TYPE_BOOL:
        return "a boolean";
    case CONFIG_TYPE_ARRAY:
        return "an array [ ... ]";
    case CONFIG_TYPE_LIST:
        return "a list ( ... )";
    default:
        return "nothing";
    }
}

/* The context of a lookup: which job (or none), and the setting path prefix. */
typedef struct scope {
    const char *who;    /* `job "NAME"` or `job #3`, NULL for sections */
    const char *prefix; /* "planner", "retry", "" ... */
} scope;

static void path_of(char *buf, size_t len, const scope *sc, const char *name)
{
    if (sc->prefix && *sc->prefix)
        snprintf(buf, len, "%s.%s", sc->prefix, name);
    else
        snprintf(buf, len, "%s", name);
}

static int levenshtein(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    int row[64];

    if (la > 62 || lb > 62)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int cur = row[j];
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int v = prev + cost;
            if (row[j] + 1 < v)
                v = row[j] + 1;
            if (row[j - 1] + 1 < v)
                v = row[j - 1] + 1;
            row[j] = v;
            prev = cur;
        }
    }
    return row[lb];
}

/* The known name closest to s, or NULL if none is close enough to be a typo. */
static const char *nearest(const char *s, const char *const *known)
{
    const char *best = NULL;
    int bestd = 99;
    for (size_t i = 0; known[i] != NULL; i++) {
        int d = strcasecmp(s, known[i]) == 0 ? 0 : levenshtein(s, known[i]);
        if (d < bestd) {
            bestd = d;
            best = known[i];
        }
    }
    size_t n = strlen(s);
    int limit = n >= 8 ? 3 : n >= 5 ? 2 : 1;
    return bestd <= limit ? best : NULL;
}

static void check_known(loader *L, const config_setting_t *group, const scope *sc,
                        const char *const *known)
{
    char path[256], alt[256], q[200];
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(s);
        size_t k;
        if (name == NULL)
            continue;
        for (k = 0; known[k] != NULL; k++)
            if (strcmp(name, known[k]) == 0)
                break;
        if (known[k] != NULL)
            continue;
        path_of(path, sizeof(path), sc, name);
        const char *near = nearest(name, known);
        if (near != NULL) {
            char qa[200];
            path_of(alt, sizeof(alt), sc, near);
            report(L, s, sc->who, NULL, "unknown setting %s (did you mean %s?)",
                   quote(q, sizeof(q), path), quote(qa, sizeof(qa), alt));
        } else {
            report(L, s, sc->who, NULL, "unknown setting %s", quote(q, sizeof(q), path));
        }
    }
}

/* Returns the member or NULL; never reports. */
static config_setting_t *member(const config_setting_t *group, const char *name)
{
    return group ? config_setting_get_member(group, name) : NULL;
}

static void wrong_type(loader *L, const config_setting_t *s, const scope *sc, const char *name,
                       const char *want)
{
    char path[256];
    path_of(path, sizeof(path), sc, name);
    report(L, s, sc->who, path, "expected %s, got %s", want, type_name(s));
}

/* Each getter: 0 absent (out untouched), 1 present and valid, -1 reported. */
static int get_string(loader *L, const config_setting_t *g, const scope *sc, const char *name,
                      const char **out)
{
    const config_setting_t *s = member(g, name);
    char path[256];
    if (s == NULL)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        wrong_type(L, s, sc, name, "a string");
        return -1;
    }
    *out = config_setting_get_string(s);
    if (**out == '\0') {
        path_of(path, sizeof(path), sc, name);
        report(L, s, sc->who, path, "must not be empty");
        return -1;
    }
    return 1;
}

static int get_int(loader *L, const config_setting_t *g, const scope *sc, const char *name,
                   long long min, long long max, int *out)
{
    const config_setting_t *s = member(g, name);
    char path[256];
    long long v;
    if (s == NULL)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_INT && config_setting_type(s) != CONFIG_TYPE_INT64) {
        wrong_type(L, s, sc, name, "an integer");
        return -1;
    }
    v = config_setting_get_int64(s);
    if (v < min || v > max) {
        path_of(path, sizeof(path), sc, name);
        report(L, s, sc->who, path, "%lld is out of range %lld-%lld", v, min, max);
        return -1;
    }
    *out = (int)v;
    return 1;
}

static int get_bool(loader *L, const config_setting_t *g, const scope *sc, const char *name,
                    int *out)
{
    const config_setting_t *s = member(g, name);
    if (s == NULL)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
        wrong_type(L, s, sc, name, "a boolean (true or false)");
        return -1;
    }
    *out = config_setting_get_bool(s) ? 1 : 0;
    return 1;
}

#define DUR_WHOLE_SECONDS 0x1 /* the value is used in whole seconds */

/* The longest duration any setting takes: 100 years. Longer ones parse, but
 * the planner and worker turn durations into microseconds and add them to
 * instants, which would overflow int64 (a 10^11-day horizon did). */
#define DUR_MAX_MS (INT64_C(36500) * 86400000)
/* A lease is handed to workers in whole seconds as an int. */
#define LEASE_MAX_MS (INT64_C(2147483647) / 86400 * 86400 * 1000)

/* A duration string; min_ms is the smallest allowed value. */
static int get_duration(loader *L, const config_setting_t *g, const scope *sc, const char *name,
                        int64_t min_ms, unsigned flags, int64_t *out)
{
    const config_setting_t *s = member(g, name);
    char path[256], q[200], fmt[64];
    warren_error err = {0};
    int64_t v;
    if (s == NULL)
        return 0;
    path_of(path, sizeof(path), sc, name);
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        report(L, s, sc->who, path, "expected a duration string like \"30s\" or \"5m\", got %s",
               type_name(s));
        return -1;
    }
    const char *text = config_setting_get_string(s);
    if (warren_duration_parse(text, &v, &err) != 0) {
        report(L, s, sc->who, path, "%s", err.message);
        return -1;
    }
    if (v < min_ms) {
        report(L, s, sc->who, path, "%s is too short (at least %s)", quote(q, sizeof(q), text),
               warren_duration_format(min_ms, fmt, sizeof(fmt)));
        return -1;
    }
    if (v > DUR_MAX_MS) {
        report(L, s, sc->who, path, "%s is too long (at most %s)", quote(q, sizeof(q), text),
               warren_duration_format(DUR_MAX_MS, fmt, sizeof(fmt)));
        return -1;
    }
    if ((flags & DUR_WHOLE_SECONDS) && v % 1000 != 0) {
        report(L, s, sc->who, path, "%s must be a whole number of seconds",
               quote(q, sizeof(q), text));
        return -1;
    }
    *out = v;
    return 1;
}

/* A group member: NULL if absent or reported as the wrong type. */
static config_setting_t *get_group(loader *L, const config_setting_t *g, const scope *sc,
                                   const char *name)
{
    config_setting_t *s = member(g, name);
    if (s == NULL)
        return NULL;
    if (config_setting_type(s) != CONFIG_TYPE_GROUP) {
        wrong_type(L, s, sc, name, "a group { ... }");
        return NULL;
    }
    return s;
}

static char *dup_or_oom(loader *L, const char *s)
{
    char *d = strdup(s ? s : "");
    if (d == NULL)
        L->oom = 1;
    return d;
}

/* ---- sections ------------------------------------------------------------------------------- */

static const char *const top_known[] = {"database", "broker", "planner", "worker", "jobs", NULL};
static const char *const database_known[] = {"url", NULL};
static const char *const broker_known[] = {"url", "delivery_limit", NULL};
static const char *const planner_known[] = {
    "horizon",         "tick",          "misfire_threshold", "reconcile_grace",
    "partitions",      "publish_batch", "delay_ring",        "delay_queue_expires",
    "delay_ring_type", "event_defer",   "release_lead",      NULL};
static const char *const worker_known[] = {"concurrency", "shutdown_grace", "heartbeat_margin",
                                           "id", NULL};
static const char *const job_known[] = {"name",    "cron",    "every",   "at",      "timezone",
                                        "queue",   "payload", "handler", "misfire", "max_catch_up",
                                        "overlap", "jitter",  "retry",   "lease",   "timeout",
                                        "paused",  NULL};
static const char *const handler_known[] = {"exec", "shell", "sql", "c", NULL};
static const char *const retry_known[] = {"max_attempts", "base", "cap", NULL};

static int is_amqp_url(const char *u)
{
    return strncmp(u, "amqp://", 7) == 0 || strncmp(u, "amqps://", 8) == 0;
}

/* quote() of a URL with the password of its userinfo (SCHEME://USER:PASSWORD@)
 * shown as "***": messages go to terminals and logs, secrets must not. */
static const char *quote_url(char *buf, size_t len, const char *u)
{
    const char *s = strstr(u, "://"), *at = NULL, *colon = NULL;
    char masked[512];

    if (s != NULL) {
        s += 3;
        at = s + strcspn(s, "/?#@");
        colon = *at == '@' ? memchr(s, ':', (size_t)(at - s)) : NULL;
    }
    if (colon == NULL)
        return quote(buf, len, u);
    snprintf(masked, sizeof(masked), "%.*s:***%s", (int)(colon - u), u, at);
    return quote(buf, len, masked);
}

static void load_sections(loader *L, config_t *cf, warren_config *cfg)
{
    const config_setting_t *root = config_root_setting(cf);
    scope top = {NULL, ""};
    const config_setting_t *g;
    const char *s;
    char q[200], a[64], b[64];

    check_known(L, root, &top, top_known);

    scope db = {NULL, "database"};
    if ((g = get_group(L, root, &top, "database")) != NULL) {
        check_known(L, g, &db, database_known);
        if (get_string(L, g, &db, "url", &s) == 1) {
            free(cfg->database_url);
            cfg->database_url = dup_or_oom(L, s);
        }
    }

    scope br = {NULL, "broker"};
    if ((g = get_group(L, root, &top, "broker")) != NULL) {
        check_known(L, g, &br, broker_known);
        if (get_string(L, g, &br, "url", &s) == 1) {
            if (!is_amqp_url(s))
                report(
                    L, member(g, "url"), NULL, "broker.url",
                    "%s is not an AMQP URL (use e.g. \"amqp://guest:guest@localhost:5672/%%2f\")",
                    quote_url(q, sizeof(q), s));
            free(cfg->amqp_url);
            cfg->amqp_url = dup_or_oom(L, s);
        }
        get_int(L, g, &br, "delivery_limit", 1, 1000000, &cfg->delivery_limit);
    }

    scope pl = {NULL, "planner"};
    warren_planner_config *p = &cfg->planner;
    if ((g = get_group(L, root, &top, "planner")) != NULL) {
        check_known(L, g, &pl, planner_known);
        get_duration(L, g, &pl, "horizon", 1000, 0, &p->horizon_ms);
        get_duration(L, g, &pl, "tick", 10, 0, &p->tick_ms);
        get_duration(L, g, &pl, "misfire_threshold", 1000, 0, &p->misfire_threshold_ms);
        get_duration(L, g, &pl, "reconcile_grace", 1000, 0, &p->reconcile_grace_ms);
        get_int(L, g, &pl, "partitions", 1, 65536, &p->partitions);
        get_int(L, g, &pl, "publish_batch", 1, 100000, &p->publish_batch);
        get_int(L, g, &pl, "delay_ring", 0, 1024, &p->delay_ring);
        get_duration(L, g, &pl, "delay_queue_expires", 1000, 0, &p->delay_queue_expires_ms);
        get_duration(L, g, &pl, "event_defer", 0, 0, &p->event_defer_ms);
        if (get_duration(L, g, &pl, "release_lead", 0, 0, &p->release_lead_ms) == 1 &&
            p->release_lead_ms > MAX_RELEASE_LEAD_MS)
            report(L, member(g, "release_lead"), NULL, "planner.release_lead",
                   "%s is too long (at most %s: warren.claim waits at most 15 s for a run "
                   "released early)",
                   warren_duration_format(p->release_lead_ms, a, sizeof(a)),
                   warren_duration_format(MAX_RELEASE_LEAD_MS, b, sizeof(b)));
        if (get_string(L, g, &pl, "delay_ring_type", &s) == 1) {
            if (strcmp(s, "quorum") == 0)
                p->delay_ring_type = WARREN_DELAY_RING_QUORUM;
            else if (strcmp(s, "classic") == 0)
                p->delay_ring_type = WARREN_DELAY_RING_CLASSIC;
            else
                report(L, member(g, "delay_ring_type"), NULL, "planner.delay_ring_type",
                       "%s is not a delay ring type (use \"quorum\" or \"classic\")",
                       quote(q, sizeof(q), s));
            if (p->delay_ring == 0)
                report(L, member(g, "delay_ring_type"), NULL, "planner.delay_ring_type",
                       "has no effect without planner.delay_ring = N (the number of ring "
                       "queues; the default is a classic queue per due second)");
        }
        if (p->horizon_ms < p->tick_ms)
            report(L, member(g, "horizon") ? member(g, "horizon") : member(g, "tick"), NULL,
                   "planner.horizon",
                   "%s is shorter than planner.tick (%s): nothing could be "
                   "planned ahead",
                   warren_duration_format(p->horizon_ms, a, sizeof(a)),
                   warren_duration_format(p->tick_ms, b, sizeof(b)));
        /* A per-second delay queue must outlive every message published into it. */
        if (p->delay_queue_expires_ms <= p->horizon_ms)
            report(L,
                   member(g, "delay_queue_expires") ? member(g, "delay_queue_expires")
                                                    : member(g, "horizon"),
                   NULL, "planner.delay_queue_expires",
                   "%s must be longer than planner.horizon (%s), or delayed runs would be lost "
                   "with their queue",
                   warren_duration_format(p->delay_queue_expires_ms, a, sizeof(a)),
                   warren_duration_format(p->horizon_ms, b, sizeof(b)));
    }

    scope wk = {NULL, "worker"};
    warren_worker_config *w = &cfg->worker;
    if ((g = get_group(L, root, &top, "worker")) != NULL) {
        check_known(L, g, &wk, worker_known);
        get_int(L, g, &wk, "concurrency", 1, 4096, &w->concurrency);
        get_duration(L, g, &wk, "shutdown_grace", 0, 0, &w->shutdown_grace_ms);
        get_duration(L, g, &wk, "heartbeat_margin", 0, 0, &w->heartbeat_margin_ms);
        if (get_string(L, g, &wk, "id", &s) == 1)
            w->id = dup_or_oom(L, s);
    }
}

/* ---- payload -------------------------------------------------------------------------------- */

static json_t *to_json(loader *L, const config_setting_t *s, const scope *sc, const char *path)
{
    json_t *v = NULL;
    char sub[512];
    int n = config_setting_length(s);

    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP:
        v = json_object();
        for (int i = 0; v != NULL && i < n; i++) {
            const config_setting_t *c = config_setting_get_elem(s, (unsigned)i);
            snprintf(sub, sizeof(sub), "%s.%s", path, config_setting_name(c));
            json_t *cv = to_json(L, c, sc, sub);
            if (cv == NULL || json_object_set_new(v, config_setting_name(c), cv) != 0) {
                json_decref(v);
                return NULL;
            }
        }
        break;
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST:
        v = json_array();
        for (int i = 0; v != NULL && i < n; i++) {
            snprintf(sub, sizeof(sub), "%s[%d]", path, i);
            json_t *cv = to_json(L, config_setting_get_elem(s, (unsigned)i), sc, sub);
            if (cv == NULL || json_array_append_new(v, cv) != 0) {
                json_decref(v);
                return NULL;
            }
        }
        break;
    case CONFIG_TYPE_INT:
        v = json_integer(config_setting_get_int(s));
        break;
    case CONFIG_TYPE_INT64:
        v = json_integer(config_setting_get_int64(s));
        break;
    case CONFIG_TYPE_FLOAT:
        /* 1e999 reads as infinity, which JSON cannot spell (json_real refuses it). */
        if (!isfinite(config_setting_get_float(s))) {
            report(L, s, sc->who, path, "is not a finite number (JSON has no infinity or NaN)");
            return NULL;
        }
        v = json_real(config_setting_get_float(s));
        break;
    case CONFIG_TYPE_BOOL:
        v = json_boolean(config_setting_get_bool(s));
        break;
    case CONFIG_TYPE_STRING:
        v = json_string(config_setting_get_string(s));
        if (v == NULL) {
            report(L, s, sc->who, path, "is not valid UTF-8 (JSON strings must be)");
            return NULL;
        }
        break;
    default:
        break;
    }
    if (v == NULL)
        L->oom = 1;
    return v;
}

/* ---- jobs ----------------------------------------------------------------------------------- */

static void free_argv(char **argv)
{
    if (argv == NULL)
        return;
    for (char **a = argv; *a != NULL; a++)
        free(*a);
    free(argv);
}

static void job_clear(warren_job *j)
{
    free(j->name);
    free(j->schedule);
    free(j->timezone);
    free(j->queue);
    free(j->payload_json);
    free_argv(j->exec_argv);
    free(j->sql);
    free(j->c_handler);
    free(j->file);
    memset(j, 0, sizeof(*j));
}

/* argv[0] with a '/' that is not absolute is taken relative to the config
 * file's directory, like @include, so a config works from any directory. */
static char *resolve_exec(loader *L, const char *cmd)
{
    char *r;
    if (cmd[0] == '/' || strchr(cmd, '/') == NULL || L->absdir == NULL)
        return dup_or_oom(L, cmd);
    const char *c = cmd;
    while (c[0] == '.' && c[1] == '/')
        c += 2;
    size_t n = strlen(L->absdir) + strlen(c) + 2;
    r = malloc(n);
    if (r == NULL) {
        L->oom = 1;
        return NULL;
    }
    snprintf(r, n, "%s/%s", L->absdir, c);
    return r;
}

static void load_handler(loader *L, const config_setting_t *job, const scope *jsc, warren_job *j)
{
    config_setting_t *h = get_group(L, job, jsc, "handler");
    scope hs = {jsc->who, "handler"};
    const char *s;
    int shell = 0, kinds = 0;
    char q[200];

    if (h == NULL)
        return;
    check_known(L, h, &hs, handler_known);
    const config_setting_t *ex = member(h, "exec"), *sq = member(h, "sql"), *cc = member(h, "c");
    kinds = (ex != NULL) + (sq != NULL) + (cc != NULL);
    if (kinds == 0) {
        report(L, h, jsc->who, "handler",
               "needs one of \"exec\", \"sql\" or \"c\" (or leave the handler out when workers "
               "in another language serve the queue)");
        return;
    }
    if (kinds > 1) {
        report(L, h, jsc->who, "handler",
               "has more than one of \"exec\", \"sql\" and \"c\": keep exactly one");
        return;
    }
    int has_shell = get_bool(L, h, &hs, "shell", &shell);
    if (has_shell != 0 && ex == NULL)
        report(L, member(h, "shell"), jsc->who, "handler.shell",
               "applies only to an \"exec\" handler");
    if (ex != NULL) {
        j->handler = WARREN_HANDLER_EXEC;
        j->exec_shell = shell;
        if (config_setting_type(ex) == CONFIG_TYPE_STRING) {
            s = config_setting_get_string(ex);
            if (*s == '\0') {
                report(L, ex, jsc->who, "handler.exec", "must not be empty");
                return;
            }
            j->exec_argv = calloc(2, sizeof(char *));
            if (j->exec_argv == NULL) {
                L->oom = 1;
                return;
            }
            j->exec_argv[0] = shell ? dup_or_oom(L, s) : resolve_exec(L, s);
        } else if (config_setting_type(ex) == CONFIG_TYPE_ARRAY ||
                   config_setting_type(ex) == CONFIG_TYPE_LIST) {
            int n = config_setting_length(ex);
            if (n == 0) {
                report(L, ex, jsc->who, "handler.exec",
                       "is empty: give the command and its arguments, e.g. [\"/usr/bin/env\", "
                       "\"python3\", \"job.py\"]");
                return;
            }
            if (shell) {
                report(L, ex, jsc->who, "handler.exec",
                       "with shell = true must be one string (the shell command line)");
                return;
            }
            j->exec_argv = calloc((size_t)n + 1, sizeof(char *));
            if (j->exec_argv == NULL) {
                L->oom = 1;
                return;
            }
            for (int i = 0; i < n; i++) {
                const config_setting_t *e = config_setting_get_elem(ex, (unsigned)i);
                char path[64];
                snprintf(path, sizeof(path), "handler.exec[%d]", i);
                if (config_setting_type(e) != CONFIG_TYPE_STRING) {
                    report(L, e, jsc->who, path, "expected a string, got %s", type_name(e));
                    free_argv(j->exec_argv);
                    j->exec_argv = NULL;
                    return;
                }
                s = config_setting_get_string(e);
                if (i == 0 && *s == '\0') {
                    report(L, e, jsc->who, path, "the command must not be empty");
                    free_argv(j->exec_argv);
                    j->exec_argv = NULL;
                    return;
                }
                j->exec_argv[i] = i == 0 ? resolve_exec(L, s) : dup_or_oom(L, s);
            }
        } else {
            wrong_type(L, ex, &hs, "exec", "a string or a list of strings");
        }
    } else if (sq != NULL) {
        j->handler = WARREN_HANDLER_SQL;
        if (get_string(L, h, &hs, "sql", &s) == 1)
            j->sql = dup_or_oom(L, s);
    } else {
        j->handler = WARREN_HANDLER_C;
        if (get_string(L, h, &hs, "c", &s) == 1) {
            if (!warren_name_valid(s))
                report(L, cc, jsc->who, "handler.c", "%s is not a valid handler name (%s)",
                       quote(q, sizeof(q), s), NAME_RULE);
            else
                j->c_handler = dup_or_oom(L, s);
        }
    }
}

static void load_schedule(loader *L, const config_setting_t *job, const scope *jsc, warren_job *j)
{
    static const char *const kinds[] = {"cron", "every", "at"};
    const config_setting_t *found[3];
    int n = 0, which = -1;
    char q[200];
    warren_error err = {0};
    const char *s;

    for (int k = 0; k < 3; k++) {
        found[k] = member(job, kinds[k]);
        if (found[k] != NULL) {
            n++;
            if (which < 0)
                which = k;
        }
    }
    if (n == 0) {
        report(
            L, job, jsc->who, NULL,
            "needs a schedule: one of \"cron\", \"every\" or \"at\" (e.g. cron = \"0 9 * * *\")");
        return;
    }
    if (n > 1) {
        const config_setting_t *second = NULL;
        char names[64] = "";
        for (int k = 0; k < 3; k++) {
            if (found[k] == NULL)
                continue;
            if (second == NULL ||
                config_setting_source_line(found[k]) >= config_setting_source_line(second))
                second = found[k];
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s\"%s\"",
                     names[0] ? " and " : "", kinds[k]);
        }
        report(L, second, jsc->who, NULL,
               "has more than one schedule (%s): keep exactly one of \"cron\", \"every\" or "
               "\"at\"",
               names);
        return;
    }
    j->kind = (warren_sched_kind)which;
    if (which == WARREN_SCHED_EVERY) {
        if (get_duration(L, job, jsc, "every", 1000, DUR_WHOLE_SECONDS, &j->every_ms) != 1)
            return;
        j->schedule = dup_or_oom(L, config_setting_get_string(found[which]));
        return;
    }
    if (get_string(L, job, jsc, kinds[which], &s) != 1)
        return;
    j->schedule = dup_or_oom(L, s);
    if (which == WARREN_SCHED_AT) {
        warren_us t;
        if (warren_time_parse(s, &t, &err) != 0)
            report(L, found[which], jsc->who, "at", "%s", err.message);
        else if (t % WARREN_US_PER_S != 0)
            report(L, found[which], jsc->who, "at",
                   "%s must be whole seconds (run keys are JOB@TIME to the second)",
                   quote(q, sizeof(q), s));
        else
            j->at = t;
        return;
    }
    /* cron: the job name seeds H; an invalid name was already reported. */
    warren_cron *c = NULL;
    if (warren_cron_parse(s, warren_name_valid(j->name) ? j->name : NULL, &c, &err) != 0) {
        /* name the expression unless the parser's message already quotes it */
        if (strstr(err.message, s) != NULL)
            report(L, found[which], jsc->who, "cron", "%s", err.message);
        else
            report(L, found[which], jsc->who, "cron", "%s: %s", quote(q, sizeof(q), s),
                   err.message);
    }
    warren_cron_free(c);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* Adds job `index` to the name set; returns the earlier job with the same
 * name, or NULL. A hash set keeps 100,000-job files fast. */
static const warren_job *remember_name(loader *L, const warren_config *cfg, int index)
{
    const char *name = cfg->jobs[index].name;
    if (L->names == NULL)
        return NULL;
    size_t mask = L->names_cap - 1;
    for (size_t i = (size_t)fnv1a(name) & mask;; i = (i + 1) & mask) {
        if (L->names[i] == 0) {
            L->names[i] = (size_t)index + 1;
            return NULL;
        }
        const warren_job *o = &cfg->jobs[L->names[i] - 1];
        if (strcmp(o->name, name) == 0)
            return o;
    }
}

static void load_job(loader *L, const config_setting_t *job, int index, warren_config *cfg,
                     warren_job *j)
{
    char who[240], q[200], a[64], b[64];
    scope sc = {who, ""};
    const char *s;
    const config_setting_t *g;

    snprintf(who, sizeof(who), "job #%d", index + 1);
    j->line = (int)config_setting_source_line(job);
    const char *file;
    file_rank(L, job, &file);
    j->file = dup_or_oom(L, file);

    /* defaults */
    j->misfire = WARREN_MISFIRE_RUN_ONCE;
    j->overlap = WARREN_OVERLAP_SKIP;
    j->retry_max_attempts = DEF_RETRY_MAX_ATTEMPTS;
    j->retry_base_ms = DEF_RETRY_BASE_MS;
    j->retry_cap_ms = DEF_RETRY_CAP_MS;
    j->lease_ms = DEF_LEASE_MS;
    j->timeout_ms = DEF_TIMEOUT_MS;

    /* name first: it labels every other message about this job */
    const config_setting_t *ns = member(job, "name");
    if (ns == NULL) {
        report(L, job, who, NULL, "setting \"name\" is missing");
    } else if (get_string(L, job, &sc, "name", &s) == 1) {
        char qn[200];
        quote(qn, sizeof(qn), s);
        if (!warren_name_valid(s))
            report(L, ns, who, "name", "%s cannot be used as a job name (%s)", qn, NAME_RULE);
        snprintf(who, sizeof(who), "job %s", qn);
        j->name = dup_or_oom(L, s);
        const warren_job *first = j->name ? remember_name(L, cfg, index) : NULL;
        if (first != NULL)
            report(L, ns, NULL, NULL, "job %s is defined twice (first at %s:%d)", qn, first->file,
                   first->line);
    }

    check_known(L, job, &sc, job_known);
    load_schedule(L, job, &sc, j);

    j->timezone = dup_or_oom(L, DEF_TIMEZONE);
    if (get_string(L, job, &sc, "timezone", &s) == 1) {
        const warren_tz *tz;
        warren_error err = {0};
        free(j->timezone);
        j->timezone = dup_or_oom(L, s);
        if (L->tzdb == NULL)
            L->oom = 1;
        else if (warren_tzdb_get(L->tzdb, s, &tz, &err) != 0)
            report(L, member(job, "timezone"), who, "timezone", "%s", err.message);
    }

    const config_setting_t *qs = member(job, "queue");
    if (qs == NULL) {
        report(L, job, who, NULL,
               "setting \"queue\" is missing (the ready queue is warren.ready.<queue>; e.g. "
               "queue = \"default\")");
    } else if (get_string(L, job, &sc, "queue", &s) == 1) {
        if (!warren_name_valid(s))
            report(L, qs, who, "queue", "%s cannot be used as a queue name (%s)",
                   quote(q, sizeof(q), s), NAME_RULE);
        j->queue = dup_or_oom(L, s);
    }

    const config_setting_t *ps = member(job, "payload");
    if (ps == NULL) {
        j->payload_json = dup_or_oom(L, "{}");
    } else if (config_setting_type(ps) != CONFIG_TYPE_GROUP) {
        wrong_type(L, ps, &sc, "payload",
                   "a group { key = value; ... } (it becomes a JSON object)");
    } else {
        json_t *v = to_json(L, ps, &sc, "payload");
        if (v != NULL) {
            char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (text == NULL)
                L->oom = 1;
            else if (strlen(text) > PAYLOAD_MAX_BYTES)
                report(L, ps, who, "payload", "is %zu bytes as JSON (limit %d)", strlen(text),
                       PAYLOAD_MAX_BYTES);
            j->payload_json = text;
            json_decref(v);
        }
    }

    load_handler(L, job, &sc, j);

    int misfire_ok = 1;
    if ((g = member(job, "misfire")) != NULL) {
        int r = get_string(L, job, &sc, "misfire", &s);
        if (r == 1 && warren_misfire_from_name(s, &j->misfire) != 0)
            report(L, g, who, "misfire",
                   "%s is not a misfire policy (use one of: run_once, skip, catch_up)",
                   quote(q, sizeof(q), s));
        misfire_ok = r == 1 && warren_misfire_from_name(s, &j->misfire) == 0;
    }
    if (get_int(L, job, &sc, "max_catch_up", 0, 1000000, &j->max_catch_up) == 1 && misfire_ok &&
        j->misfire != WARREN_MISFIRE_CATCH_UP)
        report(L, member(job, "max_catch_up"), who, "max_catch_up",
               "applies only with misfire = \"catch_up\" (this job's is \"%s\")",
               warren_misfire_name(j->misfire));

    if ((g = member(job, "overlap")) != NULL && get_string(L, job, &sc, "overlap", &s) == 1 &&
        warren_overlap_from_name(s, &j->overlap) != 0)
        report(L, g, who, "overlap",
               "%s is not an overlap policy (use one of: skip, allow, queue, cancel_previous)",
               quote(q, sizeof(q), s));

    get_duration(L, job, &sc, "jitter", 0, DUR_WHOLE_SECONDS, &j->jitter_ms);

    if ((g = get_group(L, job, &sc, "retry")) != NULL) {
        scope rs = {who, "retry"};
        check_known(L, g, &rs, retry_known);
        get_int(L, g, &rs, "max_attempts", 1, 1000, &j->retry_max_attempts);
        int hb = get_duration(L, g, &rs, "base", 1, 0, &j->retry_base_ms);
        int hc = get_duration(L, g, &rs, "cap", 1, 0, &j->retry_cap_ms);
        if (hb >= 0 && hc >= 0 && j->retry_cap_ms < j->retry_base_ms)
            report(L, member(g, "cap") ? member(g, "cap") : member(g, "base"), who, "retry.cap",
                   "%s is shorter than retry.base (%s)",
                   warren_duration_format(j->retry_cap_ms, a, sizeof(a)),
                   warren_duration_format(j->retry_base_ms, b, sizeof(b)));
    }

    if (get_duration(L, job, &sc, "lease", 1000, DUR_WHOLE_SECONDS, &j->lease_ms) >= 0 &&
        j->lease_ms <= cfg->worker.heartbeat_margin_ms)
        report(L, member(job, "lease") ? member(job, "lease") : job, who, "lease",
               "%s must be longer than worker.heartbeat_margin (%s): a worker would stop every "
               "handler before its first heartbeat",
               warren_duration_format(j->lease_ms, a, sizeof(a)),
               warren_duration_format(cfg->worker.heartbeat_margin_ms, b, sizeof(b)));
    if (j->lease_ms > LEASE_MAX_MS)
        report(L, member(job, "lease"), who, "lease",
               "%s is too long (at most %s: warren.claim returns lease_seconds as an int)",
               warren_duration_format(j->lease_ms, a, sizeof(a)),
               warren_duration_format(LEASE_MAX_MS, b, sizeof(b)));
    get_duration(L, job, &sc, "timeout", 1, 0, &j->timeout_ms);
    get_bool(L, job, &sc, "paused", &j->paused);
}

static void load_jobs(loader *L, config_t *cf, warren_config *cfg)
{
    const config_setting_t *jobs = config_lookup(cf, "jobs");
    scope top = {NULL, ""};

    if (jobs == NULL)
        return;
    if (config_setting_type(jobs) != CONFIG_TYPE_LIST) {
        wrong_type(L, jobs, &top, "jobs", "a list ( { ... }, { ... } )");
        return;
    }
    int n = config_setting_length(jobs);
    if (n == 0)
        return;
    cfg->jobs = calloc((size_t)n, sizeof(warren_job));
    for (L->names_cap = 16; L->names_cap < 2 * (size_t)n; L->names_cap *= 2)
        ;
    L->names = calloc(L->names_cap, sizeof(size_t));
    if (cfg->jobs == NULL || L->names == NULL) {
        L->oom = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *job = config_setting_get_elem(jobs, (unsigned)i);
        cfg->njobs = (size_t)i + 1;
        if (config_setting_type(job) != CONFIG_TYPE_GROUP) {
            char who[32];
            snprintf(who, sizeof(who), "job #%d", i + 1);
            report(L, job, who, NULL, "expected a group { name = ...; ... }, got %s",
                   type_name(job));
            continue;
        }
        load_job(L, job, i, cfg, &cfg->jobs[i]);
    }
}

/* ---- loading -------------------------------------------------------------------------------- */

static void apply_env(loader *L, warren_config *cfg)
{
    const char *v = getenv("WARREN_DATABASE_URL");
    char q[200];
    if (v != NULL && *v != '\0') {
        free(cfg->database_url);
        cfg->database_url = dup_or_oom(L, v);
    }
    v = getenv("WARREN_AMQP_URL");
    if (v != NULL && *v != '\0') {
        free(cfg->amqp_url);
        cfg->amqp_url = dup_or_oom(L, v);
        if (!is_amqp_url(v)) {
            char *text = malloc(300);
            if (text != NULL)
                snprintf(text, 300,
                         "environment WARREN_AMQP_URL: %s is not an AMQP URL (use e.g. "
                         "\"amqp://guest:guest@localhost:5672/%%2f\")",
                         quote_url(q, sizeof(q), v));
            add_diag(L, -1, 0, text);
        }
    }
}

void warren_config_free(warren_config *cfg)
{
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->njobs; i++)
        job_clear(&cfg->jobs[i]);
    free(cfg->jobs);
    free(cfg->name_index);
    free(cfg->path);
    free(cfg->database_url);
    free(cfg->amqp_url);
    free(cfg->worker.id);
    free(cfg);
}

static void set_defaults(loader *L, warren_config *cfg)
{
    cfg->database_url = dup_or_oom(L, DEF_DATABASE_URL);
    cfg->amqp_url = dup_or_oom(L, DEF_AMQP_URL);
    cfg->delivery_limit = DEF_DELIVERY_LIMIT;
    cfg->planner.horizon_ms = DEF_HORIZON_MS;
    cfg->planner.tick_ms = DEF_TICK_MS;
    cfg->planner.misfire_threshold_ms = DEF_MISFIRE_THRESHOLD_MS;
    cfg->planner.reconcile_grace_ms = DEF_RECONCILE_GRACE_MS;
    cfg->planner.partitions = DEF_PARTITIONS;
    cfg->planner.publish_batch = DEF_PUBLISH_BATCH;
    cfg->planner.delay_ring = DEF_DELAY_RING;
    cfg->planner.delay_ring_type = WARREN_DELAY_RING_QUORUM;
    cfg->planner.delay_queue_expires_ms = DEF_DELAY_QUEUE_EXPIRES_MS;
    cfg->planner.event_defer_ms = DEF_EVENT_DEFER_MS;
    cfg->planner.release_lead_ms = DEF_RELEASE_LEAD_MS;
    cfg->worker.concurrency = DEF_CONCURRENCY;
    cfg->worker.shutdown_grace_ms = DEF_SHUTDOWN_GRACE_MS;
    cfg->worker.heartbeat_margin_ms = DEF_HEARTBEAT_MARGIN_MS;
}

/* libconfig says "cannot open include file" without naming it: read the
 * directive back from the line and say where it was looked for. */
static void include_hint(const char *file, int line, const char *dir, char *out, size_t len)
{
    char buf[1024], q[200];
    FILE *f = fopen(file, "r");
    int n = 0;

    snprintf(out, len, " (@include paths are relative to the directory of the main file, %s)", dir);
    if (f == NULL)
        return;
    while (fgets(buf, sizeof(buf), f) != NULL)
        if (++n == line) {
            char *a = strstr(buf, "@include"), *b, *e;
            if (a != NULL && (b = strchr(a, '"')) != NULL && (e = strchr(b + 1, '"')) != NULL) {
                *e = '\0';
                snprintf(out, len,
                         " %s (@include paths are relative to the directory of the main "
                         "file, %s)",
                         quote(q, sizeof(q), b + 1), dir);
            }
            break;
        }
    fclose(f);
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    char *d = malloc((size_t)(slash - path) + 1);
    if (d != NULL) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = '\0';
    }
    return d;
}

int warren_config_load(const char *path, warren_config **out, warren_diags *diags,
                       warren_error *err)
{
    loader L;
    config_t cf;
    warren_config *cfg = NULL;
    int rc = 0;
    FILE *f;
    struct stat st = {0};

    *out = NULL;
    if (diags != NULL) {
        diags->items = NULL;
        diags->count = 0;
    }
    if (path == NULL || *path == '\0')
        return warren_error_set(err, WARREN_EINVAL, "no configuration file given");
    memset(&L, 0, sizeof(L));
    L.path = path;
    L.dir = dir_of(path);
    L.absdir = L.dir ? realpath(L.dir, NULL) : NULL;
    L.tzdb = warren_tzdb_new(NULL);
    config_init(&cf);
    if (L.dir == NULL) {
        L.oom = 1;
        goto done;
    }
    config_set_include_dir(&cf, L.dir);

    /* libconfig says only "file I/O error": ask the system ourselves. */
    f = fopen(path, "r");
    if (f == NULL || stat(path, &st) != 0 || S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + 300;
        char *text = malloc(n);
        if (text != NULL)
            snprintf(text, n, "%s: cannot read the configuration: %s", path,
                     f != NULL && S_ISDIR(st.st_mode) ? "it is a directory" : strerror(errno));
        add_diag(&L, 0, 0, text);
        if (f != NULL)
            fclose(f);
        goto done;
    }
    fclose(f);
    if (config_read_file(&cf, path) != CONFIG_TRUE) {
        const char *ef = config_error_file(&cf);
        const char *et = config_error_text(&cf);
        size_t n = (ef ? strlen(ef) : 0) + strlen(L.dir) * 2 + strlen(path) + strlen(et) + 600;
        char *text = malloc(n);
        char full[4096];
        if (ef == NULL || strcmp(ef, path) == 0 || ef[0] == '/' || strcmp(L.dir, ".") == 0)
            snprintf(full, sizeof(full), "%s", ef ? ef : path);
        else
            snprintf(full, sizeof(full), "%s/%s", L.dir, ef);
        if (text != NULL) {
            char inc[300] = "";
            if (strstr(et, "include") != NULL)
                include_hint(full, config_error_line(&cf), L.dir, inc, sizeof(inc));
            if (config_error_line(&cf) > 0)
                snprintf(text, n, "%s:%d: %s%s", full, config_error_line(&cf), et, inc);
            else
                snprintf(text, n, "%s: %s%s", full, et, inc);
        }
        add_diag(&L, 0, config_error_line(&cf), text);
        goto done;
    }

    cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL) {
        L.oom = 1;
        goto done;
    }
    cfg->path = dup_or_oom(&L, path);
    set_defaults(&L, cfg);
    load_sections(&L, &cf, cfg);
    load_jobs(&L, &cf, cfg);
    apply_env(&L, cfg);

done:
    config_destroy(&cf);
    if (L.oom) {
        rc = warren_error_set(err, WARREN_ENOMEM, "%s: out of memory loading the configuration",
                              path);
    } else if (L.ndiags > 0) {
        qsort(L.diags, L.ndiags, sizeof(*L.diags), diag_cmp);
        if (L.ndiags == 1)
            warren_error_set(err, WARREN_ECONFIG, "%s", L.diags[0].text);
        else
            warren_error_set(err, WARREN_ECONFIG, "%s (and %zu more error%s)", L.diags[0].text,
                             L.ndiags - 1, L.ndiags == 2 ? "" : "s");
        rc = WARREN_ECONFIG;
    }
    if (rc == 0) {
        /* the duplicate-name set becomes the lookup index */
        cfg->name_index = L.names;
        cfg->name_index_cap = L.names_cap;
        L.names = NULL;
        *out = cfg;
        cfg = NULL;
    }
    /* Hand the messages over (or free them). */
    if (diags != NULL && L.ndiags > 0 && !L.oom) {
        diags->items = calloc(L.ndiags, sizeof(char *));
        if (diags->items != NULL) {
            for (size_t i = 0; i < L.ndiags; i++)
                diags->items[i] = L.diags[i].text;
            diags->count = L.ndiags;
            L.ndiags = 0;
        }
    }
    for (size_t i = 0; i < L.ndiags; i++)
        free(L.diags[i].text);
    free(L.diags);
    for (size_t i = 0; i < L.nfiles; i++)
        free(L.files[i]);
    free(L.files);
    free(L.dir);
    free(L.absdir);
    free(L.names);
    warren_tzdb_free(L.tzdb);
    warren_config_free(cfg);
    return rc;
}

const warren_job *warren_config_job(const warren_config *cfg, const char *name)
{
    if (cfg == NULL || name == NULL || cfg->name_index == NULL)
        return NULL;
    size_t mask = cfg->name_index_cap - 1;
    for (size_t i = (size_t)fnv1a(name) & mask; cfg->name_index[i] != 0; i = (i + 1) & mask) {
        const warren_job *j = &cfg->jobs[cfg->name_index[i] - 1];
        if (strcmp(j->name, name) == 0)
            return j;
    }
    return NULL;
}

const char **warren_config_queues(const warren_config *cfg, size_t *n)
{
    const char **qs = calloc(cfg->njobs ? cfg->njobs : 1, sizeof(char *));
    size_t k = 0;

    *n = 0;
    if (qs == NULL)
        return NULL;
    for (size_t i = 0; i < cfg->njobs; i++) {
        size_t m;
        for (m = 0; m < k; m++)
            if (strcmp(qs[m], cfg->jobs[i].queue) == 0)
                break;
        if (m == k)
            qs[k++] = cfg->jobs[i].queue;
    }
    *n = k;
    return qs;
}
