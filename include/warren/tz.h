/* tz.h: IANA time zones read from the system's TZif files (with the POSIX
 * footer for instants past the last listed transition), cached per database. */
#ifndef WARREN_TZ_H
#define WARREN_TZ_H

#include <stddef.h>
#include <stdint.h>

#include <warren/error.h>

typedef struct warren_tz warren_tz;
typedef struct warren_tzdb warren_tzdb;

/* A zone cache over directory dir (NULL: $TZDIR, else /usr/share/zoneinfo).
 * Not thread-safe; give each thread its own or lock around it. New; free with
 * warren_tzdb_free (NULL allowed). Returns NULL only when out of memory. */
warren_tzdb *warren_tzdb_new(const char *dir);
void warren_tzdb_free(warren_tzdb *db);

/* Loads (once) and returns the zone called name ("UTC", "Europe/Berlin").
 * *out is borrowed, valid until the db is freed. Errors (WARREN_ETZ): names
 * that are not IANA zones (absolute paths, "..", zone.tab, POSIX TZ strings,
 * trailing spaces), unreadable or malformed files; the message names the zone.
 * When the directory holds tzdata.zi (the tz database's own list of zones and
 * links), a name must be listed there; otherwise the name is checked by form
 * and the file must be a regular file starting with the TZif magic. */
int warren_tzdb_get(warren_tzdb *db, const char *name, const warren_tz **out, warren_error *err);

/* Number of zones currently cached in db. */
size_t warren_tzdb_count(const warren_tzdb *db);

/* Parses a TZif (version 1-4) image. name is copied. *out is new; free with
 * warren_tz_free. Never reads outside data[0..len). Errors: WARREN_ETZ. */
int warren_tz_parse_tzif(const char *name, const unsigned char *data, size_t len, warren_tz **out,
                         warren_error *err);
/* Frees a zone from warren_tz_parse_tzif (never one borrowed from a db). NULL allowed. */
void warren_tz_free(warren_tz *tz);

/* A loaded zone is immutable: the lookups below may run concurrently from
 * any number of threads (only warren_tzdb_get mutates the cache). */

/* The zone's name as given to warren_tzdb_get (borrowed). */
const char *warren_tz_name(const warren_tz *tz);

/* The local-time rule in force at UTC instant t (seconds since the epoch):
 * UTC offset in seconds (local = UTC + offset), DST flag and abbreviation
 * (borrowed, valid as long as the zone). Any pointer may be NULL. */
void warren_tz_lookup(const warren_tz *tz, int64_t t, int32_t *utc_offset, int *is_dst,
                      const char **abbr);

/* A maximal stretch of UTC time with one UTC offset (changes of abbreviation
 * or DST flag alone do not end it). */
typedef struct warren_tz_span {
    int64_t start;       /* first instant of the span; INT64_MIN if unbounded */
    int64_t end;         /* first instant after it; INT64_MAX if unbounded */
    int32_t offset;      /* UTC offset inside the span */
    int32_t prev_offset; /* offset just before start (== offset when unbounded) */
    int32_t next_offset; /* offset from end on (== offset when unbounded) */
} warren_tz_span;

/* The span containing UTC instant t. */
void warren_tz_span_at(const warren_tz *tz, int64_t t, warren_tz_span *out);

/* Bytes of memory held for this zone once parsed (for the benchmark). */
size_t warren_tz_memory(const warren_tz *tz);

#endif
