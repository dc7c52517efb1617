/* libFuzzer target: ckpt_codec_decode (lib/format/codec.c) on hostile payloads.
 *
 * Input: byte 0 = codec (any value, unknown ones included), bytes 1..4 = raw_len (little-endian,
 * reduced modulo 256 KiB + 1), the rest = the stored payload. Decoding must return 0 or
 * -CKPT_E_CORRUPT, and never write outside the raw_len bytes it was given. When it succeeds, the
 * encoder's output for those bytes must decode back to them.
 * Replayed by tests/unit/format/t-fuzz-replay.c (which renames FUZZ_ENTRY). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/codec.h"
#include "common/common.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);

#define FC_MAX (256u << 10)

static void fc_die(const char *why)
{
	fprintf(stderr, "fuzz-codec: %s (last message: %s)\n", why, ckpt_errmsg());
	abort();
}

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
	static ckpt_codec_ctx *ctx;
	if (!ctx && !(ctx = ckpt_codec_ctx_create(FC_MAX)))
		return 0;
	if (size < 5)
		return 0;
	int codec = data[0];
	size_t raw_len = get_le32(data + 1) % (FC_MAX + 1);
	const uint8_t *in = data + 5;
	size_t in_len = size - 5;
	/* Exact-size buffers so that ASan catches any access past either end. */
	uint8_t *inb = malloc(in_len ? in_len : 1), *out = malloc(raw_len ? raw_len : 1);
	if (!inb || !out) {
		free(inb);
		free(out);
		return 0;
	}
	if (in_len)
		memcpy(inb, in, in_len);
	int rc = ckpt_codec_decode(ctx, codec, inb, in_len, out, raw_len);
	if (rc && rc != -CKPT_E_CORRUPT)
		fc_die("decode failed with a code other than CKPT_E_CORRUPT");
	if (rc == 0 && raw_len) {
		/* Re-encode what came out (as 1-, 2- and 4-byte elements) and decode it back. */
		size_t cap = ckpt_codec_bound(raw_len);
		uint8_t *enc = malloc(cap), *back = malloc(raw_len);
		for (size_t elem = 1; enc && back && elem <= 4; elem *= 2) {
			size_t n = 0;
			int c = ckpt_codec_encode(ctx, out, raw_len, elem, 1, enc, cap, &n);
			const uint8_t *src = c == CKPT_CODEC_RAW ? out : enc;
			if (ckpt_codec_decode(ctx, c, src, n, back, raw_len) || memcmp(back, out, raw_len))
				fc_die("re-encoded chunk does not decode to the same bytes");
		}
		free(enc);
		free(back);
	}
	free(inb);
	free(out);
	return 0;
}
