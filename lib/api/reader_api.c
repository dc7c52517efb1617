/* The public reader: one object for one-process and multi-rank checkpoints. By default its
 * tensors are the global tensors (dist/, which reads any checkpoint as global tensors of one or
 * more pieces); opened CKPT_READ_AS_SAVED, the pieces as saved (read/). Where a global tensor is
 * one piece saved whole, reads take the one-process reader's paths (O_DIRECT straight into the
 * destination, the parallel read_all), so that a one-process checkpoint reads as fast as before. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "common/common.h"
#include "dist/dist.h"
#include "store/store.h"

/* True when every global tensor is one piece saved whole at the same index. */
static bool is_identity(dreader *d, reader1 *r)
{
	size_t n = dreader_tensor_count(d);
	if (n != reader1_tensor_count(r))
		return false;
	for (size_t i = 0; i < n; i++) {
		ckpt_shard sh;
		if (dreader_shard_count(d, i) != 1 || dreader_shard(d, i, 0, &sh) ||
		    sh.tensor != i || sh.rank != -1)
			return false;
	}
	return true;
}

CKPT_API int ckpt_reader_open(ckpt_store *store, uint64_t step, unsigned flags,
			      ckpt_reader **out)
{
	if (!out)
		return ckpt_fail(CKPT_E_INVAL, "ckpt_reader_open: out is NULL");
	*out = NULL;
	if (flags & ~CKPT_READ_AS_SAVED)
		return ckpt_fail(CKPT_E_INVAL, "unknown reader flags 0x%x", flags);
	ckpt_reader *rd = calloc(1, sizeof *rd);
	if (!rd)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	rd->s = store;
	rd->as_saved = flags & CKPT_READ_AS_SAVED;
	int rc;
	if (rd->as_saved) {
		rc = reader1_open(store, step, &rd->r);
	} else {
		rc = dreader_open(store, step, &rd->d);
		if (!rc) {
			rd->r = dreader_checkpoint(rd->d);
			rd->identity = is_identity(rd->d, rd->r);
		}
	}
	if (rc) {
		free(rd);
		return rc;
	}
	ckpt_info info;
	reader1_info(rd->r, &info);
	rd->step = info.step;
	*out = rd;
	return 0;
}

CKPT_API void ckpt_reader_close(ckpt_reader *rd)
{
	if (!rd)
		return;
	if (rd->d)
		dreader_close(rd->d);
	else
		reader1_close(rd->r);
	free(rd);
}

CKPT_API int ckpt_reader_info(const ckpt_reader *rd, ckpt_info *info)
{
	int rc = api_size_ok(info ? info->struct_size : 0, sizeof *info, "ckpt_info");
	if (rc)
		return rc;
	ckpt_info in;
	reader1_info(rd->r, &in);
	in.struct_size = sizeof in;
	api_copy_out(info, &in, sizeof in);
	return 0;
}

/* The world size a manifest's reserved key records, parsed as the layout parser does (1 to
 * DIST_MAX_RANKS, nothing after it); 1 without the key or with an invalid value. */
static unsigned world_of(const reader1 *r)
{
	const char *p = reader1_get_meta(r, DIST_WORLD);
	uint64_t n;
	if (!p || dist_parse_u64(&p, DIST_MAX_RANKS, &n) || *p || n == 0)
		return 1;
	return (unsigned)n;
}

CKPT_API unsigned ckpt_reader_world_size(const ckpt_reader *rd)
{
	return rd->d ? dreader_world_size(rd->d) : world_of(rd->r);
}

CKPT_API size_t ckpt_reader_tensor_count(const ckpt_reader *rd)
{
	return rd->d ? dreader_tensor_count(rd->d) : reader1_tensor_count(rd->r);
}

/* A global tensor's description, with the chunk counts of all its pieces. */
static int global_info(const ckpt_reader *rd, size_t i, ckpt_tensor_info *ti)
{
	int rc = dreader_tensor(rd->d, i, ti);
	long n = rc ? rc : dreader_shard_count(rd->d, i);
	if (n < 0)
		return (int)n;
	ti->struct_size = sizeof *ti;
	ti->shards = (uint32_t)n;
	ti->replicated = dreader_replicated(rd->d, i) == 1;
	for (long j = 0; j < n; j++) {
		ckpt_shard sh;
		ckpt_tensor_info p;
		if ((rc = dreader_shard(rd->d, i, (size_t)j, &sh)) ||
		    (rc = reader1_tensor(rd->r, sh.tensor, &p)))
			return rc;
		ti->chunks += p.chunks;
		ti->chunks_new += p.chunks_new;
		ti->bytes_new += p.bytes_new;
	}
	return 0;
}

CKPT_API int ckpt_reader_tensor(const ckpt_reader *rd, size_t i, ckpt_tensor_info *info)
{
	int rc = api_size_ok(info ? info->struct_size : 0, sizeof *info, "ckpt_tensor_info");
	if (rc)
		return rc;
	ckpt_tensor_info ti;
	rc = rd->d ? global_info(rd, i, &ti) : reader1_tensor(rd->r, i, &ti);
	if (!rc)
		api_copy_out(info, &ti, sizeof ti);
	return rc;
}

CKPT_API long ckpt_reader_find(const ckpt_reader *rd, const char *name)
{
	return rd->d ? dreader_find(rd->d, name) : reader1_find(rd->r, name);
}

CKPT_API size_t ckpt_reader_meta_count(const ckpt_reader *rd)
{
	return reader1_meta_count(rd->r);
}

CKPT_API int ckpt_reader_meta(const ckpt_reader *rd, size_t i, const char **key,
			      const char **value)
{
	return reader1_meta(rd->r, i, key, value);
}

CKPT_API const char *ckpt_reader_get_meta(const ckpt_reader *rd, const char *key)
{
	return reader1_get_meta(rd->r, key);
}

CKPT_API int ckpt_reader_after_stream(ckpt_reader *rd, void *stream)
{
	return reader1_after_stream(rd->r, stream);
}

CKPT_API int ckpt_reader_stats(const ckpt_reader *rd, ckpt_stats *stats)
{
	int rc = api_size_ok(stats ? stats->struct_size : 0, sizeof *stats, "ckpt_stats");
	if (rc)
		return rc;
	ckpt_stats st;
	reader1_stats(rd->r, &st);
	st.struct_size = sizeof st;
	api_copy_out(stats, &st, sizeof st);
	return 0;
}

CKPT_API int ckpt_reader_shard(const ckpt_reader *rd, size_t i, size_t j, ckpt_shard *out)
{
	int rc = api_size_ok(out ? out->struct_size : 0, sizeof *out, "ckpt_shard");
	if (rc)
		return rc;
	if (!rd->d)
		return ckpt_fail(CKPT_E_STATE, "a reader opened CKPT_READ_AS_SAVED has no global "
				 "tensors: its tensors are the pieces");
	ckpt_shard sh;
	if (!(rc = dreader_shard(rd->d, i, j, &sh))) {
		sh.struct_size = sizeof sh;
		api_copy_out(out, &sh, sizeof sh);
	}
	return rc;
}

CKPT_API int ckpt_reader_chunk(const ckpt_reader *rd, size_t i, uint64_t j, ckpt_chunk_info *out)
{
	int rc = api_size_ok(out ? out->struct_size : 0, sizeof *out, "ckpt_chunk_info");
	if (rc)
		return rc;
	ckpt_chunk_info c;
	if ((rc = reader1_chunk(rd->r, i, j, &c)))
		return rc;
	c.struct_size = sizeof c;
	/* Rank R's packs take ids [(R + 1) * SPAN, (R + 2) * SPAN) (docs/format.md). */
	c.rank = c.pack_id >= DIST_PACK_SPAN ? (int)(c.pack_id / DIST_PACK_SPAN) - 1 : -1;
	api_copy_out(out, &c, sizeof c);
	return 0;
}
