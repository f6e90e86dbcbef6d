/* tz.c: a small TZif (RFC 8536, versions 1-4) reader with its POSIX TZ footer,
 * and a per-database cache of parsed zones. glibc only offers the process-global
 * TZ + tzset, so warren reads the tz database itself. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <warren/hash.h>
#include <warren/timefmt.h>
#include <warren/tz.h>

#define ABBR_MAX 16              /* POSIX TZNAME_MAX is 6; real names are shorter */
#define TZIF_MAX_BYTES (1 << 20) /* the largest real zone file is ~3 KB */
#define TZIF_MAX_TIMES 65536
#define OFFSET_LIMIT (26 * 3600) /* |UTC offset| bound (RFC 8536 allows -89999..93599) */

typedef struct ttype {
    int32_t off;
    uint8_t isdst;
    uint8_t abbr; /* index into chars */
} ttype;

/* A POSIX TZ rule date: Jn (julian, no Feb 29), n (zero-based, with Feb 29) or Mm.w.d. */
typedef struct rdate {
    char kind; /* 'J', 'D' (zero-based day), 'M' */
    int16_t day;
    int8_t mon, week, wday;
    int32_t time; /* seconds after local midnight; may be negative or > 24h (v3) */
} rdate;

typedef struct footer {
    int present; /* a footer with at least a standard time */
    int has_dst;
    ttype std, dst; /* abbr indexes point into the zone's footer name strings */
    char std_abbr[ABBR_MAX], dst_abbr[ABBR_MAX];
    rdate start, end;
} footer;

struct warren_tz {
    char *name;
    int32_t ntimes;
    int32_t ntypes;
    int64_t *times; /* ascending transition instants */
    uint8_t *idx;   /* type index per transition */
    ttype *types;   /* ntypes entries */
    char *chars;    /* abbreviation strings */
    size_t nchars;
    footer ft;
    size_t memory;
};

/* ---- POSIX TZ footer ---------------------------------------------------- */

static int parse_name(const char **pp, char *out)
{
    const char *p = *pp;
    size_t n = 0;
    if (*p == '<') {
        p++;
        while (*p && *p != '>') {
            char c = *p;
            if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '+' || c == '-'))
                return -1;
            if (n + 1 >= ABBR_MAX)
                return -1;
            out[n++] = c;
            p++;
        }
        if (*p != '>')
            return -1;
        p++;
    } else {
        while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')) {
            if (n + 1 >= ABBR_MAX)
                return -1;
            out[n++] = *p++;
        }
    }
    if (n < 3)
        return -1;
    out[n] = '\0';
    *pp = p;
    return 0;
}

static int parse_num(const char **pp, int max, int *out)
{
    const char *p = *pp;
    int v = 0, n = 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        if (v > max)
            return -1;
        p++;
        n++;
    }
    if (n == 0)
        return -1;
    *pp = p;
    *out = v;
    return 0;
}

/* [+-]hh[:mm[:ss]] with hours up to max_h; returns signed seconds. */
static int parse_hms(const char **pp, int max_h, int32_t *out)
{
    const char *p = *pp;
    int sign = 1, h, m = 0, s = 0;
    if (*p == '+' || *p == '-') {
        sign = *p == '-' ? -1 : 1;
        p++;
    }
    if (parse_num(&p, max_h, &h))
        return -1;
    if (*p == ':') {
        p++;
        if (parse_num(&p, 59, &m))
            return -1;
        if (*p == ':') {
            p++;
            if (parse_num(&p, 59, &s))
                return -1;
        }
    }
    *out = sign * (h * 3600 + m * 60 + s);
    *pp = p;
    return 0;
}

static int parse_rdate(const char **pp, rdate *r)
{
    const char *p = *pp;
    int a, b, c;
    if (*p == 'J') {
        p++;
        if (parse_num(&p, 365, &a) || a < 1)
            return -1;
        r->kind = 'J';
        r->day = (int16_t)a;
    } else if (*p == 'M') {
        p++;
        if (parse_num(&p, 12, &a) || a < 1 || *p++ != '.' || parse_num(&p, 5, &b) || b < 1 ||
            *p++ != '.' || parse_num(&p, 6, &c))
            return -1;
        r->kind = 'M';
        r->mon = (int8_t)a;
        r->week = (int8_t)b;
        r->wday = (int8_t)c;
    } else if (*p >= '0' && *p <= '9') {
        if (parse_num(&p, 365, &a))
            return -1;
        r->kind = 'D';
        r->day = (int16_t)a;
    } else {
        return -1;
    }
    r->time = 7200;
    if (*p == '/') {
        p++;
        if (parse_hms(&p, 167, &r->time))
            return -1;
    }
    *pp = p;
    return 0;
}

/* Parses a footer "std offset [dst [offset] [,start[/time],end[/time]]]". */
static int parse_footer(const char *s, footer *f)
{
    const char *p = s;
    int32_t o;
    memset(f, 0, sizeof *f);
    if (parse_name(&p, f->std_abbr) || parse_hms(&p, 24, &o))
        return -1;
    f->std.off = -o;
    f->present = 1;
    if (*p == '\0')
        return 0;
    if (parse_name(&p, f->dst_abbr))
        return -1;
    f->has_dst = 1;
    f->dst.isdst = 1;
    f->dst.off = f->std.off + 3600;
    if (*p && *p != ',') {
        if (parse_hms(&p, 24, &o))
            return -1;
        f->dst.off = -o;
    }
    if (*p == '\0') {
        /* No rule: tzcode's default, the US rules since 2007. */
        f->start = (rdate){'M', 0, 3, 2, 0, 7200};
        f->end = (rdate){'M', 0, 11, 1, 0, 7200};
        return 0;
    }
    if (*p++ != ',' || parse_rdate(&p, &f->start) || *p++ != ',' || parse_rdate(&p, &f->end) ||
        *p != '\0')
        return -1;
    return 0;
}

static int is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int month_days(int64_t y, int m)
{
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : dm[m - 1];
}

/* Local seconds since the epoch (in the frame of the offset in force before
 * the transition) of rule date r in year y. */
static int64_t rdate_local(const rdate *r, int64_t y)
{
    int64_t day;
    if (r->kind == 'J') {
        day = warren_days_from_civil(y, 1, 1) + r->day - 1;
        if (is_leap(y) && r->day >= 60)
            day++;
    } else if (r->kind == 'D') {
        day = warren_days_from_civil(y, 1, 1) + r->day;
    } else {
        int64_t first = warren_days_from_civil(y, (unsigned)r->mon, 1);
        int wd = (int)(((first % 7) + 11) % 7); /* 1970-01-01 was a Thursday (4) */
        int d = 1 + (r->wday - wd + 7) % 7 + 7 * (r->week - 1);
        int dim = month_days(y, r->mon);
        while (d > dim)
            d -= 7;
        day = first + d - 1;
    }
    return day * 86400 + r->time;
}

static int64_t year_of(int64_t t)
{
    int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
    int64_t y;
    unsigned m, d;
    warren_civil_from_days(days, &y, &m, &d);
    return y;
}

typedef struct ftrans {
    int64_t at;
    int dst; /* state after the transition */
} ftrans;

/* The footer's transitions in years y-1..y+1, in order. */
static int footer_window(const footer *f, int64_t y, ftrans out[6])
{
    int n = 0;
    for (int64_t yy = y - 1; yy <= y + 1; yy++) {
        ftrans a = {rdate_local(&f->start, yy) - f->std.off, 1};
        ftrans b = {rdate_local(&f->end, yy) - f->dst.off, 0};
        if (b.at < a.at) {
            ftrans tmp = a;
            a = b;
            b = tmp;
        }
        out[n++] = a;
        out[n++] = b;
    }
    return n;
}

/* The footer's rules are evaluated within +-FOOTER_LIMIT seconds of the epoch
 * (about 300,000 years); beyond, the state at the limit holds. This keeps the
 * calendar arithmetic far from int64 overflow for any input instant. */
#define FOOTER_LIMIT INT64_C(10000000000000)

static int64_t clamp_t(int64_t t)
{
    return t > FOOTER_LIMIT ? FOOTER_LIMIT : t < -FOOTER_LIMIT ? -FOOTER_LIMIT : t;
}

/* Footer state at t: *dst and the instant it began (INT64_MIN if unknown). */
static void footer_at(const footer *f, int64_t t, int *dst, int64_t *since)
{
    ftrans w[6];
    int below = t < -FOOTER_LIMIT;
    t = clamp_t(t);
    int n = footer_window(f, year_of(t), w), best = -1;
    for (int i = 0; i < n; i++)
        if (w[i].at <= t && (best < 0 || w[i].at >= w[best].at))
            best = i;
    if (best < 0) {
        *dst = 0;
        *since = INT64_MIN;
        return;
    }
    *dst = w[best].dst;
    *since = below ? INT64_MIN : w[best].at;
}

/* First footer transition after t: returns 0 and fills *at, *dst; -1 if none. */
static int footer_after(const footer *f, int64_t t, int64_t *at, int *dst)
{
    ftrans w[6];
    if (t >= FOOTER_LIMIT)
        return -1;
    t = clamp_t(t);
    int n = footer_window(f, year_of(t), w), best = -1;
    for (int i = 0; i < n; i++)
        if (w[i].at > t && (best < 0 || w[i].at <= w[best].at))
            best = i;
    if (best < 0)
        return -1;
    *at = w[best].at;
    *dst = w[best].dst;
    return 0;
}

/* ---- lookups ------------------------------------------------------------ */

/* Index of the last transition <= t, or -1. */
static int32_t find_idx(const warren_tz *tz, int64_t t)
{
    int32_t lo = 0, hi = tz->ntimes; /* answer in [lo-1, hi-1] */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (tz->times[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

static int uses_footer(const warren_tz *tz, int64_t t)
{
    return tz->ft.present && (tz->ntimes == 0 || t >= tz->times[tz->ntimes - 1]);
}

/* The type in force at t and the instant it began (INT64_MIN if none). */
static void state_at(const warren_tz *tz, int64_t t, ttype *ty, const char **abbr, int64_t *since)
{
    if (uses_footer(tz, t)) {
        int dst = 0;
        int64_t s = INT64_MIN;
        if (tz->ft.has_dst)
            footer_at(&tz->ft, t, &dst, &s);
        if (tz->ntimes > 0 && (s == INT64_MIN || s < tz->times[tz->ntimes - 1]))
            s = tz->times[tz->ntimes - 1];
        *ty = dst ? tz->ft.dst : tz->ft.std;
        *abbr = dst ? tz->ft.dst_abbr : tz->ft.std_abbr;
        *since = s;
        return;
    }
    int32_t i = find_idx(tz, t);
    const ttype *p = &tz->types[i < 0 ? 0 : tz->idx[i]];
    *ty = *p;
    *abbr = tz->chars + p->abbr;
    *since = i < 0 ? INT64_MIN : tz->times[i];
}

/* The first transition after t and the offset it brings; -1 if none. */
static int next_change(const warren_tz *tz, int64_t t, int64_t *at, int32_t *off)
{
    if (tz->ntimes > 0 && t < tz->times[tz->ntimes - 1]) {
        int32_t i = find_idx(tz, t) + 1;
        if (i == tz->ntimes - 1 && tz->ft.present) {
            /* The last listed transition leads into the footer's rule. */
            ttype ty;
            const char *ab;
            int64_t s;
            state_at(tz, tz->times[i], &ty, &ab, &s);
            *at = tz->times[i];
            *off = ty.off;
            return 0;
        }
        *at = tz->times[i];
        *off = tz->types[tz->idx[i]].off;
        return 0;
    }
    if (!tz->ft.present || !tz->ft.has_dst)
        return -1;
    int dst;
    if (footer_after(&tz->ft, t, at, &dst))
        return -1;
    *off = dst ? tz->ft.dst.off : tz->ft.std.off;
    return 0;
}

void warren_tz_lookup(const warren_tz *tz, int64_t t, int32_t *utc_offset, int *is_dst,
                      const char **abbr)
{
    ttype ty;
    const char *ab;
    int64_t since;
    state_at(tz, t, &ty, &ab, &since);
    if (utc_offset)
        *utc_offset = ty.off;
    if (is_dst)
        *is_dst = ty.isdst;
    if (abbr)
        *abbr = ab;
}

static void span_generic(const warren_tz *tz, int64_t t, warren_tz_span *out);

/* Fast path inside the listed transitions (not touching the last one, whose
 * successor state comes from the footer). Returns -1 to defer to span_generic. */
static int span_table(const warren_tz *tz, int64_t t, warren_tz_span *out)
{
    int32_t n = tz->ntimes;
    if (n < 2 || t >= tz->times[n - 1])
        return -1;
    int32_t i = find_idx(tz, t);
    int32_t off = tz->types[i < 0 ? 0 : tz->idx[i]].off;
    int32_t j = i;
    while (j >= 0 && tz->types[j == 0 ? 0 : tz->idx[j - 1]].off == off)
        j--;
    if (j < 0) {
        out->start = INT64_MIN;
        out->prev_offset = off;
    } else {
        out->start = tz->times[j];
        out->prev_offset = tz->types[j == 0 ? 0 : tz->idx[j - 1]].off;
    }
    int32_t k = i + 1;
    while (k < n - 1 && tz->types[tz->idx[k]].off == off)
        k++;
    if (k >= n - 1)
        return -1;
    out->end = tz->times[k];
    out->next_offset = tz->types[tz->idx[k]].off;
    out->offset = off;
    return 0;
}

/* Fast path in the footer's regular alternation: one window computation. */
static int span_footer(const warren_tz *tz, int64_t t, warren_tz_span *out)
{
    const footer *f = &tz->ft;
    ftrans w[6];
    if (!f->present || !f->has_dst || !uses_footer(tz, t) || t >= FOOTER_LIMIT ||
        t <= -FOOTER_LIMIT)
        return -1;
    int n = footer_window(f, year_of(t), w), b = -1;
    for (int i = 0; i < n; i++) {
        if (i > 0 && w[i].at <= w[i - 1].at)
            return -1;
        if (w[i].at <= t)
            b = i;
    }
    if (b < 1 || b >= n - 1)
        return -1;
    if (w[b].dst == w[b - 1].dst || w[b + 1].dst == w[b].dst)
        return -1;
    if (tz->ntimes > 0 && w[b - 1].at <= tz->times[tz->ntimes - 1])
        return -1;
    int32_t cur = w[b].dst ? f->dst.off : f->std.off;
    int32_t other = w[b].dst ? f->std.off : f->dst.off;
    if (cur == other)
        return -1;
    out->start = w[b].at;
    out->end = w[b + 1].at;
    out->offset = cur;
    out->prev_offset = other;
    out->next_offset = other;
    return 0;
}

void warren_tz_span_at(const warren_tz *tz, int64_t t, warren_tz_span *out)
{
    if (span_table(tz, t, out) == 0 || span_footer(tz, t, out) == 0)
        return;
    span_generic(tz, t, out);
}

static void span_generic(const warren_tz *tz, int64_t t, warren_tz_span *out)
{
    ttype ty, pty;
    const char *ab;
    int64_t since, psince;

    state_at(tz, t, &ty, &ab, &since);
    out->offset = ty.off;
    /* Walk back over transitions that keep the offset (abbreviation or
     * DST-flag changes only); a handful at most in real data. */
    out->start = since;
    out->prev_offset = ty.off;
    for (int guard = 0; out->start != INT64_MIN && guard < 64; guard++) {
        state_at(tz, out->start - 1, &pty, &ab, &psince);
        if (pty.off != ty.off) {
            out->prev_offset = pty.off;
            break;
        }
        out->start = psince;
    }
    out->end = INT64_MAX;
    out->next_offset = ty.off;
    int64_t cur = t, at;
    int32_t off;
    for (int guard = 0; guard < 64; guard++) {
        if (next_change(tz, cur, &at, &off))
            break;
        if (off != ty.off) {
            out->end = at;
            out->next_offset = off;
            break;
        }
        cur = at;
    }
}

const char *warren_tz_name(const warren_tz *tz)
{
    return tz->name;
}

size_t warren_tz_memory(const warren_tz *tz)
{
    return tz->memory;
}

/* ---- TZif --------------------------------------------------------------- */

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

typedef struct hdr {
    int version;
    uint32_t isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt;
} hdr;

static int read_hdr(const unsigned char *p, size_t len, hdr *h)
{
    if (len < 44 || memcmp(p, "TZif", 4) != 0)
        return -1;
    h->version = p[4] == 0 ? 1 : p[4] - '0';
    if (h->version < 1 || h->version > 4)
        return -1;
    h->isutcnt = be32(p + 20);
    h->isstdcnt = be32(p + 24);
    h->leapcnt = be32(p + 28);
    h->timecnt = be32(p + 32);
    h->typecnt = be32(p + 36);
    h->charcnt = be32(p + 40);
    return 0;
}

static size_t block_size(const hdr *h, size_t tsize)
{
    return (size_t)h->timecnt * tsize + h->timecnt + (size_t)h->typecnt * 6 + h->charcnt +
           (size_t)h->leapcnt * (tsize + 4) + h->isstdcnt + h->isutcnt;
}

void warren_tz_free(warren_tz *tz)
{
    if (tz == NULL)
        return;
    free(tz->name);
    free(tz->times);
    free(tz->idx);
    free(tz->types);
    free(tz->chars);
    free(tz);
}

int warren_tz_parse_tzif(const char *name, const unsigned char *data, size_t len, warren_tz **out,
                         warren_error *err)
{
    hdr h;
    size_t tsize = 4;
    const unsigned char *p = data;
    size_t left = len;
    warren_tz *tz = NULL;
    const char *why = "malformed TZif data";

    *out = NULL;
    if (name == NULL)
        name = "(unnamed)";
    if (read_hdr(p, left, &h)) {
        why = "not a TZif file (no \"TZif\" magic or unknown version)";
        goto fail;
    }
    if (h.version >= 2) {
        /* Skip the 32-bit block; the 64-bit one follows with its own header. */
        if (h.timecnt > TZIF_MAX_TIMES || h.typecnt > 256 || h.charcnt > 4096 || h.leapcnt > 4096 ||
            h.isstdcnt > 256 || h.isutcnt > 256)
            goto fail;
        size_t skip = 44 + block_size(&h, 4);
        if (skip > left)
            goto fail;
        p += skip;
        left -= skip;
        if (read_hdr(p, left, &h))
            goto fail;
        tsize = 8;
    }
    if (h.timecnt > TZIF_MAX_TIMES || h.typecnt == 0 || h.typecnt > 256 || h.charcnt == 0 ||
        h.charcnt > 4096 || h.leapcnt > 4096 || (h.isstdcnt != 0 && h.isstdcnt != h.typecnt) ||
        (h.isutcnt != 0 && h.isutcnt != h.typecnt))
        goto fail;
    if (h.leapcnt != 0) {
        why = "leap-second (\"right/\") zones are not supported";
        goto fail;
    }
    size_t need = 44 + block_size(&h, tsize);
    if (need > left)
        goto fail;

    tz = calloc(1, sizeof *tz);
    if (tz == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    tz->name = strdup(name);
    tz->ntimes = (int32_t)h.timecnt;
    tz->ntypes = (int32_t)h.typecnt;
    tz->nchars = h.charcnt;
    tz->times = malloc(sizeof(int64_t) * (h.timecnt ? h.timecnt : 1));
    tz->idx = malloc(h.timecnt ? h.timecnt : 1);
    tz->types = malloc(sizeof(ttype) * h.typecnt);
    tz->chars = malloc(h.charcnt + 1);
    if (!tz->name || !tz->times || !tz->idx || !tz->types || !tz->chars) {
        warren_tz_free(tz);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    tz->memory = sizeof *tz + strlen(name) + 1 + sizeof(int64_t) * h.timecnt + h.timecnt +
                 sizeof(ttype) * h.typecnt + h.charcnt + 1;

    const unsigned char *q = p + 44;
    for (uint32_t i = 0; i < h.timecnt; i++, q += tsize) {
        tz->times[i] = tsize == 8 ? be64(q) : (int64_t)(int32_t)be32(q);
        if (i > 0 && tz->times[i] <= tz->times[i - 1])
            goto fail;
    }
    for (uint32_t i = 0; i < h.timecnt; i++, q++) {
        if (*q >= h.typecnt)
            goto fail;
        tz->idx[i] = *q;
    }
    for (uint32_t i = 0; i < h.typecnt; i++, q += 6) {
        int32_t off = (int32_t)be32(q);
        if (off <= -OFFSET_LIMIT || off >= OFFSET_LIMIT || q[4] > 1 || q[5] >= h.charcnt)
            goto fail;
        tz->types[i] = (ttype){off, q[4], q[5]};
    }
    memcpy(tz->chars, q, h.charcnt);
    tz->chars[h.charcnt] = '\0';
    for (uint32_t i = 0; i < h.typecnt; i++)
        if (memchr(tz->chars + tz->types[i].abbr, '\0', h.charcnt - tz->types[i].abbr) == NULL)
            goto fail;
    q += h.charcnt + h.isstdcnt + h.isutcnt;

    if (h.version >= 2) {
        /* Footer: "\n" POSIX-TZ "\n"; an empty string means no rule. */
        const unsigned char *end = data + len;
        if (q >= end || *q != '\n')
            goto fail;
        const unsigned char *nl = memchr(q + 1, '\n', (size_t)(end - q - 1));
        if (nl == NULL || nl - q - 1 > 255 || memchr(q + 1, '\0', (size_t)(nl - q - 1)))
            goto fail;
        char buf[256];
        memcpy(buf, q + 1, (size_t)(nl - q - 1));
        buf[nl - q - 1] = '\0';
        if (buf[0] != '\0' && parse_footer(buf, &tz->ft)) {
            why = "malformed POSIX TZ footer";
            goto fail;
        }
        if (tz->ft.present) {
            if (tz->ft.std.off <= -OFFSET_LIMIT || tz->ft.std.off >= OFFSET_LIMIT ||
                tz->ft.dst.off <= -OFFSET_LIMIT || tz->ft.dst.off >= OFFSET_LIMIT) {
                why = "POSIX TZ footer offset out of range";
                goto fail;
            }
        }
    }
    *out = tz;
    return 0;
fail:
    warren_tz_free(tz);
    return warren_error_set(err, WARREN_ETZ, "time zone \"%s\": %s", name, why);
}

/* ---- the database and its cache ------------------------------------------ */

typedef struct slot {
    char *key;
    warren_tz *tz;
} slot;

struct warren_tzdb {
    char *dir;
    int names_state; /* 0 not loaded, 1 loaded, -1 no tzdata.zi */
    char **names;    /* sorted zone and link names from tzdata.zi */
    size_t nnames;
    slot *slots; /* open addressing, power-of-two capacity */
    size_t cap, count;
};

warren_tzdb *warren_tzdb_new(const char *dir)
{
    warren_tzdb *db = calloc(1, sizeof *db);
    if (db == NULL)
        return NULL;
    if (dir == NULL)
        dir = getenv("TZDIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/usr/share/zoneinfo";
    db->dir = strdup(dir);
    db->cap = 64;
    db->slots = calloc(db->cap, sizeof(slot));
    if (db->dir == NULL || db->slots == NULL) {
        warren_tzdb_free(db);
        return NULL;
    }
    return db;
}

void warren_tzdb_free(warren_tzdb *db)
{
    if (db == NULL)
        return;
    for (size_t i = 0; i < db->cap && db->slots; i++) {
        free(db->slots[i].key);
        warren_tz_free(db->slots[i].tz);
    }
    for (size_t i = 0; i < db->nnames; i++)
        free(db->names[i]);
    free(db->names);
    free(db->slots);
    free(db->dir);
    free(db);
}

size_t warren_tzdb_count(const warren_tzdb *db)
{
    return db->count;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the zone and link names from tzdata.zi ("Z name ..." and "L target name"). */
static void load_names(warren_tzdb *db)
{
    char path[4096];
    char line[1024];
    size_t cap = 0;
    snprintf(path, sizeof path, "%s/tzdata.zi", db->dir);
    FILE *f = fopen(path, "r");
    db->names_state = -1;
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        char a[512], b[512];
        const char *nm = NULL;
        if (line[0] == 'Z' && sscanf(line, "Z %511s", a) == 1)
            nm = a;
        else if (line[0] == 'L' && sscanf(line, "L %511s %511s", a, b) == 2)
            nm = b;
        if (nm == NULL)
            continue;
        if (db->nnames == cap) {
            size_t ncap = cap ? cap * 2 : 512;
            char **nn = realloc(db->names, ncap * sizeof *nn);
            if (nn == NULL)
                break;
            db->names = nn;
            cap = ncap;
        }
        db->names[db->nnames] = strdup(nm);
        if (db->names[db->nnames])
            db->nnames++;
    }
    fclose(f);
    if (db->nnames == 0)
        return;
    qsort(db->names, db->nnames, sizeof *db->names, cmp_str);
    db->names_state = 1;
}

static int listed(const warren_tzdb *db, const char *name)
{
    return bsearch(&name, db->names, db->nnames, sizeof *db->names, cmp_str) != NULL;
}

static int looks_posix(const char *name)
{
    /* POSIX TZ strings carry a comma rule, <quoted> names or a sign/digit
     * offset after the name; IANA names like EST5EDT or Etc/GMT+5 are caught
     * by the listing before this is consulted. */
    return strpbrk(name, ",<>:") != NULL;
}

/* Checks the name's form; 0 if plausible. */
static int check_name(const char *name, warren_error *err)
{
    size_t n = strlen(name);
    if (n == 0)
        return warren_error_set(err, WARREN_ETZ, "time zone name is empty (use e.g. \"UTC\")");
    if (n > 255)
        return warren_error_set(err, WARREN_ETZ, "time zone name is too long (%zu characters)", n);
    if (name[0] == ' ' || name[0] == '\t' || name[n - 1] == ' ' || name[n - 1] == '\t')
        return warren_error_set(err, WARREN_ETZ, "time zone \"%s\" has leading or trailing spaces",
                                name);
    if (name[0] == '/')
        return warren_error_set(err, WARREN_ETZ,
                                "time zone \"%s\" is an absolute path; use an IANA zone name "
                                "like \"Europe/Berlin\"",
                                name);
    if (looks_posix(name))
        return warren_error_set(err, WARREN_ETZ,
                                "time zone \"%s\" looks like a POSIX TZ string; use an IANA "
                                "zone name like \"Europe/Berlin\"",
                                name);
    for (const char *p = name; *p; p++) {
        char c = *p;
        if ((p == name || p[-1] == '/') && (c == '.' || c == '/'))
            return warren_error_set(err, WARREN_ETZ,
                                    "time zone \"%s\" has an empty, \".\" or \"..\" path "
                                    "component; use an IANA zone name like \"Europe/Berlin\"",
                                    name);
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '/' || c == '_' || c == '-' || c == '+' || c == '.'))
            return warren_error_set(err, WARREN_ETZ,
                                    "time zone \"%s\" contains an invalid character", name);
    }
    if (name[n - 1] == '/')
        return warren_error_set(err, WARREN_ETZ, "time zone \"%s\" ends with \"/\"", name);
    return 0;
}

static int not_zone_file(const char *name)
{
    static const char *const bad[] = {
        "zone.tab",   "zone1970.tab",      "zonenow.tab", "iso3166.tab", "tzdata.zi", "leapseconds",
        "posixrules", "leap-seconds.list", "localtime",   "SECURITY",    "Factory"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (strcmp(name, bad[i]) == 0)
            return 1;
    return strncmp(name, "posix/", 6) == 0 || strncmp(name, "right/", 6) == 0;
}

static int load_zone(warren_tzdb *db, const char *name, warren_tz **out, warren_error *err)
{
    char path[4096];
    struct stat st;
    unsigned char *buf = NULL;
    int fd, rc;

    snprintf(path, sizeof path, "%s/%s", db->dir, name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return warren_error_set(err, WARREN_ETZ, "unknown time zone \"%s\" (%s: %s)", name, path,
                                strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 44 ||
        st.st_size > TZIF_MAX_BYTES) {
        close(fd);
        return warren_error_set(err, WARREN_ETZ, "time zone \"%s\": %s is not a zone file", name,
                                path);
    }
    buf = malloc((size_t)st.st_size);
    if (buf == NULL) {
        close(fd);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (got < 4 || memcmp(buf, "TZif", 4) != 0) {
        free(buf);
        return warren_error_set(
            err, WARREN_ETZ, "time zone \"%s\": %s is not a zone file (no TZif magic)", name, path);
    }
    rc = warren_tz_parse_tzif(name, buf, got, out, err);
    free(buf);
    return rc;
}

static int grow(warren_tzdb *db)
{
    size_t ncap = db->cap * 2;
    slot *ns = calloc(ncap, sizeof *ns);
    if (ns == NULL)
        return -1;
    for (size_t i = 0; i < db->cap; i++) {
        if (db->slots[i].key == NULL)
            continue;
        size_t j = warren_hash_fnv1a32(db->slots[i].key) & (ncap - 1);
        while (ns[j].key)
            j = (j + 1) & (ncap - 1);
        ns[j] = db->slots[i];
    }
    free(db->slots);
    db->slots = ns;
    db->cap = ncap;
    return 0;
}

int warren_tzdb_get(warren_tzdb *db, const char *name, const warren_tz **out, warren_error *err)
{
    size_t j;
    int rc;
    warren_tz *tz;

    if (name == NULL)
        return warren_error_set(err, WARREN_ETZ, "time zone name is missing");
    j = warren_hash_fnv1a32(name) & (db->cap - 1);
    while (db->slots[j].key) {
        if (strcmp(db->slots[j].key, name) == 0) {
            *out = db->slots[j].tz;
            return 0;
        }
        j = (j + 1) & (db->cap - 1);
    }
    if ((rc = check_name(name, err)) != 0)
        return rc;
    if (db->names_state == 0)
        load_names(db);
    if (db->names_state == 1 ? !listed(db, name) : not_zone_file(name))
        return warren_error_set(err, WARREN_ETZ,
                                "unknown time zone \"%s\" (not a zone or link of the tz "
                                "database in %s; use an IANA name like \"Europe/Berlin\")",
                                name, db->dir);
    if ((rc = load_zone(db, name, &tz, err)) != 0)
        return rc;
    if ((db->count + 1) * 2 > db->cap && grow(db) != 0) {
        warren_tz_free(tz);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    j = warren_hash_fnv1a32(name) & (db->cap - 1);
    while (db->slots[j].key)
        j = (j + 1) & (db->cap - 1);
    db->slots[j].key = strdup(name);
    if (db->slots[j].key == NULL) {
        warren_tz_free(tz);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    db->slots[j].tz = tz;
    db->count++;
    *out = tz;
    return 0;
}
