/* Push of one checkpoint to the remote (tier.h): header, the packs the remote lacks (several in
 * parallel, each checked by size afterwards), parts, manifest last. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "format/format.h"
#include "io/io.h"
#include "tier/tier.h"

/* Opens local pack id from whichever pack directory holds it (never through a link). Returns
 * the fd and sets *size and path, or -CKPT_E_* (-CKPT_E_NOTFOUND naming the pack). */
static int open_local_pack(struct ckpt_store *s, uint32_t id, uint64_t *size, char *path,
			   size_t plen)
{
	for (unsigned d = 0; d < s->layout.ndirs; d++) {
		store_pack_path(s, d, id, path, plen);
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (fd < 0 && errno == ENOENT)
			continue;
		if (fd < 0)
			return ckpt_fail(ckpt_errno_code(errno), "open %s: %s", path, strerror(errno));
		if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
			close(fd);
			return ckpt_fail(CKPT_E_CORRUPT, "%s: not a plain file", path);
		}
		*size = (uint64_t)st.st_size;
		return fd;
	}
	store_pack_path(s, 0, id, path, plen);
	return ckpt_fail(CKPT_E_NOTFOUND, "pack %s is missing locally", path);
}

int tier_ensure_hdr(struct ckpt_store *s, const struct tier_ref *t)
{
	uint8_t mine[STORE_HDR_LEN], theirs[STORE_HDR_LEN];
	store_hdr_encode(&s->hdr, mine);
	char key[256];
	tier_key_hdr(t, key, sizeof key);
	struct rmt_src src = {.buf = mine, .len = sizeof mine};
	int rc = t->r->ops->put(t->r, key, &src, RMT_PUT_NOREPLACE, NULL, NULL);
	if (rc != -CKPT_E_EXISTS)
		return rc;
	if ((rc = t->r->ops->get(t->r, key, 0, sizeof theirs, theirs)))
		return rc;
	if (memcmp(mine, theirs, sizeof mine))
		return ckpt_fail(CKPT_E_CORRUPT, "remote %s: %s is not the header of store %s (%s)",
				 t->r->url, key, s->path, "another store with the same id?");
	return 0;
}

/* Whether the remote's pack (key, rsize bytes) holds exactly the bytes of local pack fd (size
 * bytes), read 8 MiB at a time: for packs without a nonce only (written before them), whose
 * header does not tell two writers' packs apart. 1 the same, 0 not, or -CKPT_E_*. */
static int same_whole(const struct tier_ref *t, const char *key, int fd, uint64_t size,
		      const char *path)
{
	enum { STEP = 8u << 20 };
	uint8_t *a = malloc(STEP), *b = malloc(STEP);
	int rc = a && b ? 1 : ckpt_fail(CKPT_E_NOMEM, "out of memory (comparing %s)", key);
	for (uint64_t off = 0; rc == 1 && off < size; off += STEP) {
		size_t n = (size_t)MIN((uint64_t)STEP, size - off);
		if (!(rc = io_read_all(&ckpt_io_psync, fd, a, n, off, path)) &&
		    !(rc = t->r->ops->get(t->r, key, off, n, b)))
			rc = !memcmp(a, b, n);
	}
	free(a);
	free(b);
	return rc;
}

/* The error for another writer's pack under our id: both named, with the writers recorded. */
static int not_ours(const struct tier_ref *t, uint32_t id, const char *key, uint64_t rsize,
		    const char *path, uint64_t size)
{
	char who[2048];
	tier_describe_writers(t, who, sizeof who);
	return ckpt_fail(CKPT_E_CORRUPT, "remote pack %s (%" PRIu64 " bytes) is not local pack %s "
			 "(%" PRIu64 " bytes): two writers of store %s have used pack id %u (a "
			 "second store adopted from this remote, or a copied store directory); the "
			 "remote's pack is kept, since its checkpoints may name it. Writers recorded: "
			 "%s. Keep one writer: pull what this one needs into a new directory and "
			 "stop the other", key, rsize, path, size, t->id, id, who);
}

/* Whether the remote holds pack id, the local pack fd: absent (0), present (1: the same size,
 * the same header, whose nonce is drawn when a pack is written, and the same first record
 * header; a pack written before nonces compared whole), or -CKPT_E_* (present but another pack:
 * never replaced, since remote manifests may reference it). */
static int remote_has_pack(const struct tier_ref *t, uint32_t id, int fd, uint64_t size,
			   const char *path)
{
	char key[256];
	tier_key_pack(t, id, key, sizeof key);
	uint64_t rsize;
	int rc = t->r->ops->stat(t->r, key, &rsize, NULL);
	if (rc == -CKPT_E_NOTFOUND)
		return 0;
	if (rc)
		return rc;
	uint8_t a[PACK_HDR_LEN + REC_HDR_LEN], b[PACK_HDR_LEN + REC_HDR_LEN];
	size_t n = size >= sizeof a ? sizeof a : PACK_HDR_LEN;
	if (rsize == size && size >= PACK_HDR_LEN &&
	    !(rc = io_read_all(&ckpt_io_psync, fd, a, n, 0, path)) &&
	    !(rc = t->r->ops->get(t->r, key, 0, n, b)) && !memcmp(a, b, n)) {
		if (get_le64(a + 48)) /* the nonce: these bytes are this pack's */
			return 1;
		if ((rc = same_whole(t, key, fd, size, path)) != 0)
			return rc;
	}
	if (rc)
		return rc;
	return not_ours(t, id, key, rsize, path, size);
}

/* The packs of one push, shared by its threads (tier_parallel). */
struct push_job {
	struct ckpt_store *s;
	const struct tier_ref *t;
	const uint32_t *ids;
	pthread_mutex_t mu; /* done, st, progress calls */
	uint64_t done, total;
	ckpt_remote_stats *st;
	rmt_progress_cb progress;
	void *arg;
	const bool *cancel;
};

struct put_prog {
	struct push_job *j;
	uint64_t last;
};

/* A put's progress, added to the push's (under the job's lock); non-zero cancels the put. */
static int put_progress(void *arg, uint64_t done, uint64_t total)
{
	struct put_prog *p = arg;
	struct push_job *j = p->j;
	pthread_mutex_lock(&j->mu);
	j->done += done - p->last;
	p->last = done;
	int stop = j->cancel && __atomic_load_n(j->cancel, __ATOMIC_ACQUIRE);
	if (!stop && j->progress)
		stop = j->progress(j->arg, j->done, j->total);
	pthread_mutex_unlock(&j->mu);
	return stop;
}

/* Sends pack ids[i] unless the remote has it, then checks the remote's size. */
static int push_pack(void *ctx, size_t i)
{
	struct push_job *j = ctx;
	uint32_t id = j->ids[i];
	char path[4096], key[256];
	uint64_t size = 0;
	int fd = open_local_pack(j->s, id, &size, path, sizeof path);
	if (fd < 0)
		return fd;
	int rc = remote_has_pack(j->t, id, fd, size, path);
#ifdef CKPT_TEST_HOOKS
	if (rc == 0 && tier_test_hook)
		tier_test_hook("push-pack-put");
#endif
	if (rc == 0) {
		/* Never replacing: another writer may have put its pack N since the look above, and
		 * a remote manifest may name it by then. */
		tier_key_pack(j->t, id, key, sizeof key);
		struct rmt_src src = {.fd = fd, .len = size};
		struct put_prog pp = {.j = j};
		rc = j->t->r->ops->put(j->t->r, key, &src, RMT_PUT_NOREPLACE, put_progress, &pp);
		uint64_t rsize = 0;
		if (rc == -CKPT_E_EXISTS && (rc = remote_has_pack(j->t, id, fd, size, path)) == 1)
			rc = 0; /* the same pack, put meanwhile (a push of this store resumed twice) */
		else if (!rc && !(rc = j->t->r->ops->stat(j->t->r, key, &rsize, NULL)) &&
			 rsize != size)
			rc = ckpt_fail(CKPT_E_IO, "remote pack %s: %" PRIu64 " bytes after the put of %"
				       PRIu64, key, rsize, size);
		pthread_mutex_lock(&j->mu);
		if (!rc)
			j->st->packs_sent++, j->st->bytes_sent += size;
		pthread_mutex_unlock(&j->mu);
	} else if (rc == 1) {
		pthread_mutex_lock(&j->mu);
		j->st->packs_present++, j->st->bytes_present += size;
		j->done += size;
		pthread_mutex_unlock(&j->mu);
		rc = 0;
	}
	close(fd);
	return rc;
}

/* The sizes of the packs to consider, for the progress total. */
static uint64_t local_bytes(struct ckpt_store *s, const uint32_t *ids, size_t n)
{
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		for (unsigned d = 0; d < s->layout.ndirs; d++) {
			store_pack_path(s, d, ids[i], path, sizeof path);
			if (!lstat(path, &st)) {
				sum += (uint64_t)st.st_size;
				break;
			}
		}
	}
	return sum;
}

/* Puts the local file path at key (parts and manifests: small) unless key holds its bytes
 * already (the put is then skipped: no object is sent twice). Another object at key: the
 * manifest (replace false) fails with -CKPT_E_EXISTS; a part (replace true: a stale one of a save
 * of that step that never reached the remote) is replaced. Returns 0 or -CKPT_E_*. */
static int put_file(const struct tier_ref *t, const char *path, const char *key, bool replace)
{
	uint8_t *buf;
	size_t len;
	int rc = io_slurp(path, MF_MAX_LEN, &buf, &len);
	if (rc)
		return rc;
	struct rmt_src src = {.buf = buf, .len = len};
	rc = t->r->ops->put(t->r, key, &src, RMT_PUT_NOREPLACE, NULL, NULL);
	if (rc == -CKPT_E_EXISTS) {
		uint8_t *theirs;
		uint64_t tl;
		if (!(rc = tier_get_all(t, key, MF_MAX_LEN, &theirs, &tl))) {
			bool same = tl == len && !memcmp(buf, theirs, len);
			if (!same && replace)
				rc = t->r->ops->put(t->r, key, &src, 0, NULL, NULL);
			else if (!same)
				rc = ckpt_fail(CKPT_E_EXISTS, "remote %s holds another checkpoint of "
					       "that step than %s", key, path);
			free(theirs);
		}
	}
	free(buf);
	return rc;
}

int tier_put_part(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, unsigned rank)
{
	char path[4096], key[256];
	dist_part_path(s, step, (int)rank, path, sizeof path);
	tier_key_part(t, step, rank, key, sizeof key);
	return put_file(t, path, key, true);
}

int tier_check_present(const struct tier_ref *t, const uint32_t *ids, size_t n)
{
	char key[256];
	uint64_t size;
	for (size_t i = 0; i < n; i++) {
		tier_key_pack(t, ids[i], key, sizeof key);
		int rc = t->r->ops->stat(t->r, key, &size, NULL);
		if (rc == -CKPT_E_NOTFOUND)
			return ckpt_fail(CKPT_E_IO, "remote pack %s vanished during the push (a remote "
					 "gc?): push again", key);
		if (rc)
			return rc;
	}
	return 0;
}

/* The part files of a multi-rank checkpoint, then (every pack checked there still: a remote gc
 * that began before this push's marker may have taken one it found present) its manifest. */
static int push_tail(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m,
		     const uint32_t *ids, size_t n)
{
	char path[4096], key[256], name[64];
	unsigned world = tier_world(m);
	int rc = tier_check_present(t, ids, n);
	for (unsigned rank = 0; !rc && rank < world; rank++)
		rc = tier_put_part(s, t, m->step, rank);
	if (rc)
		return rc;
	store_mf_name(m->step, name, sizeof name);
	snprintf(path, sizeof path, "%s/%s", s->layout.mf_dir, name);
	tier_key_mf(t, m->step, key, sizeof key);
	return put_file(t, path, key, false);
}

int tier_push_packs(struct ckpt_store *s, const struct tier_ref *t, const uint32_t *ids, size_t n,
		    ckpt_remote_stats *st, rmt_progress_cb progress, void *arg, const bool *cancel)
{
	struct push_job j = {.s = s, .t = t, .ids = ids, .st = st, .progress = progress,
			     .arg = arg, .cancel = cancel, .total = local_bytes(s, ids, n)};
	struct tier_par par = {.one = push_pack, .ctx = &j, .n = n, .cancel = cancel};
	pthread_mutex_init(&j.mu, NULL);
	int rc = tier_parallel(&par, t->r->cfg.parallel);
	pthread_mutex_destroy(&j.mu);
	return rc;
}

void tier_unmark_keep_error(const struct tier_ref *t, const char *mark, int rc)
{
	if (!*mark)
		return;
	char msg[1024];
	snprintf(msg, sizeof msg, "%s", ckpt_errmsg());
	tier_unmark_upload(t, mark);
	if (rc) /* the push's own message, whatever the marker's removal said */
		ckpt_fail(-rc, "%s", msg);
}

/* Whether a and b are one checkpoint whose chunks may sit in other packs: a local compaction
 * rewrites a manifest's pack ids and offsets, and nothing else. */
static bool same_content(const struct manifest *a, const struct manifest *b)
{
	if (a->step != b->step || a->time_ns != b->time_ns || a->n_meta != b->n_meta ||
	    a->n_tensors != b->n_tensors || a->n_chunks != b->n_chunks || a->n_refs != b->n_refs ||
	    memcmp(a->refs, b->refs, a->n_refs * sizeof *a->refs))
		return false;
	for (uint32_t i = 0; i < a->n_chunks; i++)
		if (!ckpt_digest_eq(&a->chunks[i].digest, &b->chunks[i].digest) ||
		    a->chunks[i].raw_len != b->chunks[i].raw_len)
			return false;
	for (uint32_t i = 0; i < a->n_meta; i++)
		if (a->meta[i].klen != b->meta[i].klen || a->meta[i].vlen != b->meta[i].vlen ||
		    memcmp(a->meta[i].key, b->meta[i].key, a->meta[i].klen) ||
		    memcmp(a->meta[i].value, b->meta[i].value, a->meta[i].vlen))
			return false;
	for (uint32_t i = 0; i < a->n_tensors; i++) {
		const struct mf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
		if (x->name_len != y->name_len || memcmp(x->name, y->name, x->name_len) ||
		    x->dtype != y->dtype || x->ndim != y->ndim || x->nbytes != y->nbytes ||
		    x->first_ref != y->first_ref || x->nrefs != y->nrefs ||
		    memcmp(x->shape, y->shape, x->ndim * sizeof *x->shape))
			return false;
	}
	return true;
}

/* The remote's copy of checkpoint m, looked at before anything is sent, so that a push that
 * cannot succeed leaves no pack behind: 0 none, or the same bytes (the usual push: what is
 * missing is sent); 1 the same checkpoint under other pack ids (pushed before a local
 * compaction), whose packs are all there: nothing to send; -CKPT_E_EXISTS another checkpoint of
 * that step; or the error of a damaged one (never replaced). */
static int remote_copy(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m)
{
	struct manifest rm;
	uint8_t *raw, *mine = NULL;
	uint64_t rawlen;
	size_t mylen = 0;
	char path[4096], name[64];
	int rc = tier_fetch_manifest(t, s->hdr.uuid, m->step, &rm, &raw, &rawlen);
	if (rc == -CKPT_E_NOTFOUND)
		return 0;
	if (rc)
		return rc;
	store_mf_name(m->step, name, sizeof name);
	snprintf(path, sizeof path, "%s/%s", s->layout.mf_dir, name);
	if ((rc = io_slurp(path, MF_MAX_LEN, &mine, &mylen)) == 0) {
		uint32_t *ids = NULL;
		long n;
		if (mylen == rawlen && !memcmp(mine, raw, mylen))
			rc = 0;
		else if (!same_content(m, &rm))
			rc = ckpt_fail(CKPT_E_EXISTS, "the remote holds another checkpoint %" PRIu64
				       " of store %s than %s", m->step, t->id, path);
		else if ((n = tier_packs_of(&rm, &ids)) < 0)
			rc = (int)n;
		else if (!(rc = tier_check_present(t, ids, (size_t)n)))
			rc = 1;
		free(ids);
	}
	free(mine);
	free(raw);
	manifest_free(&rm);
	return rc;
}

/* Packs first, then the tail. A gc seen after this push's marker was put may not have seen the
 * marker, and may delete a pack found present here: the push waits for that gc to end, then
 * looks at (and sends) its packs again before the manifest names them. */
static int push_body(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m,
		     const uint32_t *ids, size_t n, ckpt_remote_stats *st, rmt_progress_cb progress,
		     void *arg, const bool *cancel)
{
	struct tier_gc_seen gcs = {0};
	int rc = tier_gc_look(t, &gcs);
	if (!rc)
		rc = tier_push_packs(s, t, ids, n, st, progress, arg, cancel);
	if (!rc && gcs.n && !(rc = tier_gc_wait(t, &gcs, cancel))) {
		ckpt_remote_stats again = {0};
		rc = tier_push_packs(s, t, ids, n, &again, NULL, NULL, cancel);
		st->packs_sent += again.packs_sent, st->bytes_sent += again.bytes_sent;
	}
	return rc ? rc : push_tail(s, t, m, ids, n);
}

int tier_push(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, ckpt_remote_stats *st,
	      rmt_progress_cb progress, void *arg, const bool *cancel)
{
	ckpt_remote_stats local = {0};
	if (!st)
		st = &local;
	*st = (ckpt_remote_stats){0};
	struct manifest m;
	int rc = store_load_manifest(s, step, &m);
	if (rc)
		return rc;
	uint32_t *ids = NULL;
	long n = tier_packs_of(&m, &ids);
	if (n < 0) {
		manifest_free(&m);
		return (int)n;
	}
	char mark[256] = "";
	if (!(rc = tier_ensure_hdr(s, t)) && !(rc = tier_note_writer(s, t)) &&
	    !(rc = remote_copy(s, t, &m)) && !(rc = tier_mark_upload(t, mark, sizeof mark)))
		rc = push_body(s, t, &m, ids, (size_t)n, st, progress, arg, cancel);
	rc = rc ? rc : tier_put_info(s, t); /* who pushed: what a replacement node lists */
	tier_unmark_keep_error(t, mark, rc);
	if (rc == 1) { /* there already, under the pack ids of before a compaction */
		st->packs_present = (uint64_t)n;
		rc = 0;
	}
	if (rc)
		ckpt_fail_prefix("push of checkpoint %" PRIu64 " to %s", step, t->r->url);
	free(ids);
	manifest_free(&m);
	return rc;
}
