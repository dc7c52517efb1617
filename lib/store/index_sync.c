/* Keeping the dedup index current without rereading every manifest (a storm of metadata reads:
 * N ranks each rebuilding the index from every manifest at every step read N x steps
 * manifests per step from a parallel file system). The index remembers which manifest files it
 * was built from (step, inode, size, mtime); when the manifests directory only gained files, it
 * reads just those; when one it was built from changed or went (prune, gc's rewrite), it
 * rebuilds from all of them, as it always did. Listing the directory and one stat per file stay:
 * they are how another process's commit is seen. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "store/index.h"
#include "store/store.h"

struct mf_seen {
	uint64_t step, ino, size;
	int64_t sec, nsec;
};

#ifdef CKPT_TEST_HOOKS
/* Test builds: manifests read into the dedup index, by every handle of the process. */
unsigned long ckpt_test_index_reads;
#define COUNT_READ() __atomic_add_fetch(&ckpt_test_index_reads, 1, __ATOMIC_RELAXED)
#else
#define COUNT_READ() ((void)0)
#endif

static int name_step(const char *n, uint64_t *step)
{
	if (strlen(n) != 25 || strcmp(n + 20, ".ckpt"))
		return -1;
	uint64_t v = 0;
	for (int i = 0; i < 20; i++) {
		if (n[i] < '0' || n[i] > '9' || __builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(n[i] - '0'), &v))
			return -1;
	}
	*step = v;
	return 0;
}

static int cmp_seen(const void *a, const void *b)
{
	const struct mf_seen *x = a, *y = b;
	return x->step < y->step ? -1 : x->step > y->step;
}

/* The manifest files now, sorted by step. */
static int list_seen(struct ckpt_store *s, struct mf_seen **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir(s->layout.mf_dir);
	if (!d) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open %s: %s", s->layout.mf_dir, strerror(e));
	}
	size_t cap = 0;
	struct mf_seen *v = NULL;
	struct dirent *e;
	int rc = 0;
	while (!rc && (e = readdir(d))) {
		uint64_t step;
		struct stat st;
		if (name_step(e->d_name, &step) || fstatat(dirfd(d), e->d_name, &st, 0))
			continue;
		if (*n == cap) {
			struct mf_seen *nv = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
			if (!nv) {
				rc = ckpt_fail(CKPT_E_NOMEM, "out of memory");
				break;
			}
			v = nv;
		}
		v[(*n)++] = (struct mf_seen){step, (uint64_t)st.st_ino, (uint64_t)st.st_size,
					     st.st_mtim.tv_sec, st.st_mtim.tv_nsec};
	}
	closedir(d);
	if (rc) {
		free(v);
		*n = 0;
		return rc;
	}
	if (*n)
		qsort(v, *n, sizeof *v, cmp_seen);
	*out = v;
	return 0;
}

/* Whether every file of old (sorted) is in now (sorted), unchanged. */
static bool only_added(const struct mf_seen *old, size_t no, const struct mf_seen *now, size_t nn)
{
	size_t j = 0;
	for (size_t i = 0; i < no; i++) {
		while (j < nn && now[j].step < old[i].step)
			j++;
		if (j == nn || memcmp(&now[j], &old[i], sizeof *old))
			return false;
	}
	return true;
}

static bool seen_has(const struct mf_seen *v, size_t n, uint64_t step)
{
	struct mf_seen key = {.step = step};
	return n && bsearch(&key, v, n, sizeof *v, cmp_seen) != NULL; /* v is NULL when n is 0 */
}

/* Adds the chunks of manifest step. Its copy of a chunk replaces the one the index had: after a
 * multi-rank commit the global manifest names one copy per digest, possibly another rank's than
 * the one this rank wrote, and only the named copy is live for gc. A damaged manifest only means
 * fewer chunks to reuse. */
static int load_one(struct ckpt_store *s, uint64_t step)
{
	struct manifest m;
	COUNT_READ();
	int rc = store_load_manifest(s, step, &m);
	if (rc)
		return rc == -CKPT_E_NOMEM ? rc : 0;
	for (uint32_t c = 0; c < m.n_chunks && !rc; c++) {
		struct idx_entry *e = index_put(&s->index.idx, &m.chunks[c]);
		if (!e)
			rc = ckpt_fail(CKPT_E_NOMEM, "dedup index: out of memory");
		else
			e->c = m.chunks[c];
	}
	manifest_free(&m);
	return rc;
}

int store_refresh_index(struct ckpt_store *s)
{
	struct mf_seen *now;
	size_t n;
	int rc = list_seen(s, &now, &n);
	if (rc)
		return rc;
	bool incremental = s->index.valid && only_added(s->index.seen, s->index.nseen, now, n);
	if (!incremental) {
		index_free(&s->index.idx);
		s->index.valid = false;
	}
	for (size_t i = 0; i < n && !rc; i++)
		if (!incremental || !seen_has(s->index.seen, s->index.nseen, now[i].step))
			rc = load_one(s, now[i].step);
	free(s->index.seen);
	s->index.seen = NULL;
	s->index.nseen = 0;
	if (rc) {
		free(now);
		index_free(&s->index.idx);
		s->index.valid = false;
		return rc;
	}
	s->index.seen = now;
	s->index.nseen = n;
	s->index.valid = true;
	return 0;
}

int store_index_resync(struct ckpt_store *s)
{
	/* After this handle's own commit: its manifest's chunks are in the index already. What
	 * else appeared meanwhile is taken as seen, as the directory signature did before. */
	struct mf_seen *now;
	size_t n;
	int rc = list_seen(s, &now, &n);
	if (rc || !only_added(s->index.seen, s->index.nseen, now, n)) {
		free(now);
		s->index.valid = false;
		return rc;
	}
	free(s->index.seen);
	s->index.seen = now;
	s->index.nseen = n;
	return 0;
}

/* The first write of a handle: the writer lock, pack ids above every pack on disk, the io ops
 * and an index current with every committed manifest. Here rather than in store.c because the
 * index refresh reads manifests through store_load_manifest (one-way: this file -> store). */
int store_begin_write(struct ckpt_store *s)
{
	uint32_t maxid = 0;
	int rc = store_lock(s, "save");
	if (!rc && !(rc = store_max_pack_id(s, &maxid))) {
		__atomic_store_n(&s->packs.next_id, maxid, __ATOMIC_SEQ_CST);
		s->packs.io = ckpt_io_default();
		pthread_mutex_lock(&s->index.mu);
		rc = store_refresh_index(s);
		pthread_mutex_unlock(&s->index.mu);
	}
	if (rc)
		store_unlock(s);
	return rc;
}
