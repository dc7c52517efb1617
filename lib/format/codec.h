/* Chunk codecs: raw, zstd, and zstd after byte-grouping 2- or 4-byte elements (the bytes of equal
 * significance together: exponents of bf16/fp32 compress far better side by side). */
#ifndef CKPT_CODEC_H
#define CKPT_CODEC_H

#include <stddef.h>
#include <stdint.h>

enum ckpt_codec {
	CKPT_CODEC_RAW = 0,
	CKPT_CODEC_ZSTD = 1,
	CKPT_CODEC_ZSTD_BG2 = 2,
	CKPT_CODEC_ZSTD_BG4 = 3,
	CKPT_CODEC__COUNT
};

typedef struct ckpt_codec_ctx ckpt_codec_ctx;

/* A context holds the zstd state and scratch space for chunks of up to max_chunk bytes; one per
 * thread. Returns NULL when out of memory. */
ckpt_codec_ctx *ckpt_codec_ctx_create(size_t max_chunk);
void ckpt_codec_ctx_free(ckpt_codec_ctx *c);

/* Largest stored size for a raw chunk of n bytes (when encoding can expand, raw is kept). */
size_t ckpt_codec_bound(size_t n);

/* Encodes in[0..n) for an element size of elem bytes at zstd level into out (capacity cap).
 * Returns the codec used and sets *out_len; returns CKPT_CODEC_RAW (copying nothing) when
 * compression does not shrink the chunk — the caller then stores in as it is. */
int ckpt_codec_encode(ckpt_codec_ctx *c, const void *in, size_t n, size_t elem, int level,
		      void *out, size_t cap, size_t *out_len);

/* Decodes a stored payload of codec into out, which must receive exactly raw_len bytes.
 * Returns 0, or -CKPT_E_CORRUPT when the payload does not decode to raw_len bytes. */
int ckpt_codec_decode(ckpt_codec_ctx *c, int codec, const void *in, size_t in_len, void *out,
		      size_t raw_len);

#endif
