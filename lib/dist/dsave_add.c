/* The add phase of a multi-rank save (dsave.c walks them all): this rank's shards, replicated
 * tensors and flattened ranges go into its part as ordinary tensors, each with a reserved
 * description (DIST_KEY NAME) that rank 0's merge reads back; metadata and tags go into the
 * part, and after a CKPT_SAVE_DEFER submit metadata is kept for the global manifest until the
 * release (the late metadata). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist.h"
#include "dist/dist_layout.h"
#include "dist/dist_save.h"
#include "format/format.h"
#include "save/save.h"

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

/* Metadata set after a deferred submit: kept for the global manifest (rank 0's), replacing an
 * entry of the same key, until the commit's exchange begins. */
static int late_meta(dsave *d, const char *key, const char *value)
{
	struct async_commit *ac = d->ac;
	enum dsave_defer defer;
	dist_state(d, &defer);
	if (defer == DSAVE_NOT_DEFERRED || !ac)
		return ckpt_fail(CKPT_E_STATE, "metadata '%s': checkpoint %" PRIu64 " was already "
				 "submitted (after submit only a CKPT_SAVE_DEFER save takes metadata, "
				 "until dsave_release)", key, d->step);
	if (!*key || !value || !strcmp(key, CKPT_TAGS_KEY))
		return ckpt_fail(CKPT_E_INVAL, "metadata: key must be a non-empty string other than "
				 "%s, value a string", CKPT_TAGS_KEY);
	char *k = strdup(key), *v = strdup(value);
	int rc = k && v ? 0 : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	pthread_mutex_lock(&d->mu);
	if (!rc && (d->defer == DSAVE_RELEASED || d->state >= DSAVE_EXCHANGE))
		rc = ckpt_fail(CKPT_E_STATE, "metadata '%s': checkpoint %" PRIu64 " was released "
			       "for its commit already", key, d->step);
	size_t i = 0;
	while (!rc && i < ac->nlate && strcmp(ac->late[i], key))
		i += 2;
	if (!rc && i == ac->nlate) {
		char **n = realloc(ac->late, (ac->nlate + 2) * sizeof *n);
		if (n) {
			ac->late = n;
			ac->late[i] = NULL;
			ac->late[i + 1] = NULL;
			ac->nlate += 2;
		} else
			rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	if (!rc) {
		free(ac->late[i]);
		free(ac->late[i + 1]);
		ac->late[i] = k;
		ac->late[i + 1] = v;
		k = v = NULL;
	}
	pthread_mutex_unlock(&d->mu);
	free(k);
	free(v);
	return rc;
}

int dsave_set_meta(dsave *d, const char *key, const char *value)
{
	if (!d || !key)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL metadata key");
	if (!strncmp(key, DIST_KEY, strlen(DIST_KEY)))
		return ckpt_fail(CKPT_E_INVAL, "metadata key %s: keys starting %s are reserved", key,
				 DIST_KEY);
	if (dist_state(d, NULL) != DSAVE_OPEN)
		return late_meta(d, key, value);
	return save1_set_meta(d->part, key, value);
}

int dsave_add_tag(dsave *d, const char *tag)
{
	if (!d)
		return ckpt_fail(CKPT_E_INVAL, "distributed save: NULL save");
	if (dist_state(d, NULL) != DSAVE_OPEN)
		return ckpt_fail(CKPT_E_STATE, "tag '%.40s': checkpoint %" PRIu64 " was already "
				 "submitted (tags are added before submit)", tag ? tag : "", d->step);
	return save1_add_tag(d->part, tag);
}
