/* config.c: loads the libconfig file (docs/design.md §8) into warren_config and
 * validates all of it, collecting every error as "FILE:LINE: job "NAME":
 * setting "retry.base": ..." rather than stopping at the first. Each section's
 * settings are declared once, in a table (config_int.h) that drives parsing,
 * defaults, bounds and "did you mean"; structured settings (schedules,
 * payload, handler) have dedicated code the table points to. */
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
#include <warren/hash.h>
#include <warren/tz.h>

#include "config_int.h"

/* Every setting's default and bounds are in the tables below; these two have reasons. */
#define MAX_RELEASE_LEAD_MS                                                                        \
    10000 /* planner.release_lead: below warren.wp_max_wait() (sql/functions/claim.sql) */

/* A payload's JSON is capped so one job cannot bloat every message. */
#define PAYLOAD_MAX_BYTES (64 * 1024)
#define NAME_RULE                                                                                  \
    "allowed: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63 "     \
    "characters"
/* Job names are longer (warren.jobs.name, migration 012): a tenant-scoped
 * API job name such as usage-report.tenant-4711 needs the room. */
#define JOB_NAME_MAX 200
#define JOB_NAME_RULE                                                                              \
    "allowed: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 200 "    \
    "characters"

/* ---- names ---------------------------------------------------------------------------------- */

/* Each enum's names, indexed by value (NULL-terminated: the settings tables use them too). */
static const char *const misfire_names[] = {"run_once", "skip", "catch_up", NULL};
static const char *const overlap_names[] = {"skip", "allow", "queue", "cancel_previous", NULL};
static const char *const sched_names[] = {"cron", "every", "at", NULL};
static const char *const handler_names[] = {"none", "exec", "sql", "c", NULL};
static const char *const delay_ring_type_names[] = {"quorum", "classic", NULL};

_Static_assert(WARREN_MISFIRE_CATCH_UP == 2 && WARREN_OVERLAP_CANCEL_PREVIOUS == 3 &&
                   WARREN_SCHED_AT == 2 && WARREN_HANDLER_C == 3 && WARREN_DELAY_RING_QUORUM == 0 &&
                   WARREN_DELAY_RING_CLASSIC == 1,
               "the name arrays are indexed by value");
/* ENUM settings are stored through an int *. */
_Static_assert(sizeof(warren_misfire) == sizeof(int) && sizeof(warren_overlap) == sizeof(int),
               "enums are int-sized");

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *name_of(const char *const *names, size_t n, unsigned v)
{
    return v < n - 1 ? names[v] : "unknown";
}

/* The index of s in names, or -1. */
static int index_of(const char *const *names, const char *s)
{
    for (int i = 0; s != NULL && names[i] != NULL; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

const char *warren_misfire_name(warren_misfire m)
{
    return name_of(misfire_names, COUNT(misfire_names), (unsigned)m);
}

const char *warren_overlap_name(warren_overlap o)
{
    return name_of(overlap_names, COUNT(overlap_names), (unsigned)o);
}

const char *warren_sched_kind_name(warren_sched_kind k)
{
    return name_of(sched_names, COUNT(sched_names), (unsigned)k);
}

const char *warren_handler_kind_name(warren_handler_kind k)
{
    return name_of(handler_names, COUNT(handler_names), (unsigned)k);
}

int warren_misfire_from_name(const char *s, warren_misfire *out)
{
    int i = index_of(misfire_names, s);
    if (i < 0)
        return WARREN_EINVAL;
    *out = (warren_misfire)i;
    return 0;
}

int warren_overlap_from_name(const char *s, warren_overlap *out)
{
    int i = index_of(overlap_names, s);
    if (i < 0)
        return WARREN_EINVAL;
    *out = (warren_overlap)i;
    return 0;
}

int warren_sched_kind_from_name(const char *s, warren_sched_kind *out)
{
    int i = index_of(sched_names, s);
    if (i < 0)
        return WARREN_EINVAL;
    *out = (warren_sched_kind)i;
    return 0;
}

/* 1 if s can be a job name: [A-Za-z0-9][A-Za-z0-9._-]{0,199} (queue and
 * handler names keep warren_name_valid's 63). */
static int job_name_valid(const char *s)
{
    size_t n;

    if (s == NULL || s[0] == '\0')
        return 0;
    for (n = 0; s[n] != '\0'; n++) {
        char c = s[n];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if ((!alnum && (n == 0 || (c != '.' && c != '_' && c != '-'))) || n >= JOB_NAME_MAX)
            return 0;
    }
    return 1;
}

/* ---- diagnostics ---------------------------------------------------------------------------- */

typedef struct diag {
    char *text;
    int file_rank; /* order in which files were first seen */
    int line;
    size_t seq;
} diag;

typedef struct warren__loader {
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
    warren_config *cfg; /* being loaded */
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
typedef struct warren__scope {
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

/* The setting of sec closest to s, or NULL if none is close enough to be a typo. */
static const char *nearest(const char *s, const warren__section *sec)
{
    const char *best = NULL;
    int bestd = 99;
    for (size_t i = 0; i < sec->count; i++) {
        const char *known = sec->settings[i].name;
        int d = strcasecmp(s, known) == 0 ? 0 : levenshtein(s, known);
        if (d < bestd) {
            bestd = d;
            best = known;
        }
    }
    size_t n = strlen(s);
    int limit = n >= 8 ? 3 : n >= 5 ? 2 : 1;
    return bestd <= limit ? best : NULL;
}

/* The index of name in sec, or -1. */
static int setting_index(const warren__section *sec, const char *name)
{
    for (size_t k = 0; k < sec->count; k++)
        if (strcmp(name, sec->settings[k].name) == 0)
            return (int)k;
    return -1;
}

/* Reports every member of group that is not a setting of sec. */
static void check_known(loader *L, const config_setting_t *group, const scope *sc,
                        const warren__section *sec)
{
    char path[256], alt[256], q[200];
    for (int i = 0; i < config_setting_length(group); i++) {
        const config_setting_t *s = config_setting_get_elem(group, (unsigned)i);
        const char *name = config_setting_name(s);
        if (name == NULL || setting_index(sec, name) >= 0)
            continue;
        path_of(path, sizeof(path), sc, name);
        const char *near = nearest(name, sec);
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

#define DUR_WHOLE_SECONDS WARREN__SET_WHOLE_SECONDS /* the value is used in whole seconds */

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

/* ---- the settings tables' engine -------------------------------------------------------- */

/* Sets every setting of sec (and of its groups) in base, a zeroed struct, to its default. */
static void apply_defaults(loader *L, const warren__section *sec, void *base)
{
    for (size_t i = 0; i < sec->count; i++) {
        const warren__setting *st = &sec->settings[i];
        void *f = (char *)base + st->offset;
        switch (st->type) {
        case WARREN__SET_STRING:
            if (st->def_str != NULL)
                *(char **)f = dup_or_oom(L, st->def_str);
            break;
        case WARREN__SET_INT:
        case WARREN__SET_BOOL:
        case WARREN__SET_ENUM:
            *(int *)f = (int)st->def;
            break;
        case WARREN__SET_DURATION:
            *(int64_t *)f = st->def;
            break;
        case WARREN__SET_GROUP:
            apply_defaults(L, st->group, f);
            break;
        case WARREN__SET_CUSTOM:
            break;
        }
    }
}

static void load_group(loader *L, const config_setting_t *g, const scope *sc,
                       const warren__section *sec, void *base);

/* Parses setting st of group g into base: 0 absent (the default stays), 1
 * valid, -1 reported, -2 (ENUM) a string that is none of its names. */
static int parse_setting(loader *L, const config_setting_t *g, const scope *sc,
                         const warren__setting *st, void *base)
{
    void *f = (char *)base + st->offset;
    char path[256], q[200], a[64], b[64];
    const char *s;
    int64_t v;
    int r;

    switch (st->type) {
    case WARREN__SET_STRING:
        if ((r = get_string(L, g, sc, st->name, &s)) == 1) {
            free(*(char **)f);
            *(char **)f = dup_or_oom(L, s);
        }
        return r;
    case WARREN__SET_INT:
        return get_int(L, g, sc, st->name, st->min, st->max, (int *)f);
    case WARREN__SET_BOOL:
        return get_bool(L, g, sc, st->name, (int *)f);
    case WARREN__SET_DURATION:
        if ((r = get_duration(L, g, sc, st->name, st->min, st->flags, &v)) != 1)
            return r;
        if (st->max > 0 && v > st->max) {
            path_of(path, sizeof(path), sc, st->name);
            report(L, member(g, st->name), sc->who, path, "%s is too long (at most %s: %s)",
                   warren_duration_format(v, a, sizeof(a)),
                   warren_duration_format(st->max, b, sizeof(b)), st->what);
            return -1;
        }
        *(int64_t *)f = v;
        return 1;
    case WARREN__SET_ENUM:
        if ((r = get_string(L, g, sc, st->name, &s)) != 1)
            return r;
        if ((r = index_of(st->names, s)) >= 0) {
            *(int *)f = r;
            return 1;
        }
        path_of(path, sizeof(path), sc, st->name);
        report(L, member(g, st->name), sc->who, path, "%s is not %s", quote(q, sizeof(q), s),
               st->what);
        return -2;
    case WARREN__SET_GROUP: {
        const config_setting_t *sub = get_group(L, g, sc, st->name);
        if (sub == NULL)
            return member(g, st->name) != NULL ? -1 : 0;
        path_of(path, sizeof(path), sc, st->name);
        scope ss = {sc->who, path};
        load_group(L, sub, &ss, st->group, f);
        return 1;
    }
    case WARREN__SET_CUSTOM:
        if (st->fn != NULL)
            st->fn(L, g, sc, base, 0);
        return member(g, st->name) != NULL;
    }
    return 0;
}

/* Loads group g by table sec into base: unknown settings, then each setting
 * in table order (so errors on one line keep that order), then sec's checks
 * across settings. */
static void load_group(loader *L, const config_setting_t *g, const scope *sc,
                       const warren__section *sec, void *base)
{
    int status[WARREN__SECTION_MAX];

    check_known(L, g, sc, sec);
    for (size_t i = 0; i < sec->count && i < WARREN__SECTION_MAX; i++) {
        const warren__setting *st = &sec->settings[i];
        status[i] = parse_setting(L, g, sc, st, base);
        if (st->type != WARREN__SET_CUSTOM && st->fn != NULL)
            st->fn(L, g, sc, base, status[i]);
    }
    if (sec->finish != NULL)
        sec->finish(L, g, sc, base, status);
}

/* What the parse of setting name of sec found (status as load_group keeps it). */
static int status_of(const warren__section *sec, const int *status, const char *name)
{
    int i = setting_index(sec, name);
    return i >= 0 ? status[i] : 0;
}

/* ---- sections ------------------------------------------------------------------------------- */

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

static void check_broker_url(loader *L, const config_setting_t *g, const scope *sc, void *base,
                             int status)
{
    const warren_config *cfg = base;
    char q[200];

    (void)sc;
    if (status == 1 && cfg->amqp_url != NULL && !is_amqp_url(cfg->amqp_url))
        report(L, member(g, "url"), NULL, "broker.url",
               "%s is not an AMQP URL (use e.g. \"amqp://guest:guest@localhost:5672/%%2f\")",
               quote_url(q, sizeof(q), cfg->amqp_url));
}

/* A type string (valid or not) without a ring is reported too. */
static void check_delay_ring_type(loader *L, const config_setting_t *g, const scope *sc, void *base,
                                  int status)
{
    const warren_planner_config *p = base;

    (void)sc;
    if ((status == 1 || status == -2) && p->delay_ring == 0)
        report(L, member(g, "delay_ring_type"), NULL, "planner.delay_ring_type",
               "has no effect without planner.delay_ring = N (the number of ring "
               "queues; the default is a classic queue per due second)");
}

static void check_planner(loader *L, const config_setting_t *g, const scope *sc, void *base,
                          const int *status)
{
    const warren_planner_config *p = base;
    char a[64], b[64];

    (void)sc;
    (void)status;
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

/* The handler group's settings depend on each other: parsed here, after the
 * unknown ones were reported. hsc is the handler's scope. */
static void load_handler(loader *L, const config_setting_t *h, const scope *hsc, void *base,
                         const int *status)
{
    warren_job *j = base;
    const char *s;
    int shell = 0, kinds = 0;
    char q[200];

    (void)status;
    const config_setting_t *ex = member(h, "exec"), *sq = member(h, "sql"), *cc = member(h, "c");
    kinds = (ex != NULL) + (sq != NULL) + (cc != NULL);
    if (kinds == 0) {
        report(L, h, hsc->who, "handler",
               "needs one of \"exec\", \"sql\" or \"c\" (or leave the handler out when workers "
               "in another language serve the queue)");
        return;
    }
    if (kinds > 1) {
        report(L, h, hsc->who, "handler",
               "has more than one of \"exec\", \"sql\" and \"c\": keep exactly one");
        return;
    }
    int has_shell = get_bool(L, h, hsc, "shell", &shell);
    if (has_shell != 0 && ex == NULL)
        report(L, member(h, "shell"), hsc->who, "handler.shell",
               "applies only to an \"exec\" handler");
    if (ex != NULL) {
        j->handler = WARREN_HANDLER_EXEC;
        j->exec_shell = shell;
        if (config_setting_type(ex) == CONFIG_TYPE_STRING) {
            s = config_setting_get_string(ex);
            if (*s == '\0') {
                report(L, ex, hsc->who, "handler.exec", "must not be empty");
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
                report(L, ex, hsc->who, "handler.exec",
                       "is empty: give the command and its arguments, e.g. [\"/usr/bin/env\", "
                       "\"python3\", \"job.py\"]");
                return;
            }
            if (shell) {
                report(L, ex, hsc->who, "handler.exec",
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
                    report(L, e, hsc->who, path, "expected a string, got %s", type_name(e));
                    free_argv(j->exec_argv);
                    j->exec_argv = NULL;
                    return;
                }
                s = config_setting_get_string(e);
                if (i == 0 && *s == '\0') {
                    report(L, e, hsc->who, path, "the command must not be empty");
                    free_argv(j->exec_argv);
                    j->exec_argv = NULL;
                    return;
                }
                j->exec_argv[i] = i == 0 ? resolve_exec(L, s) : dup_or_oom(L, s);
            }
        } else {
            wrong_type(L, ex, hsc, "exec", "a string or a list of strings");
        }
    } else if (sq != NULL) {
        j->handler = WARREN_HANDLER_SQL;
        if (get_string(L, h, hsc, "sql", &s) == 1)
            j->sql = dup_or_oom(L, s);
    } else {
        j->handler = WARREN_HANDLER_C;
        if (get_string(L, h, hsc, "c", &s) == 1) {
            if (!warren_name_valid(s))
                report(L, cc, hsc->who, "handler.c", "%s is not a valid handler name (%s)",
                       quote(q, sizeof(q), s), NAME_RULE);
            else
                j->c_handler = dup_or_oom(L, s);
        }
    }
}

/* cron, every and at: exactly one. */
static void load_schedule(loader *L, const config_setting_t *job, const scope *jsc, void *base,
                          int status)
{
    warren_job *j = base;
    static const char *const kinds[] = {"cron", "every", "at"};
    const config_setting_t *found[3];
    int n = 0, which = -1;
    char q[200];
    warren_error err = {0};
    const char *s;

    (void)status;
    for (int k = 0; k < 3; k++) {
        found[k] = member(job, kinds[k]);
        if (found[k] != NULL) {
            n++;
            if (which < 0)
                which = k;
        }
    }
    /* "template" is parsed before this (table order). */
    if (j->is_template) {
        if (n > 0)
            report(L, found[which], jsc->who, kinds[which],
                   "a template (template = true) has no schedule: its API jobs get theirs from "
                   "warren.upsert_job; remove \"%s\" (or drop template = true to make this a "
                   "scheduled job)",
                   kinds[which]);
        return;
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
    if (warren_cron_parse(s, job_name_valid(j->name) ? j->name : NULL, &c, &err) != 0) {
        /* name the expression unless the parser's message already quotes it */
        if (strstr(err.message, s) != NULL)
            report(L, found[which], jsc->who, "cron", "%s", err.message);
        else
            report(L, found[which], jsc->who, "cron", "%s: %s", quote(q, sizeof(q), s),
                   err.message);
    }
    warren_cron_free(c);
}

/* Adds job `index` to the name set; returns the earlier job with the same
 * name, or NULL. A hash set keeps 100,000-job files fast. */
static const warren_job *remember_name(loader *L, const warren_config *cfg, int index)
{
    const char *name = cfg->jobs[index].name;
    if (L->names == NULL)
        return NULL;
    size_t mask = L->names_cap - 1;
    for (size_t i = (size_t)warren_hash_fnv1a64(name) & mask;; i = (i + 1) & mask) {
        if (L->names[i] == 0) {
            L->names[i] = (size_t)index + 1;
            return NULL;
        }
        const warren_job *o = &cfg->jobs[L->names[i] - 1];
        if (strcmp(o->name, name) == 0)
            return o;
    }
}

static void load_payload(loader *L, const config_setting_t *job, const scope *sc, void *base,
                         int status)
{
    warren_job *j = base;
    const config_setting_t *ps = member(job, "payload");

    (void)status;
    if (ps == NULL) {
        j->payload_json = dup_or_oom(L, "{}");
    } else if (config_setting_type(ps) != CONFIG_TYPE_GROUP) {
        wrong_type(L, ps, sc, "payload", "a group { key = value; ... } (it becomes a JSON object)");
    } else {
        json_t *v = to_json(L, ps, sc, "payload");
        if (v != NULL) {
            char *text = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (text == NULL)
                L->oom = 1;
            else if (strlen(text) > PAYLOAD_MAX_BYTES)
                report(L, ps, sc->who, "payload", "is %zu bytes as JSON (limit %d)", strlen(text),
                       PAYLOAD_MAX_BYTES);
            j->payload_json = text;
            json_decref(v);
        }
    }
}

static void check_timezone(loader *L, const config_setting_t *job, const scope *sc, void *base,
                           int status)
{
    const warren_job *j = base;
    const warren_tz *tz;
    warren_error err = {0};

    if (status != 1 || j->timezone == NULL)
        return;
    if (L->tzdb == NULL)
        L->oom = 1;
    else if (warren_tzdb_get(L->tzdb, j->timezone, &tz, &err) != 0)
        report(L, member(job, "timezone"), sc->who, "timezone", "%s", err.message);
}

static void check_queue(loader *L, const config_setting_t *job, const scope *sc, void *base,
                        int status)
{
    const warren_job *j = base;
    char q[200];

    if (status == 0)
        report(L, job, sc->who, NULL,
               "setting \"queue\" is missing (the ready queue is warren.ready.<queue>; e.g. "
               "queue = \"default\")");
    else if (status == 1 && j->queue != NULL &&
             (!warren_name_valid(j->queue) || strlen(j->queue) > 63))
        report(L, member(job, "queue"), sc->who, "queue", "%s cannot be used as a queue name (%s)",
               quote(q, sizeof(q), j->queue), NAME_RULE);
}

/* max_catch_up needs misfire = "catch_up"; a misfire already reported as
 * invalid says nothing about it. */
static void check_max_catch_up(loader *L, const config_setting_t *job, const scope *sc, void *base,
                               int status)
{
    const warren_job *j = base;
    const config_setting_t *m = member(job, "misfire");
    warren_misfire any;

    if (status != 1)
        return;
    if (m != NULL && (config_setting_type(m) != CONFIG_TYPE_STRING ||
                      warren_misfire_from_name(config_setting_get_string(m), &any) != 0))
        return;
    if (j->misfire != WARREN_MISFIRE_CATCH_UP)
        report(L, member(job, "max_catch_up"), sc->who, "max_catch_up",
               "applies only with misfire = \"catch_up\" (this job's is \"%s\")",
               warren_misfire_name(j->misfire));
}

static void check_retry(loader *L, const config_setting_t *g, const scope *sc, void *base,
                        const int *status);

/* The lease is compared with the worker's margin, set or default. */
static void check_lease(loader *L, const config_setting_t *job, const scope *sc, void *base,
                        int status)
{
    const warren_job *j = base;
    int64_t margin = L->cfg->worker.heartbeat_margin_ms;
    char a[64], b[64];

    if (status >= 0 && j->lease_ms <= margin)
        report(L, member(job, "lease") ? member(job, "lease") : job, sc->who, "lease",
               "%s must be longer than worker.heartbeat_margin (%s): a worker would stop every "
               "handler before its first heartbeat",
               warren_duration_format(j->lease_ms, a, sizeof(a)),
               warren_duration_format(margin, b, sizeof(b)));
}

/* ---- the jobs' tables ----------------------------------------------------------------------- */

/* One line per setting: name, type, where it goes, default, bounds, check.
 * (Not clang-formatted: it would spread each initializer over a block.) */
/* clang-format off */
#define SET_STRING(nm, ty, fld, dflt, check) \
    {.name = nm, .type = WARREN__SET_STRING, .offset = offsetof(ty, fld), .def_str = dflt, \
     .fn = check}
#define SET_INT(nm, ty, fld, dflt, lo, hi) \
    {.name = nm, .type = WARREN__SET_INT, .offset = offsetof(ty, fld), .def = dflt, .min = lo, \
     .max = hi}
#define SET_INT_CHECKED(nm, ty, fld, dflt, lo, hi, check) \
    {.name = nm, .type = WARREN__SET_INT, .offset = offsetof(ty, fld), .def = dflt, .min = lo, \
     .max = hi, .fn = check}
#define SET_BOOL(nm, ty, fld, dflt) \
    {.name = nm, .type = WARREN__SET_BOOL, .offset = offsetof(ty, fld), .def = dflt}
/* hi 0: at most 100 years; otherwise why says why hi. */
#define SET_DURATION(nm, ty, fld, dflt, lo, hi, why, flg, check) \
    {.name = nm, .type = WARREN__SET_DURATION, .offset = offsetof(ty, fld), .def = dflt, \
     .min = lo, .max = hi, .what = why, .flags = flg, .fn = check}
#define SET_ENUM(nm, ty, fld, dflt, nms, wht, check) \
    {.name = nm, .type = WARREN__SET_ENUM, .offset = offsetof(ty, fld), .def = dflt, \
     .names = nms, .what = wht, .fn = check}
#define SET_GROUP(nm, off, grp) {.name = nm, .type = WARREN__SET_GROUP, .offset = off, .group = grp}
/* parse NULL: parsed by an earlier setting's code (or by the group's finish). */
#define SET_CUSTOM(nm, parse) {.name = nm, .type = WARREN__SET_CUSTOM, .fn = parse}

#define SECONDS(n) ((int64_t)(n) * 1000)
#define MINUTES(n) ((int64_t)(n) * 60000)
/* clang-format on */

static const warren__setting retry_settings[] = {
    SET_INT("max_attempts", warren_job, retry_max_attempts, 5, 1, 1000),
    SET_DURATION("base", warren_job, retry_base_ms, SECONDS(10), 1, 0, NULL, 0, NULL),
    SET_DURATION("cap", warren_job, retry_cap_ms, MINUTES(10), 1, 0, NULL, 0, NULL),
};
static const warren__section retry_section = {"jobs.retry", retry_settings, COUNT(retry_settings),
                                              check_retry};

static const warren__setting handler_settings[] = {
    SET_CUSTOM("exec", NULL),
    SET_CUSTOM("shell", NULL),
    SET_CUSTOM("sql", NULL),
    SET_CUSTOM("c", NULL),
};
static const warren__section handler_section = {"jobs.handler", handler_settings,
                                                COUNT(handler_settings), load_handler};

static const warren__setting job_settings[] = {
    SET_CUSTOM("name", NULL), /* parsed first by load_job: it names the job in every message */
    SET_BOOL("template", warren_job, is_template, 0), /* before the schedule, which needs it */
    SET_CUSTOM("cron", load_schedule),
    SET_CUSTOM("every", NULL),
    SET_CUSTOM("at", NULL),
    SET_STRING("timezone", warren_job, timezone, "UTC", check_timezone),
    SET_STRING("queue", warren_job, queue, NULL, check_queue),
    SET_CUSTOM("payload", load_payload),
    SET_GROUP("handler", 0, &handler_section),
    SET_ENUM("misfire", warren_job, misfire, WARREN_MISFIRE_RUN_ONCE, misfire_names,
             "a misfire policy (use one of: run_once, skip, catch_up)", NULL),
    SET_INT_CHECKED("max_catch_up", warren_job, max_catch_up, 0, 0, 1000000, check_max_catch_up),
    SET_ENUM("overlap", warren_job, overlap, WARREN_OVERLAP_SKIP, overlap_names,
             "an overlap policy (use one of: skip, allow, queue, cancel_previous)", NULL),
    SET_DURATION("jitter", warren_job, jitter_ms, 0, 0, 0, NULL, DUR_WHOLE_SECONDS, NULL),
    SET_GROUP("retry", 0, &retry_section),
    SET_DURATION("lease", warren_job, lease_ms, SECONDS(30), 1000, LEASE_MAX_MS,
                 "warren.claim returns lease_seconds as an int", DUR_WHOLE_SECONDS, check_lease),
    SET_DURATION("timeout", warren_job, timeout_ms, MINUTES(30), 1, 0, NULL, 0, NULL),
    SET_BOOL("paused", warren_job, paused, 0),
    SET_INT("max_running", warren_job, max_running, 0, 1, 1000000),
    SET_INT("max_running_per_tenant", warren_job, max_running_per_tenant, 0, 1, 1000000),
};
static const warren__section job_section = {"jobs", job_settings, COUNT(job_settings), NULL};

static void check_retry(loader *L, const config_setting_t *g, const scope *sc, void *base,
                        const int *status)
{
    const warren_job *j = base;
    char a[64], b[64];

    if (status_of(&retry_section, status, "base") >= 0 &&
        status_of(&retry_section, status, "cap") >= 0 && j->retry_cap_ms < j->retry_base_ms)
        report(L, member(g, "cap") ? member(g, "cap") : member(g, "base"), sc->who, "retry.cap",
               "%s is shorter than retry.base (%s)",
               warren_duration_format(j->retry_cap_ms, a, sizeof(a)),
               warren_duration_format(j->retry_base_ms, b, sizeof(b)));
}

/* ---- jobs ----------------------------------------------------------------------------------- */

static void load_job(loader *L, const config_setting_t *job, int index, warren_config *cfg,
                     warren_job *j)
{
    char who[240];
    scope sc = {who, ""};
    const char *s;

    snprintf(who, sizeof(who), "job #%d", index + 1);
    j->line = (int)config_setting_source_line(job);
    const char *file;
    file_rank(L, job, &file);
    j->file = dup_or_oom(L, file);
    apply_defaults(L, &job_section, j);

    /* name first: it labels every other message about this job */
    const config_setting_t *ns = member(job, "name");
    if (ns == NULL) {
        report(L, job, who, NULL, "setting \"name\" is missing");
    } else if (get_string(L, job, &sc, "name", &s) == 1) {
        char qn[200];
        quote(qn, sizeof(qn), s);
        if (!job_name_valid(s))
            report(L, ns, who, "name", "%s cannot be used as a job name (%s)", qn, JOB_NAME_RULE);
        snprintf(who, sizeof(who), "job %s", qn);
        j->name = dup_or_oom(L, s);
        const warren_job *first = j->name ? remember_name(L, cfg, index) : NULL;
        if (first != NULL)
            report(L, ns, NULL, NULL, "job %s is defined twice (first at %s:%d)", qn, first->file,
                   first->line);
    }

    load_group(L, job, &sc, &job_section, j);
}

static void load_jobs(loader *L, const config_setting_t *root, const scope *top, void *base,
                      int status)
{
    warren_config *cfg = base;
    const config_setting_t *jobs = member(root, "jobs");

    (void)status;
    if (jobs == NULL)
        return;
    if (config_setting_type(jobs) != CONFIG_TYPE_LIST) {
        wrong_type(L, jobs, top, "jobs", "a list ( { ... }, { ... } )");
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

/* ---- the sections' tables ------------------------------------------------------------------- */

static const warren__setting database_settings[] = {
    SET_STRING("url", warren_config, database_url, "postgresql://localhost/warren", NULL),
};
static const warren__section database_section = {"database", database_settings,
                                                 COUNT(database_settings), NULL};

static const warren__setting broker_settings[] = {
    SET_STRING("url", warren_config, amqp_url, "amqp://guest:guest@localhost:5672/%2f",
               check_broker_url),
    SET_INT("delivery_limit", warren_config, delivery_limit, 5, 1, 1000000),
};
static const warren__section broker_section = {"broker", broker_settings, COUNT(broker_settings),
                                               NULL};

typedef warren_planner_config planner_t;
static const warren__setting planner_settings[] = {
    SET_DURATION("horizon", planner_t, horizon_ms, SECONDS(150), 1000, 0, NULL, 0, NULL),
    SET_DURATION("tick", planner_t, tick_ms, SECONDS(1), 10, 0, NULL, 0, NULL),
    SET_DURATION("misfire_threshold", planner_t, misfire_threshold_ms, SECONDS(60), 1000, 0, NULL,
                 0, NULL),
    SET_DURATION("reconcile_grace", planner_t, reconcile_grace_ms, SECONDS(30), 1000, 0, NULL, 0,
                 NULL),
    SET_INT("partitions", planner_t, partitions, 64, 1, 65536),
    SET_INT("publish_batch", planner_t, publish_batch, 200, 1, 100000),
    SET_INT("delay_ring", planner_t, delay_ring, 0, 0, 1024),
    SET_DURATION("delay_queue_expires", planner_t, delay_queue_expires_ms, MINUTES(10), 1000,
                 MINUTES(24 * 60 * 24), "RabbitMQ's x-expires is a 32-bit count of milliseconds", 0,
                 NULL),
    SET_DURATION("event_defer", planner_t, event_defer_ms, SECONDS(10), 0, 0, NULL, 0, NULL),
    SET_DURATION("release_lead", planner_t, release_lead_ms, SECONDS(3), 0, MAX_RELEASE_LEAD_MS,
                 "warren.claim waits at most 15 s for a run released early", 0, NULL),
    SET_ENUM("delay_ring_type", planner_t, delay_ring_type, WARREN_DELAY_RING_QUORUM,
             delay_ring_type_names, "a delay ring type (use \"quorum\" or \"classic\")",
             check_delay_ring_type),
};
static const warren__section planner_section = {"planner", planner_settings,
                                                COUNT(planner_settings), check_planner};

/* worker.exec_env: a list of environment variable names ([A-Za-z_][A-Za-z0-9_]*),
 * or prefixes of names followed by '*'. */
static void load_exec_env(loader *L, const config_setting_t *g, const scope *sc, void *base,
                          int status)
{
    warren_worker_config *wc = base;
    const config_setting_t *s = member(g, "exec_env");
    char name[32], path[256], q[200];

    (void)status;
    if (s == NULL)
        return;
    if (config_setting_type(s) != CONFIG_TYPE_ARRAY && config_setting_type(s) != CONFIG_TYPE_LIST) {
        wrong_type(L, s, sc, "exec_env", "a list of variable names, e.g. [\"AWS_PROFILE\"]");
        return;
    }
    int n = config_setting_length(s);
    free_argv(wc->exec_env);
    if ((wc->exec_env = calloc((size_t)n + 1, sizeof(char *))) == NULL) {
        L->oom = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        const char *v;
        size_t k = 0;
        snprintf(name, sizeof(name), "exec_env[%d]", i);
        path_of(path, sizeof(path), sc, name);
        if (config_setting_type(e) != CONFIG_TYPE_STRING) {
            report(L, e, sc->who, path, "expected a string, got %s", type_name(e));
            continue;
        }
        v = config_setting_get_string(e);
        while (v[k] == '_' || (v[k] >= 'A' && v[k] <= 'Z') || (v[k] >= 'a' && v[k] <= 'z') ||
               (k > 0 && v[k] >= '0' && v[k] <= '9'))
            k++;
        if (k > 0 && v[k] == '*' && v[k + 1] == '\0')
            k++; /* a prefix: "PREFIX*" */
        if (k == 0 || v[k] != '\0' || k > 255) {
            report(L, e, sc->who, path,
                   "%s is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*, or such a "
                   "prefix followed by *; at most 255 bytes)",
                   quote(q, sizeof(q), v));
            continue;
        }
        wc->exec_env[i] = dup_or_oom(L, v);
    }
    /* keep the list dense (a reported element left a hole; the load fails anyway) */
    int m = 0;
    for (int i = 0; i < n; i++)
        if (wc->exec_env[i] != NULL)
            wc->exec_env[m++] = wc->exec_env[i];
    wc->exec_env[m] = NULL;
}

static const warren__setting worker_settings[] = {
    SET_INT("concurrency", warren_worker_config, concurrency, 4, 1, 4096),
    SET_DURATION("shutdown_grace", warren_worker_config, shutdown_grace_ms, SECONDS(30), 0, 0, NULL,
                 0, NULL),
    SET_DURATION("heartbeat_margin", warren_worker_config, heartbeat_margin_ms, SECONDS(5), 0, 0,
                 NULL, 0, NULL),
    SET_STRING("id", warren_worker_config, id, NULL, NULL), /* default: hostname:pid */
    SET_CUSTOM("exec_env", load_exec_env),
    SET_DURATION("ack_hold", warren_worker_config, ack_hold_ms, 0, 0, 1000,
                 "a held acknowledgement keeps a prefetch slot from the next delivery", 0, NULL),
    SET_INT("sql_batch", warren_worker_config, sql_batch, 32, 1, 64),
    SET_BOOL("sql_take", warren_worker_config, sql_take, 1),
    SET_INT("prefetch", warren_worker_config, prefetch, 0, 0, 65535), /* 0: worker.c */
};
static const warren__section worker_section = {"worker", worker_settings, COUNT(worker_settings),
                                               NULL};

/* database and broker settings live in warren_config itself. */
static const warren__setting root_settings[] = {
    SET_GROUP("database", 0, &database_section),
    SET_GROUP("broker", 0, &broker_section),
    SET_GROUP("planner", offsetof(warren_config, planner), &planner_section),
    SET_GROUP("worker", offsetof(warren_config, worker), &worker_section),
    SET_CUSTOM("jobs", load_jobs),
};
static const warren__section root_section = {"", root_settings, COUNT(root_settings), NULL};

static const warren__section *const all_sections[] = {
    &root_section,   &database_section, &broker_section, &planner_section,
    &worker_section, &job_section,      &retry_section,  &handler_section,
};

const warren__section *const *warren__config_sections(size_t *n)
{
    *n = COUNT(all_sections);
    return all_sections;
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
    free_argv(cfg->worker.exec_env);
    free(cfg);
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
    L.cfg = cfg;
    apply_defaults(&L, &root_section, cfg);
    scope top = {NULL, ""};
    load_group(&L, config_root_setting(&cf), &top, &root_section, cfg);
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
    for (size_t i = (size_t)warren_hash_fnv1a64(name) & mask; cfg->name_index[i] != 0;
         i = (i + 1) & mask) {
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
