/* buf.c: the capped growable text buffer (buf.h). Capacity doubles from 256
 * bytes, so n appends cost O(n) copies in all. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/error.h>

#include "buf.h"

#define FIRST_CAP 256

void warren__buf_init(warren__buf *b, size_t max)
{
    b->p = NULL;
    b->len = b->cap = 0;
    b->max = max;
    b->err = 0;
}

void warren__buf_close(warren__buf *b)
{
    if (b == NULL)
        return;
    free(b->p);
    warren__buf_init(b, b->max);
}

void warren__buf_reset(warren__buf *b)
{
    b->len = 0;
    if (b->p != NULL)
        b->p[0] = '\0';
}

/* Room for n more bytes and the NUL. */
static int grow(warren__buf *b, size_t n)
{
    size_t max = b->max == 0 ? WARREN__BUF_PG_VALUE_MAX : b->max;
    if (max > SIZE_MAX - 1)
        max = SIZE_MAX - 1; /* len + NUL never overflows */
    if (b->err != 0)
        return b->err;
    if (n > max - b->len || b->len > max)
        return b->err = WARREN_ERANGE;
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : FIRST_CAP;
    while (cap < b->len + n + 1)
        cap = cap > SIZE_MAX / 2 ? b->len + n + 1 : cap * 2;
    char *p = realloc(b->p, cap);
    if (p == NULL)
        return b->err = WARREN_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int warren__buf_add(warren__buf *b, const void *data, size_t n)
{
    int rc = grow(b, n);
    if (rc != 0)
        return rc;
    if (n > 0)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int warren__buf_puts(warren__buf *b, const char *s)
{
    return warren__buf_add(b, s, strlen(s));
}

int warren__buf_printf(warren__buf *b, const char *fmt, ...)
{
    va_list ap;
    int n, rc;

    if (b->err != 0)
        return b->err;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return b->err = WARREN_ERANGE;
    if ((rc = grow(b, (size_t)n)) != 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

char *warren__buf_steal(warren__buf *b)
{
    char *text;

    if (b->p == NULL)
        warren__buf_add(b, "", 0); /* "" rather than NULL */
    if (b->err != 0) {
        warren__buf_close(b);
        return NULL;
    }
    text = b->p;
    b->p = NULL;
    b->len = b->cap = 0;
    return text;
}
