/* Reading a checkpoint: restore and verify. Every chunk is re-hashed after decoding, so damage
 * anywhere (record header, payload, a record moved or swapped) is caught, never restored.
 *
 * This file owns the reader handle: open (lease, manifest, name index, buffers, engine), close,
 * and the lookups of tensors, chunks and metadata. Restores are in restore.c and restore_all.c,
 * verify in verify.c; read_int.h lists the pieces. Uses rpipe.c, stage.c and pack.c (close). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <pthread.h>

#include "format/codec.h"
#include "common/common.h"
#include "io/engine.h"
#include "store/lease.h"
#include "read/read_int.h"
#include "store/store.h"

static size_t name_hash(const char *n, size_t len)
{
	return (size_t)ckpt_checksum64(n, len);
}

/* Builds the name index so that lookups by name cost O(1) (models have 100k+ tensors). */
static int index_names(struct reader1 *r)
{
	size_t cap = 16;
	while (cap < 2 * (size_t)r->m.n_tensors)
		cap *= 2;
	r->names = calloc(cap, sizeof *r->names);
	if (!r->names)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	r->names_cap = cap;
	for (uint32_t i = 0; i < r->m.n_tensors; i++) {
		const struct mf_tensor *t = &r->m.tensors[i];
		size_t k = name_hash(t->name, t->name_len) & (cap - 1);
		while (r->names[k])
			k = (k + 1) & (cap - 1);
		r->names[k] = i + 1;
	}
	return 0;
}

/* Read bytes a restore keeps in flight at least (restore_all over all its threads, or one
 * reader1_restore): a disk's best sequential read wants deep queues of large blocks (the fio
 * sweep's best points here were 16 MiB x 32 x 2 jobs and 1 MiB x 32; 224 MiB in flight, queue
 * depth 32, measured no faster than 128 MiB on this disk). Each group read has its own buf_cap
 * read buffer; on the direct path it holds only the scratch pieces, so its untouched pages cost
 * no memory. */
#define RESTORE_INFLIGHT_BYTES (128u << 20)

/* Group reads in flight in a restore, and in the reader's engine: at least the queue depth; at
 * most 256 (the largest queue depth), which small read buffers would exceed. */
unsigned rd_restore_slots(const struct reader1 *r)
{
	unsigned n = MAX(r->s->opt.queue_depth, (unsigned)(RESTORE_INFLIGHT_BYTES / r->buf_cap));
	return MIN(MAX(n, 2u), 256u);
}

bool reader1_from_remote(const reader1 *r)
{
	return r->remote_mf;
}

int reader1_open(ckpt_store *s, uint64_t step, reader1 **out)
{
	*out = NULL;
	if (!s)
		return ckpt_fail(CKPT_E_INVAL, "reader: NULL store");
	/* The lease comes first: gc and prune defer pack removals from before the manifest is read
	 * until the reader is closed. */
	struct lease *lease;
	int rc = lease_take(s, &lease);
	bool leased = !rc;
	uint64_t want = step;
	if (!rc && !store_remote_first(s))
		rc = ckpt_store_resolve(s, step, &step);
	/* Not local (or CKPT_REMOTE_READ): the remote's. */
	bool remote = leased && store_remote_reads(s) &&
		      (store_remote_first(s) || rc == -CKPT_E_NOTFOUND);
	if (remote)
		rc = 0;
	if (rc) {
		lease_drop(lease);
		return rc;
	}
	struct reader1 *r = calloc(1, sizeof *r);
	if (!r) {
		lease_drop(lease);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	r->s = s;
	r->lease = lease;
	r->remote_mf = remote;
	pthread_mutex_init(&r->mu, NULL);
	char name[64];
	rc = remote ? store_remote_manifest(s, want, &r->m) : store_load_manifest(s, step, &r->m);
	step = rc ? step : r->m.step;
	store_mf_name(step, name, sizeof name);
	snprintf(r->mf_path, sizeof r->mf_path, "%s/%s", s->layout.mf_dir, name);
	if (rc) {
		pthread_mutex_destroy(&r->mu);
		lease_drop(r->lease);
		free(r);
		return rc;
	}
	if ((rc = lease_publish(r->lease, &r->m))) {
		reader1_close(r);
		return rc;
	}
	if ((rc = index_names(r))) {
		reader1_close(r);
		return rc;
	}
	uint32_t cs = r->m.chunk_size;
	r->buf_cap = ALIGN_UP(MAX((size_t)s->opt.io_size, rec_span((uint32_t)ckpt_codec_bound(cs))),
			      CKPT_ALIGN);
	r->buf = ckpt_aligned_alloc(r->buf_cap);
	r->scratch = malloc(cs);
	r->codec = ckpt_codec_ctx_create(cs);
	if (!r->buf || !r->scratch || !r->codec) {
		reader1_close(r);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	/* Room in the engine for every read a restore keeps in flight. */
	if ((rc = io_engine_create(s->opt.engine, rd_restore_slots(r), NULL, 0, 0, &r->eng))) {
		reader1_close(r);
		return rc;
	}
	r->st.step = step;
	snprintf(r->st.engine, sizeof r->st.engine, "%s", io_engine_name(r->eng));
	r->st.direct_io = s->opt.direct_io;
	*out = r;
	return 0;
}

void reader1_close(reader1 *r)
{
	if (!r)
		return;
	rd_packs_close(r);
	manifest_free(&r->m);
	rpipe_free(r->pipe);
	reader_res_free(r);
	free(r->buf);
	free(r->scratch);
	ckpt_codec_ctx_free(r->codec);
	io_engine_destroy(r->eng);
	pthread_mutex_destroy(&r->mu);
	free(r->names);
	lease_drop(r->lease); /* after the packs are closed */
	free(r);
}

void reader1_info(const reader1 *r, ckpt_info *info)
{
	store_info_of(&r->m, info);
}

size_t reader1_tensor_count(const reader1 *r)
{
	return r ? r->m.n_tensors : 0;
}

int reader1_tensor(const reader1 *r, size_t i, ckpt_tensor_info *info)
{
	if (!r || i >= r->m.n_tensors)
		return ckpt_fail(CKPT_E_INVAL, "tensor index %zu out of range", i);
	const struct mf_tensor *t = &r->m.tensors[i];
	memset(info, 0, sizeof *info);
	info->struct_size = sizeof *info;
	info->shards = 1;
	info->name = t->name;
	info->dtype = (ckpt_dtype)t->dtype;
	info->ndim = t->ndim;
	info->shape = t->shape;
	info->nbytes = t->nbytes;
	info->chunks = t->nrefs;
	for (uint64_t j = 0; j < t->nrefs; j++) {
		const struct mf_chunk *c = &r->m.chunks[r->m.refs[t->first_ref + j]];
		if (c->flags & MF_CHUNK_NEW) {
			info->chunks_new++;
			info->bytes_new += rec_span(c->stored_len);
		}
	}
	return 0;
}

long reader1_find(const reader1 *r, const char *name)
{
	if (r && name && r->names_cap) {
		size_t len = strlen(name);
		for (size_t k = name_hash(name, len) & (r->names_cap - 1); r->names[k];
		     k = (k + 1) & (r->names_cap - 1)) {
			/* Probing meets entries in insertion order: with duplicate names (a foreign
			 * manifest), the first one wins, as it did when added. */
			uint32_t i = r->names[k] - 1;
			if (r->m.tensors[i].name_len == len && !memcmp(r->m.tensors[i].name, name, len))
				return (long)i;
		}
	}
	return ckpt_fail(CKPT_E_NOTFOUND, "no tensor '%s' in checkpoint %llu", name ? name : "",
			 r ? (unsigned long long)r->m.step : 0ull);
}

size_t reader1_meta_count(const reader1 *r)
{
	return r ? r->m.n_meta : 0;
}

int reader1_meta(const reader1 *r, size_t i, const char **key, const char **value)
{
	if (!r || i >= r->m.n_meta)
		return ckpt_fail(CKPT_E_INVAL, "metadata index %zu out of range", i);
	*key = r->m.meta[i].key;
	*value = r->m.meta[i].value;
	return 0;
}

const char *reader1_get_meta(const reader1 *r, const char *key)
{
	for (uint32_t i = 0; r && key && i < r->m.n_meta; i++)
		if (!strcmp(r->m.meta[i].key, key))
			return r->m.meta[i].value;
	return NULL;
}

void reader1_stats(const reader1 *r, ckpt_stats *st)
{
	*st = r->st;
}

int reader1_chunk(const reader1 *r, size_t i, uint64_t j, ckpt_chunk_info *out)
{
	if (!r || i >= r->m.n_tensors || j >= r->m.tensors[i].nrefs)
		return ckpt_fail(CKPT_E_INVAL, "chunk %llu of tensor %zu out of range",
				 (unsigned long long)j, i);
	const struct mf_chunk *c = &r->m.chunks[r->m.refs[r->m.tensors[i].first_ref + j]];
	memcpy(out->digest, c->digest.b, 16);
	out->pack_id = c->pack_id;
	out->offset = c->offset;
	out->raw_bytes = c->raw_len;
	out->stored_bytes = c->stored_len;
	out->disk_bytes = rec_span(c->stored_len);
	out->codec = c->codec;
	out->is_new = (c->flags & MF_CHUNK_NEW) != 0;
	return 0;
}
