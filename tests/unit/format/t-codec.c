/* Chunk codecs (lib/format/codec.c): raw, zstd, and zstd after byte grouping of 2- and 4-byte
 * elements. Round trips over random, smooth (bf16/fp32-like), zero, tiny and odd-length inputs;
 * incompressible or barely compressible data stays raw; decode rejects corrupt payloads, unknown
 * codecs and wrong lengths with -CKPT_E_CORRUPT and never writes past the raw_len bytes it was
 * given (the output buffers are exact-size heap blocks: the sanitizer build sees any overrun). */
#include "helpers.h"

#include "format/codec.h"
#include "common/common.h"

enum { MAXC = 1 << 20 };

enum kind { K_RANDOM, K_BF16, K_F32, K_ZERO, K_PATTERN, K_NKINDS };
static const char *kind_name[] = {"random", "bf16-like", "f32-like", "zeros", "pattern"};

static uint8_t *make_input(enum kind k, size_t n, uint64_t seed)
{
	uint8_t *b = malloc(n ? n : 1);
	REQUIRE(b);
	t_fill(b, n, seed);
	switch (k) {
	case K_RANDOM:
		break;
	case K_BF16: /* high byte: sign + a few exponents; low byte: noise */
		for (size_t i = 1; i < n; i += 2)
			b[i] = (uint8_t)(0x3c + (b[i] & 3));
		break;
	case K_F32: /* two noisy mantissa bytes, a narrow exponent, one sign */
		for (size_t i = 0; i < n; i++)
			if (i % 4 == 3)
				b[i] = 0x3f;
			else if (i % 4 == 2)
				b[i] = (uint8_t)(0x80 | (b[i] & 7));
		break;
	case K_ZERO:
		memset(b, 0, n);
		break;
	case K_PATTERN:
		for (size_t i = 0; i < n; i++)
			b[i] = (uint8_t)(i % 251);
		break;
	default:
		break;
	}
	return b;
}

/* Encodes, checks the choice of codec, decodes into an exact-size buffer and compares. Returns the
 * codec used. */
static int roundtrip(ckpt_codec_ctx *c, size_t scratch, const uint8_t *in, size_t n, size_t elem,
		     int level, const char *ctx)
{
	size_t cap = ckpt_codec_bound(n);
	uint8_t *enc = malloc(cap ? cap : 1);
	size_t out_len = (size_t)-1;
	int codec = ckpt_codec_encode(c, in, n, elem, level, enc, cap, &out_len);
	CHECK(codec >= CKPT_CODEC_RAW && codec < CKPT_CODEC__COUNT);
	if (codec == CKPT_CODEC_RAW) {
		CHECK(out_len == n);
	} else {
		/* compressed only when it saves a page at least */
		CHECK(out_len + CKPT_ALIGN <= n);
		CHECK(out_len > 0 && out_len <= cap);
		int grouped = (elem == 2 || elem == 4) && n >= 2 * elem && n <= scratch;
		int want = !grouped ? CKPT_CODEC_ZSTD : elem == 2 ? CKPT_CODEC_ZSTD_BG2 : CKPT_CODEC_ZSTD_BG4;
		if (codec != want) {
			fprintf(stderr, "%s: n=%zu elem=%zu: codec %d, expected %d\n", ctx, n, elem, codec,
				want);
			t_failures++;
		}
	}
	uint8_t *out = malloc(n ? n : 1);
	const uint8_t *src = codec == CKPT_CODEC_RAW ? in : enc;
	int rc = ckpt_codec_decode(c, codec, src, out_len, out, n);
	if (rc || (n && memcmp(out, in, n))) {
		fprintf(stderr, "%s: n=%zu elem=%zu level=%d codec %d: round trip failed (%d: %s)\n",
			ctx, n, elem, level, codec, rc, ckpt_errmsg());
		t_failures++;
	}
	free(out);
	free(enc);
	return codec;
}

static void test_roundtrips(void)
{
	ckpt_codec_ctx *c = ckpt_codec_ctx_create(MAXC);
	REQUIRE(c);
	static const size_t sizes[] = {0,    1,	   2,	   3,	   4,	   5,	   7,	  8,
				       9,    15,   4095,  4096,  4097,  8191,  8192,  12289,
				       65535, 65536, 65537, 100003, 262144, MAXC - 1, MAXC};
	static const size_t elems[] = {1, 2, 4, 8, 3};
	unsigned long counts[CKPT_CODEC__COUNT] = {0};
	for (int k = 0; k < K_NKINDS; k++)
		for (size_t si = 0; si < ARRAY_SIZE(sizes); si++) {
			size_t n = sizes[si];
			uint8_t *in = make_input((enum kind)k, n, 1000 + si);
			for (size_t ei = 0; ei < ARRAY_SIZE(elems); ei++) {
				int level = n <= 65536 ? (int)(1 + (si + ei) % 19) : 1;
				int codec = roundtrip(c, MAXC, in, n, elems[ei], level, kind_name[k]);
				counts[codec]++;
				/* Expectations by kind. */
				if (k == K_RANDOM || n <= CKPT_ALIGN)
					CHECK(codec == CKPT_CODEC_RAW); /* incompressible / too small to gain */
				if ((k == K_ZERO || k == K_PATTERN) && n >= 3 * CKPT_ALIGN)
					CHECK(codec != CKPT_CODEC_RAW);
				if ((k == K_BF16 && elems[ei] == 2 && n >= 65536) ||
				    (k == K_F32 && elems[ei] == 4 && n >= 65536))
					CHECK(codec != CKPT_CODEC_RAW);
			}
			free(in);
		}
	printf("codecs chosen: raw %lu, zstd %lu, bg2 %lu, bg4 %lu\n", counts[0], counts[1], counts[2],
	       counts[3]);
	for (int i = 0; i < CKPT_CODEC__COUNT; i++)
		CHECK(counts[i] > 0);

	/* Byte grouping pays: smooth bf16 compresses better grouped than plain. */
	size_t n = 1 << 18, cap = ckpt_codec_bound(n), l2 = 0, l1 = 0;
	uint8_t *in = make_input(K_BF16, n, 7), *e = malloc(cap);
	CHECK(ckpt_codec_encode(c, in, n, 2, 1, e, cap, &l2) == CKPT_CODEC_ZSTD_BG2);
	CHECK(ckpt_codec_encode(c, in, n, 1, 1, e, cap, &l1) == CKPT_CODEC_ZSTD);
	CHECK(l2 < l1);
	/* A chunk longer than the context's scratch is still compressed, without grouping. */
	ckpt_codec_ctx *small = ckpt_codec_ctx_create(65536);
	REQUIRE(small);
	CHECK(roundtrip(small, 65536, in, n, 2, 1, "beyond scratch") == CKPT_CODEC_ZSTD);
	/* ... and a grouped payload of more than the scratch cannot be decoded there. */
	size_t lg = 0;
	CHECK(ckpt_codec_encode(c, in, n, 2, 1, e, cap, &lg) == CKPT_CODEC_ZSTD_BG2);
	uint8_t *out = malloc(n);
	CHECK_RC(ckpt_codec_decode(small, CKPT_CODEC_ZSTD_BG2, e, lg, out, n), -CKPT_E_CORRUPT);
	free(out);
	ckpt_codec_ctx_free(small);
	/* Barely compressible (saves less than a page): stays raw. */
	uint8_t *half = make_input(K_RANDOM, 65536, 9);
	memset(half, 0, 3000);
	size_t lh = 0;
	CHECK(ckpt_codec_encode(c, half, 65536, 1, 3, e, cap, &lh) == CKPT_CODEC_RAW && lh == 65536);
	/* A too-small output capacity: raw, not an overflow. */
	uint8_t *zeros = make_input(K_ZERO, 65536, 0), tiny[8];
	size_t lt = 0;
	CHECK(ckpt_codec_encode(c, zeros, 65536, 1, 1, tiny, sizeof tiny, &lt) == CKPT_CODEC_RAW && lt == 65536);
	free(zeros);
	free(half);
	free(in);
	free(e);
	ckpt_codec_ctx_free(c);
	ckpt_codec_ctx_free(NULL);
}

/* Decoding must return 0 or -CKPT_E_CORRUPT (with a message), never anything else. */
static int dec_checked(ckpt_codec_ctx *c, int codec, const uint8_t *in, size_t in_len, size_t raw_len,
		       const char *ctx)
{
	uint8_t *out = malloc(raw_len ? raw_len : 1);
	int rc = ckpt_codec_decode(c, codec, in, in_len, out, raw_len);
	if (rc != 0 && (rc != -CKPT_E_CORRUPT || !*ckpt_errmsg())) {
		fprintf(stderr, "%s: decode returned %d (%s)\n", ctx, rc, ckpt_errmsg());
		t_failures++;
	}
	free(out);
	return rc;
}

static void test_corrupt(void)
{
	ckpt_codec_ctx *c = ckpt_codec_ctx_create(MAXC);
	REQUIRE(c);
	uint64_t rng = 99;
	for (size_t elem = 1; elem <= 4; elem *= 2) {
		size_t n = 20000 + elem; /* odd lengths: a tail shorter than one element */
		uint8_t *in = make_input(elem == 4 ? K_F32 : K_BF16, n, elem);
		size_t cap = ckpt_codec_bound(n), len = 0;
		uint8_t *enc = malloc(cap);
		int codec = ckpt_codec_encode(c, in, n, elem, 5, enc, cap, &len);
		REQUIRE(codec != CKPT_CODEC_RAW);
		CHECK_OK(dec_checked(c, codec, enc, len, n, "valid"));
		/* Every truncation of the payload. */
		for (size_t k = 0; k < len; k++) {
			uint8_t *t = malloc(k ? k : 1);
			memcpy(t, enc, k);
			CHECK_RC(dec_checked(c, codec, t, k, n, "truncated payload"), -CKPT_E_CORRUPT);
			free(t);
		}
		/* Wrong raw lengths. */
		size_t wrong[] = {0, 1, n - 1, n + 1, n - elem, 2 * n};
		for (size_t i = 0; i < ARRAY_SIZE(wrong); i++)
			CHECK_RC(dec_checked(c, codec, enc, len, wrong[i], "wrong raw_len"), -CKPT_E_CORRUPT);
		CHECK_RC(dec_checked(c, codec, enc, len, MAXC + 1, "raw_len above the chunk size"),
			 -CKPT_E_CORRUPT);
		/* Junk appended to the frame. */
		uint8_t *x = malloc(len + 7);
		memcpy(x, enc, len);
		memset(x + len, 0xa5, 7);
		CHECK_RC(dec_checked(c, codec, x, len + 7, n, "junk after frame"), -CKPT_E_CORRUPT);
		free(x);
		/* Every byte flipped: without a zstd checksum some flips decode to other bytes (the
		 * reader's digest catches those); none may crash or report anything but CORRUPT. */
		unsigned long caught = 0;
		for (size_t i = 0; i < len; i++) {
			uint8_t *f = malloc(len);
			memcpy(f, enc, len);
			f[i] ^= (uint8_t)(1 + t_rand(&rng) % 255);
			if (dec_checked(c, codec, f, len, n, "flipped payload"))
				caught++;
			free(f);
		}
		CHECK(caught > 0);
		/* The other codecs on the same payload: another byte order, or an error. */
		for (int o = 0; o < CKPT_CODEC__COUNT; o++)
			if (o != codec)
				dec_checked(c, o, enc, len, n, "other codec");
		free(enc);
		free(in);
	}
	/* Unknown codecs, raw with the wrong length, garbage. */
	uint8_t g[64];
	t_fill(g, sizeof g, 5);
	int unknown[] = {CKPT_CODEC__COUNT, 9, 255, -1, 1 << 20};
	for (size_t i = 0; i < ARRAY_SIZE(unknown); i++)
		CHECK_RC(dec_checked(c, unknown[i], g, sizeof g, sizeof g, "unknown codec"), -CKPT_E_CORRUPT);
	CHECK_OK(dec_checked(c, CKPT_CODEC_RAW, g, sizeof g, sizeof g, "raw"));
	CHECK_RC(dec_checked(c, CKPT_CODEC_RAW, g, sizeof g, sizeof g - 1, "raw short"), -CKPT_E_CORRUPT);
	CHECK_RC(dec_checked(c, CKPT_CODEC_RAW, g, sizeof g - 1, sizeof g, "raw long"), -CKPT_E_CORRUPT);
	for (int o = CKPT_CODEC_ZSTD; o < CKPT_CODEC__COUNT; o++) {
		CHECK_RC(dec_checked(c, o, g, sizeof g, 1000, "garbage"), -CKPT_E_CORRUPT);
		CHECK_RC(dec_checked(c, o, g, 0, 1000, "empty payload"), -CKPT_E_CORRUPT);
	}
	/* Random garbage of many lengths through every codec. */
	for (int it = 0; it < 2000; it++) {
		size_t l = t_rand(&rng) % 300, raw = t_rand(&rng) % 5000;
		uint8_t *b = malloc(l ? l : 1);
		t_fill(b, l, t_rand(&rng));
		if (l >= 4 && it % 2) { /* a zstd magic number, to get past the first check */
			b[0] = 0x28, b[1] = 0xb5, b[2] = 0x2f, b[3] = 0xfd;
		}
		dec_checked(c, (int)(t_rand(&rng) % (CKPT_CODEC__COUNT + 1)), b, l, raw, "random");
		free(b);
	}
	ckpt_codec_ctx_free(c);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	CHECK(ckpt_codec_bound(0) > 0 && ckpt_codec_bound(1 << 20) >= (1 << 20));
	test_roundtrips();
	test_corrupt();
	return t_done();
}
