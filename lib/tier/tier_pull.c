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
#include "format/codec.h"
#include "format/format.h"
#include "io/io.h"
#include "read/reader.h"
#include "tier/tier.h"

#define PIECE (8u << 20)

struct pull_job {
	struct ckpt_store *s;
	const struct tier_ref *t;
	const struct manifest *m;
	const uint32_t *ids;
	pthread_mutex_t mu; /* done, st, progress */
	uint64_t done, total; /* total: the sizes of the packs missing locally */
	ckpt_remote_stats *st;
	rmt_progress_cb progress;
	void *arg;
};

static bool have_local(struct ckpt_store *s, uint32_t id)
{
	char path[4096];
	struct stat st;
	for (unsigned d = 0; d < s->ndirs; d++) {
		store_pack_path(s, d, id, path, sizeof path);
		if (!lstat(path, &st))
			return true;
	}
	return false;
}

/* Checks every record m references in pack id, read back from fd (the downloaded copy): the
 * pack header, then each record's header and decoded digest. Errors name the remote key. */
static int check_pack(struct pull_job *j, uint32_t id, int fd, const char *key)
{
	uint8_t hb[PACK_HDR_LEN];
	struct pack_hdr h;
	int rc = io_read_all(&ckpt_io_psync, fd, hb, sizeof hb, 0, key);
	if (!rc && !(rc = pack_hdr_decode(hb, sizeof hb, &h, key)) &&
	    (h.pack_id != id || memcmp(h.uuid, j->s->hdr.uuid, 16)))
		rc = ckpt_fail(CKPT_E_CORRUPT, "remote pack %s: header of %s", key,
			       h.pack_id != id ? "another pack" : "another store's pack");
	ckpt_codec_ctx *codec = rc ? NULL : ckpt_codec_ctx_create(j->m->chunk_size);
	uint8_t *rec = rc ? NULL : malloc(rec_span(ckpt_codec_bound(j->m->chunk_size)));
	uint8_t *out = rc ? NULL : malloc(j->m->chunk_size);
	if (!rc && (!codec || !rec || !out))
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory (checking %s)", key);
	for (uint32_t i = 0; !rc && i < j->m->n_chunks; i++) {
		const struct mf_chunk *c = &j->m->chunks[i];
		if (c->pack_id != id)
			continue;
		if (!(rc = io_read_all(&ckpt_io_psync, fd, rec, REC_HDR_LEN + c->stored_len, c->offset, key)) &&
		    !(rc = rd_check_hdr(rec, c, key)) &&
		    !(rc = ckpt_codec_decode(codec, c->codec, rec + REC_HDR_LEN, c->stored_len, out,
					     c->raw_len)))
			rc = rd_check_digest(out, c, key);
	}
	if (rc)
		ckpt_fail_prefix("damaged remote object");
	ckpt_codec_ctx_free(codec);
	free(rec);
	free(out);
	return rc;
}

/* Copies remote key (size bytes) into fd in pieces, counting progress. */
static int fetch_into(struct pull_job *j, const char *key, uint64_t size, int fd, const char *tmp)
{
	uint8_t *buf = malloc(PIECE);
	if (!buf)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory (%s)", key);
	int rc = 0;
	for (uint64_t off = 0; !rc && off < size; off += PIECE) {
		size_t n = (size_t)MIN((uint64_t)PIECE, size - off);
		if (!(rc = j->t->r->ops->get(j->t->r, key, off, n, buf)))
			rc = io_write_all(&ckpt_io_psync, fd, buf, n, off, tmp);
		pthread_mutex_lock(&j->mu);
		j->done += n;
		if (!rc && j->progress && j->progress(j->arg, j->done, MAX(j->total, j->done)))
			rc = ckpt_fail(CKPT_E_CANCELED, "pull of %s: canceled", key);
		pthread_mutex_unlock(&j->mu);
	}
	free(buf);
	return rc;
}

/* Brings pack ids[i] local unless it is: downloaded to a temporary file in the store directory,
 * checked, fdatasynced, then linked into packs/ (never over a file). */
static int pull_pack(void *ctx, size_t i)
{
	struct pull_job *j = ctx;
	uint32_t id = j->ids[i];
	if (have_local(j->s, id)) {
		pthread_mutex_lock(&j->mu);
		j->st->packs_present++;
		pthread_mutex_unlock(&j->mu);
		return 0;
	}
	char key[256], name[32], tmp[4096], dst[4096];
	tier_key_pack(j->t, id, key, sizeof key);
	uint64_t size;
	int rc = j->t->r->ops->stat(j->t->r, key, &size, NULL);
	if (rc == -CKPT_E_NOTFOUND)
		ckpt_fail_prefix("remote checkpoint %" PRIu64 " names pack %u, which the remote lacks",
				 j->m->step, id);
	if (rc)
		return rc;
	snprintf(name, sizeof name, "%08u.pack", id);
	int fd = io_create_tmp(j->s->path, name, tmp, sizeof tmp);
	if (fd < 0)
		return fd;
	rc = fetch_into(j, key, size, fd, tmp);
	if (!rc && fdatasync(fd))
		rc = ckpt_fail(ckpt_errno_code(errno), "fdatasync %s: %s", tmp, strerror(errno));
	close(fd);
	/* Checked as it lies on the disk, through a read-only descriptor of its own. */
	int rfd = rc ? -1 : open(tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (!rc && rfd < 0)
		rc = ckpt_fail(ckpt_errno_code(errno), "open %s: %s", tmp, strerror(errno));
	if (!rc)
		rc = check_pack(j, id, rfd, key);
	if (rfd >= 0)
		close(rfd);
	store_pack_path(j->s, 0, id, dst, sizeof dst);
	if (!rc && link(tmp, dst) && errno != EEXIST) /* EEXIST: another pull placed it */
		rc = ckpt_fail(ckpt_errno_code(errno), "link %s to %s: %s", tmp, dst, strerror(errno));
	unlink(tmp);
	if (!rc) {
		pthread_mutex_lock(&j->mu);
		j->st->packs_sent++, j->st->bytes_sent += size;
		pthread_mutex_unlock(&j->mu);
	}
	return rc;
}

/* The part files of a multi-rank checkpoint into parts/<step>/, never over one. */
static int pull_parts(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m)
{
	unsigned world = tier_world(m);
	char dir[4096], key[256], name[32];
	int rc = world ? store_part_dir(s, m->step, dir, sizeof dir) : 0;
	for (unsigned rank = 0; !rc && rank < world; rank++) {
		uint8_t *buf;
		uint64_t len;
		tier_key_part(t, m->step, rank, key, sizeof key);
		snprintf(name, sizeof name, "%u.part", rank);
		if (!(rc = tier_get_all(t, key, MF_MAX_LEN, &buf, &len))) {
			rc = io_write_new(dir, name, buf, len, NULL);
			rc = rc > 0 ? 0 : rc;
			free(buf);
		}
	}
	return rc;
}

/* The writer lock for the pull's length (as a save holds it), so that no gc takes its packs
 * before the manifest names them. */
static int pull_lock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->mu);
	int rc = s->lock_users ? 0 : store_lock(s, "pull");
	if (!rc)
		s->lock_users++;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static void pull_unlock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->mu);
	pthread_mutex_lock(&s->idx_mu);
	s->idx_valid = false; /* a new manifest: the next save rebuilds its dedup index */
	pthread_mutex_unlock(&s->idx_mu);
	if (--s->lock_users == 0)
		store_unlock(s);
	pthread_mutex_unlock(&s->mu);
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
	j->ids = ids;
	for (long i = 0; i < n && j->progress; i++) { /* the progress total: what is missing */
		char key[256];
		uint64_t size;
		tier_key_pack(t, ids[i], key, sizeof key);
		if (!have_local(s, ids[i]) && !t->r->ops->stat(t->r, key, &size, NULL))
			j->total += size;
	}
	struct tier_par par = {.one = pull_pack, .ctx = j, .n = (size_t)n};
	int rc = tier_parallel(&par, t->r->cfg.parallel);
	if (!rc && !(rc = io_fsync_dir(s->pack_dir)) && !(rc = pull_parts(s, t, m))) {
		rc = io_write_new(s->mf_dir, name, raw, rawlen, NULL); /* the commit point */
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

/* Whether directory path holds nothing but what a store being created holds (packs/,
 * manifests/, a temporary header): the only place a store may be created. */
static bool empty_or_missing(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return errno == ENOENT;
	bool empty = true;
	for (struct dirent *e; empty && (e = readdir(d));)
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
			!strcmp(e->d_name, PACK_DIR) || !strcmp(e->d_name, MF_DIR) ||
			!strncmp(e->d_name, "." STORE_FILE ".tmp", 10);
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
		return ckpt_fail(CKPT_E_INVAL, "remote %s holds %ld stores (%s, %s%s): name one by its id",
				 r->url, n, ids[0], ids[1], n > 2 ? ", ..." : "");
	memcpy(id, ids[0], TIER_ID_LEN + 1);
	return 0;
}

int tier_adopt(struct rmt *r, const char *id, const char *path)
{
	struct tier_ref t = {.r = r};
	uint8_t uuid[16];
	int rc = id ? tier_parse_id(id, uuid) : only_store(r, t.id);
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
