/* Chunk digests (lib/common/hash.c): ckpt_copy_digest, the pipeline's fused copy + hash with
 * non-temporal stores, must store exactly the source bytes (no byte outside dst touched) and give
 * the digest ckpt_digest_of gives for them, for every length class (empty, under one vector, the
 * 16/32/64-byte loop edges, XXH3's 240-byte and 1 KiB stripe edges, the 8 KiB block edge, 64 KiB
 * and 1 MiB, each +-1) at odd alignments of src and dst, with the AVX2 kernel and the SSE2 one.
 * The same for ckpt_copy_stream, the plain copy with those stores. */
#include "helpers.h"

#include "common/hash.h"

enum { GUARD = 64, MAXLEN = (1 << 20) + 64 };

static const size_t lens[] = {0,    1,    2,    15,   16,   17,    31,    32,    33,    63,
			      64,   65,   127,  128,  129,  239,   240,   241,   1023,  1024,
			      1025, 8191, 8192, 8193, 16385, 65535, 65536, 65537, 1 << 20,
			      (1 << 20) + 13};
static const size_t aligns[] = {0, 1, 3, 8, 15, 16, 31, 33, 63};

static void check_one(uint8_t *dbuf, const uint8_t *src, size_t len, size_t da, bool avx2,
		      bool stream)
{
	uint8_t *dst = dbuf + GUARD + da;
	size_t end = GUARD + da + len + GUARD; /* the guards: GUARD bytes each side of dst */
	memset(dbuf, 0xa5, end);
	ckpt_digest got, want;
	if (stream) {
		ckpt_copy_stream_isa(dst, src, len, avx2);
		ckpt_digest_of(dst, len, &got);
	} else {
		ckpt_copy_digest_isa(dst, src, len, &got, avx2);
	}
	ckpt_digest_of(src, len, &want);
	bool same = !memcmp(dst, src, len), eq = ckpt_digest_eq(&got, &want), intact = true;
	for (size_t i = 0; i < GUARD + da; i++)
		intact &= dbuf[i] == 0xa5;
	for (size_t i = GUARD + da + len; i < end; i++)
		intact &= dbuf[i] == 0xa5;
	if (!same || !eq || !intact)
		fprintf(stderr, "%s, len %zu, src %% 64 = %zu, dst %% 64 = %zu, avx2 %d: bytes %s, "
			"digest %s, outside dst %s\n", stream ? "stream" : "digest", len,
			(size_t)((uintptr_t)src & 63), (size_t)((uintptr_t)dst & 63), avx2, same ? "ok" : "DIFFER", eq ? "ok" : "DIFFERS", intact ? "ok" : "WRITTEN");
	CHECK(same && eq && intact);
}

int main(void)
{
	uint8_t *sbuf = aligned_alloc(64, MAXLEN + 128), *dbuf = aligned_alloc(64, MAXLEN + 2 * GUARD + 64);
	REQUIRE(sbuf && dbuf);
	t_fill(sbuf, MAXLEN + 128, 13);
	for (int k = 0; k < 4; k++)
		for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
			for (size_t sa = 0; sa < sizeof aligns / sizeof *aligns; sa++)
				for (size_t da = 0; da < sizeof aligns / sizeof *aligns; da++)
					check_one(dbuf, sbuf + aligns[sa], lens[l], aligns[da], k & 1,
						  k & 2);
	/* The wrapper gives the same digest, and a digest depends on the bytes. */
	ckpt_digest a, b;
	ckpt_copy_digest(dbuf, sbuf, 4096, &a);
	ckpt_digest_of(sbuf, 4096, &b);
	CHECK(ckpt_digest_eq(&a, &b));
	sbuf[100] ^= 1;
	ckpt_copy_digest(dbuf, sbuf, 4096, &b);
	CHECK(!ckpt_digest_eq(&a, &b));
	free(sbuf);
	free(dbuf);
	return t_done();
}
