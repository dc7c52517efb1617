/* The save API: what the caller adds (tensors, metadata), then submit/wait around the pipeline
 * (a struct pipe_save request whose commit callback, save_commit, writes the manifest last). Order of durability: pack data and pack directory entries
 * first, the manifest last (temporary name, fsync, rename, directory fsync). Until the rename
 * nothing is visible. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/common.h"
#include "gpu/gpu.h"
#include "save/pipeline.h"
#include "save/save.h"
#include "store/store.h"

static int save_commit(struct pipe_save *ps, bool *keep_packs);
/* What the pipeline calls back: the commit, which writes the manifest. */
static const struct pipe_save_ops save_ops = {.commit = save_commit};


/* True when a save of step is open or in flight on this handle (ss->mu held). */
static bool step_live(struct save_store *ss, uint64_t step)
{
	for (struct save1 *o = ss->live; o; o = o->next_live)
		if (o->step == step)
			return true;
	return false;
}

/* Under ss->mu and s->mu: takes the writer lock for the handle's first save, and refuses a step
 * that exists (or is being saved) unless overwriting. */
static int begin_locked(struct save_store *ss, uint64_t step)
{
	struct ckpt_store *s = &ss->store;
	int rc = s->lock.users ? 0 : store_begin_write(s);
	if (rc)
		return rc;
	char name[64], p[4096];
	store_mf_name(step, name, sizeof name);
	snprintf(p, sizeof p, "%s/%s", s->layout.mf_dir, name);
	if (!s->opt.overwrite && (step_live(ss, step) || access(p, F_OK) == 0)) {
		rc = ckpt_fail(CKPT_E_EXISTS, "checkpoint %llu already exists in store %s (%s)",
			       (unsigned long long)step, s->path,
			       step_live(ss, step) ? "being saved" : p);
		if (!s->lock.users)
			store_unlock(s);
	}
	return rc;
}

int save1_begin(ckpt_store *s, uint64_t step, save1 **out)
{
	*out = NULL;
	if (!s)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL store");
	if (step == CKPT_STEP_LATEST)
		return ckpt_fail(CKPT_E_INVAL, "save: step %llu is reserved", (unsigned long long)step);
	struct save1 *sv = calloc(1, sizeof *sv);
	if (!sv)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	struct save_store *ss = save_store_of(s);
	pthread_mutex_lock(&ss->mu);
	pthread_mutex_lock(&s->lock.mu);
	int rc = begin_locked(ss, step);
	if (!rc) {
		s->lock.users++;
		sv->gen = ++s->lock.gen;
	}
	pthread_mutex_unlock(&s->lock.mu);
	if (rc) {
		pthread_mutex_unlock(&ss->mu);
		free(sv);
		return rc;
	}
	sv->s = s;
	sv->step = step;
	sv->ps.step = step;
	sv->ps.st.step = step;
	sv->chunk_size = s->opt.chunk_size ? (uint32_t)s->opt.chunk_size : s->hdr.chunk_size;
	sv->compress = s->opt.compress >= 0 ? s->opt.compress : s->hdr.codec;
	sv->level = s->opt.zstd_level ? s->opt.zstd_level : (s->hdr.zstd_level ? s->hdr.zstd_level : 1);
	sv->next_live = ss->live;
	ss->live = sv;
	pthread_mutex_unlock(&ss->mu);
	*out = sv;
	return 0;
}

void save_destroy(struct save1 *sv)
{
	struct ckpt_store *s = sv->s;
	struct save_store *ss = save_store_of(s);
	pthread_mutex_lock(&ss->mu);
	for (struct save1 **pp = &ss->live; *pp; pp = &(*pp)->next_live)
		if (*pp == sv) {
			*pp = sv->next_live;
			break;
		}
	pthread_mutex_lock(&s->lock.mu);
	if (--s->lock.users == 0)
		store_unlock(s);
	pthread_mutex_unlock(&s->lock.mu);
	pthread_mutex_unlock(&ss->mu);
	pipe_save_release(&sv->ps);
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
	free(sv);
}

void save_drain(struct save_store *ss)
{
	for (;;) {
		pthread_mutex_lock(&ss->mu);
		struct save1 *sv = ss->live;
		pthread_mutex_unlock(&ss->mu);
		if (!sv)
			break;
		if (sv->ps.submitted)
			save1_wait(sv, NULL);
		else
			save1_abort(sv);
	}
}

void save1_abort(save1 *sv)
{
	if (!sv)
		return;
	if (sv->ps.submitted) {
		pipe_set_error(&sv->ps, ckpt_fail(CKPT_E_CANCELED, "aborted by the caller"));
		pipe_wait(&sv->ps);
	}
	save_destroy(sv);
}

int save1_after_stream(save1 *sv, void *stream)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	if (sv->ps.submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %llu was already submitted",
				 (unsigned long long)sv->step);
	/* Each call adds a stream (tensors on several devices each follow their own trainer
	 * stream). */
	struct pipe_save *ps = &sv->ps;
	for (unsigned i = 0; i < ps->n_user_streams; i++)
		if (ps->user_streams[i] == stream)
			return 0;
	if (ps->n_user_streams == 16)
		return ckpt_fail(CKPT_E_INVAL, "checkpoint %llu: more than 16 streams to follow",
				 (unsigned long long)sv->step);
	ps->user_streams[ps->n_user_streams++] = stream;
	return 0;
}

int save1_submit(save1 *sv)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	if (sv->ps.submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %llu was already submitted",
				 (unsigned long long)sv->step);
	/* From here the caller waits: a pool allocated now (the handle's first save) is in the
	 * save's seconds and snapshot_seconds, not hidden. */
	double t0 = ckpt_now();
	struct save_store *ss = save_store_of(sv->s);
	struct pipe_save *ps = &sv->ps;
	ps->ops = &save_ops;
	ps->gen = sv->gen;
	ps->chunk_size = sv->chunk_size;
	ps->compress = sv->compress;
	ps->level = sv->level;
	ps->t = sv->t;
	ps->nt = sv->nt;
	ps->sync = sv->sync;
	pthread_mutex_lock(&ss->mu);
	struct pipe *p = ss->pipe;
	int rc = p ? 0 : pipe_create(sv->s, 0, &ss->pipe);
	p = ss->pipe;
	pthread_mutex_unlock(&ss->mu);
	if (!rc)
		rc = pipe_submit(p, ps, t0);
	if (rc)
		ckpt_fail_prefix("saving checkpoint %llu", (unsigned long long)sv->step);
	return rc;
}

/* A save that could not even be submitted fails like one that failed in the background. */
static int not_submitted(save1 *sv)
{
	return ckpt_fail(CKPT_E_STATE, "checkpoint %llu was not submitted", (unsigned long long)sv->step);
}

int save1_wait_snapshot(save1 *sv)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	if (!sv->ps.submitted)
		return not_submitted(sv);
	int rc = pipe_wait_snapshot(&sv->ps);
	if (rc)
		ckpt_fail(-rc, "%s", sv->ps.errmsg);
	return rc;
}

int save1_fence(save1 *sv, void *stream)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	if (!sv->ps.submitted)
		return not_submitted(sv);
	/* Host tensors only: the fence is the snapshot itself, and CUDA is not asked (asking
	 * loads the module, a runtime and the driver in a process that may have no GPU work). */
	if (!pipe_uses_cuda(&sv->ps))
		return save1_wait_snapshot(sv);
	if (!ckpt_gpu_cuda())
		return ckpt_fail(CKPT_E_UNSUPPORTED, "fence: %s", ckpt_gpu_cuda_error());
	/* Never blocks: the trainer's stream waits on the device for a flag the library sets when
	 * the last copy is done, however many times the state exceeds the pool. */
	int rc = pipe_fence(&sv->ps, stream);
	if (rc && sv->ps.err)
		ckpt_fail(-sv->ps.err, "%s", sv->ps.errmsg);
	return rc;
}

int save1_poll(const save1 *sv)
{
	return sv && sv->ps.submitted ? pipe_poll(&sv->ps) : 0;
}

int save1_progress(const save1 *sv, uint64_t *done)
{
	if (!sv || !done)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save or result");
	*done = pipe_progress(&sv->ps);
	return 0;
}

int save1_wait(save1 *sv, ckpt_stats *stats)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	int rc = sv->ps.submitted ? pipe_wait(&sv->ps) : not_submitted(sv);
	sv->ps.st.tensors = sv->nt;
	if (stats)
		*stats = sv->ps.st;
	if (rc && sv->ps.submitted)
		ckpt_fail(-rc, "%s", sv->ps.errmsg);
	save_destroy(sv);
	return rc;
}

int save1_commit(save1 *sv, ckpt_stats *stats)
{
	if (!sv)
		return ckpt_fail(CKPT_E_INVAL, "save: NULL save");
	sv->sync = true; /* the caller waits for all of it: the snapshot has no lead to keep */
	int rc = save1_submit(sv);
	if (rc) {
		if (stats)
			*stats = sv->ps.st;
		save_destroy(sv);
		return rc;
	}
	return save1_wait(sv, stats);
}

static uint32_t *name_slot(struct save1 *sv, const char *name, size_t len)
{
	size_t mask = sv->names_cap - 1;
	for (size_t i = (size_t)ckpt_checksum64(name, len) & mask;; i = (i + 1) & mask) {
		uint32_t v = sv->names[i];
		if (!v || (sv->t[v - 1].name_len == len && !memcmp(sv->t[v - 1].name, name, len)))
			return &sv->names[i];
	}
}

static int names_grow(struct save1 *sv)
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

int save1_add_tensor(save1 *sv, const char *name, ckpt_dtype dtype,
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
	if (sv->ps.submitted)
		return ckpt_fail(CKPT_E_STATE, "tensor '%s': checkpoint %llu was already submitted", name,
				 (unsigned long long)sv->step);
	if (mem != CKPT_MEM_HOST) {
		if (mem < 0 || mem >= 16)
			return ckpt_fail(CKPT_E_INVAL, "tensor '%s': invalid memory type %d", name, mem);
		if (!ckpt_gpu_cuda())
			return ckpt_fail(CKPT_E_UNSUPPORTED, "tensor '%s' on CUDA device %d: %s", name,
					 mem, ckpt_gpu_cuda_error());
	}
	uint64_t nbytes = esz;
	for (unsigned i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(nbytes, shape[i], &nbytes))
			return ckpt_fail(CKPT_E_INVAL, "tensor '%s': shape overflows", name);
	if (nbytes && !data)
		return ckpt_fail(CKPT_E_INVAL, "tensor '%s': NULL data for %llu bytes", name,
				 (unsigned long long)nbytes);
	int mrc = nbytes ? ckpt_gpu_check_mem(mem, data, "tensor", name) : 0;
	if (mrc)
		return mrc;
	int rc;
	if ((rc = names_grow(sv)) || (rc = ckpt_grow((void **)&sv->t, &sv->capt, sv->nt + 1, sizeof *sv->t)))
		return rc;
	uint32_t *slot = name_slot(sv, name, len);
	if (*slot)
		return ckpt_fail(CKPT_E_INVAL, "tensor '%s' added twice to checkpoint %llu", name,
				 (unsigned long long)sv->step);
	struct pipe_tensor *t = &sv->t[sv->nt];
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
	t->mem = mem;
	sv->nt++;
	*slot = (uint32_t)sv->nt;
	return 0;
}

/* Sets key (kl bytes) to a copy of value, replacing an earlier value. Returns 0 or -CKPT_E_NOMEM. */
static int meta_put(save1 *sv, const char *key, size_t kl, const char *value, size_t vl)
{
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
	int rc = k ? ckpt_grow((void **)&sv->meta, &sv->capmeta, sv->nmeta + 1, sizeof *sv->meta)
		   : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (rc) {
		free(k);
		free(v);
		return rc;
	}
	sv->meta[sv->nmeta++] = (struct mf_meta){k, v, (uint32_t)kl, (uint32_t)vl};
	return 0;
}

int save1_set_meta(save1 *sv, const char *key, const char *value)
{
	if (!sv || !key || !*key || !value)
		return ckpt_fail(CKPT_E_INVAL, "metadata: key must be a non-empty string, value a string");
	if (sv->ps.submitted)
		return ckpt_fail(CKPT_E_STATE, "metadata '%s': checkpoint %llu was already submitted",
				 key, (unsigned long long)sv->step);
	if (!strcmp(key, CKPT_TAGS_KEY))
		return ckpt_fail(CKPT_E_INVAL, "metadata key %s is reserved: tags are added with "
				 "save1_add_tag", key);
	size_t kl = strlen(key), vl = strlen(value);
	if (kl > UINT32_MAX / 2 || vl > UINT32_MAX / 2)
		return ckpt_fail(CKPT_E_INVAL, "metadata '%.40s': too long", key);
	return meta_put(sv, key, kl, value, vl);
}

CKPT_API int ckpt_tag_check(const char *tag)
{
	return tag ? tag_check(tag) : ckpt_fail(CKPT_E_INVAL, "tag: NULL");
}

int save1_add_tag(save1 *sv, const char *tag)
{
	if (!sv || !tag)
		return ckpt_fail(CKPT_E_INVAL, "tag: NULL save or tag");
	if (sv->ps.submitted)
		return ckpt_fail(CKPT_E_STATE, "tag '%.40s': checkpoint %llu was already submitted", tag,
				 (unsigned long long)sv->step);
	const char *have = "";
	for (size_t i = 0; i < sv->nmeta; i++)
		if (!strcmp(sv->meta[i].key, CKPT_TAGS_KEY))
			have = sv->meta[i].value;
	char list[CKPT_TAGS_MAX * (CKPT_TAG_MAX + 1)];
	int rc = tags_add(have, tag, list, sizeof list);
	return rc ? rc : meta_put(sv, CKPT_TAGS_KEY, strlen(CKPT_TAGS_KEY), list, strlen(list));
}

/* The commit time recorded in the manifest. In test builds only (CKPT_TEST_HOOKS: the tests'
 * archive and ckptctl), CKPT_TEST_COMMIT_TIME=UNIX_SECONDS replaces it, so that tests of time-based
 * retention (prune --keep-daily ...) can make checkpoints of any date. */
static int64_t commit_time_ns(void)
{
#ifdef CKPT_TEST_HOOKS
	const char *e = getenv("CKPT_TEST_COMMIT_TIME");
	if (e && *e)
		return (int64_t)strtoll(e, NULL, 10) * 1000000000;
#endif
	return ckpt_wall_ns();
}

/* The pipeline's commit callback (on a worker, every pack durable): the manifest from the
 * chunk table and references the pipeline built. */
static int save_commit(struct pipe_save *ps, bool *keep_packs)
{
	struct save1 *sv = (struct save1 *)(void *)((char *)ps - offsetof(struct save1, ps));
	struct ckpt_store *s = sv->s;
	struct manifest m = {
		.version = CKPT_FORMAT_VERSION, .step = sv->step, .time_ns = commit_time_ns(),
		.chunk_size = sv->chunk_size, .new_bytes = ps->st.bytes_written,
		.n_meta = (uint32_t)sv->nmeta, .n_tensors = (uint32_t)sv->nt,
		.n_chunks = (uint32_t)ps->nchunks, .n_refs = ps->nchunks_total,
		.meta = sv->meta, .chunks = ps->chunks, .refs = ps->refs,
	};
	memcpy(m.uuid, s->hdr.uuid, 16);
	m.tensors = calloc(sv->nt ? sv->nt : 1, sizeof *m.tensors);
	if (!m.tensors)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; i < sv->nt; i++) {
		const struct pipe_tensor *t = &sv->t[i];
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
		int renamed;
		if (s->lock.part_mode) /* a rank's part: visible only through the global manifest */
			rc = dist_write_part(s, sv->step, buf, len, &renamed);
		else
			rc = io_write_atomic(s->layout.mf_dir, name, buf, len, &renamed);
		if (rc && renamed && !s->lock.part_mode) {
			/* The manifest is visible but its directory entry may not be durable: the save
			 * reports failure, so take the manifest back. Its packs go too once the removal
			 * is durable; otherwise they stay (garbage for gc) in case the entry survives. */
			char p[4096];
			snprintf(p, sizeof p, "%s/%s", s->layout.mf_dir, name);
			unlink(p);
			*keep_packs = io_fsync_dir(s->layout.mf_dir) != 0;
		}
	}
	free(buf);
	free(m.tensors);
	if (!rc && !s->lock.part_mode)
		store_notify_commit(s, sv->step); /* a remote's background upload (lib/tier) */
	return rc;
}
