/* Space accounting, retention (prune) and garbage collection.
 *
 * Safety rests on one order: a pack is removed only when no manifest on disk references it, and
 * a manifest is only ever replaced atomically. prune removes manifests (durably) before packs;
 * compaction writes the new pack (durably) before rewriting manifests, and removes the old pack
 * last. A kill at any point leaves garbage at worst, never a dangling reference. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/codec.h"
#include "common/common.h"
#include "dist/dist.h"
#include "store/lease.h"
#include "store/store.h"

/* Crash testing, in test builds only (CKPT_TEST_HOOKS: the tests' archive and the tests' ckptctl,
 * never the release library): CKPT_GC_KILL_AT=N kills the process at the Nth point where the
 * store's state on disk changes (tests/unit/t-gc and tests/cli/t-ckptctl-crash kill at every point
 * in turn and check the store). */
#ifdef CKPT_TEST_HOOKS
static void kill_point(void)
{
	static long n;
	const char *e = getenv("CKPT_GC_KILL_AT");
	if (e && ++n == atol(e))
		raise(SIGKILL);
}
#else
static inline void kill_point(void) {}
#endif

/* Every manifest file of the store, decoded where possible. */
struct mfset {
	size_t n;
	uint64_t *steps;
	struct manifest *m;
	int *err;          /* 0, or why the manifest is invalid */
	uint64_t *size;    /* file size */
	size_t ninvalid;
};

struct pk {
	uint32_t id;
	unsigned dir;
	uint64_t size;
	uint64_t live;     /* record bytes referenced by valid manifests */
};

/* A chunk location referenced by a valid manifest. */
struct loc {
	uint32_t pack;
	uint64_t offset;
	uint64_t span;
	size_t mf;         /* index of the manifest in the mfset */
};

static void mfset_free(struct mfset *ms)
{
	for (size_t i = 0; i < ms->n; i++)
		if (!ms->err[i])
			manifest_free(&ms->m[i]);
	free(ms->steps);
	free(ms->m);
	free(ms->err);
	free(ms->size);
	memset(ms, 0, sizeof *ms);
}

static int mfset_load(struct ckpt_store *s, struct mfset *ms)
{
	memset(ms, 0, sizeof *ms);
	long n = store_steps(s, &ms->steps);
	if (n < 0)
		return (int)n;
	ms->n = (size_t)n;
	ms->m = calloc(ms->n + 1, sizeof *ms->m);
	ms->err = calloc(ms->n + 1, sizeof *ms->err);
	ms->size = calloc(ms->n + 1, sizeof *ms->size);
	if (!ms->m || !ms->err || !ms->size) {
		mfset_free(ms);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < ms->n; i++) {
		int rc = store_load_manifest(s, ms->steps[i], &ms->m[i]);
		if (rc == -CKPT_E_NOMEM) {
			for (size_t k = 0; k < i; k++)
				if (!ms->err[k])
					manifest_free(&ms->m[k]);
			ms->n = 0;
			mfset_free(ms);
			return rc;
		}
		ms->err[i] = rc ? -rc : 0;
		ms->ninvalid += rc != 0;
		char name[64], p[4096];
		struct stat st;
		store_mf_name(ms->steps[i], name, sizeof name);
		snprintf(p, sizeof p, "%s/%s", s->mf_dir, name);
		if (!stat(p, &st))
			ms->size[i] = (uint64_t)st.st_size;
	}
	return 0;
}

static int cmp_pk(const void *a, const void *b)
{
	const struct pk *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* The id of a canonical pack name: exactly what store_pack_path() writes ("%08u.pack"). strtoul
 * alone would also take "2.pack", "+2.pack" or "0000000002.pack" for pack 2, and gc would then
 * remove the real 00000002.pack as a dead duplicate. */
static bool canonical_pack_id(const char *name, uint32_t *id)
{
	uint64_t v = 0;
	size_t n = 0;
	while (name[n] >= '0' && name[n] <= '9' && n < 11)
		v = v * 10 + (uint64_t)(name[n++] - '0');
	if (n < 8 || n > 10 || v > UINT32_MAX || strcmp(name + n, ".pack"))
		return false;
	char canon[32];
	snprintf(canon, sizeof canon, "%08u.pack", (unsigned)v);
	if (strcmp(canon, name))
		return false;
	*id = (uint32_t)v;
	return true;
}

/* Records a file gc leaves alone (the first one's path and reason go into the report). */
static void left_alone(ckpt_gc_report *rep, const char *dir, const char *name, const char *why)
{
	if (!rep)
		return;
	rep->files_left_alone++;
	if (rep->left_alone)
		return;
	size_t n = strlen(dir) + strlen(name) + strlen(why) + 4;
	rep->left_alone = malloc(n);
	if (rep->left_alone)
		snprintf(rep->left_alone, n, "%s/%s: %s", dir, name, why);
}

/* Whether the pack file proves to be this store's: its header carries the store's uuid. Another store may share a data directory, or packs/ may lead into another store;
 * a name alone proves nothing. Returns NULL when it is ours, else the reason. */
static const char *not_our_pack(struct ckpt_store *s, int dfd, const char *name, struct stat *st)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? "a symbolic link, not a pack" : "cannot be opened";
	uint8_t *buf = malloc(PACK_HDR_LEN);
	const char *why = NULL;
	struct pack_hdr h;
	if (!buf)
		why = "out of memory reading its header";
	else if (fstat(fd, st) || !S_ISREG(st->st_mode))
		why = "not a regular file";
	else if (pread(fd, buf, PACK_HDR_LEN, 0) != PACK_HDR_LEN)
		why = "no complete pack header";
	else if (pack_hdr_decode(buf, PACK_HDR_LEN, &h, name))
		why = "invalid pack header";
	else if (memcmp(h.uuid, s->hdr.uuid, 16))
		why = "belongs to another store (uuid in its header)";
	/* A header naming another id is still this store's file (a misplaced copy readers refuse):
	 * garbage like any unreferenced pack. */
	free(buf);
	close(fd);
	return why;
}

/* Ids present twice (in two pack directories): which copy readers use depends on the order of
 * the directories, so neither is removed. Drops both from the list. */
static size_t drop_duplicates(struct ckpt_store *s, struct pk *v, size_t n, ckpt_gc_report *rep)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		size_t j = i + 1;
		while (j < n && v[j].id == v[i].id)
			j++;
		if (j - i == 1) {
			v[k++] = v[i];
		} else {
			for (size_t q = i; q < j; q++) {
				char name[32];
				snprintf(name, sizeof name, "%08u.pack", v[q].id);
				left_alone(rep, s->pack_dirs[v[q].dir], name,
					   "the same pack id exists in another pack directory");
			}
		}
		i = j;
	}
	return k;
}

/* This store's packs, by id. Everything else in the pack directories is left alone (and counted
 * in rep when given). */
static int list_packs_rep(struct ckpt_store *s, struct pk **out, size_t *nout, ckpt_gc_report *rep)
{
	size_t n = 0, cap = 64;
	struct pk *v = malloc(cap * sizeof *v);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (unsigned d = 0; d < s->ndirs; d++) {
		DIR *dir = opendir(s->pack_dirs[d]);
		if (!dir) {
			int e = errno;
			free(v);
			return ckpt_fail(ckpt_errno_code(e), "open %s: %s", s->pack_dirs[d], strerror(e));
		}
		struct dirent *e;
		while ((e = readdir(dir))) {
			uint32_t id;
			struct stat st;
			size_t nl = strlen(e->d_name);
			if (!canonical_pack_id(e->d_name, &id)) {
				if (nl > 5 && !strcmp(e->d_name + nl - 5, ".pack"))
					left_alone(rep, s->pack_dirs[d], e->d_name,
						   "not a canonical pack name (NNNNNNNN.pack)");
				continue;
			}
			const char *why = not_our_pack(s, dirfd(dir), e->d_name, &st);
			if (why) {
				left_alone(rep, s->pack_dirs[d], e->d_name, why);
				continue;
			}
			if (n == cap) {
				struct pk *nv = realloc(v, (cap *= 2) * sizeof *v);
				if (!nv) {
					closedir(dir);
					free(v);
					return ckpt_fail(CKPT_E_NOMEM, "out of memory");
				}
				v = nv;
			}
			v[n++] = (struct pk){(uint32_t)id, d, (uint64_t)st.st_size, 0};
		}
		closedir(dir);
	}
	qsort(v, n, sizeof *v, cmp_pk);
	*out = v;
	*nout = drop_duplicates(s, v, n, rep);
	return 0;
}

/* Fails, naming it, when a pack directory cannot be listed (a data directory not mounted). */
static int pack_dirs_present(struct ckpt_store *s)
{
	for (unsigned d = 0; d < s->ndirs; d++) {
		DIR *dir = opendir(s->pack_dirs[d]);
		if (!dir) {
			int e = errno;
			return ckpt_fail(ckpt_errno_code(e), "open %s: %s; nothing was removed",
					 s->pack_dirs[d], strerror(e));
		}
		closedir(dir);
	}
	return 0;
}

static int list_packs(struct ckpt_store *s, struct pk **out, size_t *nout)
{
	return list_packs_rep(s, out, nout, NULL);
}

static struct pk *find_pk(struct pk *v, size_t n, uint32_t id)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (v[mid].id == id)
			return &v[mid];
		if (v[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int cmp_loc(const void *a, const void *b)
{
	const struct loc *x = a, *y = b;
	if (x->pack != y->pack)
		return x->pack < y->pack ? -1 : 1;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->mf < y->mf ? -1 : x->mf > y->mf;
}

/* All locations referenced by the valid manifests (skip: manifests treated as removed), sorted. */
static int collect_locs(const struct mfset *ms, const bool *skip, struct loc **out, size_t *nout)
{
	size_t n = 0;
	for (size_t i = 0; i < ms->n; i++)
		if (!ms->err[i] && !(skip && skip[i]))
			n += ms->m[i].n_chunks;
	struct loc *v = malloc((n ? n : 1) * sizeof *v);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < ms->n; i++) {
		if (ms->err[i] || (skip && skip[i]))
			continue;
		for (uint32_t c = 0; c < ms->m[i].n_chunks; c++) {
			const struct mf_chunk *ch = &ms->m[i].chunks[c];
			v[k++] = (struct loc){ch->pack_id, ch->offset, rec_span(ch->stored_len), i};
		}
	}
	qsort(v, n, sizeof *v, cmp_loc);
	*out = v;
	*nout = n;
	return 0;
}

/* Adds the live bytes of each pack (each location counted once). */
static void mark_live(struct pk *pv, size_t np, const struct loc *l, size_t nl)
{
	for (size_t i = 0; i < nl; i++) {
		if (i && l[i].pack == l[i - 1].pack && l[i].offset == l[i - 1].offset)
			continue;
		struct pk *p = find_pk(pv, np, l[i].pack);
		if (p)
			p->live += l[i].span;
	}
}

/* Temporary files of interrupted writers: ".NAME.tmp.PID" in the manifests and store directories;
 * and the parts of multi-rank checkpoints that do not exist or are among gone (a prune's). */
static uint64_t leftovers(struct ckpt_store *s, bool remove, const uint64_t *gone, size_t ngone,
			  uint64_t *count, uint64_t *parts)
{
	const char *dirs[2] = {s->mf_dir, s->path};
	uint64_t bytes = 0;
	for (int k = 0; k < 2; k++) {
		DIR *d = opendir(dirs[k]);
		if (!d)
			continue;
		struct dirent *e;
		while ((e = readdir(d))) {
			struct stat st;
			if (e->d_name[0] != '.' || !strstr(e->d_name, ".tmp.") ||
			    fstatat(dirfd(d), e->d_name, &st, 0) || !S_ISREG(st.st_mode))
				continue;
			bytes += (uint64_t)st.st_size;
			(*count)++;
			if (remove) {
				unlinkat(dirfd(d), e->d_name, 0);
				kill_point();
			}
		}
		closedir(d);
	}
	uint64_t np = 0;
	bytes += dist_part_leftovers(s, remove, gone, ngone, &np);
	*count += np;
	if (parts)
		*parts += np;
	return bytes;
}

CKPT_API int ckpt_store_du(ckpt_store *s, ckpt_du **out)
{
	*out = NULL;
	struct mfset ms;
	int rc = mfset_load(s, &ms);
	if (rc)
		return rc;
	struct pk *pv = NULL;
	struct loc *lv = NULL;
	size_t np = 0, nl = 0;
	ckpt_du *du = calloc(1, sizeof *du);
	if (!du) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	du->entries = calloc(ms.n + 1, sizeof *du->entries);
	if (!du->entries) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = list_packs(s, &pv, &np)) || (rc = collect_locs(&ms, NULL, &lv, &nl)))
		goto out;
	mark_live(pv, np, lv, nl);
	/* Per checkpoint: a location referenced by one manifest only is exclusive to it. */
	size_t *slot = calloc(ms.n + 1, sizeof *slot);
	if (!slot) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ms.n; i++) {
		if (ms.err[i])
			continue;
		slot[i] = du->n;
		du->entries[du->n++].step = ms.steps[i];
		du->manifest_bytes += ms.size[i];
	}
	for (size_t i = 0; i < nl;) {
		size_t j = i;
		while (j < nl && lv[j].pack == lv[i].pack && lv[j].offset == lv[i].offset)
			j++;
		for (size_t k = i; k < j; k++) {
			ckpt_du_entry *e = &du->entries[slot[lv[k].mf]];
			e->referenced_bytes += lv[k].span;
			if (j - i == 1)
				e->exclusive_bytes += lv[k].span;
			else
				e->shared_bytes += lv[k].span;
		}
		i = j;
	}
	free(slot);
	du->invalid_manifests = ms.ninvalid;
	for (size_t i = 0; i < np; i++) {
		du->packs++;
		du->pack_bytes += pv[i].size;
		if (pv[i].live || ms.ninvalid) {
			/* With damaged manifests, nothing is known to be garbage. */
			uint64_t live = ms.ninvalid ? pv[i].size : MIN(pv[i].size, pv[i].live + PACK_HDR_LEN);
			du->live_bytes += live;
			du->dead_record_bytes += pv[i].size - live;
		} else {
			du->unreferenced_pack_bytes += pv[i].size;
		}
	}
	uint64_t cnt = 0;
	du->leftover_bytes = leftovers(s, false, NULL, 0, &cnt, NULL);
	du->part_bytes = dist_part_live(s, &du->parts);
	du->garbage_bytes = du->unreferenced_pack_bytes + du->dead_record_bytes + du->leftover_bytes;
	*out = du;
	du = NULL;
out:
	ckpt_du_free(du);
	free(pv);
	free(lv);
	mfset_free(&ms);
	return rc;
}

CKPT_API void ckpt_du_free(ckpt_du *du)
{
	if (!du)
		return;
	free(du->entries);
	free(du);
}

CKPT_API void ckpt_gc_report_free(ckpt_gc_report *r)
{
	if (!r)
		return;
	free(r->steps_removed);
	free(r->left_alone);
	free(r);
}

/* Takes the lock for a maintenance operation. Saves of this very handle would share the lock, so
 * they are refused too. */
static int maint_lock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->mu);
	int rc = 0;
	if (s->lock_users)
		rc = ckpt_fail(CKPT_E_BUSY, "store %s is busy: a save is in flight on this handle",
			       s->path);
	else
		rc = store_lock(s);
	if (!rc)
		s->lock_users++;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static void maint_unlock(struct ckpt_store *s)
{
	pthread_mutex_lock(&s->mu);
	/* Manifests and packs changed: the next save rebuilds its dedup index. */
	pthread_mutex_lock(&s->idx_mu);
	s->idx_valid = false;
	pthread_mutex_unlock(&s->idx_mu);
	if (--s->lock_users == 0)
		store_unlock(s);
	pthread_mutex_unlock(&s->mu);
}

static int refuse_invalid(struct ckpt_store *s, const struct mfset *ms, int flags)
{
	if (!ms->ninvalid || (flags & CKPT_GC_FORCE))
		return 0;
	char list[512] = "";
	size_t shown = 0;
	for (size_t i = 0; i < ms->n && shown < 3; i++)
		if (ms->err[i]) {
			char one[64];
			snprintf(one, sizeof one, "%s%020llu.ckpt (%s)", shown ? ", " : "",
				 (unsigned long long)ms->steps[i], ckpt_strerror(ms->err[i]));
			strncat(list, one, sizeof list - strlen(list) - 1);
			shown++;
		}
	return ckpt_fail(CKPT_E_CORRUPT,
			 "store %s has %zu damaged manifest(s): %s%s; their chunks are unknown, so no pack "
			 "is removed (use force to proceed anyway)",
			 s->path, ms->ninvalid, list, ms->ninvalid > shown ? ", ..." : "");
}

/* Removes packs without live records; fsyncs the directories touched. */
static int remove_dead_packs(struct ckpt_store *s, struct pk *pv, size_t np, bool dry,
			     ckpt_gc_report *rep)
{
	bool touched[MAX_DATA_DIRS + 1] = {false};
	/* Open readers may need packs no manifest names any more (prune removed theirs). */
	struct lease_set ls = {0};
	int rc = dry ? 0 : lease_scan(s, &ls);
	if (rc)
		return rc;
	for (size_t i = 0; i < np; i++) {
		if (pv[i].live)
			continue;
		if (!dry && lease_needs(&ls, pv[i].id)) {
			rep->packs_deferred++;
			continue;
		}
		rep->packs_removed++;
		rep->bytes_freed += pv[i].size;
		if (dry)
			continue;
		char p[4096];
		store_pack_path(s, pv[i].dir, pv[i].id, p, sizeof p);
		if (unlink(p) && errno != ENOENT) {
			int e = errno;
			lease_set_free(&ls);
			return ckpt_fail(ckpt_errno_code(e), "remove %s: %s", p, strerror(e));
		}
		kill_point();
		touched[pv[i].dir] = true;
	}
	lease_set_free(&ls);
	for (unsigned d = 0; d < s->ndirs; d++)
		if (touched[d] && (rc = io_fsync_dir(s->pack_dirs[d])))
			return rc;
	return 0;
}

/* Whether an open reader may still read pack id (compaction leaves the old pack to a later gc
 * then). Sets *rc on failure to read the leases. */
static bool reader_needs(struct ckpt_store *s, uint32_t id, int *rc)
{
	struct lease_set ls;
	*rc = lease_scan(s, &ls);
	bool needed = *rc || lease_needs(&ls, id);
	lease_set_free(&ls);
	return needed;
}

/* One pack chosen for compaction: its live records go to the new pack new_id. */
struct cpk {
	const struct pk *p;
	uint32_t new_id;
	size_t first, last; /* its locations in the sorted location list: [first, last) */
	uint64_t *newoff;   /* new offset of each of them */
	uint64_t at;        /* bytes written to the new pack */
	bool made;          /* the new pack file exists */
};

static int cmp_cpk(const void *a, const void *b)
{
	const struct cpk *x = a, *y = b;
	return x->p->id < y->p->id ? -1 : x->p->id > y->p->id;
}

/* Scratch of one compaction run, allocated once. */
struct cbufs {
	uint8_t *buf, *raw;
	ckpt_codec_ctx *codec;
	const ckpt_gc_policy *g; /* for its progress callback */
	uint64_t done, total;    /* record bytes copied, to copy */
};

/* Checks the record read into b->buf from src at off (header, then the digest of its payload). */
static int check_record(struct cbufs *b, const char *src, uint64_t off, struct rec_hdr *h)
{
	int rc = rec_hdr_decode(b->buf, REC_HDR_LEN, h, src);
	if (!rc)
		rc = ckpt_codec_decode(b->codec, h->codec, b->buf + REC_HDR_LEN, h->stored_len, b->raw,
				       h->raw_len);
	if (!rc) {
		ckpt_digest d;
		ckpt_digest_of(b->raw, h->raw_len, &d);
		if (!ckpt_digest_eq(&d, &h->digest))
			rc = ckpt_fail(CKPT_E_CHECKSUM, "%s: digest mismatch at offset %llu", src,
				       (unsigned long long)off);
	}
	return rc;
}

/* Copies the live records of c->p into the new pack c->new_id, each checked first. The new pack
 * is durable (data and directory entry) when it returns 0. */
static int compact_copy(struct ckpt_store *s, const struct loc *l, struct cpk *c, struct cbufs *b,
			ckpt_gc_report *rep)
{
	char src[4096], dst[4096];
	store_pack_path(s, c->p->dir, c->p->id, src, sizeof src);
	store_pack_path(s, c->p->dir, c->new_id, dst, sizeof dst);
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open %s: %s", src, strerror(e));
	}
	int outfd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (outfd < 0) {
		int e = errno;
		close(in);
		return ckpt_fail(ckpt_errno_code(e), "create %s: %s", dst, strerror(e));
	}
	c->made = true;
	struct pack_hdr ph = {.version = CKPT_FORMAT_VERSION, .pack_id = c->new_id,
			      .created = ckpt_wall_ns() / 1000000000};
	memcpy(ph.uuid, s->hdr.uuid, 16);
	pack_hdr_encode(&ph, b->buf);
	int rc = io_write_all(&ckpt_io_psync, outfd, b->buf, PACK_HDR_LEN, 0, dst);
	c->at = PACK_HDR_LEN;
	for (size_t i = c->first; !rc && i < c->last; i++) {
		if (i > c->first && l[i].offset == l[i - 1].offset) {
			c->newoff[i - c->first] = c->newoff[i - c->first - 1];
			continue;
		}
		struct rec_hdr h;
		rc = io_read_all(&ckpt_io_psync, in, b->buf, l[i].span, l[i].offset, src);
		if (!rc)
			rc = check_record(b, src, l[i].offset, &h);
		if (rc) {
			ckpt_fail_prefix("compacting %s (left in place; run verify)", src);
			break;
		}
		h.pack_id = c->new_id;
		rec_hdr_encode(&h, b->buf);
		rc = io_write_all(&ckpt_io_psync, outfd, b->buf, l[i].span, c->at, dst);
		kill_point();
		c->newoff[i - c->first] = c->at;
		c->at += l[i].span;
		rep->bytes_copied += l[i].span;
		b->done += l[i].span;
		if (b->g->on_progress)
			b->g->on_progress(b->done, b->total, b->g->progress_arg);
	}
	if (!rc && fdatasync(outfd))
		rc = ckpt_fail(CKPT_E_IO, "fdatasync %s: %s", dst, strerror(errno));
	close(in);
	close(outfd);
	if (!rc)
		rc = io_fsync_dir(s->pack_dirs[c->p->dir]);
	return rc;
}

/* Points every manifest (not skipped) at the new packs: one atomic rewrite per manifest, however
 * many of its packs moved. Counts the manifests written in *written. */
static int rewrite_manifests(struct ckpt_store *s, struct mfset *ms, const bool *skip,
			     const struct cpk *cv, size_t nc, const struct loc *l, uint64_t *written)
{
	for (size_t m = 0; m < ms->n; m++) {
		if (ms->err[m] || (skip && skip[m]))
			continue;
		struct manifest *mf = &ms->m[m];
		bool changed = false;
		for (uint32_t k = 0; k < mf->n_chunks; k++) {
			struct mf_chunk *ch = &mf->chunks[k];
			struct pk key = {.id = ch->pack_id};
			struct cpk ck = {.p = &key};
			const struct cpk *c = bsearch(&ck, cv, nc, sizeof *cv, cmp_cpk);
			if (!c)
				continue;
			size_t lo = c->first, hi = c->last;
			while (lo < hi) {
				size_t mid = (lo + hi) / 2;
				if (l[mid].offset < ch->offset)
					lo = mid + 1;
				else
					hi = mid;
			}
			ch->pack_id = c->new_id;
			ch->offset = c->newoff[lo - c->first];
			changed = true;
		}
		if (!changed)
			continue;
		uint64_t len = manifest_encoded_len(mf);
		uint8_t *enc = malloc(len);
		if (!enc)
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		manifest_encode(mf, enc);
		char name[64];
		store_mf_name(mf->step, name, sizeof name);
		int rc = io_write_atomic(s->mf_dir, name, enc, len, NULL);
		kill_point();
		free(enc);
		if (rc)
			return rc;
		(*written)++;
	}
	return 0;
}

/* Compacts the packs of cv (sorted by id): copies all of them first, then rewrites the manifests
 * once, then removes the old packs. A failed copy removes the new packs (nothing names them yet)
 * and leaves every old pack in place. */
static int compact_run(struct ckpt_store *s, struct mfset *ms, const bool *skip, struct cpk *cv,
		       size_t nc, const struct loc *l, const ckpt_gc_policy *g, ckpt_gc_report *rep)
{
	struct cbufs b = {ckpt_aligned_alloc(rec_span(CKPT_MAX_CHUNK + 65536)), malloc(CKPT_MAX_CHUNK),
			  ckpt_codec_ctx_create(CKPT_MAX_CHUNK), g, 0, 0};
	for (size_t i = 0; i < nc; i++)
		b.total += cv[i].p->live;
	int rc = 0;
	if (!b.buf || !b.raw || !b.codec)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (size_t i = 0; !rc && i < nc; i++)
		rc = compact_copy(s, l, &cv[i], &b, rep);
	uint64_t written = 0;
	if (!rc)
		rc = rewrite_manifests(s, ms, skip, cv, nc, l, &written);
	rep->manifests_rewritten += written;
	kill_point();
	bool touched[MAX_DATA_DIRS + 1] = {false};
	for (size_t i = 0; i < nc; i++) {
		char p[4096];
		if (rc) {
			/* Unless a manifest names them already, the new packs are only garbage. */
			store_pack_path(s, cv[i].p->dir, cv[i].new_id, p, sizeof p);
			if (cv[i].made && !written)
				unlink(p);
			continue;
		}
		if (reader_needs(s, cv[i].p->id, &rc)) {
			/* An open reader may still read it: no manifest names it now, so a later gc
			 * removes it as unreferenced. */
			if (!rc) {
				rep->packs_compacted++;
				rep->packs_deferred++;
			}
			continue;
		}
		store_pack_path(s, cv[i].p->dir, cv[i].p->id, p, sizeof p);
		if (unlink(p)) {
			rc = ckpt_fail(CKPT_E_IO, "remove %s: %s", p, strerror(errno));
			continue;
		}
		kill_point();
		touched[cv[i].p->dir] = true;
		rep->packs_compacted++;
		rep->bytes_freed += cv[i].p->size > cv[i].at ? cv[i].p->size - cv[i].at : 0;
	}
	for (unsigned d = 0; d < s->ndirs; d++)
		if (touched[d]) {
			int r = io_fsync_dir(s->pack_dirs[d]);
			rc = rc ? rc : r;
		}
	free(b.buf);
	free(b.raw);
	ckpt_codec_ctx_free(b.codec);
	return rc;
}

/* A pack gc may compact: partly live, and not shorter than its live records (such a pack is
 * damaged, verify names it; copying would only fail, removing it would lose what is left). */
static bool compactable(const struct pk *p)
{
	return p->live && p->size > PACK_HDR_LEN && p->live + PACK_HDR_LEN <= p->size;
}

static uint64_t dead_of(const struct pk *p)
{
	return p->size - p->live - PACK_HDR_LEN;
}

/* Marks in sel the packs to compact under policy g (see ckpt_gc_policy). */
static void choose_packs(const struct pk *pv, size_t np, const ckpt_gc_policy *g, bool *sel)
{
	uint64_t garbage = 0, bytes = 0;
	for (size_t i = 0; i < np; i++) {
		if (!pv[i].live)
			continue; /* removed whole */
		bytes += pv[i].size;
		if (!compactable(&pv[i]))
			continue;
		double share = (double)(pv[i].live + PACK_HDR_LEN) / (double)pv[i].size;
		sel[i] = share < g->compact_below;
		if (sel[i])
			bytes -= dead_of(&pv[i]);
		else
			garbage += dead_of(&pv[i]);
	}
	/* Most garbage first: the fewest bytes copied for the space given back. */
	while ((double)garbage > g->max_unused * (double)bytes) {
		size_t best = np;
		for (size_t i = 0; i < np; i++)
			if (!sel[i] && compactable(&pv[i]) && dead_of(&pv[i]) &&
			    (best == np || dead_of(&pv[i]) > dead_of(&pv[best])))
				best = i;
		if (best == np)
			break;
		sel[best] = true;
		garbage -= dead_of(&pv[best]);
		bytes -= dead_of(&pv[best]);
	}
}

/* What compacting the packs of sel would do, for a dry run. */
static void compact_predict(const struct mfset *ms, const bool *skip, const struct pk *pv,
			    size_t np, const bool *sel, ckpt_gc_report *rep)
{
	for (size_t i = 0; i < np; i++)
		if (sel[i]) {
			rep->packs_compacted++;
			rep->bytes_copied += pv[i].live;
			rep->bytes_freed += dead_of(&pv[i]);
		}
	for (size_t m = 0; m < ms->n; m++) {
		bool uses = false;
		for (uint32_t c = 0; !ms->err[m] && !(skip && skip[m]) && !uses && c < ms->m[m].n_chunks;
		     c++) {
			const struct pk *p = find_pk((struct pk *)pv, np, ms->m[m].chunks[c].pack_id);
			uses = p && sel[p - pv];
		}
		rep->manifests_rewritten += uses;
	}
}

/* Compaction under policy g after the dead packs are gone (pv, lv as collect() made them). */
static int compact(struct ckpt_store *s, struct mfset *ms, const bool *skip, struct pk *pv,
		   size_t np, const struct loc *lv, size_t nl, const ckpt_gc_policy *g, bool dry,
		   ckpt_gc_report *rep)
{
	bool *sel = calloc(np + 1, sizeof *sel);
	struct cpk *cv = calloc(np + 1, sizeof *cv);
	int rc = 0;
	if (!sel || !cv)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	if (!rc)
		choose_packs(pv, np, g, sel);
	if (!rc && dry)
		compact_predict(ms, skip, pv, np, sel, rep);
	size_t nc = 0;
	uint32_t next_id = np ? pv[np - 1].id : 0, any_max = 0;
	/* New packs take ids above every file in the pack directories, ours or not. */
	if (!rc && !dry && !(rc = store_max_pack_id(s, &any_max)))
		next_id = MAX(next_id, any_max);
	for (size_t i = 0, k = 0; !rc && !dry && i < np; i++) {
		if (!sel[i])
			continue;
		struct cpk *c = &cv[nc++];
		c->p = &pv[i];
		c->new_id = ++next_id;
		while (k < nl && lv[k].pack < pv[i].id)
			k++;
		c->first = k;
		while (k < nl && lv[k].pack == pv[i].id)
			k++;
		c->last = k;
		if (!(c->newoff = calloc(c->last - c->first + 1, sizeof *c->newoff)))
			rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	if (!rc && nc)
		rc = compact_run(s, ms, skip, cv, nc, lv, g, rep);
	for (size_t i = 0; cv && i < nc; i++)
		free(cv[i].newoff);
	free(cv);
	free(sel);
	return rc;
}

/* The common tail of prune and gc: dead packs, leftovers, compaction (g NULL: none). skip marks
 * manifests that prune removes (already gone from disk, or not in a dry run). */
static int collect(struct ckpt_store *s, struct mfset *ms, const bool *skip,
		   const ckpt_gc_policy *g, bool dry, ckpt_gc_report *rep)
{
	struct pk *pv = NULL;
	struct loc *lv = NULL;
	size_t np = 0, nl = 0;
	int rc = list_packs_rep(s, &pv, &np, rep);
	if (!rc)
		rc = collect_locs(ms, skip, &lv, &nl);
	if (!rc) {
		mark_live(pv, np, lv, nl);
		rc = remove_dead_packs(s, pv, np, dry, rep);
	}
	if (!rc)
		rep->bytes_freed += leftovers(s, !dry, rep->steps_removed, rep->n_steps_removed,
					      &rep->leftovers_removed, &rep->parts_removed);
	if (!rc && g)
		rc = compact(s, ms, skip, pv, np, lv, nl, g, dry, rep);
	free(pv);
	free(lv);
	return rc;
}

static ckpt_gc_report *new_report(void)
{
	return calloc(1, sizeof(ckpt_gc_report));
}

CKPT_API int ckpt_store_gc_with(ckpt_store *s, const ckpt_gc_policy *g, int flags,
				ckpt_gc_report **report)
{
	ckpt_gc_policy def = {.max_unused = CKPT_GC_MAX_UNUSED_DEFAULT};
	if (report)
		*report = NULL;
	if (!g)
		g = &def;
	if (!s || !(g->compact_below >= 0 && g->compact_below <= 1) ||
	    !(g->max_unused >= 0 && g->max_unused <= 1))
		return ckpt_fail(CKPT_E_INVAL, "gc: compact_below and max_unused must be 0 to 1");
	int rc = maint_lock(s);
	if (rc)
		return rc;
	ckpt_gc_report *rep = new_report();
	struct mfset ms;
	if (!rep)
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
	else if (!(rc = mfset_load(s, &ms))) {
		if (!(rc = refuse_invalid(s, &ms, flags)))
			rc = collect(s, &ms, NULL, g, flags & CKPT_GC_DRY_RUN, rep);
		mfset_free(&ms);
	}
	maint_unlock(s);
	if (rc || !report)
		ckpt_gc_report_free(rep);
	else
		*report = rep;
	return rc;
}

CKPT_API int ckpt_store_gc(ckpt_store *s, double compact_below, int flags, ckpt_gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || !(compact_below >= 0 && compact_below <= 1))
		return ckpt_fail(CKPT_E_INVAL, "gc: compaction threshold must be 0 to 1");
	ckpt_gc_policy g = {.compact_below = compact_below, .max_unused = 1};
	return ckpt_store_gc_with(s, &g, flags, report);
}

/* Sets drop[k] for each manifest of ms to remove; returns 0, or an error (nothing is removed). */
typedef int (*choose_fn)(struct ckpt_store *s, const struct mfset *ms, const void *ctx, int flags,
			 bool *drop);

/* Removes the manifests choose picks (durably, first), then collects under g. Damaged manifests
 * refuse everything unless CKPT_GC_FORCE. */
static int prune_run(struct ckpt_store *s, choose_fn choose, const void *ctx,
		     const ckpt_gc_policy *g, int flags, ckpt_gc_report **report)
{
	int rc = maint_lock(s);
	if (rc)
		return rc;
	bool dry = flags & CKPT_GC_DRY_RUN;
	ckpt_gc_report *rep = new_report();
	struct mfset ms;
	bool *drop = NULL;
	if (!rep) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out_unlock;
	}
	if ((rc = mfset_load(s, &ms)))
		goto out_unlock;
	/* With a damaged manifest nothing is removed unless forced: the operator looks first. */
	if ((rc = refuse_invalid(s, &ms, flags)))
		goto out;
	drop = calloc(ms.n + 1, sizeof *drop);
	rep->steps_removed = calloc(ms.n + 1, sizeof *rep->steps_removed);
	if (!drop || !rep->steps_removed) {
		rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
		goto out;
	}
	if ((rc = choose(s, &ms, ctx, flags, drop)))
		goto out;
	for (size_t k = 0; k < ms.n; k++)
		if (drop[k]) {
			rep->steps_removed[rep->n_steps_removed++] = ms.steps[k];
			rep->bytes_freed += ms.size[k];
		}
	/* Every pack directory must be there before anything goes: without one, the packs it
	 * holds are unknown and the collection below would fail after the manifests were removed. */
	if ((rc = pack_dirs_present(s)))
		goto out;
	/* Manifests first, durably: after this no remaining checkpoint needs what goes next. */
	for (size_t k = 0; !dry && k < ms.n; k++) {
		if (!drop[k])
			continue;
		char name[64], p[4096];
		store_mf_name(ms.steps[k], name, sizeof name);
		snprintf(p, sizeof p, "%s/%s", s->mf_dir, name);
		if (unlink(p) && errno != ENOENT) {
			int e = errno;
			rc = ckpt_fail(ckpt_errno_code(e), "remove %s: %s", p, strerror(e));
			goto out;
		}
		kill_point();
	}
	if (!dry && rep->n_steps_removed && (rc = io_fsync_dir(s->mf_dir)))
		goto out;
	rc = collect(s, &ms, drop, g, dry, rep);
out:
	mfset_free(&ms);
out_unlock:
	free(drop);
	maint_unlock(s);
	if (rc || !report)
		ckpt_gc_report_free(rep);
	else
		*report = rep;
	return rc;
}

struct by_time {
	const struct mfset *ms;
	size_t *idx; /* valid manifests, newest commit time first (then highest step) */
	size_t n;
};

static int cmp_newest(const void *a, const void *b, void *arg)
{
	const struct mfset *ms = arg;
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	if (ms->m[x].time_ns != ms->m[y].time_ns)
		return ms->m[x].time_ns > ms->m[y].time_ns ? -1 : 1;
	return ms->steps[x] > ms->steps[y] ? -1 : ms->steps[x] < ms->steps[y];
}

/* The period of a commit time for a rule: hour, day or ISO week, in UTC. */
static void period_of(int64_t time_ns, char rule, char *buf, size_t len)
{
	time_t t = (time_t)(time_ns / 1000000000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, rule == 'H' ? "%Y-%m-%d %H" : rule == 'd' ? "%Y-%m-%d" : "%G-%V", &tm);
}

/* borg's prune_split: the newest checkpoint of each of the newest n periods, skipping periods whose
 * newest is kept already; the oldest checkpoint too when fewer than n periods were found. */
static void keep_split(const struct by_time *bt, char rule, uint64_t n, bool *keep)
{
	char last[32] = "", cur[32];
	uint64_t kept = 0;
	if (!n || !bt->n)
		return;
	for (size_t i = 0; i < bt->n && kept < n; i++) {
		size_t k = bt->idx[i];
		period_of(bt->ms->m[k].time_ns, rule, cur, sizeof cur);
		if (!strcmp(cur, last))
			continue;
		strcpy(last, cur);
		if (!keep[k]) {
			keep[k] = true;
			kept++;
		}
	}
	size_t oldest = bt->idx[bt->n - 1];
	if (kept < n && !keep[oldest])
		keep[oldest] = true;
}

/* Retention (ckpt_retention), in borg's order: within, last, hourly, daily, weekly; then the
 * multiples of keep_every, the listed steps and the newest valid checkpoint. */
static int choose_retention(struct ckpt_store *s, const struct mfset *ms, const void *ctx,
			    int flags, bool *drop)
{
	(void)s;
	(void)flags;
	const ckpt_retention *r = ctx;
	struct by_time bt = {ms, calloc(ms->n + 1, sizeof(size_t)), 0};
	bool *keep = calloc(ms->n + 1, sizeof *keep);
	if (!bt.idx || !keep) {
		free(bt.idx);
		free(keep);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	for (size_t k = 0; k < ms->n; k++)
		if (!ms->err[k])
			bt.idx[bt.n++] = k;
	qsort_r(bt.idx, bt.n, sizeof *bt.idx, cmp_newest, (void *)ms);
	int64_t now = r->now ? r->now : ckpt_wall_ns() / 1000000000;
	for (size_t i = 0; r->keep_within > 0 && i < bt.n; i++)
		if (ms->m[bt.idx[i]].time_ns / 1000000000 > now - r->keep_within)
			keep[bt.idx[i]] = true;
	/* keep_last counts by step, as ckpt_store_prune() always has. */
	uint64_t kept = 0;
	for (size_t k = ms->n; k-- > 0 && kept < r->keep.keep_last;)
		if (!ms->err[k] && !keep[k]) {
			keep[k] = true;
			kept++;
		}
	keep_split(&bt, 'H', r->keep_hourly, keep);
	keep_split(&bt, 'd', r->keep_daily, keep);
	keep_split(&bt, 'w', r->keep_weekly, keep);
	bool newest = false;
	for (size_t k = ms->n; k-- > 0;) {
		if (ms->err[k])
			continue; /* never removed here: verify shows them, an operator decides */
		if (!newest)
			keep[k] = newest = true;
		if (r->keep.keep_every && ms->steps[k] % r->keep.keep_every == 0)
			keep[k] = true;
		for (size_t q = 0; q < r->keep.n_keep_steps; q++)
			keep[k] |= r->keep.keep_steps[q] == ms->steps[k];
		drop[k] = !keep[k];
	}
	free(bt.idx);
	free(keep);
	return 0;
}

CKPT_API int ckpt_store_prune_gc(ckpt_store *s, const ckpt_retention *r, const ckpt_gc_policy *g,
				 int flags, ckpt_gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || !r)
		return ckpt_fail(CKPT_E_INVAL, "prune: NULL store or policy");
	if (r->keep_within < 0)
		return ckpt_fail(CKPT_E_INVAL, "prune: keep_within must not be negative");
	if (g && (!(g->compact_below >= 0 && g->compact_below <= 1) ||
		  !(g->max_unused >= 0 && g->max_unused <= 1)))
		return ckpt_fail(CKPT_E_INVAL, "prune: compact_below and max_unused must be 0 to 1");
	return prune_run(s, choose_retention, r, g, flags, report);
}

CKPT_API int ckpt_store_prune(ckpt_store *s, const ckpt_prune_policy *pol, int flags,
			      ckpt_gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || !pol)
		return ckpt_fail(CKPT_E_INVAL, "prune: NULL store or policy");
	ckpt_retention r = {.keep = *pol};
	return ckpt_store_prune_gc(s, &r, NULL, flags, report);
}

struct step_list {
	const uint64_t *steps;
	size_t n;
};

/* "10, 20, 30" (the first few) into buf: the steps a mistyped one could have meant. */
static void list_steps(const struct mfset *ms, char *buf, size_t len)
{
	buf[0] = 0;
	for (size_t k = 0; k < ms->n; k++) {
		char one[32];
		if (k == 8) {
			strncat(buf, ", ...", len - strlen(buf) - 1);
			break;
		}
		snprintf(one, sizeof one, "%s%llu", k ? ", " : "", (unsigned long long)ms->steps[k]);
		strncat(buf, one, len - strlen(buf) - 1);
	}
}

static int choose_steps(struct ckpt_store *s, const struct mfset *ms, const void *ctx, int flags,
			bool *drop)
{
	const struct step_list *sl = ctx;
	char have[256];
	for (size_t q = 0; q < sl->n; q++) {
		size_t k = 0;
		while (k < ms->n && ms->steps[k] != sl->steps[q])
			k++;
		if (k == ms->n) {
			list_steps(ms, have, sizeof have);
			return ckpt_fail(CKPT_E_NOTFOUND, "store %s has no checkpoint of step %llu (%s%s)",
					 s->path, (unsigned long long)sl->steps[q],
					 ms->n ? "steps: " : "it has none", have);
		}
		drop[k] = true;
	}
	size_t newest = ms->n;
	while (newest-- > 0 && ms->err[newest])
		;
	if (newest < ms->n && drop[newest] && !(flags & CKPT_GC_NEWEST))
		return ckpt_fail(CKPT_E_INVAL, "step %llu is the newest valid checkpoint of %s, which "
				 "is kept", (unsigned long long)ms->steps[newest], s->path);
	return 0;
}

CKPT_API int ckpt_store_delete(ckpt_store *s, const uint64_t *steps, size_t n,
			       const ckpt_gc_policy *g, int flags, ckpt_gc_report **report)
{
	if (report)
		*report = NULL;
	if (!s || (n && !steps))
		return ckpt_fail(CKPT_E_INVAL, "delete: NULL store or steps");
	if (g && (!(g->compact_below >= 0 && g->compact_below <= 1) ||
		  !(g->max_unused >= 0 && g->max_unused <= 1)))
		return ckpt_fail(CKPT_E_INVAL, "delete: compact_below and max_unused must be 0 to 1");
	struct step_list sl = {steps, n};
	return prune_run(s, choose_steps, &sl, g, flags, report);
}
