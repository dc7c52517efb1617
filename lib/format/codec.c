/* zstd with optional byte grouping. Digests are over raw bytes, so compression never changes
 * which chunks deduplicate. */
#include "format/codec.h"

#include <stdlib.h>
#include <zstd.h>

#include "common/common.h"

struct ckpt_codec_ctx {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	uint8_t *scratch; /* byte-grouped copy of the input, or decoded grouped output */
	size_t scratch_len;
};

ckpt_codec_ctx *ckpt_codec_ctx_create(size_t max_chunk)
{
	ckpt_codec_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->cctx = ZSTD_createCCtx();
	c->dctx = ZSTD_createDCtx();
	c->scratch = malloc(max_chunk ? max_chunk : 1);
	c->scratch_len = max_chunk;
	if (!c->cctx || !c->dctx || !c->scratch) {
		ckpt_codec_ctx_free(c);
		return NULL;
	}
	return c;
}

void ckpt_codec_ctx_free(ckpt_codec_ctx *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cctx);
	ZSTD_freeDCtx(c->dctx);
	free(c->scratch);
	free(c);
}

size_t ckpt_codec_bound(size_t n)
{
	return ZSTD_compressBound(n);
}

/* Splits elements of elem bytes into elem planes; a tail shorter than one element stays last. */
static void group(uint8_t *dst, const uint8_t *src, size_t n, size_t elem)
{
	size_t count = n / elem, tail = n % elem;
	for (size_t b = 0; b < elem; b++) {
		uint8_t *plane = dst + b * count;
		for (size_t i = 0; i < count; i++)
			plane[i] = src[i * elem + b];
	}
	memcpy(dst + count * elem, src + count * elem, tail);
}

static void ungroup(uint8_t *dst, const uint8_t *src, size_t n, size_t elem)
{
	size_t count = n / elem, tail = n % elem;
	for (size_t b = 0; b < elem; b++) {
		const uint8_t *plane = src + b * count;
		for (size_t i = 0; i < count; i++)
			dst[i * elem + b] = plane[i];
	}
	memcpy(dst + count * elem, src + count * elem, tail);
}

int ckpt_codec_encode(ckpt_codec_ctx *c, const void *in, size_t n, size_t elem, int level,
		      void *out, size_t cap, size_t *out_len)
{
	int codec = CKPT_CODEC_ZSTD;
	const void *src = in;
	if ((elem == 2 || elem == 4) && n <= c->scratch_len && n >= 2 * elem) {
		group(c->scratch, in, n, elem);
		src = c->scratch;
		codec = elem == 2 ? CKPT_CODEC_ZSTD_BG2 : CKPT_CODEC_ZSTD_BG4;
	}
	size_t r = ZSTD_compressCCtx(c->cctx, out, cap, src, n, level);
	/* Keep a chunk raw unless it shrinks by a page at least: the record is padded to 4 KiB,
	 * so a smaller gain saves nothing on disk and costs a decompression on restore. */
	if (ZSTD_isError(r) || r + CKPT_ALIGN > n) {
		*out_len = n;
		return CKPT_CODEC_RAW;
	}
	*out_len = r;
	return codec;
}

int ckpt_codec_decode(ckpt_codec_ctx *c, int codec, const void *in, size_t in_len, void *out,
		      size_t raw_len)
{
	size_t elem = 0;
	switch (codec) {
	case CKPT_CODEC_RAW:
		if (in_len != raw_len)
			return ckpt_fail(CKPT_E_CORRUPT, "raw chunk of %zu bytes, expected %zu", in_len,
					 raw_len);
		memcpy(out, in, raw_len);
		return 0;
	case CKPT_CODEC_ZSTD: break;
	case CKPT_CODEC_ZSTD_BG2: elem = 2; break;
	case CKPT_CODEC_ZSTD_BG4: elem = 4; break;
	default:
		return ckpt_fail(CKPT_E_CORRUPT, "unknown codec %d", codec);
	}
	void *dst = out;
	if (elem) {
		if (raw_len > c->scratch_len)
			return ckpt_fail(CKPT_E_CORRUPT, "chunk of %zu bytes exceeds the chunk size",
					 raw_len);
		dst = c->scratch;
	}
	size_t r = ZSTD_decompressDCtx(c->dctx, dst, raw_len, in, in_len);
	if (ZSTD_isError(r))
		return ckpt_fail(CKPT_E_CORRUPT, "zstd: %s", ZSTD_getErrorName(r));
	if (r != raw_len)
		return ckpt_fail(CKPT_E_CORRUPT, "chunk decoded to %zu bytes, expected %zu", r,
				 raw_len);
	if (elem)
		ungroup(out, dst, raw_len, elem);
	return 0;
}
