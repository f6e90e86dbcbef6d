/* duration.c: durations as operators write them ("250ms", "90s", "1h30m", "2d"),
 * parsed strictly (units largest first, each once) into milliseconds, and back. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <warren/duration.h>

/* Units from largest to smallest; a duration must use them in this order. */
static const struct {
    const char *name;
    int64_t ms;
} units[] = {
    {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1},
};
#define NUNITS ((int)(sizeof(units) / sizeof(units[0])))

/* Longest input we quote back in messages (the text may be anything). */
#define QUOTE_MAX 60

static int bad(warren_error *err, const char *text, const char *why)
{
    size_t n = strlen(text);
    return warren_error_set(
        err, WARREN_EPARSE, "\"%.*s%s\" is not a duration%s%s (use e.g. \"10s\", \"5m\")",
        QUOTE_MAX, text, n > QUOTE_MAX ? "..." : "", why ? ": " : "", why ? why : "");
}

int warren_duration_parse(const char *text, int64_t *ms, warren_error *err)
{
    const char *p = text;
    int64_t total = 0;
    int next_unit = 0; /* index of the largest unit still allowed */

    if (text == NULL)
        return warren_error_set(err, WARREN_EPARSE, "missing duration (use e.g. \"10s\", \"5m\")");
    if (*p == '\0')
        return bad(err, text, "it is empty");
    if (*p == '-')
        return bad(err, text, "durations cannot be negative");
    if (strcmp(text, "0") == 0) {
        *ms = 0;
        return 0;
    }
    while (*p != '\0') {
        int64_t v = 0;
        int u, len = 0;

        if (*p < '0' || *p > '9')
            return bad(err, text, NULL);
        while (*p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - (*p - '0')) / 10)
                return warren_error_set(err, WARREN_ERANGE, "\"%.*s\" is too long a duration",
                                        QUOTE_MAX, text);
            v = v * 10 + (*p - '0');
            p++;
        }
        /* "ms" before "m": take the unit that the next letters spell exactly. */
        if (p[0] == 'm' && p[1] == 's')
            len = 2;
        else if (*p != '\0' && strchr("dhms", *p) != NULL)
            len = 1;
        for (u = 0; len > 0 && u < NUNITS; u++)
            if ((int)strlen(units[u].name) == len && strncmp(p, units[u].name, (size_t)len) == 0)
                break;
        if (len == 0 || (p[len] != '\0' && (p[len] < '0' || p[len] > '9')))
            return bad(err, text, *p == '\0' ? "a number needs a unit (ms, s, m, h, d)" : NULL);
        if (u < next_unit)
            return bad(err, text, "units go from largest to smallest, each at most once");
        if (v > INT64_MAX / units[u].ms || total > INT64_MAX - v * units[u].ms)
            return warren_error_set(err, WARREN_ERANGE, "\"%.*s\" is too long a duration",
                                    QUOTE_MAX, text);
        total += v * units[u].ms;
        next_unit = u + 1;
        p += len;
    }
    *ms = total;
    return 0;
}

char *warren_duration_format(int64_t ms, char *buf, size_t len)
{
    size_t off = 0;
    uint64_t rest;

    if (buf == NULL || len == 0)
        return buf;
    buf[0] = '\0';
    if (ms == 0) {
        snprintf(buf, len, "0s");
        return buf;
    }
    if (ms < 0) {
        off += (size_t)snprintf(buf, len, "-");
        rest = (uint64_t)(-(ms + 1)) + 1; /* INT64_MIN safe */
    } else {
        rest = (uint64_t)ms;
    }
    for (int u = 0; u < NUNITS && rest > 0; u++) {
        uint64_t q = rest / (uint64_t)units[u].ms;
        if (q == 0)
            continue;
        rest -= q * (uint64_t)units[u].ms;
        if (off < len)
            off += (size_t)snprintf(buf + off, len - off, "%" PRIu64 "%s", q, units[u].name);
    }
    return buf;
}
