/* XXH3 from Debian's libxxhash: fast enough (10+ GB/s a core) that hashing every chunk costs less
 * than writing it. */
#include "common/hash.h"

/* The streaming state's layout, so that ckpt_copy_digest keeps it on the stack (no malloc per
 * chunk); it is libxxhash's own header, so the layout is the library's. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
/* libxxhash's run-time dispatch picks AVX2/AVX-512 where the CPU has them (a third faster than
 * the SSE2 build here); same digests. */
#include <immintrin.h>
#include <xxh_x86dispatch.h>
#define DIGEST128 XXH3_128bits_dispatch
#define UPDATE128 XXH3_128bits_update_dispatch
#else
#define DIGEST128 XXH3_128bits
#define UPDATE128 XXH3_128bits_update
#endif

static void canonical(XXH128_hash_t h, ckpt_digest *out)
{
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, h);
	memcpy(out->b, c.digest, 16);
}

void ckpt_digest_of(const void *data, size_t len, ckpt_digest *out)
{
	canonical(DIGEST128(data, len), out);
}

#if defined(__x86_64__)
/* The copy of one block: every 16 or 32 bytes are loaded once into a register, stored to the
 * block buffer b (which stays in L1 and is hashed next) and streamed to dst with a non-temporal
 * store, which skips the read-for-ownership of dst's cache lines and does not evict the cache.
 * A memcpy into a destination that is not in the cache moves about 3 bytes of memory traffic per
 * byte (read src, read dst's line for ownership, write it back), this about 2. The unaligned head
 * and tail of dst are copied through b too, so that dst and b always hold the same bytes. */
static void tee_sse2(uint8_t *dst, uint8_t *b, const uint8_t *src, size_t n)
{
	size_t i = (size_t)(-(uintptr_t)dst & 15);
	i = i < n ? i : n;
	memcpy(b, src, i);
	memcpy(dst, b, i);
	for (; i + 32 <= n; i += 32) {
		__m128i x = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i y = _mm_loadu_si128((const __m128i *)(src + i + 16));
		_mm_storeu_si128((__m128i *)(b + i), x);
		_mm_storeu_si128((__m128i *)(b + i + 16), y);
		_mm_stream_si128((__m128i *)(dst + i), x);
		_mm_stream_si128((__m128i *)(dst + i + 16), y);
	}
	memcpy(b + i, src + i, n - i);
	memcpy(dst + i, b + i, n - i);
}

__attribute__((target("avx2"))) static void tee_avx2(uint8_t *dst, uint8_t *b, const uint8_t *src,
						     size_t n)
{
	size_t i = (size_t)(-(uintptr_t)dst & 31);
	i = i < n ? i : n;
	memcpy(b, src, i);
	memcpy(dst, b, i);
	for (; i + 64 <= n; i += 64) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
		__m256i y = _mm256_loadu_si256((const __m256i *)(src + i + 32));
		_mm256_storeu_si256((__m256i *)(b + i), x);
		_mm256_storeu_si256((__m256i *)(b + i + 32), y);
		_mm256_stream_si256((__m256i *)(dst + i), x);
		_mm256_stream_si256((__m256i *)(dst + i + 32), y);
	}
	memcpy(b + i, src + i, n - i);
	memcpy(dst + i, b + i, n - i);
}

/* A copy with non-temporal stores, for the same reason, where nothing is hashed. */
static void stream_sse2(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = (size_t)(-(uintptr_t)dst & 15);
	i = i < n ? i : n;
	memcpy(dst, src, i);
	for (; i + 32 <= n; i += 32) {
		__m128i x = _mm_loadu_si128((const __m128i *)(src + i));
		__m128i y = _mm_loadu_si128((const __m128i *)(src + i + 16));
		_mm_stream_si128((__m128i *)(dst + i), x);
		_mm_stream_si128((__m128i *)(dst + i + 16), y);
	}
	memcpy(dst + i, src + i, n - i);
}

__attribute__((target("avx2"))) static void stream_avx2(uint8_t *dst, const uint8_t *src, size_t n)
{
	size_t i = (size_t)(-(uintptr_t)dst & 31);
	i = i < n ? i : n;
	memcpy(dst, src, i);
	for (; i + 64 <= n; i += 64) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
		__m256i y = _mm256_loadu_si256((const __m256i *)(src + i + 32));
		_mm256_stream_si256((__m256i *)(dst + i), x);
		_mm256_stream_si256((__m256i *)(dst + i + 32), y);
	}
	memcpy(dst + i, src + i, n - i);
}

void ckpt_copy_stream_isa(void *dst, const void *src, size_t len, bool avx2)
{
	if (avx2 && __builtin_cpu_supports("avx2"))
		stream_avx2(dst, src, len);
	else
		stream_sse2(dst, src, len);
	_mm_sfence(); /* as in ckpt_copy_digest_isa */
}

/* 8 KiB: measured against 16 and 32 KiB (1 thread, AVX2, 16 and 256 MiB destination rings, 5
 * interleaved runs: 11.5 / 11.0 / 11.1 GB/s and 11.0 / 10.6 / 10.1 GB/s); a block this size stays
 * in L1 between its copy and its hash. */
enum { COPY_BLOCK = 8192 };

void ckpt_copy_digest_isa(void *dst, const void *src, size_t len, ckpt_digest *out, bool avx2)
{
	_Alignas(64) uint8_t b[COPY_BLOCK];
	XXH3_state_t st;
	avx2 = avx2 && __builtin_cpu_supports("avx2");
	XXH3_128bits_reset(&st);
	for (size_t off = 0; off < len; off += COPY_BLOCK) {
		size_t n = len - off < COPY_BLOCK ? len - off : COPY_BLOCK;
		if (avx2)
			tee_avx2((uint8_t *)dst + off, b, (const uint8_t *)src + off, n);
		else
			tee_sse2((uint8_t *)dst + off, b, (const uint8_t *)src + off, n);
		UPDATE128(&st, b, n);
	}
	/* Non-temporal stores are weakly ordered: they must be visible before dst is handed to
	 * another thread or to the I/O engine, and a lock release does not order them on every
	 * CPU. */
	_mm_sfence();
	canonical(XXH3_128bits_digest(&st), out);
}
#else
void ckpt_copy_stream_isa(void *dst, const void *src, size_t len, bool avx2)
{
	memcpy(dst, src, len);
}

void ckpt_copy_digest_isa(void *dst, const void *src, size_t len, ckpt_digest *out, bool avx2)
{
	memcpy(dst, src, len);
	ckpt_digest_of(dst, len, out);
}
#endif

void ckpt_copy_digest(void *dst, const void *src, size_t len, ckpt_digest *out)
{
	ckpt_copy_digest_isa(dst, src, len, out, true);
}

void ckpt_copy_stream(void *dst, const void *src, size_t len)
{
	ckpt_copy_stream_isa(dst, src, len, true);
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
