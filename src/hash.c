/* hash.c: FNV-1a 32- and 64-bit (Fowler, Noll, Vo; the "1a" order: xor the
 * byte, then multiply), behind H, partitions and jitter (hash.h). */
#include <string.h>

#include <warren/hash.h>

#define FNV32_PRIME UINT32_C(16777619)
#define FNV64_PRIME UINT64_C(1099511628211)

uint32_t warren_hash_fnv1a32_update(uint32_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV32_PRIME;
    }
    return h;
}

uint64_t warren_hash_fnv1a64_update(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV64_PRIME;
    }
    return h;
}

uint32_t warren_hash_fnv1a32(const char *s)
{
    return warren_hash_fnv1a32_update(WARREN_HASH_FNV32_BASIS, s, strlen(s));
}

uint64_t warren_hash_fnv1a64(const char *s)
{
    return warren_hash_fnv1a64_update(WARREN_HASH_FNV64_BASIS, s, strlen(s));
}
