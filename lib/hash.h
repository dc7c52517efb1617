/* Chunk digests (XXH3-128) and structure checksums (XXH3-64). */
#ifndef CKPT_HASH_H
#define CKPT_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ckpt_digest {
	uint8_t b[16]; /* canonical (big-endian) XXH3-128 */
} ckpt_digest;

void ckpt_digest_of(const void *data, size_t len, ckpt_digest *out);
uint64_t ckpt_checksum64(const void *data, size_t len);
/* Writes 32 lowercase hex digits and a NUL into hex[33]. */
void ckpt_digest_hex(const ckpt_digest *d, char hex[33]);

static inline int ckpt_digest_eq(const ckpt_digest *a, const ckpt_digest *b)
{
	return !memcmp(a->b, b->b, 16);
}

#endif
