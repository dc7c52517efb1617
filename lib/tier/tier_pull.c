/* Pull of one checkpoint from the remote into the local store (tier.h), and the binding of a fresh
 * local store to a remote store (tier_adopt). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "dist/dist.h"
#include "format/codec.h"
#include "format/format.h"
#include "io/io.h"
#include "read/reader.h"
#include "tier/tier.h"

#define PIECE (8u << 20) /* bytes of one ranged read of a pack (as aws s3 cp's 8 MiB parts) */
#define PULL_BATCH 64    /* packs downloaded at once: their temporary files are open */

/* A pack the checkpoint references. */
struct pull_pack {
	uint32_t id;
	bool present;               /* local already */
	uint64_t size;              /* on the remote */
	char key[256], tmp[4096];
	int fd;                     /* the temporary file, -1 when none */
	const struct mf_chunk **c;  /* the records the manifest references in it, by offset */
	size_t nc;
};

/* One ranged read: [off, off + len) of a pack, holding its records c[first, last) whole. */
struct pull_piece {
	struct pull_pack *p;
	uint64_t off, len;
	size_t first, last;
};

/* The scratch of one read in flight: its buffer, a decoder, one chunk's decoded bytes. */
struct pull_slot {
	struct pull_slot *next;
	uint8_t *buf, *out;
	size_t cap;
	ckpt_codec_ctx *codec;
};

struct pull_job {
	struct ckpt_store *s;
	const struct tier_ref *t;
	const struct manifest *m;
	struct pull_pack *packs;
	size_t npacks, from; /* from: the first pack of the batch in flight */
	const struct mf_chunk **byp; /* every chunk reference, by pack then offset */
	struct pull_piece *pieces;
	size_t npieces, cap_pieces;
	pthread_mutex_t mu; /* done, st, progress, slots */
	struct pull_slot *slots;
	uint64_t done, total; /* total: the sizes of the packs missing locally */
	ckpt_remote_stats *st;
	rmt_progress_cb progress;
	void *arg;
};
static int cmp_pack_off(const void *a, const void *b)
{
	const struct mf_chunk *x = *(const struct mf_chunk *const *)a;
	const struct mf_chunk *y = *(const struct mf_chunk *const *)b;
	if (x->pack_id != y->pack_id)
		return x->pack_id < y->pack_id ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The packs of m (distinct ids, ascending), each with its records (j->byp sorted by pack and
 * offset, sliced). Returns 0 or -CKPT_E_NOMEM. */
static int pull_plan_packs(struct pull_job *j, const uint32_t *ids, size_t n)
{
	const struct manifest *m = j->m;
	j->packs = calloc(n ? n : 1, sizeof *j->packs);
	j->byp = malloc((m->n_chunks ? m->n_chunks : 1) * sizeof *j->byp);
	if (!j->packs || !j->byp)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (pull of checkpoint %" PRIu64 ")",
				 m->step);
	for (uint32_t i = 0; i < m->n_chunks; i++)
		j->byp[i] = &m->chunks[i];
	qsort(j->byp, m->n_chunks, sizeof *j->byp, cmp_pack_off);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct pull_pack *p = &j->packs[i];
		p->id = ids[i];
		p->fd = -1;
		while (k < m->n_chunks && j->byp[k]->pack_id < p->id)
			k++;
		p->c = &j->byp[k];
		while (k < m->n_chunks && j->byp[k]->pack_id == p->id)
			k++, p->nc++;
	}
	j->npacks = n;
	return 0;
}

static int add_piece(struct pull_job *j, struct pull_pack *p, uint64_t off, uint64_t len,
		     size_t first, size_t last)
{
	if (ckpt_grow((void **)&j->pieces, &j->cap_pieces, j->npieces + 1, sizeof *j->pieces))
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", p->key);
	j->pieces[j->npieces++] = (struct pull_piece){p, off, len, first, last};
	return 0;
}

/* Cuts pack p into pieces of about PIECE bytes, never inside a record the manifest references
 * (nor its padding): each piece is checked as it arrives, before it is written. */
static int plan_pieces(struct pull_job *j, struct pull_pack *p)
{
	const struct mf_chunk *last = p->nc ? p->c[p->nc - 1] : NULL;
	uint64_t need = last ? last->offset + rec_span(last->stored_len) : PACK_HDR_LEN;
	if (p->size < MAX(need, (uint64_t)PACK_HDR_LEN) || (p->nc && p->c[0]->offset < PACK_HDR_LEN))
		return ckpt_fail(CKPT_E_CORRUPT, "damaged remote object: pack %s holds %" PRIu64
				 " bytes, the checkpoint names records up to byte %" PRIu64, p->key,
				 p->size, need);
	size_t k = 0;
	int rc = 0;
	for (uint64_t pos = 0; !rc && pos < p->size;) {
		uint64_t cut = MIN(pos + PIECE, p->size);
		size_t first = k;
		for (; k < p->nc && p->c[k]->offset < cut; k++) {
			uint64_t end = p->c[k]->offset + rec_span(p->c[k]->stored_len);
			if (end <= cut)
				continue;
			if (p->c[k]->offset > pos && k > first) {
				cut = p->c[k]->offset; /* the record starts the next piece */
				break;
			}
			cut = end; /* a record larger than a piece: the piece holds it whole */
		}
		rc = add_piece(j, p, pos, cut - pos, first, k);
		pos = cut;
	}
	return rc;
}

static struct pull_slot *slot_take(struct pull_job *j, size_t len)
{
	pthread_mutex_lock(&j->mu);
	struct pull_slot *sl = j->slots;
	if (sl)
		j->slots = sl->next;
	pthread_mutex_unlock(&j->mu);
	if (!sl && (sl = calloc(1, sizeof *sl)) &&
	    (!(sl->codec = ckpt_codec_ctx_create(j->m->chunk_size)) ||
	     !(sl->out = malloc(j->m->chunk_size)))) {
		ckpt_codec_ctx_free(sl->codec);
		free(sl);
		sl = NULL;
	}
	if (sl && sl->cap < len) {
		free(sl->buf);
		sl->cap = (sl->buf = malloc(len)) ? len : 0;
	}
	return sl && sl->buf ? sl : NULL; /* a slot without a buffer goes back below */
}

static void slot_give(struct pull_job *j, struct pull_slot *sl)
{
	pthread_mutex_lock(&j->mu);
	sl->next = j->slots;
	j->slots = sl;
	pthread_mutex_unlock(&j->mu);
}

static void slots_free(struct pull_job *j)
{
	for (struct pull_slot *sl = j->slots, *nx; sl; sl = nx) {
		nx = sl->next;
		ckpt_codec_ctx_free(sl->codec);
		free(sl->buf);
		free(sl->out);
		free(sl);
	}
	j->slots = NULL;
}

/* The path of local pack id (into path) when some data directory has a file of that id. */
static bool have_local(struct ckpt_store *s, uint32_t id, char *path, size_t len)
{
	struct stat st;
	for (unsigned d = 0; d < s->layout.ndirs; d++) {
		store_pack_path(s, d, id, path, len);
		if (!lstat(path, &st))
			return true;
	}
	return false;
}

/* Reads and checks the local file at path as pack p: its header (this pack id of this store) and
 * every record the remote manifest names in it (the checks of a downloaded pack). Returns 0, the
 * first mismatch (-CKPT_E_CORRUPT/-CKPT_E_CHECKSUM) or an I/O error. */
static int check_local_records(struct pull_job *j, const struct pull_pack *p, const char *path)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return ckpt_fail(ckpt_errno_code(errno), "open %s: %s", path, strerror(errno));
	uint64_t max = PACK_HDR_LEN;
	for (size_t k = 0; k < p->nc; k++)
		max = MAX(max, REC_HDR_LEN + (uint64_t)p->c[k]->stored_len);
	struct pull_slot *sl = slot_take(j, max);
	int rc = sl ? io_read_all(&ckpt_io_psync, fd, sl->buf, PACK_HDR_LEN, 0, path)
		    : ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", path);
	struct pack_hdr h;
	if (!rc && !(rc = pack_hdr_decode(sl->buf, PACK_HDR_LEN, &h, path)) &&
	    (h.pack_id != p->id || memcmp(h.uuid, j->s->hdr.uuid, 16)))
		rc = ckpt_fail(CKPT_E_CORRUPT, "%s: header of %s", path,
			       h.pack_id != p->id ? "another pack" : "another store's pack");
	for (size_t k = 0; !rc && k < p->nc; k++) {
		const struct mf_chunk *c = p->c[k];
		rc = io_read_all(&ckpt_io_psync, fd, sl->buf, REC_HDR_LEN + c->stored_len, c->offset,
				 path);
		if (!rc)
			rc = tier_check_record(sl->codec, sl->out, sl->buf, c, path);
	}
	if (sl)
		slot_give(j, sl);
	close(fd);
	return rc;
}

/* Whether the local file at path is the remote's pack p. A file of the same id alone proves
 * nothing: two writers of one store id (two stores adopted from it, both saving) allocate the
 * same next id, and taking the other's pack for the remote's would commit a checkpoint whose
 * chunks are not there. Returns 0 or -CKPT_E_CORRUPT saying so. */
static int check_local(struct pull_job *j, const struct pull_pack *p, const char *path)
{
	int rc = check_local_records(j, p, path);
	if (rc != -CKPT_E_CORRUPT && rc != -CKPT_E_CHECKSUM)
		return rc;
	char why[1024];
	snprintf(why, sizeof why, "%s", ckpt_errmsg());
	return ckpt_fail(CKPT_E_CORRUPT, "local pack %u (%s) is not the remote's pack %u (%s/%s): "
			 "two writers of store %s have used the same pack ids (or the local pack is "
			 "damaged): %s", p->id, path, p->id, j->t->r->url, p->key, j->t->id, why);
}

/* Pack i: local already (and the remote's), or its size on the remote (a parallel step: one
 * HEAD each). */
static int pull_stat(void *ctx, size_t i)
{
	struct pull_job *j = ctx;
	struct pull_pack *p = &j->packs[i];
	char path[4096];
	tier_key_pack(j->t, p->id, p->key, sizeof p->key);
	if ((p->present = have_local(j->s, p->id, path, sizeof path))) {
		int rc = check_local(j, p, path);
		pthread_mutex_lock(&j->mu);
		j->st->packs_present += !rc;
		pthread_mutex_unlock(&j->mu);
		return rc;
	}
	int rc = j->t->r->ops->stat(j->t->r, p->key, &p->size, NULL);
	if (rc == -CKPT_E_NOTFOUND) /* the checkpoint exists: what it names is damage, not absence */
		rc = ckpt_fail(CKPT_E_CORRUPT, "damaged remote checkpoint: checkpoint %" PRIu64
			       " names pack %u, which the remote lacks (no object %s)", j->m->step,
			       p->id, p->key);
	if (!rc) {
		pthread_mutex_lock(&j->mu);
		j->total += p->size;
		pthread_mutex_unlock(&j->mu);
	}
	return rc;
}

/* The pack header in the first piece: this pack of this store. */
static int check_pack_hdr(struct pull_job *j, const struct pull_pack *p, const uint8_t *buf)
{
	struct pack_hdr h;
	int rc = pack_hdr_decode(buf, PACK_HDR_LEN, &h, p->key);
	if (!rc && (h.pack_id != p->id || memcmp(h.uuid, j->s->hdr.uuid, 16)))
		rc = ckpt_fail(CKPT_E_CORRUPT, "remote pack %s: header of %s", p->key,
			       h.pack_id != p->id ? "another pack" : "another store's pack");
	return rc;
}

/* Piece i: read, checked (the pack header, every record the manifest references in it against
 * its digest, and its zero padding, as the local verifier checks it), written at its offset in
 * the temporary file, its writeback started (so that the pack's fdatasync finds little left to
 * do). */
static int pull_piece(void *ctx, size_t i)
{
	struct pull_job *j = ctx;
	const struct pull_piece *pc = &j->pieces[i];
	struct pull_pack *p = pc->p;
	struct pull_slot *sl = slot_take(j, pc->len);
	if (!sl)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", p->key);
	int rc = j->t->r->ops->get(j->t->r, p->key, pc->off, pc->len, sl->buf);
	int damaged = 0;
	if (!rc && pc->off == 0)
		damaged = rc = check_pack_hdr(j, p, sl->buf);
	for (size_t k = pc->first; !rc && k < pc->last; k++) {
		const uint8_t *rec = sl->buf + (p->c[k]->offset - pc->off);
		damaged = rc = tier_check_record(sl->codec, sl->out, rec, p->c[k], p->key);
		if (!rc)
			damaged = rc = rd_check_padding(rec, p->c[k], p->key);
	}
	if (damaged)
		ckpt_fail_prefix("damaged remote object");
	if (!rc && !(rc = io_write_all(&ckpt_io_psync, p->fd, sl->buf, pc->len, pc->off, p->tmp)))
		sync_file_range(p->fd, (off_t)pc->off, (off_t)pc->len, SYNC_FILE_RANGE_WRITE);
	slot_give(j, sl);
	pthread_mutex_lock(&j->mu);
	j->done += pc->len;
	if (!rc && j->progress && j->progress(j->arg, j->done, MAX(j->total, j->done)))
		rc = ckpt_fail(CKPT_E_CANCELED, "pull of %s: canceled", p->key);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* The records of downloaded pack p back to back from its header to its end, as the local
 * verifier walks a pack (read/verify.c): a pack cut inside the padding of its last record, or
 * with bytes after it, holds every record the checkpoint names, but committed it would fail
 * verify for good. Returns 0 or -CKPT_E_CORRUPT naming the object. */
static int check_walk(const struct pull_pack *p)
{
	int fd = open(p->tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC); /* p->fd is write-only */
	if (fd < 0)
		return ckpt_fail(ckpt_errno_code(errno), "open %s: %s", p->tmp, strerror(errno));
	uint64_t off = PACK_HDR_LEN;
	int rc = 0;
	while (!rc && off < p->size) {
		uint8_t b[REC_HDR_LEN];
		struct rec_hdr h;
		rc = p->size - off < 4096 ? -CKPT_E_CORRUPT
					  : io_read_all(&ckpt_io_psync, fd, b, sizeof b, off, p->tmp);
		if (rc == -CKPT_E_CORRUPT || (!rc && rec_hdr_decode(b, sizeof b, &h, p->key)))
			rc = ckpt_fail(CKPT_E_CORRUPT, "damaged remote object: pack %s: %" PRIu64
				       " byte(s) at offset %" PRIu64 " are not records (a cut or damaged "
				       "record, or bytes appended)", p->key, p->size - off, off);
		else if (!rc)
			off += rec_span(h.stored_len);
	}
	close(fd);
	if (!rc && off > p->size)
		rc = ckpt_fail(CKPT_E_CORRUPT, "damaged remote object: pack %s: the last record ends "
			       "at %" PRIu64 ", after the end of the object (%" PRIu64 " bytes)", p->key,
			       off, p->size);
	return rc;
}

/* Pack i of the batch, whole and checked: walked, fdatasynced, then linked into packs/ (never
 * over a file: one there must be this pack). */
static int pull_finish(void *ctx, size_t i)
{
	struct pull_job *j = ctx;
	struct pull_pack *p = &j->packs[j->from + i];
	char dst[4096];
	if (p->fd < 0)
		return 0;
	int rc = check_walk(p);
	if (!rc && fdatasync(p->fd))
		rc = ckpt_fail(ckpt_errno_code(errno), "fdatasync %s: %s", p->tmp, strerror(errno));
	store_pack_path(j->s, 0, p->id, dst, sizeof dst);
	if (!rc && link(p->tmp, dst))
		rc = errno == EEXIST ? check_local(j, p, dst) /* placed meanwhile: the same pack? */
				     : ckpt_fail(ckpt_errno_code(errno), "link %s to %s: %s", p->tmp,
						 dst, strerror(errno));
	if (!rc) {
		pthread_mutex_lock(&j->mu);
		j->st->packs_sent++, j->st->bytes_sent += p->size;
		pthread_mutex_unlock(&j->mu);
	}
	return rc;
}

/* Packs [from, to) that are not local: their temporary files, every piece of them (all packs'
 * pieces in one parallel run: a large pack is read by several requests at once, several small
 * ones side by side), then each made durable and put in place. Temporary files never outlive
 * it. */
static int pull_batch(struct pull_job *j, size_t from, size_t to)
{
	int rc = 0;
	char name[32];
	j->npieces = 0;
	for (size_t i = from; !rc && i < to; i++) {
		struct pull_pack *p = &j->packs[i];
		if (p->present)
			continue;
		snprintf(name, sizeof name, "%08u.pack", p->id);
		if ((p->fd = io_create_tmp(j->s->path, name, p->tmp, sizeof p->tmp)) < 0)
			rc = p->fd;
		else
			rc = plan_pieces(j, p);
	}
	struct tier_par par = {.one = pull_piece, .ctx = j, .n = j->npieces};
	if (!rc)
		rc = tier_parallel(&par, j->t->r->cfg.parallel);
	j->from = from;
	struct tier_par fin = {.one = pull_finish, .ctx = j, .n = to - from};
	if (!rc)
		rc = tier_parallel(&fin, j->t->r->cfg.parallel);
	for (size_t i = from; i < to; i++) {
		struct pull_pack *p = &j->packs[i];
		if (p->fd >= 0) {
			close(p->fd);
			unlink(p->tmp);
			p->fd = -1;
		}
	}
	return rc;
}

/* Every pack of m that is not local (ids: their distinct ids), in batches of PULL_BATCH. */
static int pull_packs(struct pull_job *j, const uint32_t *ids, size_t n)
{
	int rc = pull_plan_packs(j, ids, n);
	struct tier_par par = {.one = pull_stat, .ctx = j, .n = n};
	if (!rc)
		rc = tier_parallel(&par, j->t->r->cfg.parallel);
	for (size_t from = 0; !rc && from < n; from += PULL_BATCH)
		rc = pull_batch(j, from, MIN(n, from + PULL_BATCH));
	slots_free(j);
	free(j->pieces);
	free(j->packs);
	free(j->byp);
	return rc;
}

/* Part object key (buf, len bytes) of rank of m, checked as verify checks a local part
 * (dist/dist_verify.c): the size and trailer of the global manifest's DIST_PART record, a
 * manifest that decodes, of this step and store. Written unchecked, a damaged one would fail
 * the pulled checkpoint's verify for good. Returns 0 or -CKPT_E_* naming the object. */
static int check_part(const struct ckpt_store *s, const struct manifest *m, unsigned rank,
		      const char *key, const uint8_t *buf, uint64_t len)
{
	char mk[64];
	const char *rec = NULL;
	struct dist_part_sum want;
	snprintf(mk, sizeof mk, DIST_PART "%u", rank);
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (!strcmp(m->meta[i].key, mk))
			rec = m->meta[i].value;
	if (!rec || dist_parse_sum(rec, &want))
		return ckpt_fail(CKPT_E_CORRUPT, "damaged remote checkpoint %" PRIu64 ": no valid %s "
				 "record", m->step, mk);
	if (len != want.size || len < 16 || memcmp(buf + len - 16, want.digest, 16))
		return ckpt_fail(CKPT_E_CHECKSUM, "damaged remote object %s: %" PRIu64 " bytes, not "
				 "the part the global manifest records (%" PRIu64 " bytes; or its "
				 "checksum differs)", key, len, want.size);
	uint8_t *copy = malloc(len); /* manifest_decode takes its buffer */
	if (!copy)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", key);
	memcpy(copy, buf, len);
	struct manifest pm;
	int rc = manifest_decode(copy, len, &pm, key);
	if (rc) {
		ckpt_fail_prefix("damaged remote object");
		return rc;
	}
	if (pm.step != m->step || memcmp(pm.uuid, s->hdr.uuid, 16))
		rc = ckpt_fail(CKPT_E_CORRUPT, "damaged remote object %s: a part of another step or "
			       "store", key);
	manifest_free(&pm);
	return rc;
}

/* Part rank of m from the remote, checked, into dir (*mine: this call created the file). One
 * there already must hold the same bytes. */
static int pull_part(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m,
		     const char *dir, unsigned rank, int *mine)
{
	char key[256], name[32];
	uint8_t *buf, *cur;
	uint64_t len;
	size_t clen;
	tier_key_part(t, m->step, rank, key, sizeof key);
	snprintf(name, sizeof name, "%u.part", rank);
	int rc = tier_get_all(t, key, MF_MAX_LEN, &buf, &len);
	if (rc == -CKPT_E_NOTFOUND)
		return ckpt_fail(CKPT_E_CORRUPT, "damaged remote checkpoint: checkpoint %" PRIu64
				 " has %u ranks, the remote lacks part %u (no object %s)", m->step,
				 tier_world(m), rank, key);
	if (rc)
		return rc;
	if (!(rc = check_part(s, m, rank, key, buf, len)) &&
	    (rc = io_write_new(dir, name, buf, len, mine)) > 0) {
		char path[4200];
		snprintf(path, sizeof path, "%s/%s", dir, name);
		int got = io_slurp(path, MF_MAX_LEN, &cur, &clen);
		rc = got ? got : clen == len && !memcmp(cur, buf, len) ? 0 :
		     ckpt_fail(CKPT_E_EXISTS, "%s is not the remote's part %s (a local save of step %"
			       PRIu64 " that did not commit left it; gc removes it)", path, key, m->step);
		if (!got)
			free(cur);
	}
	free(buf);
	return rc;
}

/* The part files of a multi-rank checkpoint into parts/<step>/, never over one; each checked
 * before it is written, and those this call wrote taken back when one fails. */
static int pull_parts(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m)
{
	unsigned world = tier_world(m);
	if (!world)
		return 0;
	char dir[4096], path[4200];
	int *mine = calloc(world, sizeof *mine);
	int rc = mine ? store_part_dir(s, m->step, dir, sizeof dir)
		      : ckpt_fail(CKPT_E_NOMEM, "out of memory (pull of checkpoint %" PRIu64 ")",
				  m->step);
	for (unsigned rank = 0; !rc && rank < world; rank++)
		rc = pull_part(s, t, m, dir, rank, &mine[rank]);
	for (unsigned rank = 0; rc && mine && rank < world; rank++) {
		snprintf(path, sizeof path, "%s/%u.part", dir, rank);
		if (mine[rank])
			unlink(path);
	}
	free(mine);
	return rc;
}

/* The writer lock for the pull's length (as a save holds it), so that no gc takes its packs
 * before the manifest names them. */
static int pull_lock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->lock.mu);
	int rc = s->lock.users ? 0 : store_lock(s, "pull");
	if (!rc)
		s->lock.users++;
	pthread_mutex_unlock(&s->lock.mu);
	return rc;
}

static void pull_unlock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->lock.mu);
	pthread_mutex_lock(&s->index.mu);
	s->index.valid = false; /* a new manifest: the next save rebuilds its dedup index */
	pthread_mutex_unlock(&s->index.mu);
	if (--s->lock.users == 0)
		store_unlock(s);
	pthread_mutex_unlock(&s->lock.mu);
}

/* Packs, parts, manifest: the checkpoint m (raw: its bytes) into s. */
static int pull_locked(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m,
		       const uint8_t *raw, uint64_t rawlen, struct pull_job *j)
{
	char name[64];
	store_mf_name(m->step, name, sizeof name);
	uint32_t *ids;
	long n = tier_packs_of(m, &ids);
	if (n < 0)
		return (int)n;
	int rc = pull_packs(j, ids, (size_t)n);
	if (!rc && !(rc = io_fsync_dir(s->layout.pack_dir)) && !(rc = pull_parts(s, t, m))) {
		rc = io_write_new(s->layout.mf_dir, name, raw, rawlen, NULL); /* the commit point */
		if (rc > 0)
			rc = ckpt_fail(CKPT_E_EXISTS, "checkpoint %" PRIu64 " exists in %s already",
				       m->step, s->path);
	}
	free(ids);
	return rc;
}

int tier_pull(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, uint64_t *got,
	      ckpt_remote_stats *st, rmt_progress_cb progress, void *arg)
{
	ckpt_remote_stats local = {0};
	if (st)
		*st = local;
	struct manifest m;
	uint8_t *raw;
	uint64_t rawlen;
	int rc = tier_fetch_manifest(t, s->hdr.uuid, step, &m, &raw, &rawlen);
	if (rc)
		return rc;
	if (got)
		*got = m.step;
	struct manifest lm;
	if (!store_load_manifest(s, m.step, &lm)) { /* already local: nothing to do */
		manifest_free(&lm);
		manifest_free(&m);
		free(raw);
		return 0;
	}
	struct pull_job j = {.s = s, .t = t, .m = &m, .st = st ? st : &local,
			     .progress = progress, .arg = arg};
	pthread_mutex_init(&j.mu, NULL);
	if (!(rc = pull_lock(s))) {
		rc = pull_locked(s, t, &m, raw, rawlen, &j);
		pull_unlock(s);
	}
	pthread_mutex_destroy(&j.mu);
	if (rc)
		ckpt_fail_prefix("pull of checkpoint %" PRIu64 " from %s", m.step, t->r->url);
	manifest_free(&m);
	free(raw);
	return rc;
}

/* mkdir, fsynced into its parent when new. */
static int mkdir_durable(const char *parent, const char *path)
{
	if (mkdir(path, 0755)) {
		if (errno == EEXIST)
			return 0;
		return ckpt_fail(ckpt_errno_code(errno), "mkdir %s: %s", path, strerror(errno));
	}
	return io_fsync_dir(parent);
}

/* Whether entry name of directory fd is a directory (not a link) holding nothing. */
static bool empty_subdir(int fd, const char *name)
{
	int sub = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = sub < 0 ? NULL : fdopendir(sub);
	if (!d) {
		if (sub >= 0)
			close(sub);
		return false;
	}
	bool empty = true;
	for (struct dirent *e; empty && (e = readdir(d));)
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	return empty;
}

/* Whether entry name of directory fd is a plain file (not a link). */
static bool plain_file(int fd, const char *name)
{
	struct stat st;
	return !fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) && S_ISREG(st.st_mode);
}

/* Whether directory path holds nothing but what an adopt leaves before it links the header (one
 * killed there, which the next adopt completes): empty packs/ and manifests/, packids, and the
 * temporary files of packids and of the header. The only place a store may be created; anything
 * else is someone's. */
static bool empty_or_missing(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT;
	bool empty = true;
	for (struct dirent *e; empty && (e = readdir(d));) {
		const char *n = e->d_name;
		if (!strcmp(n, PACK_DIR) || !strcmp(n, MF_DIR))
			empty = empty_subdir(dirfd(d), n);
		else if (!strcmp(n, ".") || !strcmp(n, ".."))
			empty = true;
		else
			empty = plain_file(dirfd(d), n) &&
				(!strcmp(n, STORE_PACKIDS) ||
				 !strncmp(n, "." STORE_PACKIDS ".tmp.", strlen("." STORE_PACKIDS ".tmp.")) ||
				 !strncmp(n, "." STORE_FILE ".tmp.", strlen("." STORE_FILE ".tmp.")));
	}
	closedir(d);
	return empty;
}

/* The remote's one store id into id, or the error naming what is there. */
static int only_store(struct rmt *r, char id[TIER_ID_LEN + 1])
{
	char ids[8][TIER_ID_LEN + 1];
	long n = tier_remote_stores(r, ids, 8);
	if (n < 0)
		return (int)n;
	if (n == 0)
		return ckpt_fail(CKPT_E_NOTFOUND, "remote %s holds no store", r->url);
	if (n > 1)
		return ckpt_fail(CKPT_E_INVAL, "remote %s holds %ld stores (%s, %s%s): name one by its "
				 "id (ckptctl pull --store-id ID; 'ckptctl list --remote %s' lists them)",
				 r->url, n, ids[0], ids[1], n > 2 ? ", ..." : "", r->url);
	memcpy(id, ids[0], TIER_ID_LEN + 1);
	return 0;
}

int tier_adopt(struct rmt *r, const char *id, const char *path)
{
	struct tier_ref t = {.r = r};
	uint8_t uuid[16];
	int rc = id ? tier_parse_id(id, uuid) : only_store(r, t.id);
	if (!rc && !id)
		rc = tier_parse_id(t.id, uuid);
	if (rc)
		return rc;
	if (id)
		snprintf(t.id, sizeof t.id, "%s", id);
	char key[256], parent[4096], sub[4096];
	uint8_t hb[STORE_HDR_LEN];
	struct store_hdr h;
	tier_key_hdr(&t, key, sizeof key);
	if ((rc = r->ops->get(r, key, 0, sizeof hb, hb)) ||
	    (rc = store_hdr_decode(hb, sizeof hb, &h, key)))
		return rc;
	if (memcmp(h.uuid, uuid, 16)) { /* a header put under another store's id */
		char other[TIER_ID_LEN + 1];
		tier_id_of(h.uuid, other);
		return ckpt_fail(CKPT_E_CORRUPT, "damaged remote object %s/%s: the header of store %s, "
				 "not of %s", r->url, key, other, t.id);
	}
	snprintf(sub, sizeof sub, "%s/%s", path, STORE_FILE);
	uint8_t *cur;
	size_t len;
	if (!io_slurp(sub, STORE_HDR_LEN, &cur, &len)) { /* a store there: it must be this one */
		bool same = len == STORE_HDR_LEN && !memcmp(cur, hb, len);
		free(cur);
		return same ? 0 : ckpt_fail(CKPT_E_EXISTS, "%s holds another store than %s's %s",
					    path, r->url, t.id);
	}
	if (!empty_or_missing(path))
		return ckpt_fail(CKPT_E_EXISTS, "%s is not empty and not a libckpt store; refusing to "
				 "create one there", path);
	snprintf(parent, sizeof parent, "%s/..", path);
	if ((rc = mkdir_durable(parent, path)))
		return rc;
	const char *dirs[] = {PACK_DIR, MF_DIR};
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		snprintf(sub, sizeof sub, "%s/%s", path, dirs[i]);
		if ((rc = mkdir_durable(path, sub)))
			return rc;
	}
	/* The remote's pack ids are this store's too: its saves must allocate above them. */
	uint32_t *ids;
	long n = tier_remote_packs(&t, &ids);
	if (n < 0)
		return (int)n;
	rc = store_packids_raise(path, ids, (size_t)n);
	free(ids);
	if (rc)
		return rc;
	rc = io_write_new(path, STORE_FILE, hb, sizeof hb, NULL); /* last: then it is a store */
	return rc > 0 ? ckpt_fail(CKPT_E_EXISTS, "%s: a store appeared meanwhile", path) : rc;
}
