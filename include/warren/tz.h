/* tz.h: IANA time zones read from the system's TZif files (with the POSIX
 * footer for instants past the last listed transition), cached per database. */
#ifndef WARREN_TZ_H
#define WARREN_TZ_H

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
 * trailing spaces), unreadable or malformed files; the message names the zone. */
int warren_tzdb_get(warren_tzdb *db, const char *name, const warren_tz **out, warren_error *err);

/* The zone's name as given to warren_tzdb_get (borrowed). */
const char *warren_tz_name(const warren_tz *tz);

/* The local-time rule in force at UTC instant t (seconds since the epoch):
 * UTC offset in seconds (local = UTC + offset), DST flag and abbreviation
 * (borrowed, valid as long as the zone). Any pointer may be NULL. */
void warren_tz_lookup(const warren_tz *tz, int64_t t, int32_t *utc_offset, int *is_dst,
                      const char **abbr);

/* Bytes of memory held for this zone once parsed (for the benchmark). */
size_t warren_tz_memory(const warren_tz *tz);

#endif
