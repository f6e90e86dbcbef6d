/* buf.h: a growable text buffer with a cap (curl's dynbuf): what the store
 * modules build SQL parameters (array literals, the sync document) in.
 * Private to the library. */
#ifndef WARREN_BUF_H
#define WARREN_BUF_H

#include <stddef.h>

/* The largest text PostgreSQL takes as one value (1 GB less one byte). */
#define WARREN__BUF_PG_VALUE_MAX (((size_t)1 << 30) - 1)

typedef struct warren__buf {
    char *p;    /* the text, NUL-terminated; NULL until something is added */
    size_t len; /* bytes of text, without the NUL */
    size_t cap; /* bytes allocated */
    size_t max; /* the cap: len never exceeds it (0, as in a zeroed buffer:
                   WARREN__BUF_PG_VALUE_MAX) */
    int err;    /* 0, or WARREN_ENOMEM or WARREN_ERANGE (an add would pass max): once set,
                   every later add is dropped, so callers check once at the end */
} warren__buf;

/* An empty buffer holding at most max bytes (0: WARREN__BUF_PG_VALUE_MAX);
 * nothing is allocated yet. A zeroed warren__buf is the same as max 0. */
void warren__buf_init(warren__buf *b, size_t max);
/* Frees the text; the buffer is empty (and usable) again. Accepts NULL. */
void warren__buf_close(warren__buf *b);
/* Empties the text but keeps the memory (and the error, if any). */
void warren__buf_reset(warren__buf *b);

/* Appends n bytes of data / the string s / printf output. 0, or b->err. */
int warren__buf_add(warren__buf *b, const void *data, size_t n);
int warren__buf_puts(warren__buf *b, const char *s);
int warren__buf_printf(warren__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The text, new (the caller frees it; "" when nothing was added), and the
 * buffer empty again; NULL (and the buffer closed) if b->err is set or
 * memory ran out. */
char *warren__buf_steal(warren__buf *b);

#endif
