/* XXH3 from Debian's libxxhash: fast enough (10+ GB/s a core) that hashing every chunk costs less
 * than writing it. */
#include "hash.h"

#include <xxhash.h>
#if defined(__x86_64__)
/* libxxhash's run-time dispatch picks AVX2/AVX-512 where the CPU has them (a third faster than
 * the SSE2 build here); same digests. */
#include <xxh_x86dispatch.h>
#define DIGEST128 XXH3_128bits_dispatch
#else
#define DIGEST128 XXH3_128bits
#endif

void ckpt_digest_of(const void *data, size_t len, ckpt_digest *out)
{
	XXH128_hash_t h = DIGEST128(data, len);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	memcpy(out->b, c.digest, 16);
}

uint64_t ckpt_checksum64(const void *data, size_t len)
{
	return XXH3_64bits(data, len);
}

void ckpt_digest_hex(const ckpt_digest *d, char hex[33])
{
	static const char x[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		hex[2 * i] = x[d->b[i] >> 4];
		hex[2 * i + 1] = x[d->b[i] & 15];
	}
	hex[32] = 0;
}
