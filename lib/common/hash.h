/* Chunk digests (XXH3-128) and structure checksums (XXH3-64). */
#ifndef CKPT_HASH_H
#define CKPT_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ckpt_digest {
	uint8_t b[16]; /* canonical (big-endian) XXH3-128 */
} ckpt_digest;

void ckpt_digest_of(const void *data, size_t len, ckpt_digest *out);
/* Copies len bytes from src to dst (they must not overlap) and sets *out to their digest, equal to
 * ckpt_digest_of(dst, len) afterwards. The bytes hashed are the bytes stored: each block is loaded
 * once into registers, stored both to dst and to a small buffer, and the buffer is hashed. So if
 * the caller changes src during the copy (a tensor modified before its snapshot is done, which the
 * snapshot contract forbids), dst holds some mix of old and new bytes, but *out is always the
 * digest of exactly those bytes: a record never carries a digest of other bytes, and dedup never
 * maps that digest to something else. On x86_64, dst is written with non-temporal stores (fenced
 * before the return): a loss when dst is read again soon (compression), so use memcpy +
 * ckpt_digest_of there. */
void ckpt_copy_digest(void *dst, const void *src, size_t len, ckpt_digest *out);
/* memcpy(dst, src, len) with the same non-temporal stores, for a destination read again only
 * much later (the slab of a snapshot hashed after it). */
void ckpt_copy_stream(void *dst, const void *src, size_t len);
/* The same two with the AVX2 kernel allowed or not (it is used only where the CPU has it), so
 * that t-hash covers the SSE2 one on any x86_64 machine. */
void ckpt_copy_digest_isa(void *dst, const void *src, size_t len, ckpt_digest *out, bool avx2);
void ckpt_copy_stream_isa(void *dst, const void *src, size_t len, bool avx2);
uint64_t ckpt_checksum64(const void *data, size_t len);
/* Writes 32 lowercase hex digits and a NUL into hex[33]. */
void ckpt_digest_hex(const ckpt_digest *d, char hex[33]);

static inline int ckpt_digest_eq(const ckpt_digest *a, const ckpt_digest *b)
{
	return !memcmp(a->b, b->b, 16);
}

#endif
