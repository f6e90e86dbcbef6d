/* store_migrate.c: `warren migrate`: the pending migrations
 * (SQL_DIR/migrations/NNN_*.sql: tables, columns, indexes, drops), then every
 * function file SQL_DIR/functions.sql lists (the one current definition of
 * each function), in one transaction under the migration lock. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* The migration lock: warren.schema_migrations locked IN SHARE ROW
 * EXCLUSIVE MODE (it conflicts with itself) for the whole transaction. Only
 * a login with UPDATE, DELETE or TRUNCATE on that table (its owner, a
 * superuser) can take it, so no producer or worker login can stall a migrate
 * the way any login could hold an advisory lock key. sql/install.sql takes
 * the same lock. */
static const char MIGRATE_LOCK_SQL[] =
    "LOCK TABLE warren.schema_migrations IN SHARE ROW EXCLUSIVE MODE";

/* A first install has no table to lock: it creates the schema and the table
 * in its transaction. A second first install racing it waits on the catalog
 * rows the first is inserting and fails when that one commits (23505, or
 * 42P06/42P07); it then starts again and finds the table. No advisory lock:
 * nothing any login of the database can hold stalls it. */
static const char MIGRATE_CREATE_SQL[] = "CREATE SCHEMA IF NOT EXISTS warren; "
                                         "CREATE TABLE IF NOT EXISTS warren.schema_migrations ("
                                         " version int PRIMARY KEY, name text NOT NULL,"
                                         " applied_at timestamptz NOT NULL DEFAULT now())";
#define MIGRATE_CREATE_TRIES 5

/* An SQL file larger than this is refused (every buffer has a cap). */
#define SQL_FILE_MAX_BYTES (64L * 1024 * 1024)

/* The list of function files, in creation order, and their directory. */
#define FUNCTIONS_LIST "functions.sql"
#define FUNCTIONS_DIR "functions"
#define MIGRATIONS_DIR "migrations"

int warren_store_has_function(warren_store *st, const char *signature, warren_error *err)
{
    PGresult *res;
    const char *p[] = {signature};
    /* to_regprocedure reads the catalog: any login may ask, and an unknown
     * name gives NULL instead of an error. */
    int rc = warren__store_exec(st, "SELECT to_regprocedure($1) IS NOT NULL", 1, p, &res,
                                "look up a function", err);
    if (rc != 0)
        return rc;
    rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return rc;
}

int warren_store_has_migration(warren_store *st, int version, warren_error *err)
{
    PGresult *res;
    char buf[16];
    const char *p[] = {warren__store_int_param(version, buf, sizeof(buf))};
    int rc = warren__store_exec(st, "SELECT to_regclass('warren.schema_migrations') IS NOT NULL", 0,
                                NULL, &res, "read warren.schema_migrations", err);
    if (rc != 0)
        return rc;
    rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (rc == 0)
        return 0;
    rc = warren__store_exec(st, "SELECT count(*) FROM warren.schema_migrations WHERE version = $1",
                            1, p, &res, "read warren.schema_migrations", err);
    if (rc != 0)
        return rc;
    rc = strcmp(PQgetvalue(res, 0, 0), "0") != 0;
    PQclear(res);
    return rc;
}

typedef struct {
    char **names;
    size_t n, cap;
} namelist;

static void namelist_free(namelist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->n = l->cap = 0;
}

static int namelist_add(namelist *l, const char *s, size_t len)
{
    char *copy;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **p = realloc(l->names, cap * sizeof(*p));
        if (p == NULL)
            return WARREN_ENOMEM;
        l->names = p;
        l->cap = cap;
    }
    copy = malloc(len + 1);
    if (copy == NULL)
        return WARREN_ENOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    l->names[l->n++] = copy;
    return 0;
}

static int namelist_has(const namelist *l, const char *s)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->names[i], s) == 0)
            return 1;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with_sql(const char *s)
{
    size_t len = strlen(s);

    return len > 4 && strcmp(s + len - 4, ".sql") == 0;
}

/* NNN_*.sql with exactly three leading digits. */
static int is_migration_name(const char *s)
{
    return strlen(s) > 8 && isdigit((unsigned char)s[0]) && isdigit((unsigned char)s[1]) &&
           isdigit((unsigned char)s[2]) && s[3] == '_' && ends_with_sql(s);
}

/* The version of a name is_migration_name accepted: its three leading digits. */
static int migration_version(const char *name)
{
    char digits[4];
    char *end;
    long v;

    memcpy(digits, name, 3);
    digits[3] = '\0';
    v = strtol(digits, &end, 10);
    return *end == '\0' && v >= 0 && v < 1000 ? (int)v : -1;
}

/* The names in dir that accept() takes, sorted. */
static int list_dir(const char *dir, int (*accept)(const char *), namelist *out, warren_error *err)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (d == NULL)
        return warren_error_set(err, WARREN_ENOENT,
                                "cannot read the SQL directory %s: %s (use --sql-dir or "
                                "WARREN_SQL_DIR: the directory holding " MIGRATIONS_DIR
                                "/ and " FUNCTIONS_LIST ")",
                                dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        if (!accept(e->d_name))
            continue;
        if (namelist_add(out, e->d_name, strlen(e->d_name)) != 0) {
            closedir(d);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        }
    }
    closedir(d);
    if (out->n > 1)
        qsort(out->names, out->n, sizeof(char *), cmp_names);
    return 0;
}

static int list_migrations(const char *sql_dir, namelist *out, warren_error *err)
{
    char dir[4096];
    int rc;

    snprintf(dir, sizeof(dir), "%s/" MIGRATIONS_DIR, sql_dir);
    rc = list_dir(dir, is_migration_name, out, err);
    if (rc != 0)
        return rc;
    if (out->n == 0)
        return warren_error_set(err, WARREN_ENOENT,
                                "no migrations (NNN_*.sql) in %s (use --sql-dir or WARREN_SQL_DIR)",
                                dir);
    for (size_t i = 1; i < out->n; i++)
        if (strncmp(out->names[i], out->names[i - 1], 3) == 0)
            return warren_error_set(err, WARREN_EINVAL,
                                    "migrations %s and %s in %s share version %.3s: renumber one",
                                    out->names[i - 1], out->names[i], dir, out->names[i]);
    return 0;
}

static int read_file(const char *path, char **out, warren_error *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    *out = NULL;
    if (f == NULL)
        return warren_error_set(err, errno == ENOENT ? WARREN_ENOENT : WARREN_EIO,
                                "cannot open %s: %s", path, strerror(errno));
    for (;;) {
        if (cap - len < 65536) {
            char *p;
            if (cap > (size_t)SQL_FILE_MAX_BYTES) {
                free(buf);
                fclose(f);
                return warren_error_set(err, WARREN_EIO, "%s is larger than %ld bytes", path,
                                        SQL_FILE_MAX_BYTES);
            }
            cap = cap ? cap * 2 : 65536 * 2;
            p = realloc(buf, cap + 1);
            if (p == NULL) {
                free(buf);
                fclose(f);
                return warren_error_set(err, WARREN_ENOMEM, "out of memory");
            }
            buf = p;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return warren_error_set(err, WARREN_EIO, "cannot read %s", path);
    }
    fclose(f);
    buf[len] = '\0';
    if (strlen(buf) != len) {
        free(buf);
        return warren_error_set(err, WARREN_EINVAL, "%s contains a NUL byte", path);
    }
    *out = buf;
    return 0;
}

/* A function file name: [A-Za-z0-9_-]+.sql. */
static int is_function_file_name(const char *s)
{
    size_t len = strlen(s);

    if (!ends_with_sql(s))
        return 0;
    for (size_t i = 0; i + 4 < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

/* The function files SQL_DIR/functions.sql lists ("\ir functions/NAME.sql"
 * lines, in order; comments and blank lines skipped), each of which must
 * exist, and every *.sql in SQL_DIR/functions/ must be listed: a file added
 * but not listed would silently never be applied. */
static int list_functions(const char *sql_dir, namelist *out, warren_error *err)
{
    static const char prefix[] = "\\ir " FUNCTIONS_DIR "/";
    char path[4096], dir[4096];
    char *text = NULL, *line, *next;
    namelist present = {0};
    int rc, lineno = 0;

    snprintf(path, sizeof(path), "%s/" FUNCTIONS_LIST, sql_dir);
    snprintf(dir, sizeof(dir), "%s/" FUNCTIONS_DIR, sql_dir);
    rc = read_file(path, &text, err);
    if (rc != 0)
        return rc;
    for (line = text; line != NULL; line = next) {
        char *end;
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        lineno++;
        while (isspace((unsigned char)*line))
            line++;
        end = line + strlen(line);
        while (end > line && isspace((unsigned char)end[-1]))
            *--end = '\0';
        if (*line == '\0' || strncmp(line, "--", 2) == 0)
            continue;
        if (strncmp(line, prefix, sizeof(prefix) - 1) != 0 ||
            !is_function_file_name(line + sizeof(prefix) - 1)) {
            rc = warren_error_set(err, WARREN_EINVAL,
                                  "%s:%d: expected \\ir " FUNCTIONS_DIR "/NAME.sql, not \"%s\"",
                                  path, lineno, line);
            goto out;
        }
        line += sizeof(prefix) - 1;
        if (namelist_has(out, line)) {
            rc = warren_error_set(err, WARREN_EINVAL, "%s:%d: %s is listed twice", path, lineno,
                                  line);
            goto out;
        }
        if (namelist_add(out, line, strlen(line)) != 0) {
            rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
            goto out;
        }
    }
    rc = list_dir(dir, ends_with_sql, &present, err);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < present.n; i++) {
        if (!namelist_has(out, present.names[i])) {
            rc = warren_error_set(err, WARREN_EINVAL,
                                  "%s/%s is not listed in %s: add \"\\ir " FUNCTIONS_DIR
                                  "/%s\" there (in the order the functions must be created)",
                                  dir, present.names[i], path, present.names[i]);
            goto out;
        }
    }
out:
    namelist_free(&present);
    free(text);
    return rc;
}

/* The 1-based line of the 1-based character position pos in text (UTF-8). */
static int line_of(const char *text, long pos)
{
    int line = 1;
    long chars = 0;

    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
        if ((*p & 0xC0) != 0x80 && ++chars >= pos)
            break;
        if (*p == '\n')
            line++;
    }
    return line;
}

/* Runs the statements of the file at path (text, read already) in the open
 * transaction; a failure names PATH:LINE of the failing statement. */
static int exec_file(warren_store *st, const char *kind, const char *path, const char *text,
                     warren_error *err)
{
    PGresult *res = PQexec(warren__store_conn(st), text);
    ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    int rc = 0;

    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        const char *pos = res ? PQresultErrorField(res, PG_DIAG_STATEMENT_POSITION) : NULL;
        char what[4200];
        if (pos != NULL)
            snprintf(what, sizeof(what), "%s %s:%d", kind, path, line_of(text, atol(pos)));
        else
            snprintf(what, sizeof(what), "%s %s", kind, path);
        rc = warren__store_fail(st, res, what, err);
    }
    PQclear(res);
    return rc;
}

/* Applies one migration file in the open transaction and records it. */
static int apply_migration(warren_store *st, const char *sql_dir, const char *name,
                           warren_error *err)
{
    char path[4096], version[4], base[256];
    char *text = NULL;
    int rc;

    snprintf(path, sizeof(path), "%s/" MIGRATIONS_DIR "/%s", sql_dir, name);
    snprintf(version, sizeof(version), "%.3s", name);
    snprintf(base, sizeof(base), "%.*s", (int)(strlen(name) - 4), name);
    rc = read_file(path, &text, err);
    if (rc != 0)
        return rc;
    rc = exec_file(st, "migration", path, text, err);
    free(text);
    if (rc != 0)
        return rc;
    {
        const char *params[2] = {version, base};
        return warren__store_exec(st,
                                  "INSERT INTO warren.schema_migrations (version, name) "
                                  "VALUES ($1::int, $2) ON CONFLICT (version) DO NOTHING",
                                  2, params, NULL, "record the migration", err);
    }
}

/* Applies every function file, in the list's order, in the open transaction. */
static int apply_functions(warren_store *st, const char *sql_dir, const namelist *files,
                           warren_error *err)
{
    char path[4096];
    char *text = NULL;
    int rc;

    for (size_t i = 0; i < files->n; i++) {
        snprintf(path, sizeof(path), "%s/" FUNCTIONS_DIR "/%s", sql_dir, files->names[i]);
        rc = read_file(path, &text, err);
        if (rc != 0)
            return rc;
        rc = exec_file(st, "function file", path, text, err);
        free(text);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int warren__store_migrate_to(warren_store *st, const char *sql_dir, int target, int *applied,
                             warren_error *err)
{
    namelist files = {0}, functions = {0}, done_now = {0};
    PGresult *res = NULL;
    char *done = NULL;
    int rc, maxknown = 0, newer;
    const warren_logger *lg = warren__store_logger(st);

    if (applied != NULL)
        *applied = 0;
    /* Every file problem shows before the database is touched. */
    rc = list_migrations(sql_dir, &files, err);
    if (rc == 0)
        rc = list_functions(sql_dir, &functions, err);
    if (rc != 0)
        goto out;
    /* One transaction: a database never has a new migration's tables without
     * the functions written for them, nor half of a failed run. The lock
     * blocks while another migrate holds it: the second process then sees
     * every version recorded and applies nothing (but the function files,
     * again: they are the same). */
    for (int attempt = 1;; attempt++) {
        warren_error cerr = {0};
        int installed;
        rc = warren__store_begin(st, err);
        if (rc == 0)
            rc =
                warren__store_exec(st, "SELECT to_regclass('warren.schema_migrations') IS NOT NULL",
                                   0, NULL, &res, "look for warren.schema_migrations", err);
        if (rc != 0)
            goto out;
        installed = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        res = NULL;
        if (!installed &&
            warren__store_exec_simple(st, MIGRATE_CREATE_SQL, "create warren.schema_migrations",
                                      &cerr) != 0) {
            const char *state = warren__store_sqlstate(st);
            int raced = strcmp(state, "23505") == 0 || strcmp(state, "42P06") == 0 ||
                        strcmp(state, "42P07") == 0;
            warren__store_rollback(st);
            if (raced && attempt < MIGRATE_CREATE_TRIES) {
                warren_log(lg, WARREN_LOG_DEBUG,
                           "another migrate created warren's schema first: looking again");
                continue;
            }
            rc = warren_error_set(err, cerr.code, "%s", cerr.message);
            goto out;
        }
        break;
    }
    rc = warren__store_exec_simple(st, MIGRATE_LOCK_SQL, "take the migration lock", err);
    if (rc != 0)
        goto out;
    rc = warren__store_exec(st, "SELECT version FROM warren.schema_migrations ORDER BY version", 0,
                            NULL, &res, "read warren.schema_migrations", err);
    if (rc != 0)
        goto out;
    done = calloc(1000, 1);
    if (done == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        int v;
        if (warren__store_get_int(res, i, 0, &v) == 0 && v >= 0 && v < 1000) {
            done[v] = 1;
            if (v > maxknown)
                maxknown = v;
        }
    }
    PQclear(res);
    res = NULL;
    /* Function files older than the database's schema would replace the
     * newer warren's functions with older ones: leave them. */
    newer = maxknown > migration_version(files.names[files.n - 1]);
    if (newer)
        warren_log(lg, WARREN_LOG_WARN,
                   "the database has migration %03d, newer than any in %s/" MIGRATIONS_DIR
                   ": is this warren older than the one that migrated it? its function files "
                   "are not applied",
                   maxknown, sql_dir);
    for (size_t i = 0; i < files.n; i++) {
        int v = migration_version(files.names[i]);
        if (v < 0 || done[v] || (target >= 0 && v > target)) {
            if (v >= 0 && done[v])
                warren_log(lg, WARREN_LOG_DEBUG, "migration %s already applied", files.names[i]);
            continue;
        }
        rc = apply_migration(st, sql_dir, files.names[i], err);
        if (rc == 0 && namelist_add(&done_now, files.names[i], strlen(files.names[i])) != 0)
            rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        if (rc != 0)
            goto out;
    }
    if (!newer)
        rc = apply_functions(st, sql_dir, &functions, err);
    if (rc != 0)
        goto out;
    rc = warren__store_commit(st, err);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < done_now.n; i++)
        warren_log(lg, WARREN_LOG_INFO, "applied migration %s", done_now.names[i]);
    if (!newer)
        warren_log(lg, WARREN_LOG_DEBUG, "applied the %zu function files of %s/" FUNCTIONS_LIST,
                   functions.n, sql_dir);
    if (applied != NULL)
        *applied = (int)done_now.n;
out:
    if (rc != 0)
        warren__store_rollback(st);
    PQclear(res);
    free(done);
    namelist_free(&files);
    namelist_free(&functions);
    namelist_free(&done_now);
    return rc;
}

int warren_store_migrate(warren_store *st, const char *sql_dir, int *applied, warren_error *err)
{
    return warren__store_migrate_to(st, sql_dir, -1, applied, err);
}
