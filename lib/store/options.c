/* Options: plain values checked on set, so that a bad value fails where it is given. */
#include <stdio.h>
#include <stdlib.h>

#include "common/common.h"
#include "store/marker.h"
#include "store/store.h"

/* Defaults recommended for this machine by `nvmetune bench`, in $CKPT_CONFIG or
 * /etc/libckpt.conf: "key = value" lines, '#' comments. Unknown keys and bad values are ignored
 * (a stale file must never stop a save); explicit options override them. */
static void read_config(ckpt_options *o)
{
	const char *path = getenv("CKPT_CONFIG");
	FILE *f = fopen(path && *path ? path : "/etc/libckpt.conf", "re");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		char key[64];
		long long v;
		if (line[0] == '#' || sscanf(line, " %63[a-z_] = %lld", key, &v) != 2)
			continue;
		if (!strcmp(key, "io_queue_depth") && v >= 1 && v <= 256)
			o->queue_depth = (unsigned)v;
		else if (!strcmp(key, "io_size_bytes") && v >= 4096 && v <= (1ll << 30) && !(v & 4095))
			o->io_size = (uint64_t)v;
	}
	fclose(f);
}

CKPT_API ckpt_options *ckpt_options_create(void)
{
	ckpt_options *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	o->direct_io = 1;
	o->compress = -1;
	o->io_size = 8u << 20;
	o->pack_size = 1ull << 30;
	o->pool_size = 256ull << 20;
	o->queue_depth = 8;
	o->engine = CKPT_ENGINE_AUTO;
	o->gc_grace_s = MARKER_GRACE_DEFAULT_S;
	read_config(o);
	return o;
}

CKPT_API void ckpt_options_free(ckpt_options *opts)
{
	if (!opts)
		return;
	for (unsigned i = 0; i < opts->ndata_dirs; i++)
		free(opts->data_dirs[i]);
	free(opts);
}

CKPT_API int ckpt_options_add_data_dir(ckpt_options *o, const char *dir)
{
	if (!o || !dir || !*dir)
		return ckpt_fail(CKPT_E_INVAL, "data directory: empty path");
	if (o->ndata_dirs >= MAX_DATA_DIRS)
		return ckpt_fail(CKPT_E_INVAL, "data directory %s: at most %d directories", dir,
				 MAX_DATA_DIRS);
	if (strchr(dir, '\n'))
		return ckpt_fail(CKPT_E_INVAL, "data directory: path contains a newline");
	char *d = strdup(dir);
	if (!d)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	o->data_dirs[o->ndata_dirs++] = d;
	return 0;
}

static int is_pow2(int64_t v) { return v > 0 && !(v & (v - 1)); }

/* A duration option: 0 to max (in unit; span: max in words). */
static int set_duration(int64_t *to, int64_t v, int64_t max, const char *what, const char *unit,
			const char *span)
{
	if (v < 0 || v > max)
		return ckpt_fail(CKPT_E_INVAL, "%s %lld %s: must be 0 to %lld (%s)", what, (long long)v,
				 unit, (long long)max, span);
	*to = v;
	return 0;
}

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
	case CKPT_OPT_THREADS:
		if (v < 1 || v > 256)
			return ckpt_fail(CKPT_E_INVAL, "threads %lld: must be 1 to 256", (long long)v);
		o->threads = (unsigned)v;
		return 0;
	case CKPT_OPT_POOL_SIZE:
		if (v < (1ll << 20))
			return ckpt_fail(CKPT_E_INVAL, "pool size %lld: must be at least 1 MiB", (long long)v);
		o->pool_size = (uint64_t)v;
		return 0;
	case CKPT_OPT_QUEUE_DEPTH:
		if (v < 1 || v > 256)
			return ckpt_fail(CKPT_E_INVAL, "queue depth %lld: must be 1 to 256", (long long)v);
		o->queue_depth = (unsigned)v;
		return 0;
	case CKPT_OPT_IO_ENGINE:
		if (v != CKPT_ENGINE_AUTO && v != CKPT_ENGINE_IO_URING && v != CKPT_ENGINE_PSYNC)
			return ckpt_fail(CKPT_E_INVAL, "I/O engine %lld: must be auto (0), io_uring (1) or psync (2)",
					 (long long)v);
		o->engine = (int)v;
		return 0;
	case CKPT_OPT_LOCK_WAIT_MS:
		return set_duration(&o->lock_wait_ms, v, CKPT_MAX_LOCK_WAIT_MS, "lock wait", "ms",
				    "24 hours");
	case CKPT_OPT_GC_GRACE_S:
		return set_duration(&o->gc_grace_s, v, CKPT_MAX_GC_GRACE_S, "gc grace", "s", "30 days");
	case CKPT_OPT_REMOTE_PARALLEL:
		if (v < 1 || v > 64)
			return ckpt_fail(CKPT_E_INVAL, "remote parallelism %lld: must be 1 to 64",
					 (long long)v);
		o->remote_parallel = (unsigned)v;
		return 0;
	case CKPT_OPT_REMOTE_BANDWIDTH:
		if (v < 0)
			return ckpt_fail(CKPT_E_INVAL, "remote bandwidth %lld: must be 0 (no cap) or "
					 "bytes per second", (long long)v);
		o->remote_bandwidth = (uint64_t)v;
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
