/* config_int.h: the settings tables behind config.c, one per section: each
 * setting's name, type, place in its struct, default and bounds drive
 * parsing, defaults, bounds checks and "did you mean". Private; tests walk
 * them (every setting documented in docs/config.md and examples/warren.cfg). */
#ifndef WARREN_CONFIG_INT_H
#define WARREN_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    WARREN__SET_STRING,   /* a non-empty string, copied into a char * (default def_str) */
    WARREN__SET_INT,      /* an integer in min-max, into an int (default def) */
    WARREN__SET_BOOL,     /* true or false, into an int as 0 or 1 (default def) */
    WARREN__SET_DURATION, /* a duration string >= min ms (and <= max when max > 0), into an
                             int64_t of milliseconds (default def) */
    WARREN__SET_ENUM,     /* one of names[], into an int (or enum) as its index (default def) */
    WARREN__SET_GROUP,    /* a group { ... } whose settings are table group */
    WARREN__SET_CUSTOM    /* structured: parsed by dedicated code (schedules, payload, ...) */
} warren__setting_type;

#define WARREN__SET_WHOLE_SECONDS 0x1u /* DURATION: used in whole seconds */

typedef struct warren__section warren__section;
typedef struct warren__setting warren__setting;
struct warren__loader;   /* config.c's loading state */
struct warren__scope;    /* which job, and the setting path prefix */
struct config_setting_t; /* libconfig's */

/* A setting's dedicated code (CUSTOM) or its check after the generic parse
 * (other types; may be NULL). base is the section's struct; status is what
 * the parse found: 0 absent, 1 valid (stored), -1 invalid (reported), -2 a
 * string that is none of names[] (ENUM; reported). */
typedef void (*warren__setting_fn)(struct warren__loader *L, const struct config_setting_t *group,
                                   const struct warren__scope *sc, void *base, int status);

struct warren__setting {
    const char *name;
    warren__setting_type type;
    size_t offset;       /* of the value in the section's struct (GROUP: of the group's struct) */
    int64_t def;         /* INT, BOOL, ENUM (index), DURATION (ms) */
    const char *def_str; /* STRING; NULL: no default */
    int64_t min, max;    /* INT: bounds; DURATION: at least min ms, at most max (0: 100 years) */
    unsigned flags;      /* WARREN__SET_* */
    const char *const *names;     /* ENUM: NULL-terminated, index = value */
    const char *what;             /* ENUM: how an unknown name is refused ("a misfire policy (use
                                     one of: ...)"); DURATION with max: why ("warren.claim ...") */
    const warren__section *group; /* GROUP */
    warren__setting_fn fn;        /* CUSTOM: parses it (NULL: an earlier entry's code parses
                                     it too); others: a check after parsing */
};

/* The most settings one section may have (load_group keeps their status on the stack). */
#define WARREN__SECTION_MAX 32

struct warren__section {
    const char *name; /* "" (the file's top level), "planner", "jobs", "jobs.retry", ... */
    const warren__setting *settings;
    size_t count;
    /* Checks across the section's settings, after all of them (may be NULL);
     * status[i] is what the parse of settings[i] found (as for fn). */
    void (*finish)(struct warren__loader *L, const struct config_setting_t *group,
                   const struct warren__scope *sc, void *base, const int *status);
};

/* Every section, the top level first; *n gets the count. Borrowed (static). */
const warren__section *const *warren__config_sections(size_t *n);

#endif
