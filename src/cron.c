/* cron.c: parses cron expressions into bit sets and finds their next fire
 * instants in a time zone, stepping by calendar fields (never by seconds) and
 * applying warren's DST contract (docs/design.md §7, docs/cron.md). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <warren/cron.h>
#include <warren/hash.h>

enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_DOW, F_COUNT };

static const struct {
    const char *name;
    int lo, hi;
} fdesc[F_COUNT] = {
    {"second", 0, 59},       {"minute", 0, 59}, {"hour", 0, 23},
    {"day of month", 1, 31}, {"month", 1, 12},  {"day of week", 0, 7},
};

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const dow_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

struct warren_cron {
    uint64_t sec, min;
    uint32_t hour;
    uint32_t dom;       /* bits 1..31 */
    uint32_t dom_w;     /* nW: bits n */
    uint16_t mon;       /* bits 1..12 */
    uint8_t dow;        /* bits 0..6 */
    uint8_t dow_last;   /* nL: bits by weekday */
    uint8_t dow_nth[7]; /* n#k: bits k (1..5) by weekday */
    uint8_t dom_last;
    uint8_t day_or; /* Vixie: both day fields restricted */
    uint8_t interval_like;
    uint8_t six;
    /* Matching days of a month depend only on its length (28..31) and the
     * weekday of its first day: bits 1..31. */
    uint32_t daymask[4][7];
};

/* Parse context for one field. */
typedef struct fctx {
    int kind; /* F_* */
    int pos;  /* 1-based field position in the expression */
    const char *job;
    warren_error *err;
    warren_cron *c;
    uint64_t set; /* plain values */
} fctx;

uint32_t warren_cron_hash(const char *job_name, int field_kind)
{
    unsigned char kind = (unsigned char)field_kind;
    return warren_hash_fnv1a32_update(warren_hash_fnv1a32(job_name), &kind, 1);
}

__attribute__((format(printf, 2, 3))) static int ferr(fctx *f, const char *fmt, ...)
{
    char buf[WARREN_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return warren_error_set(f->err, WARREN_ECRON, "field %d (%s): %s", f->pos, fdesc[f->kind].name,
                            buf);
}

static int ferr_range(fctx *f, const char *tok, size_t len, int lo, int hi)
{
    return warren_error_set(f->err, WARREN_ECRON, "field %d (%s): \"%.*s\" is out of range %d-%d",
                            f->pos, fdesc[f->kind].name, (int)len, tok, lo, hi);
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int is_alpha(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
}

static int name_index(const char *const *names, int n, const char *p)
{
    for (int i = 0; i < n; i++) {
        int j = 0;
        for (; j < 3; j++) {
            char ch = p[j];
            if (ch >= 'a' && ch <= 'z')
                ch = (char)(ch - 'a' + 'A');
            if (ch != names[i][j])
                break;
        }
        if (j == 3)
            return i;
    }
    return -1;
}

/* Reads a number or (month/dow) name at *pp, up to end. Range-checks against
 * lo..hi. Returns 0 and the value, or an error. */
static int read_value(fctx *f, const char **pp, const char *end, int lo, int hi, int *out)
{
    const char *p = *pp, *s = p;
    if (p < end && is_digit(*p)) {
        int64_t v = 0;
        while (p < end && is_digit(*p)) {
            if (v < 1000000)
                v = v * 10 + (*p - '0');
            p++;
        }
        if (p < end && is_alpha(*p) && *p != 'W' && *p != 'w' && *p != 'L' && *p != 'l')
            goto bad;
        if (v < lo || v > hi)
            return ferr_range(f, s, (size_t)(p - s), lo, hi);
        *out = (int)v;
        *pp = p;
        return 0;
    }
    if (p < end && is_alpha(*p)) {
        while (p < end && is_alpha(*p))
            p++;
        size_t n = (size_t)(p - s);
        int mi = n >= 3 ? name_index(month_names, 12, s) : -1;
        int di = n >= 3 ? name_index(dow_names, 7, s) : -1;
        /* "FRIL" (last Friday) is a name followed by L. */
        if (f->kind == F_DOW && n == 4 && (s[3] == 'L' || s[3] == 'l') && di >= 0) {
            p = s + 3;
            n = 3;
        }
        if (n == 3 && f->kind == F_MON && mi >= 0) {
            *out = mi + 1;
        } else if (n == 3 && f->kind == F_DOW && di >= 0) {
            *out = di;
        } else if (n == 3 && mi >= 0) {
            return ferr(f, "\"%.*s\" is a month name, not valid here", (int)(n), s);
        } else if (n == 3 && di >= 0) {
            return ferr(f, "\"%.*s\" is a day-of-week name, not valid here", (int)(n), s);
        } else if (f->kind == F_MON || f->kind == F_DOW) {
            return ferr(f, "\"%.*s\" is not a valid name (use three-letter names: %s)", (int)n, s,
                        f->kind == F_MON ? "JAN-DEC" : "SUN-SAT");
        } else {
            return ferr(f, "\"%.*s\" is not a number", (int)(n), s);
        }
        if (*out < lo || *out > hi)
            return ferr_range(f, s, n, lo, hi);
        *pp = p;
        return 0;
    }
bad:
    while (p < end && *p != '-' && *p != '/' && *p != ',')
        p++;
    return ferr(f, "\"%.*s\" is not a number", (int)((size_t)(p > s ? p - s : end - s)), s);
}

static void add_range(fctx *f, int a, int b, int step)
{
    for (int v = a; v <= b; v += step) {
        int x = (f->kind == F_DOW && v == 7) ? 0 : v;
        f->set |= UINT64_C(1) << x;
    }
}

static int read_step(fctx *f, const char **pp, const char *end, const char *item, size_t ilen,
                     int *step)
{
    const char *p = *pp, *s;
    int64_t v = 0;
    int max = fdesc[f->kind].hi;
    s = p;
    while (p < end && is_digit(*p)) {
        if (v < 1000000)
            v = v * 10 + (*p - '0');
        p++;
    }
    if (p == s || p != end)
        return ferr(f, "\"%.*s\" has an invalid step (a number must follow \"/\")", (int)(ilen),
                    item);
    if (v == 0)
        return ferr(f, "\"%.*s\" has step 0 (steps start at 1)", (int)(ilen), item);
    if (v > max)
        return warren_error_set(f->err, WARREN_ECRON,
                                "field %d (%s): step \"%.*s\" in \"%.*s\" is out of range 1-%d",
                                f->pos, fdesc[f->kind].name, (int)(p - s), s, (int)ilen, item, max);
    *step = (int)v;
    *pp = p;
    return 0;
}

/* One comma-separated item [s, e). */
static int parse_item(fctx *f, const char *s, const char *e)
{
    int lo = fdesc[f->kind].lo, hi = fdesc[f->kind].hi;
    size_t n = (size_t)(e - s);
    const char *p = s;
    int a, b, step = 1, rc, has_step = 0;

    if (n == 0)
        return ferr(f, "empty list item");
    for (const char *q = s; q < e; q++)
        if ((unsigned char)*q >= 0x80)
            return ferr(f,
                        "\"%.*s\" contains a non-ASCII character (use ASCII digits and "
                        "names)",
                        (int)(n), s);

    /* Extensions first. */
    if (*p == 'L' || *p == 'l') {
        if (n >= 2 && (p[1] == 'W' || p[1] == 'w'))
            return ferr(f, "\"%.*s\" is not supported (LW: use L, or nW)", (int)(n), s);
        if (n >= 2 && p[1] == '-')
            return ferr(f, "\"%.*s\" is not supported (L-n offsets from the last day)", (int)(n),
                        s);
        if (n == 1 && f->kind == F_DOM) {
            f->c->dom_last = 1;
            return 0;
        }
        if (n == 1 && f->kind == F_DOW)
            return ferr(f,
                        "\"%.*s\" alone is not valid in day of week (use nL, e.g. 5L for "
                        "the last Friday)",
                        (int)(n), s);
        if (n == 1 || (n >= 2 && p[1] == '/'))
            return ferr(f,
                        "\"%.*s\": L is only valid in day of month (L) and day of week "
                        "(nL)",
                        (int)(n), s);
    }
    if (*p == 'H' || *p == 'h') {
        uint32_t h;
        p++;
        if (p < e && *p == '(') {
            p++;
            if ((rc = read_value(f, &p, e, lo, hi, &a)) != 0)
                return rc;
            if (p >= e || *p != '-')
                return ferr(f, "\"%.*s\" is not a valid H(a-b) range", (int)(n), s);
            p++;
            if ((rc = read_value(f, &p, e, lo, hi, &b)) != 0)
                return rc;
            if (p >= e || *p != ')')
                return ferr(f, "\"%.*s\" is not a valid H(a-b) range", (int)(n), s);
            p++;
            if (a > b)
                return ferr(f, "\"%.*s\" is a reversed range (start after end)", (int)(n), s);
        } else {
            a = lo;
            b = f->kind == F_DOM ? 28 : f->kind == F_DOW ? 6 : hi;
        }
        if (p < e && *p == '/') {
            p++;
            has_step = 1;
            if ((rc = read_step(f, &p, e, s, n, &step)) != 0)
                return rc;
        } else if (p != e) {
            return ferr(f, "\"%.*s\" is not a valid H form (H, H/n, H(a-b), H(a-b)/n)", (int)(n),
                        s);
        }
        if (f->job == NULL || f->job[0] == '\0')
            return ferr(f, "\"%.*s\" needs a job name to hash (H spreads jobs by name)", (int)(n),
                        s);
        h = warren_cron_hash(f->job, f->kind);
        if (!has_step) {
            int v = a + (int)(h % (uint32_t)(b - a + 1));
            add_range(f, v, v, 1);
        } else {
            int span = b - a + 1;
            int m = step < span ? step : span;
            add_range(f, a + (int)(h % (uint32_t)m), b, step);
        }
        return 0;
    }
    if (*p == '*' || *p == '?') {
        p++;
        a = lo;
        b = hi;
        if (p < e && *p == '/') {
            p++;
            if ((rc = read_step(f, &p, e, s, n, &step)) != 0)
                return rc;
        } else if (p != e) {
            return ferr(f, "\"%.*s\" is not valid (expected \"%c\" or \"%c/n\")", (int)(n), s, *s,
                        *s);
        }
        add_range(f, a, b, step);
        return 0;
    }
    if (!is_digit(*p) && !is_alpha(*p))
        return ferr(f, "\"%.*s\" is not valid (unexpected character)", (int)(n), s);
    if ((rc = read_value(f, &p, e, lo, hi, &a)) != 0)
        return rc;
    if (p < e && (*p == 'W' || *p == 'w')) {
        if (f->kind != F_DOM)
            return ferr(f, "\"%.*s\": nW is only valid in day of month", (int)(n), s);
        if (p + 1 != e)
            return ferr(f, "\"%.*s\" is not valid (nW takes no range or step)", (int)(n), s);
        f->c->dom_w |= 1u << a;
        return 0;
    }
    if (p < e && (*p == 'L' || *p == 'l')) {
        if (f->kind != F_DOW)
            return ferr(f, "\"%.*s\": nL is only valid in day of week (in day of month, use L)",
                        (int)(n), s);
        if (p + 1 != e)
            return ferr(f, "\"%.*s\" is not valid (nL takes no range or step)", (int)(n), s);
        f->c->dow_last |= (uint8_t)(1u << (a % 7));
        return 0;
    }
    if (p < e && *p == '#') {
        const char *ks = ++p;
        int k = 0;
        if (f->kind != F_DOW)
            return ferr(f, "\"%.*s\": n#k is only valid in day of week", (int)(n), s);
        while (p < e && is_digit(*p) && k < 100)
            k = k * 10 + (*p++ - '0');
        if (p == ks || p != e)
            return ferr(f, "\"%.*s\" is not valid (n#k takes a number k from 1 to 5)", (int)(n), s);
        if (k < 1 || k > 5)
            return ferr(f, "\"%.*s\": the occurrence after # must be 1-5", (int)(n), s);
        f->c->dow_nth[a % 7] |= (uint8_t)(1u << k);
        return 0;
    }
    b = a;
    if (p < e && *p == '-') {
        p++;
        if (p == e || *p == '/')
            return ferr(f, "\"%.*s\" is not valid (a range needs an end: a-b)", (int)n, s);
        if (*p == 'L' || *p == 'l') /* p < e: the test above */
            return ferr(f, "\"%.*s\" is not valid (a range ends with a number)", (int)(n), s);
        if ((rc = read_value(f, &p, e, lo, hi, &b)) != 0)
            return rc;
        if (p < e && *p != '/')
            return ferr(f, "\"%.*s\" is not valid (extensions do not combine with ranges)",
                        (int)(n), s);
        if (a > b)
            return ferr(f, "\"%.*s\" is a reversed range (start after end)", (int)(n), s);
        if (p < e && *p == '/') {
            p++;
            if ((rc = read_step(f, &p, e, s, n, &step)) != 0)
                return rc;
        }
    } else if (p < e && *p == '/') {
        p++;
        if ((rc = read_step(f, &p, e, s, n, &step)) != 0)
            return rc;
        b = hi;
    } else if (p != e) {
        return ferr(f, "\"%.*s\" is not valid (unexpected character)", (int)(n), s);
    }
    add_range(f, a, b, step);
    return 0;
}

static int parse_field(warren_cron *c, int kind, int pos, const char *s, const char *e,
                       const char *job, warren_error *err)
{
    fctx f = {kind, pos, job, err, c, 0};
    const char *p = s;
    while (1) {
        const char *q = p;
        while (q < e && *q != ',')
            q++;
        int rc = parse_item(&f, p, q);
        if (rc)
            return rc;
        if (q == e)
            break;
        p = q + 1;
        if (p == e)
            return ferr(&f, "\"%.*s\" ends with a comma", (int)(e - s), s);
    }
    switch (kind) {
    case F_SEC:
        c->sec = f.set;
        break;
    case F_MIN:
        c->min = f.set;
        break;
    case F_HOUR:
        c->hour = (uint32_t)f.set;
        break;
    case F_DOM:
        c->dom = (uint32_t)f.set;
        break;
    case F_MON:
        c->mon = (uint16_t)f.set;
        break;
    case F_DOW:
        c->dow = (uint8_t)f.set;
        break;
    }
    return 0;
}

/* ---- calendar ----------------------------------------------------------- */

static int is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int month_days(int64_t y, unsigned m)
{
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : dm[m - 1];
}

static int weekday(int64_t days)
{
    return (int)(((days % 7) + 11) % 7);
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b) != 0 && ((a < 0) != (b < 0)))
        q--;
    return q;
}

/* Days of a month of length dim whose 1st is weekday wd1 that match the day fields. */
static uint32_t compute_daymask(const warren_cron *c, int dim, int wd1)
{
    uint32_t all = ((1u << dim) - 1u) << 1;
    uint32_t dm = c->dom & all, dw = 0;
    if (c->dom_last)
        dm |= 1u << dim;
    for (int n = 1; n <= 31; n++) {
        if (!(c->dom_w >> n & 1u) || n > dim)
            continue;
        int wd = (wd1 + n - 1) % 7, d = n;
        if (wd == 6)
            d = n == 1 ? 3 : n - 1;
        else if (wd == 0)
            d = n == dim ? n - 2 : n + 1;
        dm |= 1u << d;
    }
    const uint64_t weekly = 1u | 1u << 7 | 1u << 14 | 1u << 21 | UINT64_C(1) << 28;
    int wdl = (wd1 + dim - 1) % 7;
    for (int w = 0; w < 7; w++) {
        int first = 1 + (w - wd1 + 7) % 7;
        if (c->dow >> w & 1u)
            dw |= (uint32_t)((weekly << first) & all);
        if (c->dow_last >> w & 1u)
            dw |= 1u << (dim - (wdl - w + 7) % 7);
        for (int k = 1; k <= 5; k++)
            if ((c->dow_nth[w] >> k & 1u) && first + 7 * (k - 1) <= dim)
                dw |= 1u << (first + 7 * (k - 1));
    }
    return c->day_or ? (dm | dw) : (dm & dw);
}

static int ctz32(uint32_t x)
{
    return __builtin_ctz(x);
}

static int ctz64(uint64_t x)
{
    return __builtin_ctzll(x);
}

#define YEAR_LIMIT 9999

/* The first naive (zone-free) local second W >= lo with W < hi matching c.
 * Returns 0 found, 1 none in [lo, hi), -1 none before year YEAR_LIMIT+1. */
static int naive_next(const warren_cron *c, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t days = floor_div(lo, 86400);
    int64_t sod = lo - days * 86400;
    int64_t y;
    unsigned m, d;
    int h = (int)(sod / 3600), mi = (int)(sod / 60 % 60), s = (int)(sod % 60);

    warren_civil_from_days(days, &y, &m, &d);
    for (;;) {
        if (y > YEAR_LIMIT)
            return -1;
        if (!(c->mon >> m & 1u)) {
            uint32_t rest = (uint32_t)c->mon >> (m + 1) << (m + 1);
            if (rest) {
                m = (unsigned)ctz32(rest);
            } else {
                y++;
                m = (unsigned)ctz32(c->mon);
            }
            goto new_month;
        }
        int dim = month_days(y, m);
        int64_t first = warren_days_from_civil(y, m, 1);
        uint32_t mask = c->daymask[dim - 28][weekday(first)] >> d << d;
        if (mask == 0) {
            m++;
            if (m > 12) {
                m = 1;
                y++;
            }
            goto new_month;
        }
        if ((unsigned)ctz32(mask) != d) {
            d = (unsigned)ctz32(mask);
            h = mi = s = 0;
            if ((first + d - 1) * 86400 >= hi)
                return 1;
        }
        uint32_t hm = c->hour >> h;
        if (hm == 0)
            goto next_day;
        if (ctz32(hm)) {
            h += ctz32(hm);
            mi = s = 0;
        }
        uint64_t mm = c->min >> mi;
        if (mm == 0)
            goto next_hour;
        if (ctz64(mm)) {
            mi += ctz64(mm);
            s = 0;
        }
        uint64_t sm = c->sec >> s;
        if (sm == 0)
            goto next_minute;
        s += ctz64(sm);
        {
            int64_t w = (first + d - 1) * 86400 + h * 3600 + mi * 60 + s;
            if (w >= hi)
                return 1;
            *out = w;
            return 0;
        }
    next_minute:
        s = 0;
        if (++mi < 60)
            goto check;
        mi = 0;
    next_hour:
        mi = s = 0;
        if (++h < 24)
            goto check;
    next_day:
        h = mi = s = 0;
        if ((int)++d <= dim)
            goto check;
        if (++m > 12) {
            m = 1;
            y++;
        }
    new_month:
        d = 1;
        h = mi = s = 0;
        if (y > YEAR_LIMIT)
            return -1;
        if (warren_days_from_civil(y, m, 1) * 86400 >= hi)
            return 1;
        continue;
    check:
        if ((first + d - 1) * 86400 + h * 3600 + mi * 60 + s >= hi)
            return 1;
    }
}

int warren_cron_matches(const warren_cron *c, int64_t local)
{
    int64_t w;
    return naive_next(c, local, local + 1, &w) == 0;
}

/* ---- parse -------------------------------------------------------------- */

static const struct {
    const char *name, *expr;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t';
}

void warren_cron_free(warren_cron *c)
{
    free(c);
}

int warren_cron_parse(const char *expr, const char *job_name, warren_cron **out, warren_error *err)
{
    const char *fs[7], *fe[7];
    int nf = 0, rc;
    size_t len;
    warren_cron *c;

    *out = NULL;
    if (expr == NULL)
        return warren_error_set(err, WARREN_ECRON, "missing cron expression");
    len = strnlen(expr, WARREN_CRON_MAX_LEN + 1);
    if (len > WARREN_CRON_MAX_LEN)
        return warren_error_set(err, WARREN_ECRON, "cron expression is longer than %d characters",
                                WARREN_CRON_MAX_LEN);
    const char *p = expr;
    while (is_space(*p))
        p++;
    if (*p == '@') {
        const char *q = p;
        while (*q && !is_space(*q))
            q++;
        const char *r = q;
        while (is_space(*r))
            r++;
        for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++) {
            if ((size_t)(q - p) == strlen(macros[i].name) &&
                strncasecmp(p, macros[i].name, (size_t)(q - p)) == 0) {
                if (*r != '\0')
                    return warren_error_set(err, WARREN_ECRON,
                                            "macro \"%s\" takes no fields after it (\"%s\")",
                                            macros[i].name, r);
                return warren_cron_parse(macros[i].expr, job_name, out, err);
            }
        }
        return warren_error_set(err, WARREN_ECRON,
                                "unknown macro \"%.*s\" (known: @yearly @annually @monthly "
                                "@weekly @daily @midnight @hourly)",
                                (int)(q - p), p);
    }
    for (const char *q = expr; *q; q++)
        if ((unsigned char)*q < 0x20 && *q != '\t')
            return warren_error_set(err, WARREN_ECRON,
                                    "cron expression contains a control character");
    for (const char *q = p; *q;) {
        if (nf < 7) {
            fs[nf] = q;
        }
        while (*q && !is_space(*q))
            q++;
        if (nf < 7)
            fe[nf] = q;
        nf++;
        while (is_space(*q))
            q++;
    }
    if (nf < 5 || nf > 6)
        return warren_error_set(err, WARREN_ECRON,
                                "expected 5 fields (minute hour day-of-month month day-of-week) "
                                "or 6 (with seconds first), got %d in \"%s\"",
                                nf, expr);
    c = calloc(1, sizeof *c);
    if (c == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    c->six = nf == 6;
    int base = nf == 6 ? 0 : 1;
    if (nf == 5)
        c->sec = 1;
    for (int i = 0; i < nf; i++) {
        rc = parse_field(c, base + i, i + 1, fs[i], fe[i], job_name, err);
        if (rc) {
            free(c);
            return rc;
        }
    }
    const char *hf = fs[F_HOUR - base], *df = fs[F_DOM - base], *wf = fs[F_DOW - base];
    c->interval_like = *hf == '*' || *hf == '?';
    c->day_or = !(*df == '*' || *df == '?') && !(*wf == '*' || *wf == '?');
    int fires = 0;
    for (int dim = 28; dim <= 31; dim++)
        for (int wd = 0; wd < 7; wd++)
            c->daymask[dim - 28][wd] = compute_daymask(c, dim, wd);
    for (unsigned m = 1; m <= 12; m++) {
        if (!(c->mon >> m & 1u))
            continue;
        int lo = m == 2 ? 28 : month_days(2001, m), hi = m == 2 ? 29 : lo;
        for (int dim = lo; dim <= hi; dim++)
            for (int wd = 0; wd < 7; wd++)
                fires |= c->daymask[dim - 28][wd] != 0;
    }
    if (!fires) {
        free(c);
        return warren_error_set(err, WARREN_ENEVER,
                                "cron expression \"%s\" can never fire (no month has a matching "
                                "day)",
                                expr);
    }
    *out = c;
    return 0;
}

int warren_cron_interval_like(const warren_cron *c)
{
    return c->interval_like;
}

int warren_cron_has_seconds(const warren_cron *c)
{
    return c->six;
}

/* ---- next --------------------------------------------------------------- */

int warren_cron_next(const warren_cron *c, const warren_tz *tz, warren_us from, int64_t *next,
                     unsigned *flags, warren_error *err)
{
    int64_t s = warren_us_to_s(from) + 1; /* strictly after; fire times are whole seconds */
    int64_t u = s, w;
    warren_tz_span sp;
    unsigned fl = 0;

    if (flags)
        *flags = 0;
    if (tz == NULL) {
        sp = (warren_tz_span){INT64_MIN, INT64_MAX, 0, 0, 0};
    }
    for (;;) {
        if (tz)
            warren_tz_span_at(tz, u, &sp);
        int32_t o = sp.offset;
        int bounded_start = sp.start != INT64_MIN;
        /* Spring forward: a fixed-hour fire time in the gap fires at the transition. */
        if (!c->interval_like && bounded_start && sp.start >= s && sp.prev_offset < o &&
            naive_next(c, sp.start + sp.prev_offset, sp.start + o, &w) == 0) {
            *next = sp.start;
            if (flags)
                *flags = WARREN_FIRE_GAP_SHIFTED;
            return 0;
        }
        int64_t lo = u + o;
        /* Fall back: fixed-hour fire times repeated after the transition were
         * already fired at their earlier instant. */
        if (!c->interval_like && bounded_start && sp.prev_offset > o &&
            lo < sp.start + sp.prev_offset)
            lo = sp.start + sp.prev_offset;
        int64_t hi = sp.end == INT64_MAX ? INT64_MAX : sp.end + o;
        int r = naive_next(c, lo, hi, &w);
        if (r == 0) {
            if (bounded_start && sp.prev_offset > o && w < sp.start + sp.prev_offset)
                fl |= WARREN_FIRE_OVERLAP_SECOND;
            if (sp.end != INT64_MAX && sp.next_offset < o && w >= sp.end + sp.next_offset)
                fl |= WARREN_FIRE_OVERLAP_FIRST;
            *next = w - o;
            if (flags)
                *flags = fl;
            return 0;
        }
        if (r < 0 || sp.end == INT64_MAX)
            break;
        u = sp.end;
    }
    return warren_error_set(err, WARREN_ENEVER, "the expression does not fire again before year %d",
                            YEAR_LIMIT + 1);
}

int64_t warren_interval_next(int64_t anchor_s, int64_t period_s, warren_us from)
{
    int64_t s = warren_us_to_s(from); /* next instant > from: anchor + k*period > s or == s+frac */
    int64_t k = floor_div(s - anchor_s, period_s) + 1;
    return anchor_s + k * period_s;
}
