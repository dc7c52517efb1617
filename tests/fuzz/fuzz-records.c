/* libFuzzer target: store_hdr_decode, pack_hdr_decode and rec_hdr_decode (lib/format/format.c).
 *
 * Every input goes through all three decoders twice: as it is, and with the header's XXH3-64
 * checksum (bytes 56..63, over bytes 0..55) recomputed so that the field checks behind it run.
 * A decode must fail cleanly (negative CKPT_E_* code, message naming the file) or return a header
 * whose fields are valid and that re-encodes to a header decoding to the same values.
 * Replayed by tests/unit/format/t-fuzz-replay.c (which renames FUZZ_ENTRY). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/codec.h"
#include "common/common.h"
#include "format/format.h"
#include "common/hash.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);

#define FR_WHAT "fuzz-records-input"

static void fr_die(const char *why)
{
	fprintf(stderr, "fuzz-records: %s (last message: %s)\n", why, ckpt_errmsg());
	abort();
}

static void fr_failed(int rc)
{
	if (rc >= 0 || rc <= -CKPT_E__COUNT || !strstr(ckpt_errmsg(), FR_WHAT))
		fr_die("failure without a valid code or without naming the file");
}

static void fr_store(const uint8_t *b, size_t n)
{
	struct store_hdr h, h2;
	int rc = store_hdr_decode(b, n, &h, FR_WHAT);
	if (rc) {
		fr_failed(rc);
		return;
	}
	if (h.version < 1 || h.version > CKPT_FORMAT_VERSION || h.chunk_size < CKPT_MIN_CHUNK ||
	    h.chunk_size > CKPT_MAX_CHUNK || (h.chunk_size & (h.chunk_size - 1)) ||
	    h.codec > CKPT_COMPRESS_ZSTD || h.zstd_level > 22)
		fr_die("store header accepted with invalid fields");
	uint8_t e[STORE_HDR_LEN];
	store_hdr_encode(&h, e);
	if (store_hdr_decode(e, sizeof e, &h2, FR_WHAT) || h2.chunk_size != h.chunk_size ||
	    h2.codec != h.codec || h2.zstd_level != h.zstd_level || h2.created != h.created ||
	    memcmp(h2.uuid, h.uuid, 16))
		fr_die("store header does not round-trip");
}

static void fr_pack(const uint8_t *b, size_t n)
{
	struct pack_hdr h, h2;
	int rc = pack_hdr_decode(b, n, &h, FR_WHAT);
	if (rc) {
		fr_failed(rc);
		return;
	}
	if (h.version < 1 || h.version > CKPT_FORMAT_VERSION || n < PACK_HDR_LEN)
		fr_die("pack header accepted with invalid fields");
	for (size_t i = 64; i < PACK_HDR_LEN; i++)
		if (b[i])
			fr_die("pack header accepted with damaged padding");
	uint8_t *e = malloc(PACK_HDR_LEN);
	if (!e)
		return;
	pack_hdr_encode(&h, e);
	if (pack_hdr_decode(e, PACK_HDR_LEN, &h2, FR_WHAT) || h2.pack_id != h.pack_id ||
	    h2.created != h.created || memcmp(h2.uuid, h.uuid, 16))
		fr_die("pack header does not round-trip");
	free(e);
}

static void fr_rec(const uint8_t *b, size_t n)
{
	struct rec_hdr h, h2;
	int rc = rec_hdr_decode(b, n, &h, FR_WHAT);
	if (rc) {
		fr_failed(rc);
		return;
	}
	if (h.codec >= CKPT_CODEC__COUNT || !h.raw_len || h.raw_len > CKPT_MAX_CHUNK ||
	    !h.stored_len || h.stored_len > ckpt_codec_bound(h.raw_len) ||
	    (h.codec == CKPT_CODEC_RAW && h.stored_len != h.raw_len))
		fr_die("record header accepted with invalid fields");
	uint8_t e[REC_HDR_LEN];
	rec_hdr_encode(&h, e);
	if (rec_hdr_decode(e, sizeof e, &h2, FR_WHAT) || h2.codec != h.codec ||
	    h2.raw_len != h.raw_len || h2.stored_len != h.stored_len || h2.pack_id != h.pack_id ||
	    memcmp(h2.digest.b, h.digest.b, 16))
		fr_die("record header does not round-trip");
}

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
	if (size > 2 * PACK_HDR_LEN)
		size = 2 * PACK_HDR_LEN;
	/* Exact-size heap copies, so that ASan sees any read past the end. */
	uint8_t *b = calloc(1, size ? size : 1);
	if (!b)
		return 0;
	if (size)
		memcpy(b, data, size);
	fr_store(b, size);
	fr_pack(b, size);
	fr_rec(b, size);
	if (size >= 64) {
		put_le64(b + 56, ckpt_checksum64(b, 56));
		fr_store(b, size);
		fr_pack(b, size);
		fr_rec(b, size);
	}
	free(b);
	return 0;
}
