/* Options: plain values checked on set, so that a bad value fails where it is given. */
#include <stdlib.h>

#include "common.h"
#include "store.h"

CKPT_API ckpt_options *ckpt_options_create(void)
{
	ckpt_options *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	o->direct_io = 1;
	o->compress = -1;
	o->io_size = 8u << 20;
	o->pack_size = 1ull << 30;
	return o;
}

CKPT_API void ckpt_options_free(ckpt_options *opts)
{
	free(opts);
}

static int is_pow2(int64_t v) { return v > 0 && !(v & (v - 1)); }

CKPT_API int ckpt_options_set(ckpt_options *o, ckpt_option opt, int64_t v)
{
	if (!o)
		return ckpt_fail(CKPT_E_INVAL, "options: NULL options object");
	switch (opt) {
	case CKPT_OPT_CREATE: o->create = v != 0; return 0;
	case CKPT_OPT_READ_ONLY: o->read_only = v != 0; return 0;
	case CKPT_OPT_DIRECT_IO: o->direct_io = v != 0; return 0;
	case CKPT_OPT_OVERWRITE: o->overwrite = v != 0; return 0;
	case CKPT_OPT_CHUNK_SIZE:
		if (!is_pow2(v) || v < CKPT_MIN_CHUNK || v > CKPT_MAX_CHUNK)
			return ckpt_fail(CKPT_E_INVAL,
					 "chunk size %lld: must be a power of two from 64 KiB to 64 MiB",
					 (long long)v);
		o->chunk_size = v;
		return 0;
	case CKPT_OPT_COMPRESS:
		if (v != CKPT_COMPRESS_NONE && v != CKPT_COMPRESS_ZSTD)
			return ckpt_fail(CKPT_E_INVAL, "compression %lld: must be none (0) or zstd (1)",
					 (long long)v);
		o->compress = (int)v;
		return 0;
	case CKPT_OPT_ZSTD_LEVEL:
		if (v < 1 || v > 19)
			return ckpt_fail(CKPT_E_INVAL, "zstd level %lld: must be 1 to 19", (long long)v);
		o->zstd_level = (int)v;
		return 0;
	case CKPT_OPT_IO_SIZE:
		if (v < 4096 || v > (1ll << 30) || (v & 4095))
			return ckpt_fail(CKPT_E_INVAL,
					 "I/O size %lld: must be a multiple of 4 KiB up to 1 GiB", (long long)v);
		o->io_size = (uint64_t)v;
		return 0;
	case CKPT_OPT_PACK_SIZE:
		if (v < (1ll << 20))
			return ckpt_fail(CKPT_E_INVAL, "pack size %lld: must be at least 1 MiB",
					 (long long)v);
		o->pack_size = (uint64_t)v;
		return 0;
	}
	return ckpt_fail(CKPT_E_INVAL, "unknown option %d", (int)opt);
}
