/* Saving a checkpoint: chunk, hash, look up, encode, write new chunks, commit the manifest.
 * Order of durability: pack data and pack directory entries first, the manifest last (written to a
 * temporary name, fsynced, renamed, directory fsynced). Until the rename nothing is visible. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "codec.h"
#include "common.h"
#include "packw.h"
#include "store.h"

struct save_tensor {
	char *name;
	uint32_t name_len;
	uint8_t dtype, ndim;
	uint64_t *shape;
	uint64_t nbytes;
	const uint8_t *data;
};

struct ckpt_save {
	struct ckpt_store *s;
	uint64_t step;
	double t0;
	uint32_t gen;
	struct save_tensor *t;
	size_t nt, capt;
	uint32_t *names;     /* open-addressing set of tensor indices + 1, keyed by name hash */
	size_t names_cap;
	struct mf_meta *meta;
	size_t nmeta, capmeta;
	struct mf_chunk *chunks;
	size_t nchunks, capchunks;
	uint32_t *refs;
	uint64_t nrefs, caprefs;
	ckpt_stats st;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 16;
	while (n < need)
		n *= 2;
	void *q = realloc(*p, n * elem);
	if (!q)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	*p = q;
	*cap = n;
	return 0;
}

CKPT_API int ckpt_save_begin(ckpt_store *s, uint64_t step, ckpt_save **out)
{
	*out = NULL;
	if (!s)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL store");
	if (step == CKPT_STEP_LATEST)
		return ckpt_fail(CKPT_E_INVAL, "save: step %llu is reserved", (unsigned long long)step);
	if (s->active)
		return ckpt_fail(CKPT_E_STATE, "save: a save is already open on store %s", s->path);
	int rc = store_lock(s);
	if (rc)
		return rc;
	char name[64], p[4096];
	store_mf_name(step, name, sizeof name);
	snprintf(p, sizeof p, "%s/%s", s->mf_dir, name);
	if (!s->opt.overwrite && access(p, F_OK) == 0) {
		store_unlock(s);
		return ckpt_fail(CKPT_E_EXISTS, "checkpoint %llu already exists in store %s (%s)",
				 (unsigned long long)step, s->path, p);
	}
	if ((rc = store_refresh_index(s))) {
		store_unlock(s);
		return rc;
	}
	struct ckpt_save *sv = calloc(1, sizeof *sv);
	if (!sv) {
		store_unlock(s);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	sv->s = s;
	sv->step = step;
	sv->t0 = ckpt_now();
	sv->gen = ++s->gen;
	sv->st.step = step;
	s->active = sv;
	*out = sv;
	return 0;
}

static void save_free(struct ckpt_save *sv)
{
	for (size_t i = 0; i < sv->nt; i++) {
		free(sv->t[i].name);
		free(sv->t[i].shape);
	}
	for (size_t i = 0; i < sv->nmeta; i++) {
		free((char *)sv->meta[i].key);
		free((char *)sv->meta[i].value);
	}
	free(sv->t);
	free(sv->names);
	free(sv->meta);
	free(sv->chunks);
	free(sv->refs);
	free(sv);
}

static void save_end(struct ckpt_save *sv)
{
	sv->s->active = NULL;
	store_unlock(sv->s);
	save_free(sv);
}

CKPT_API void ckpt_save_abort(ckpt_save *sv)
{
	if (sv)
		save_end(sv);
}

/* Name set: returns the slot for name (holding 0 when absent). */
static uint32_t *name_slot(struct ckpt_save *sv, const char *name, size_t len)
{
	size_t mask = sv->names_cap - 1;
	for (size_t i = (size_t)ckpt_checksum64(name, len) & mask;; i = (i + 1) & mask) {
		uint32_t v = sv->names[i];
		if (!v || (sv->t[v - 1].name_len == len && !memcmp(sv->t[v - 1].name, name, len)))
			return &sv->names[i];
	}
}

static int names_grow(struct ckpt_save *sv)
{
	if ((sv->nt + 1) * 2 <= sv->names_cap)
		return 0;
	size_t ncap = sv->names_cap ? sv->names_cap * 2 : 64;
	uint32_t *old = sv->names;
	size_t ocap = sv->names_cap;
	sv->names = calloc(ncap, sizeof *sv->names);
	if (!sv->names) {
		sv->names = old;
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	sv->names_cap = ncap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i])
			*name_slot(sv, sv->t[old[i] - 1].name, sv->t[old[i] - 1].name_len) = old[i];
	free(old);
	return 0;
}

CKPT_API int ckpt_save_add_tensor(ckpt_save *sv, const char *name, ckpt_dtype dtype,
				  unsigned ndim, const uint64_t *shape, int mem, const void *data)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	size_t len = name ? strlen(name) : 0;
	if (!len || len > 65535)
		return ckpt_fail(CKPT_E_INVAL, "tensor name must be 1 to 65535 bytes (got %zu)", len);
	size_t esz = ckpt_dtype_size(dtype);
	if (!esz)
		return ckpt_fail(CKPT_E_INVAL, "tensor '%s': unknown dtype %d", name, (int)dtype);
	if (ndim > CKPT_MAX_DIMS)
		return ckpt_fail(CKPT_E_INVAL, "tensor '%s': %u dimensions (at most %d)", name, ndim,
				 CKPT_MAX_DIMS);
	if (ndim && !shape)
		return ckpt_fail(CKPT_E_INVAL, "tensor '%s': NULL shape", name);
	if (mem != CKPT_MEM_HOST)
		return ckpt_fail(CKPT_E_UNSUPPORTED,
				 "tensor '%s': memory type %d (CUDA device) is not supported by this build",
				 name, mem);
	uint64_t nbytes = esz;
	for (unsigned i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(nbytes, shape[i], &nbytes))
			return ckpt_fail(CKPT_E_INVAL, "tensor '%s': shape overflows", name);
	if (nbytes && !data)
		return ckpt_fail(CKPT_E_INVAL, "tensor '%s': NULL data for %llu bytes", name,
				 (unsigned long long)nbytes);
	int rc;
	if ((rc = names_grow(sv)) || (rc = grow((void **)&sv->t, &sv->capt, sv->nt + 1, sizeof *sv->t)))
		return rc;
	uint32_t *slot = name_slot(sv, name, len);
	if (*slot)
		return ckpt_fail(CKPT_E_INVAL, "tensor '%s' added twice to checkpoint %llu", name,
				 (unsigned long long)sv->step);
	struct save_tensor *t = &sv->t[sv->nt];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	t->shape = malloc((ndim ? ndim : 1) * sizeof *t->shape);
	if (!t->name || !t->shape) {
		free(t->name);
		free(t->shape);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	if (ndim)
		memcpy(t->shape, shape, ndim * sizeof *shape);
	t->name_len = (uint32_t)len;
	t->dtype = (uint8_t)dtype;
	t->ndim = (uint8_t)ndim;
	t->nbytes = nbytes;
	t->data = data;
	sv->nt++;
	*slot = (uint32_t)sv->nt;
	return 0;
}

CKPT_API int ckpt_save_set_meta(ckpt_save *sv, const char *key, const char *value)
{
	if (!sv || !key || !*key || !value)
		return ckpt_fail(CKPT_E_INVAL, "metadata: key must be a non-empty string, value a string");
	size_t kl = strlen(key), vl = strlen(value);
	if (kl > UINT32_MAX / 2 || vl > UINT32_MAX / 2)
		return ckpt_fail(CKPT_E_INVAL, "metadata '%.40s': too long", key);
	char *v = strdup(value);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < sv->nmeta; i++)
		if (!strcmp(sv->meta[i].key, key)) {
			free((char *)sv->meta[i].value);
			sv->meta[i].value = v;
			sv->meta[i].vlen = (uint32_t)vl;
			return 0;
		}
	char *k = strdup(key);
	int rc = k ? grow((void **)&sv->meta, &sv->capmeta, sv->nmeta + 1, sizeof *sv->meta)
		   : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (rc) {
		free(k);
		free(v);
		return rc;
	}
	sv->meta[sv->nmeta++] = (struct mf_meta){k, v, (uint32_t)kl, (uint32_t)vl};
	return 0;
}

struct save_run {
	struct ckpt_save *sv;
	struct packw w;
	ckpt_codec_ctx *codec;
	uint32_t chunk_size;
	int compress, level;
};

static int add_ref(struct ckpt_save *sv, uint32_t slot)
{
	int rc = grow((void **)&sv->refs, (size_t *)&sv->caprefs, sv->nrefs + 1, sizeof *sv->refs);
	if (rc)
		return rc;
	sv->refs[sv->nrefs++] = slot;
	return 0;
}

static int add_chunk(struct ckpt_save *sv, const struct mf_chunk *c, uint32_t *slot)
{
	if (sv->nchunks >= UINT32_MAX)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint has too many chunks");
	int rc = grow((void **)&sv->chunks, &sv->capchunks, sv->nchunks + 1, sizeof *sv->chunks);
	if (rc)
		return rc;
	*slot = (uint32_t)sv->nchunks;
	sv->chunks[sv->nchunks++] = *c;
	return 0;
}

/* Writes one chunk the store does not hold yet; fills c with its location. */
static int write_chunk(struct save_run *r, const uint8_t *p, size_t n, size_t esz,
		       struct mf_chunk *c)
{
	size_t max_stored = r->compress ? ckpt_codec_bound(n) : n;
	int rc;
	uint8_t *rec = packw_reserve(&r->w, rec_span((uint32_t)max_stored), &rc);
	if (!rec)
		return rc;
	size_t stored = n;
	int codec = CKPT_CODEC_RAW;
	if (r->compress)
		codec = ckpt_codec_encode(r->codec, p, n, esz, r->level, rec + REC_HDR_LEN, max_stored,
					  &stored);
	if (codec == CKPT_CODEC_RAW)
		memcpy(rec + REC_HDR_LEN, p, n);
	struct rec_hdr h = {.codec = (uint8_t)codec, .digest = c->digest, .raw_len = (uint32_t)n,
			    .stored_len = (uint32_t)stored, .pack_id = r->w.next_id - 1};
	uint64_t span = rec_span((uint32_t)stored);
	h.pack_id = r->w.id;
	rec_hdr_encode(&h, rec);
	memset(rec + REC_HDR_LEN + stored, 0, span - REC_HDR_LEN - stored);
	c->codec = (uint8_t)codec;
	c->raw_len = (uint32_t)n;
	c->stored_len = (uint32_t)stored;
	c->flags = MF_CHUNK_NEW;
	r->sv->st.bytes_stored += stored;
	return packw_commit(&r->w, span, &c->pack_id, &c->offset);
}

static int save_tensor(struct save_run *r, const struct save_tensor *t)
{
	struct ckpt_save *sv = r->sv;
	size_t esz = ckpt_dtype_size(t->dtype);
	for (uint64_t off = 0; off < t->nbytes; off += r->chunk_size) {
		size_t n = (size_t)MIN((uint64_t)r->chunk_size, t->nbytes - off);
		const uint8_t *p = t->data + off;
		struct mf_chunk c = {0};
		ckpt_digest_of(p, n, &c.digest);
		sv->st.bytes_hashed += n;
		sv->st.chunks++;
		int rc;
		struct idx_entry *e = index_find(&sv->s->idx, &c.digest);
		if (e && e->c.raw_len == n) {
			sv->st.chunks_reused++;
			if (e->gen != sv->gen) {
				struct mf_chunk ref = e->c;
				ref.flags = 0;
				if ((rc = add_chunk(sv, &ref, &e->slot)))
					return rc;
				e->gen = sv->gen;
			}
			if ((rc = add_ref(sv, e->slot)))
				return rc;
			continue;
		}
		if ((rc = write_chunk(r, p, n, esz, &c)))
			return rc;
		sv->st.chunks_new++;
		uint32_t slot;
		if ((rc = add_chunk(sv, &c, &slot)) || (rc = add_ref(sv, slot)))
			return rc;
		if (!e) {
			e = index_put(&sv->s->idx, &c);
			if (!e)
				return ckpt_fail(CKPT_E_NOMEM, "dedup index: out of memory");
			e->pending = 1;
			e->gen = sv->gen;
			e->slot = slot;
		}
	}
	return 0;
}

static int write_manifest(struct ckpt_save *sv, int64_t time_ns, uint64_t new_bytes)
{
	struct ckpt_store *s = sv->s;
	struct manifest m = {
		.version = CKPT_FORMAT_VERSION, .step = sv->step, .time_ns = time_ns,
		.chunk_size = 0, .new_bytes = new_bytes,
		.n_meta = (uint32_t)sv->nmeta, .n_tensors = (uint32_t)sv->nt,
		.n_chunks = (uint32_t)sv->nchunks, .n_refs = sv->nrefs,
		.meta = sv->meta, .chunks = sv->chunks, .refs = sv->refs,
	};
	memcpy(m.uuid, s->hdr.uuid, 16);
	m.chunk_size = s->opt.chunk_size ? (uint32_t)s->opt.chunk_size : s->hdr.chunk_size;
	m.tensors = calloc(sv->nt ? sv->nt : 1, sizeof *m.tensors);
	if (!m.tensors)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < sv->nt; i++) {
		const struct save_tensor *t = &sv->t[i];
		m.tensors[i] = (struct mf_tensor){.name = t->name, .name_len = t->name_len,
						  .dtype = t->dtype, .ndim = t->ndim,
						  .shape = t->shape, .nbytes = t->nbytes};
	}
	uint64_t len = manifest_encoded_len(&m);
	uint8_t *buf = len ? malloc(len) : NULL;
	int rc;
	if (!len)
		rc = ckpt_fail(CKPT_E_INVAL, "checkpoint %llu: manifest would exceed 4 GiB",
			       (unsigned long long)sv->step);
	else if (!buf)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory (manifest of %llu bytes)",
			       (unsigned long long)len);
	else {
		manifest_encode(&m, buf);
		char name[64];
		store_mf_name(sv->step, name, sizeof name);
		rc = io_write_atomic(s->mf_dir, name, buf, len);
	}
	free(buf);
	free(m.tensors);
	return rc;
}

CKPT_API int ckpt_save_commit(ckpt_save *sv, ckpt_stats *stats)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	struct ckpt_store *s = sv->s;
	struct save_run r = {.sv = sv};
	r.chunk_size = s->opt.chunk_size ? (uint32_t)s->opt.chunk_size : s->hdr.chunk_size;
	r.compress = s->opt.compress >= 0 ? s->opt.compress : s->hdr.codec;
	r.level = s->opt.zstd_level ? s->opt.zstd_level : (s->hdr.zstd_level ? s->hdr.zstd_level : 1);
	s->io = ckpt_io_default();
	uint32_t maxid = 0;
	int rc = store_max_pack_id(s, &maxid);
	size_t max_rec = rec_span((uint32_t)ckpt_codec_bound(r.chunk_size));
	if (!rc)
		rc = packw_init(&r.w, s, maxid + 1, max_rec);
	if (!rc && r.compress && !(r.codec = ckpt_codec_ctx_create(r.chunk_size)))
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory (codec)");
	for (size_t i = 0; !rc && i < sv->nt; i++) {
		sv->st.logical_bytes += sv->t[i].nbytes;
		rc = save_tensor(&r, &sv->t[i]);
	}
	double t_snap = ckpt_now();
	if (!rc)
		rc = packw_finish(&r.w);
	if (!rc)
		rc = write_manifest(sv, ckpt_wall_ns(), r.w.bytes_written);
	sv->st.tensors = sv->nt;
	sv->st.bytes_written = r.w.bytes_written;
	sv->st.direct_io = r.w.direct_ok && r.w.ncreated ? 1 : 0;
	snprintf(sv->st.engine, sizeof sv->st.engine, "%s", s->io->name);
	double t1 = ckpt_now();
	sv->st.seconds = t1 - sv->t0;
	sv->st.snapshot_seconds = t_snap - sv->t0;
	sv->st.persist_seconds = t1 - t_snap;
	if (rc) {
		ckpt_fail_prefix("saving checkpoint %llu", (unsigned long long)sv->step);
		packw_free(&r.w, true);
		index_drop_pending(&s->idx);
	} else {
		packw_free(&r.w, false);
		index_commit_pending(&s->idx);
		store_index_resync(s);
	}
	ckpt_codec_ctx_free(r.codec);
	if (stats)
		*stats = sv->st;
	save_end(sv);
	return rc;
}
