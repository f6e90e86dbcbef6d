/* tzpin.h: the tests' own tz data. tests/CMakeLists.txt compiles release
 * WARREN_TZ_RELEASE of the tz database (tests/data/tz/) into the build tree and
 * runs every test with TZDIR pointing there, so no machine's tzdata package can
 * make a test pass or fail. A runner whose expectations are facts of that
 * release calls tzpin_require() first: run by hand without ctest's TZDIR, it
 * stops with a message instead of failing on some zone's history. */
#ifndef WARREN_TESTS_TZPIN_H
#define WARREN_TESTS_TZPIN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The system's tz database: warren's default, and what PostgreSQL reads. */
#define TZPIN_SYSTEM_DIR "/usr/share/zoneinfo"

/* $TZDIR, after checking that it holds the pinned release (the first line of
 * its tzdata.zi is "# version RELEASE"); exits the runner when it does not. */
static inline const char *tzpin_require(void)
{
    const char *dir = getenv("TZDIR");
    char path[1024], line[128] = "";
    const char *want = "# version " WARREN_TZ_RELEASE;
    if (dir == NULL || *dir == '\0') {
        fprintf(stderr, "TZDIR is not set: run this test through ctest, or set TZDIR to the "
                        "build tree's tzdata-" WARREN_TZ_RELEASE " directory\n");
        exit(EXIT_FAILURE);
    }
    snprintf(path, sizeof path, "%s/tzdata.zi", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL || fgets(line, sizeof line, f) == NULL ||
        strncmp(line, want, strlen(want)) != 0) {
        fprintf(stderr,
                "%s: not tz release " WARREN_TZ_RELEASE " (first line \"%.40s\"): TZDIR "
                "must be the build tree's tzdata-" WARREN_TZ_RELEASE " directory\n",
                path, line);
        if (f != NULL)
            fclose(f);
        exit(EXIT_FAILURE);
    }
    fclose(f);
    return dir;
}

/* buf = "$TZDIR/rel" (the pinned release). */
static inline const char *tzpin_path(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", tzpin_require(), rel);
    return buf;
}

#endif
