/* hash.h: FNV-1a, the one hash warren persists. Three of its values are facts
 * stored or acted on across processes and releases, so they must never change:
 *
 * - H in cron fields: FNV-1a 32-bit of the job name's bytes followed by one
 *   byte, the field kind (warren_cron_hash, cron.h).
 * - Partitions: FNV-1a 32-bit of the job name's bytes modulo
 *   planner.partitions (warren_job_partition, store.h; stored in warren.jobs).
 * - Jitter: FNV-1a 64-bit of the job name's bytes modulo the jitter in whole
 *   seconds (warren_jitter_offset_s, planner.h; part of every due time).
 *
 * In-memory hash tables (job names, tz zones) use it too, for convenience only.
 * Test vectors (tests/check_hash.c): 32-bit "" = 0x811c9dc5, "a" = 0xe40c292c,
 * "foobar" = 0xbf9cf968; 64-bit "" = 0xcbf29ce484222325, "a" =
 * 0xaf63dc4c8601ec8c, "foobar" = 0x85944171f73967e8. */
#ifndef WARREN_HASH_H
#define WARREN_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The offset bases: the hash of no bytes. */
#define WARREN_HASH_FNV32_BASIS UINT32_C(2166136261)
#define WARREN_HASH_FNV64_BASIS UINT64_C(14695981039346656037)

/* Continues hash h over n bytes of data (start with the basis). */
uint32_t warren_hash_fnv1a32_update(uint32_t h, const void *data, size_t n);
uint64_t warren_hash_fnv1a64_update(uint64_t h, const void *data, size_t n);

/* The hash of the bytes of s up to its NUL. */
uint32_t warren_hash_fnv1a32(const char *s);
uint64_t warren_hash_fnv1a64(const char *s);

#endif
