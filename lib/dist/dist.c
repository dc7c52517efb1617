/* Multi-rank saves: a layer over the single-process save. Each rank saves an ordinary manifest
 * (its "part") into STORE/parts/<step>/<rank>.part with packs in its own id range, under the
 * store's lock taken shared; rank 0 merges the parts into one global manifest (format version 2)
 * after an allgather says every part is durable, and that one rename is the commit.
 *
 * The global manifest is an ordinary manifest of the union of the parts' chunks, so the dedup
 * index, gc liveness, verify and du work on it unchanged: replicated tensors become ordinary
 * tensors (their pieces are whole chunks, concatenated in replica order); each shard of a sharded
 * tensor is a tensor "NAME@RANK" and the shard table lives in reserved metadata (docs/format.md,
 * "Format version 2"). The box reader is dist_read.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "dist/dist.h"
#include "dist/dist_layout.h"
#include "dist/dist_save.h"
#include "io/io.h"
#include "save/save.h"
#include "store/store.h"

/* Crash testing, in test builds only: CKPT_DIST_KILL_AT="RANK:N" kills rank RANK at the Nth
 * point of its multi-rank save (tests/unit/t-dist kills at every point in turn). */
#ifdef CKPT_TEST_HOOKS
void dist_kill_point(int rank)
{
	static long n;
	const char *e = getenv("CKPT_DIST_KILL_AT");
	char *end;
	if (e && strtol(e, &end, 10) == rank && *end == ':' && ++n == atol(end + 1))
		raise(SIGKILL);
}
#else
void dist_kill_point(int rank) { (void)rank; }
#endif


/* What each rank tells the others at begin: whether its part could begin, and what it saves. */
struct begin_msg {
	int32_t rc;
	uint32_t world;
	uint64_t step;
	uint64_t chunk_size;
	char msg[232];
};


/* Rank 0, after the global commit: which ranks upload their own packs to rank 0's remote. */
static void notify_rank0(dsave *d, const struct part_msg *all, size_t n, uint64_t key)
{
	bool *sharing = calloc(n, sizeof *sharing);
	if (!sharing) /* no one shares: rank 0's upload puts every pack itself */
		return store_notify_commit(d->s, d->step);
	for (size_t r = 0; r < n; r++)
		sharing[r] = key && all[r].upkey == key;
	store_notify_dist(d->s, d->step, 0, (unsigned)n, sharing);
	free(sharing);
}

void dist_free(dsave *d, bool committed)
{
	for (size_t i = 0; i < d->nkeys; i++)
		free(d->keys[i]);
	free(d->keys);
	dist_claim_release(d->s, d->step, d->claim_fd, committed);
	if (d->lock_fd >= 0)
		close(d->lock_fd);
	pthread_mutex_lock(&d->s->lock.mu);
	d->s->lock.part_mode = false;
	pthread_mutex_unlock(&d->s->lock.mu);
	free(d);
}

/* This rank's half of begin: its part save (the shared lock) and, on rank 0, the step's claim.
 * Returns 0 and sets *out, or an error (*out NULL). */
static int begin_local(ckpt_store *s, const ckpt_comm *comm, uint64_t step, dsave **out)
{
	dsave *d = calloc(1, sizeof *d);
	if (!d)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	/* One multi-rank save per handle at a time, and none beside a single-process one: the
	 * handle's mode decides which lock and which pack ids its saves take. */
	pthread_mutex_lock(&s->lock.mu);
	bool busy = s->lock.users > 0 || s->lock.part_mode;
	if (!busy) {
		s->lock.part_mode = true;
		s->lock.part_rank = (uint32_t)comm->rank;
	}
	pthread_mutex_unlock(&s->lock.mu);
	if (busy) {
		free(d);
		return ckpt_fail(CKPT_E_BUSY, "store %s: another save of this handle is in flight",
				 s->path);
	}
	*d = (dsave){.s = s, .comm = *comm, .step = step, .lock_fd = -1, .claim_fd = -1};
	int rc = save1_begin(s, step, &d->part);
	/* Our own shared hold on LOCK: the part save releases the store's when its part is
	 * durable, but gc must stay out until the global manifest names the part's packs. */
	if (!rc && (d->lock_fd = dup(s->lock.fd)) < 0)
		rc = ckpt_fail(ckpt_errno_code(errno), "dup lock of %s: %s", s->path, strerror(errno));
	if (!rc && comm->rank == 0)
		rc = dist_claim_step(s, step, (unsigned)comm->size, &d->claim_fd);
	if (rc) {
		save1_abort(d->part);
		dist_free(d, false);
		return rc;
	}
	*out = d;
	return 0;
}

static int comm_error(const ckpt_comm *c, uint64_t step, int rc, const char *what)
{
	const char *m = c->errmsg ? c->errmsg(c->ctx) : NULL;
	return ckpt_fail(rc < 0 ? -rc : CKPT_E_IO, "checkpoint %" PRIu64 ", rank %d: %s failed: %s",
			 step, c->rank, what, m ? m : ckpt_strerror(rc));
}

/* Every rank's begin, gathered: the first failure is every rank's, and the ranks must agree on
 * the step, the world and the chunk size before any of them writes data. */
static int begin_agree(const ckpt_comm *c, uint64_t step, const dsave *d, int rc)
{
	struct begin_msg mine = {.rc = rc, .world = (uint32_t)c->size, .step = step,
				 .chunk_size = d ? d->part->chunk_size : 0};
	if (rc)
		snprintf(mine.msg, sizeof mine.msg, "%s", ckpt_errmsg());
	struct begin_msg *all = calloc((size_t)c->size, sizeof *all);
	if (!all)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	int grc = c->allgather(c->ctx, &mine, sizeof mine, all);
	if (grc)
		rc = comm_error(c, step, grc, "gathering every rank's begin");
	for (int r = 0; r < c->size && !grc && !rc; r++)
		if (all[r].rc)
			rc = ckpt_fail(-all[r].rc, "checkpoint %" PRIu64 ": rank %d could not begin: "
				       "%.*s", step, r, (int)sizeof all[r].msg, all[r].msg);
	for (int r = 1; r < c->size && !grc && !rc; r++)
		if (all[r].step != all[0].step || all[r].world != all[0].world)
			rc = ckpt_fail(CKPT_E_INVAL, "distributed save: rank %d begins step %" PRIu64
				       " of %u ranks, rank 0 step %" PRIu64 " of %u", r, all[r].step,
				       all[r].world, all[0].step, all[0].world);
		else if (all[r].chunk_size != all[0].chunk_size)
			rc = ckpt_fail(CKPT_E_INVAL, "checkpoint %" PRIu64 ": rank %d's store handle "
				       "has chunk size %" PRIu64 ", rank 0's %" PRIu64 " (open the "
				       "store with the same options on every rank)", step, r,
				       all[r].chunk_size, all[0].chunk_size);
	free(all);
	return rc;
}

int dsave_begin(ckpt_store *s, const ckpt_comm *comm, uint64_t step,
				  dsave **out)
{
	*out = NULL;
	if (!s || !comm || !comm->allgather || !comm->broadcast)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL store or communicator");
	if (comm->size < 1 || comm->size > (int)DIST_MAX_RANKS || comm->rank < 0 ||
	    comm->rank >= comm->size)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: rank %d of %d (1 to %u ranks)",
				 comm->rank, comm->size, DIST_MAX_RANKS);
	dsave *d = NULL;
	int rc = begin_local(s, comm, step, &d);
	/* Collective even when this rank failed: the others must not wait for it at commit. */
	rc = begin_agree(comm, step, d, rc);
	if (rc && d) {
		save1_abort(d->part);
		dist_free(d, false);
	}
	if (!rc)
		*out = d;
	return rc;
}

static int add_key(dsave *d, const char *name, const char *value)
{
	char **k = realloc(d->keys, (d->nkeys + 2) * sizeof *k);
	if (!k)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	d->keys = k;
	size_t n = strlen(DIST_KEY) + strlen(name) + 1;
	if (!(k[d->nkeys] = malloc(n)) || !(k[d->nkeys + 1] = strdup(value))) {
		free(k[d->nkeys]);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	snprintf(k[d->nkeys], n, "%s%s", DIST_KEY, name);
	d->nkeys += 2;
	return 0;
}

/* Appends " v0 v1 ..." to buf (of size DIST_VAL_MAX). */
static void put_dims(char *buf, unsigned n, const uint64_t *v)
{
	size_t l = strlen(buf);
	for (unsigned i = 0; i < n && l < DIST_VAL_MAX; i++)
		l += (size_t)snprintf(buf + l, DIST_VAL_MAX - l, " %" PRIu64, v[i]);
}

/* A box of global tensor name. Piece 0 is the part's tensor name ("S" description); piece k > 0
 * of a flattened range is the tensor "name#k" ("P k" description), which the merge files under
 * name again (docs/format.md, "Format version 3"). */
static int add_box(dsave *d, const char *name, unsigned piece, ckpt_dtype dtype,
		   unsigned ndim, const uint64_t *gshape, const uint64_t *off,
		   const uint64_t *lshape, int mem, const void *data)
{
	if (!d || !name || ndim > 32 || (ndim && (!gshape || !off || !lshape)))
		return ckpt_fail(CKPT_E_INVAL, "distributed save: bad shard arguments");
	for (unsigned i = 0; i < ndim; i++)
		if (off[i] > gshape[i] || lshape[i] > gshape[i] - off[i])
			return ckpt_fail(CKPT_E_INVAL, "shard of %s: dimension %u, box at %" PRIu64
					 " of %" PRIu64 " outside the global extent %" PRIu64,
					 name, i, off[i], lshape[i], gshape[i]);
	char v[DIST_VAL_MAX], pname[4096];
	if (piece) {
		snprintf(v, sizeof v, "P %u %u", piece, ndim);
		if ((size_t)snprintf(pname, sizeof pname, "%s#%u", name, piece) >= sizeof pname)
			return ckpt_fail(CKPT_E_INVAL, "tensor name %.64s... is too long", name);
	} else {
		snprintf(v, sizeof v, "S %u", ndim);
	}
	put_dims(v, ndim, gshape);
	put_dims(v, ndim, off);
	const char *tn = piece ? pname : name;
	int rc = save1_add_tensor(d->part, tn, dtype, ndim, lshape, mem, data);
	return rc ? rc : add_key(d, tn, v);
}

int dsave_add_shard(dsave *d, const char *name, ckpt_dtype dtype,
				      unsigned ndim, const uint64_t *gshape, const uint64_t *off,
				      const uint64_t *lshape, int mem, const void *data)
{
	return add_box(d, name, 0, dtype, ndim, gshape, off, lshape, mem, data);
}

/* Replica `replica` of nrep's share of a box (piece as add_box). */
static int add_box_replica(dsave *d, const char *name, unsigned piece, ckpt_dtype dtype,
			   unsigned ndim, const uint64_t *gshape, const uint64_t *off,
			   const uint64_t *lshape, unsigned replica, unsigned nrep, int mem,
			   const void *data)
{
	size_t es = ckpt_dtype_size(dtype);
	if (!d || !name || ndim > 32 || (ndim && (!gshape || !off || !lshape)) || !es ||
	    replica >= nrep)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: bad replicated shard arguments "
				 "(replica %u of %u)", replica, nrep);
	/* The holders split the box along its first dimension longer than 1: the dimensions
	 * before it are 1, so each holder's rows are one contiguous run of data and a box of
	 * their own. Rows [n*i/R, n*(i+1)/R) go to replica i (none when R > n). */
	unsigned k = 0;
	while (k < ndim && lshape[k] <= 1)
		k++;
	uint64_t vol = 1;
	for (unsigned i = 0; i < ndim; i++)
		vol *= lshape[i];
	if (k == ndim || vol == 0) /* one element, or none: replica 0 saves it whole */
		return replica ? 0 : add_box(d, name, piece, dtype, ndim, gshape, off, lshape,
					     mem, data);
	uint64_t n = lshape[k], r0 = n * replica / nrep, r1 = n * (replica + 1) / nrep;
	if (r1 <= r0)
		return 0;
	uint64_t soff[32], sshape[32], row = es;
	for (unsigned i = 0; i < ndim; i++) {
		soff[i] = off[i];
		sshape[i] = lshape[i];
		if (i > k)
			row *= lshape[i];
	}
	if (off[k] > gshape[k] || n > gshape[k] - off[k])
		return add_box(d, name, piece, dtype, ndim, gshape, off, lshape, mem,
			       data); /* names the bad box */
	soff[k] += r0;
	sshape[k] = r1 - r0;
	return add_box(d, name, piece, dtype, ndim, gshape, soff, sshape, mem,
		       (const uint8_t *)data + r0 * row);
}

int dsave_add_shard_replica(dsave *d, const char *name,
					      ckpt_dtype dtype, unsigned ndim, const uint64_t *gshape,
					      const uint64_t *off, const uint64_t *lshape,
					      unsigned replica, unsigned nrep, int mem,
					      const void *data)
{
	return add_box_replica(d, name, 0, dtype, ndim, gshape, off, lshape, replica, nrep, mem,
			       data);
}

int dsave_add_range(dsave *d, const char *name, ckpt_dtype dtype,
				      unsigned ndim, const uint64_t *gshape, uint64_t offset,
				      uint64_t count, unsigned replica, unsigned nrep, int mem,
				      const void *data)
{
	size_t es = ckpt_dtype_size(dtype), nb;
	struct dist_range_box b[DIST_RANGE_MAX_BOXES];
	char what[160];
	if (!d || !name || (ndim && !gshape) || !es || replica >= nrep || (count && !data))
		return ckpt_fail(CKPT_E_INVAL, "distributed save: bad flattened range arguments "
				 "(replica %u of %u)", replica, nrep);
	snprintf(what, sizeof what, "flattened range of %.100s", name);
	int rc = dist_range_boxes(what, ndim, gshape, offset, count, b, &nb);
	/* Each box is a contiguous run of the range: a shard of its own, split among the
	 * replicas as any box is. Piece numbers follow the boxes, so the same range makes the
	 * same pieces (and chunks) at every save. */
	for (size_t i = 0; i < nb && !rc; i++)
		rc = add_box_replica(d, name, (unsigned)i, dtype, ndim, gshape, b[i].off, b[i].len,
				     replica, nrep, mem, (const uint8_t *)data + b[i].elem * es);
	return rc;
}

int dsave_add_replicated(dsave *d, const char *name, ckpt_dtype dtype,
					   unsigned ndim, const uint64_t *shape, unsigned replica,
					   unsigned nrep, int mem, const void *data)
{
	size_t es = ckpt_dtype_size(dtype);
	if (!d || !name || ndim > 32 || (ndim && !shape) || !es || replica >= nrep)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: bad replicated tensor arguments "
				 "(replica %u of %u)", replica, nrep);
	uint64_t nbytes = es;
	for (unsigned i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(nbytes, shape[i], &nbytes))
			return ckpt_fail(CKPT_E_INVAL, "replicated tensor %s is too large", name);
	/* Replica i saves chunks [nc*i/R, nc*(i+1)/R): whole chunks, so that the pieces'
	 * references concatenate into the tensor's (the chunk size divides by every dtype size). */
	uint64_t cs = d->part->chunk_size, nc = (nbytes + cs - 1) / cs;
	uint64_t c0 = nc * replica / nrep, c1 = nc * (replica + 1) / nrep;
	uint64_t b0 = c0 * cs, b1 = MIN(c1 * cs, nbytes);
	if (b1 <= b0 && !(replica == 0 && nbytes == 0))
		return 0; /* more replicas than chunks: nothing for this one */
	char v[DIST_VAL_MAX];
	snprintf(v, sizeof v, "R %u", ndim);
	put_dims(v, ndim, shape);
	put_dims(v, 1, &b0);
	uint64_t n = (b1 - b0) / es;
	int rc = save1_add_tensor(d->part, name, dtype, 1, &n, mem,
				      (const uint8_t *)data + b0);
	return rc ? rc : add_key(d, name, v);
}

int dsave_set_meta(dsave *d, const char *key, const char *value)
{
	if (!d || !key)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL metadata key");
	if (!strncmp(key, DIST_KEY, strlen(DIST_KEY)))
		return ckpt_fail(CKPT_E_INVAL, "metadata key %s: keys starting %s are reserved", key,
				 DIST_KEY);
	if (d->submitted)
		return dist_late_meta(d, key, value);
	return save1_set_meta(d->part, key, value);
}

int dsave_add_tag(dsave *d, const char *tag)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (d->submitted)
		return ckpt_fail(CKPT_E_STATE, "tag '%.40s': checkpoint %" PRIu64 " was already "
				 "submitted (tags are added before submit)", tag ? tag : "", d->step);
	return save1_add_tag(d->part, tag);
}

/* Adds the reserved metadata and submits the part's save (kill point 1). Returns 0 or the error
 * (the part is then gone). */
int dist_submit_part(dsave *d)
{
	int rc = 0;
	for (size_t i = 0; i < d->nkeys && !rc; i += 2)
		rc = save1_set_meta(d->part, d->keys[i], d->keys[i + 1]);
	dist_kill_point(d->comm.rank);
	if (!rc)
		rc = save1_submit(d->part);
	if (rc) {
		save1_abort(d->part);
		d->part = NULL;
	}
	return rc;
}

/* Waits until this rank's part is durable (kill point 2) and describes it in *m (rc, size,
 * trailer checksum); rc is submit's failure, or 0. */
static void finish_part(dsave *d, int rc, ckpt_stats *st, struct part_msg *m)
{
	if (d->part)
		rc = save1_wait(d->part, st);
	d->part = NULL;
	dist_kill_point(d->comm.rank);
	char p[4096];
	dist_part_path(d->s, d->step, d->comm.rank, p, sizeof p);
	uint8_t *buf = NULL;
	size_t len = 0;
	if (!rc)
		rc = io_slurp(p, MF_MAX_LEN, &buf, &len);
	if (!rc && len < 16)
		rc = ckpt_fail(CKPT_E_CORRUPT, "part %s is truncated", p);
	m->rc = rc;
	if (rc)
		snprintf(m->msg, sizeof m->msg, "%s", ckpt_errmsg());
	else {
		m->size = len;
		memcpy(m->digest, buf + len - 16, 16);
	}
	free(buf);
}

/* After the allgather: the first failed rank's error, or 0. */
static int gathered_error(const dsave *d, const struct part_msg *all)
{
	for (int r = 0; r < d->comm.size; r++)
		if (all[r].rc)
			return ckpt_fail(-all[r].rc, "checkpoint %" PRIu64 ": rank %d failed: %.*s",
					 d->step, r, (int)sizeof all[r].msg, all[r].msg);
	return 0;
}

int dist_commit_all(dsave *d, ckpt_stats *st, struct part_msg *mine)
{
	size_t n = (size_t)d->comm.size;
	struct part_msg *all = calloc(n, sizeof *all);
	if (!all)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	uint64_t key = store_upload_key(d->s);
	mine->upkey = key;
	int rc = d->comm.allgather(d->comm.ctx, mine, sizeof *mine, all);
	if (rc) {
		rc = comm_error(&d->comm, d->step, rc, "gathering the parts' outcome");
		free(all);
		return rc;
	}
	dist_kill_point(d->comm.rank);
	struct part_msg out = {0};
	if (d->comm.rank == 0) {
		rc = gathered_error(d, all);
		if (!rc) {
			struct dist_part_sum *sums = calloc(n, sizeof *sums);
			if (!sums)
				rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
			for (size_t r = 0; r < n && sums; r++) {
				sums[r].size = all[r].size;
				memcpy(sums[r].digest, all[r].digest, 16);
			}
			if (sums)
				rc = dist_write_global(d->s, d->step, (unsigned)n, sums,
						       dist_late_list(d), dist_late_count(d), d->comm.rank,
						       dist_kill_point);
			if (!rc) /* every rank's packs are durable: the remote may take them */
				notify_rank0(d, all, n, key);
			free(sums);
		}
		out.rc = rc;
		out.upkey = key;
		if (rc)
			snprintf(out.msg, sizeof out.msg, "%s", ckpt_errmsg());
	}
	free(all);
	int brc = d->comm.broadcast(d->comm.ctx, &out, sizeof out, 0);
	if (brc)
		return comm_error(&d->comm, d->step, brc, "receiving the commit's outcome from rank 0");
	if (d->comm.rank != 0 && out.rc)
		return ckpt_fail(-out.rc, "checkpoint %" PRIu64 ": rank 0 could not commit: %.*s",
				 d->step, (int)sizeof out.msg, out.msg);
	if (d->comm.rank != 0 && key && out.upkey == key) /* rank 0 finishes what we upload */
		store_notify_dist(d->s, d->step, d->comm.rank, (unsigned)n, NULL);
	(void)st;
	return out.rc;
}

/* After a multi-rank save that made no checkpoint: the chunks this rank's part wrote are in the
 * handle's dedup index (its part committed) but no manifest names them, so gc may remove them;
 * the next save must not reuse them. The index is rebuilt from the manifests at its next use
 * (rare: only after a failure). */
void dist_forget_part(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->index.mu);
	s->index.valid = false;
	pthread_mutex_unlock(&s->index.mu);
}

/* The rest of a save after submit: the part durable, the exchange, rank 0's commit. */
int dist_finish(dsave *d, ckpt_stats *st)
{
	struct part_msg mine = {0};
	finish_part(d, d->submit_rc, st, &mine);
	if (d->deferred)
		dist_await_release(d, &mine);
	int rc = dist_commit_all(d, st, &mine);
	if (rc)
		dist_forget_part(d->s);
	return rc;
}

int dsave_commit(dsave *d, ckpt_stats *st)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (d->submitted)
		return ckpt_fail(CKPT_E_STATE, "checkpoint %" PRIu64 " was submitted: wait for it with "
				 "dsave_wait()", d->step);
	d->submit_rc = dist_submit_part(d);
	int rc = dist_finish(d, st);
	dist_free(d, !rc);
	return rc;
}
