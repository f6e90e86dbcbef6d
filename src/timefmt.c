/* timefmt.c: RFC 3339 parsing and formatting, and civil-date arithmetic
 * (Howard Hinnant's days_from_civil), with no dependence on the C library's
 * process-global time zone. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <warren/timefmt.h>

int64_t warren_days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void warren_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

int64_t warren_us_to_s(warren_us t)
{
    int64_t s = t / WARREN_US_PER_S;
    if (t % WARREN_US_PER_S < 0)
        s--;
    return s;
}

static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        char c = (*p)[i];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

static int days_in_month(int64_t y, int m)
{
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
        return 29;
    return dm[m - 1];
}

int warren_time_parse(const char *text, warren_us *out, warren_error *err)
{
    const char *p = text;
    int y, mo, d, h, mi, s, oh = 0, om = 0, sign = 0;
    int64_t frac = 0;

    if (text == NULL)
        return warren_error_set(err, WARREN_EPARSE, "missing time");
    if (digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) || *p++ != '-' || digits(&p, 2, &d))
        goto bad;
    if (*p != 'T' && *p != 't' && *p != ' ')
        goto bad;
    p++;
    if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &mi) || *p++ != ':' || digits(&p, 2, &s))
        goto bad;
    if (*p == '.') {
        int n = 0;
        p++;
        if (*p < '0' || *p > '9')
            goto bad;
        while (*p >= '0' && *p <= '9') {
            if (n < 6) {
                frac = frac * 10 + (*p - '0');
                n++;
            }
            p++;
        }
        for (; n < 6; n++)
            frac *= 10;
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        sign = *p == '-' ? -1 : 1;
        p++;
        if (digits(&p, 2, &oh) || *p++ != ':' || digits(&p, 2, &om) || oh > 23 || om > 59)
            goto bad;
    } else {
        goto bad;
    }
    if (*p != '\0')
        goto bad;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59)
        return warren_error_set(err, WARREN_EPARSE,
                                "\"%s\" is not a valid date and time (a field is out of range)",
                                text);
    int64_t days = warren_days_from_civil(y, (unsigned)mo, (unsigned)d);
    int64_t secs = days * 86400 + h * 3600 + mi * 60 + s - sign * (oh * 3600 + om * 60);
    *out = secs * WARREN_US_PER_S + frac;
    return 0;
bad:
    return warren_error_set(err, WARREN_EPARSE,
                            "\"%s\" is not an RFC 3339 time (use e.g. \"2026-12-01T09:00:00Z\" "
                            "or \"2026-12-01T10:00:00+01:00\")",
                            text);
}

static char *format(warren_us t, char *buf, size_t len, int with_ms)
{
    int64_t s = warren_us_to_s(t);
    int64_t us = t - s * WARREN_US_PER_S;
    int64_t days = s >= 0 ? s / 86400 : (s - 86399) / 86400;
    int64_t rem = s - days * 86400;
    int64_t y;
    unsigned m, d;

    warren_civil_from_days(days, &y, &m, &d);
    if (with_ms)
        snprintf(buf, len, "%04" PRId64 "-%02u-%02uT%02d:%02d:%02d.%03dZ", y, m, d,
                 (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60), (int)(us / 1000));
    else
        snprintf(buf, len, "%04" PRId64 "-%02u-%02uT%02d:%02d:%02dZ", y, m, d, (int)(rem / 3600),
                 (int)(rem / 60 % 60), (int)(rem % 60));
    return buf;
}

char *warren_time_format(warren_us t, char *buf, size_t len)
{
    return format(t, buf, len, 0);
}

char *warren_time_format_ms(warren_us t, char *buf, size_t len)
{
    return format(t, buf, len, 1);
}
