/* error.c: the error table (generated from WARREN_ERRNO_MAP) and the error struct. */
#include <stdio.h>
#include <string.h>

#include <warren/error.h>

static const struct {
    int code;
    const char *name;
    const char *text;
} table[] = {
#define WARREN_ERR_ROW(name, value, text) {value, "WARREN_" #name, text},
    WARREN_ERRNO_MAP(WARREN_ERR_ROW)
#undef WARREN_ERR_ROW
};

int warren_errno_count(void)
{
    return (int)(sizeof(table) / sizeof(table[0]));
}

int warren_errno_at(int i)
{
    if (i < 0 || i >= warren_errno_count())
        return 0;
    return table[i].code;
}

const char *warren_strerror(int code)
{
    if (code == 0)
        return "success";
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (table[i].code == code)
            return table[i].text;
    return "unknown error";
}

const char *warren_err_name(int code)
{
    if (code == 0)
        return "WARREN_OK";
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (table[i].code == code)
            return table[i].name;
    return NULL;
}

void warren_error_clear(warren_error *err)
{
    if (err == NULL)
        return;
    err->code = 0;
    err->message[0] = '\0';
}

int warren_error_setv(warren_error *err, int code, const char *fmt, va_list ap)
{
    if (err == NULL || err->code != 0)
        return code;
    err->code = code;
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    return code;
}

int warren_error_set(warren_error *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    warren_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}
