/* The store as gc sees it: every manifest (decoded where possible), this store's packs (proven by
 * the uuid in their header), the chunk locations the valid manifests reference and the live bytes
 * of each pack, the leftovers of interrupted writers; and the crash points of lib/gc's test build.
 * Reads only, except gc_leftovers() when told to remove. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "dist/dist.h"
#include "store/marker.h"
#include "gc/gc_int.h"
#include "store/lease.h"
#include "store/store.h"

#ifdef CKPT_TEST_HOOKS
void gc_kill_point(void)
{
	static long n;
	const char *e = getenv("CKPT_GC_KILL_AT");
	if (e && ++n == atol(e))
		raise(SIGKILL);
}
#endif

void gc_mfset_free(struct mfset *ms)
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

int gc_mfset_load(struct ckpt_store *s, struct mfset *ms)
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
		gc_mfset_free(ms);
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < ms->n; i++) {
		int rc = store_load_manifest(s, ms->steps[i], &ms->m[i]);
		if (rc == -CKPT_E_NOMEM) {
			for (size_t k = 0; k < i; k++)
				if (!ms->err[k])
					manifest_free(&ms->m[k]);
			ms->n = 0;
			gc_mfset_free(ms);
			return rc;
		}
		ms->err[i] = rc ? -rc : 0;
		ms->ninvalid += rc != 0;
		char name[64], p[4096];
		struct stat st;
		store_mf_name(ms->steps[i], name, sizeof name);
		snprintf(p, sizeof p, "%s/%s", s->layout.mf_dir, name);
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
static void left_alone(gc_report *rep, const char *dir, const char *name, const char *why)
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

/* Whether the pack file proves to be this store's: its header carries the store's uuid. Another
 * store may share a data directory, or packs/ may lead into another store; a name alone proves
 * nothing. Returns NULL when it is ours, else the reason. */
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
static size_t drop_duplicates(struct ckpt_store *s, struct pk *v, size_t n, gc_report *rep)
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
				left_alone(rep, s->layout.pack_dirs[v[q].dir], name,
					   "the same pack id exists in another pack directory");
			}
		}
		i = j;
	}
	return k;
}

/* This store's packs, by id. Everything else in the pack directories is left alone (and counted
 * in rep when given). */
int gc_list_packs(struct ckpt_store *s, struct pk **out, size_t *nout, gc_report *rep)
{
	size_t n = 0, cap = 64;
	struct pk *v = malloc(cap * sizeof *v);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	for (unsigned d = 0; d < s->layout.ndirs; d++) {
		DIR *dir = opendir(s->layout.pack_dirs[d]);
		if (!dir) {
			int e = errno;
			free(v);
			return ckpt_fail(ckpt_errno_code(e), "open %s: %s", s->layout.pack_dirs[d],
					 strerror(e));
		}
		struct dirent *e;
		while ((e = readdir(dir))) {
			uint32_t id;
			struct stat st;
			size_t nl = strlen(e->d_name);
			if (!canonical_pack_id(e->d_name, &id)) {
				if (nl > 5 && !strcmp(e->d_name + nl - 5, ".pack"))
					left_alone(rep, s->layout.pack_dirs[d], e->d_name,
						   "not a canonical pack name (NNNNNNNN.pack)");
				continue;
			}
			const char *why = not_our_pack(s, dirfd(dir), e->d_name, &st);
			if (why) {
				left_alone(rep, s->layout.pack_dirs[d], e->d_name, why);
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
int gc_pack_dirs_present(struct ckpt_store *s)
{
	for (unsigned d = 0; d < s->layout.ndirs; d++) {
		DIR *dir = opendir(s->layout.pack_dirs[d]);
		if (!dir) {
			int e = errno;
			return ckpt_fail(ckpt_errno_code(e), "open %s: %s; nothing was removed",
					 s->layout.pack_dirs[d], strerror(e));
		}
		closedir(dir);
	}
	return 0;
}

struct pk *gc_find_pk(struct pk *v, size_t n, uint32_t id)
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
int gc_collect_locs(const struct mfset *ms, const bool *skip, struct loc **out, size_t *nout)
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
void gc_mark_live(struct pk *pv, size_t np, const struct loc *l, size_t nl)
{
	for (size_t i = 0; i < nl; i++) {
		if (i && l[i].pack == l[i - 1].pack && l[i].offset == l[i - 1].offset)
			continue;
		struct pk *p = gc_find_pk(pv, np, l[i].pack);
		if (p)
			p->live += l[i].span;
	}
}

/* Temporary files of interrupted writers: ".NAME.tmp.PID" in the manifests and store directories;
 * and the parts of multi-rank checkpoints that do not exist or are among gone (a prune's). */
uint64_t gc_leftovers(struct ckpt_store *s, bool remove, const uint64_t *gone, size_t ngone,
		      uint64_t *count, uint64_t *parts)
{
	const char *dirs[2] = {s->layout.mf_dir, s->path};
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
				gc_kill_point();
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

void gc_defer(gc_report *rep, const struct lease_set *ls)
{
	rep->packs_deferred++;
	if (!rep->reader && ls->live) {
		char one[300];
		snprintf(one, sizeof one, "%s%s", ls->who, ls->live > 1 ? ", and more" : "");
		rep->reader = strdup(one);
	}
}

/* Whether a save is in flight anywhere (its in-flight marker, store/marker.c): gc then removes
 * no unreferenced pack and no leftover (gc.c) and compacts nothing (gc_compact.c). */
bool gc_save_in_flight(struct ckpt_store *s, bool dry, gc_report *rep, int *rc)
{
	struct marker_set ms;
	*rc = marker_scan(s, s->opt.gc_grace_s, !dry, &ms);
	if (*rc)
		return true;
	if (ms.live && !rep->in_flight) {
		char one[400];
		snprintf(one, sizeof one, "%s%s", ms.who, ms.live > 1 ? ", and more" : "");
		rep->in_flight = strdup(one);
	}
	return ms.live > 0;
}
