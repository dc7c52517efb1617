/* What the manifest-fed fuzz targets (fuzz-manifest.c, fuzz-dist.c) share. */
#ifndef CKPT_FUZZ_COMMON_H
#define CKPT_FUZZ_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/hash.h"
#include "format/format.h"

/* Decodes a copy of data (manifest_decode takes its buffer) into *m as what. Returns its code,
 * or 1 when out of memory (nothing decoded). */
static inline int fuzz_decode_copy(const uint8_t *data, size_t size, const char *what,
				   struct manifest *m)
{
	uint8_t *b = malloc(size ? size : 1);
	if (!b)
		return 1;
	if (size)
		memcpy(b, data, size);
	return manifest_decode(b, size, m, what);
}

/* Calls one(data, size) as it is (almost always stopped by the length field or the XXH3-128
 * trailer), and again with the length field and trailer recomputed, so that the fuzzer reaches
 * what lies behind them. Inputs over 4 MiB are skipped. */
static inline void fuzz_manifest_twice(const uint8_t *data, size_t size,
				       void (*one)(const uint8_t *, size_t))
{
	if (size > (4u << 20))
		return;
	one(data, size);
	if (size < MF_TRAILER_LEN)
		return;
	uint8_t *c = malloc(size);
	if (!c)
		return;
	memcpy(c, data, size);
	if (size >= 24)
		put_le64(c + 16, size);
	ckpt_digest d;
	ckpt_digest_of(c, size - MF_TRAILER_LEN, &d);
	memcpy(c + size - MF_TRAILER_LEN, d.b, 16);
	one(c, size);
	free(c);
}

#endif
