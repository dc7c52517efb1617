/* STORE/packids (docs/format.md): per pack id range, the highest id a pack of this store ever had
 * that may be gone now. A remote copy of the store names its pack objects by id, and a push skips
 * a pack the remote holds under the same id; so an id, once used, must never name another pack.
 * gc raises the marks before it removes any pack, and binding a fresh store to a remote
 * (ckpt_remote_adopt) raises them to the remote's ids; writers allocate above them: the
 * allocator of a handle's new pack ids is here too (struct store_packs, s->packs). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/common.h"
#include "io/io.h"
#include "store/store.h"

#define PACKIDS_MAX_LEN 65536 /* 1024 ranges of at most 22 bytes a line, and room */

/* Parses the file's text into marks[] (zeroed first): lines "R N" (range, highest id), R
 * ascending, N inside range R. Returns 0 or -CKPT_E_CORRUPT naming path. */
static int parse(const char *path, const char *p, size_t len, uint32_t *marks)
{
	memset(marks, 0, STORE_PACK_RANGES * sizeof *marks);
	const char *end = p + len;
	long last = -1;
	while (p < end) {
		char *e;
		errno = 0;
		unsigned long r = strtoul(p, &e, 10);
		bool ok = e > p && *p >= '0' && *p <= '9' && e < end && *e == ' ' && !errno;
		unsigned long id = ok ? strtoul(p = e + 1, &e, 10) : 0;
		ok = ok && e > p && *p >= '0' && *p <= '9' && e < end && *e == '\n' && !errno &&
		     r < STORE_PACK_RANGES && (long)r > last && id <= UINT32_MAX &&
		     id >> STORE_PACK_RANGE_BITS == r;
		if (!ok)
			return ckpt_fail(CKPT_E_CORRUPT, "%s: line %ld is not \"RANGE ID\" (ranges "
					 "ascending, each id inside its range)", path, last + 2);
		marks[r] = (uint32_t)id;
		last = (long)r;
		p = e + 1;
	}
	return 0;
}

/* Reads the marks of the store in directory dir (all zero when the file is absent). */
static int load(const char *dir, uint32_t *marks)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/" STORE_PACKIDS, dir);
	uint8_t *buf;
	size_t len;
	int rc = io_slurp(path, PACKIDS_MAX_LEN, &buf, &len);
	if (rc == -CKPT_E_NOTFOUND) {
		memset(marks, 0, STORE_PACK_RANGES * sizeof *marks);
		return 0;
	}
	if (rc)
		return rc;
	rc = parse(path, (const char *)buf, len, marks);
	free(buf);
	return rc;
}

int store_packid_mark(const char *dir, uint32_t range, uint32_t *mark)
{
	uint32_t *marks = malloc(STORE_PACK_RANGES * sizeof *marks);
	if (!marks)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	int rc = load(dir, marks);
	*mark = rc || range >= STORE_PACK_RANGES ? 0 : marks[range];
	free(marks);
	return rc;
}

int store_packids_raise(const char *dir, const uint32_t *ids, size_t n)
{
	uint32_t *marks = malloc(STORE_PACK_RANGES * sizeof *marks);
	char *text = malloc(PACKIDS_MAX_LEN);
	int rc = marks && text ? load(dir, marks) : ckpt_fail(CKPT_E_NOMEM, "out of memory");
	bool changed = false;
	for (size_t i = 0; !rc && i < n; i++) {
		uint32_t *m = &marks[ids[i] >> STORE_PACK_RANGE_BITS];
		if (ids[i] > *m) {
			*m = ids[i];
			changed = true;
		}
	}
	size_t len = 0;
	for (uint32_t r = 0; !rc && changed && r < STORE_PACK_RANGES; r++)
		if (marks[r])
			len += (size_t)snprintf(text + len, PACKIDS_MAX_LEN - len, "%u %u\n", r,
						marks[r]);
	if (!rc && changed)
		rc = io_write_atomic(dir, STORE_PACKIDS, text, len, NULL);
	free(marks);
	free(text);
	return rc;
}

void store_packs_init(struct store_packs *p)
{
	p->io = ckpt_io_default();
}

uint32_t store_new_pack_id(struct ckpt_store *s)
{
	return __atomic_add_fetch(&s->packs.next_id, 1, __ATOMIC_SEQ_CST);
}

bool store_direct_io(const struct ckpt_store *s)
{
	return s->opt.direct_io && !__atomic_load_n(&s->packs.direct_refused, __ATOMIC_RELAXED);
}

void store_refuse_direct(struct ckpt_store *s)
{
	__atomic_store_n(&s->packs.direct_refused, true, __ATOMIC_RELAXED);
}

/* Whether pack id names a file in any pack directory (an id names one pack across all of
 * them); a stat that fails otherwise than ENOENT counts as taken, so that the id is skipped. */
static bool pack_taken(const struct ckpt_store *s, uint32_t id)
{
	for (unsigned d = 0; d < s->layout.ndirs; d++) {
		char p[4096];
		struct stat st;
		store_pack_path(s, d, id, p, sizeof p);
		if (lstat(p, &st) == 0 || errno != ENOENT)
			return true;
	}
	return false;
}

/* The last id of the run of taken ids that follows from (from itself taken, or the start of the
 * range), below hi: a galloping probe then a bisection, O(log run) stats. Ids are taken in
 * ascending order from the range's start, so the run ends at the writer's highest pack, unless
 * gc removed a pack in the middle: the probe may then stop in that hole. The ids there are free
 * (no manifest, no index entry names a removed pack), and create_pack's O_EXCL and its skip of
 * a taken run (store_skip_taken_ids) keep every later id unique. */
static uint32_t probe_taken(const struct ckpt_store *s, uint32_t from, uint32_t hi)
{
	uint32_t a = from, b = hi; /* a: from or taken; b: free or hi */
	for (uint32_t step = 1; hi - a > step; step *= 2) {
		if (!pack_taken(s, a + step)) {
			b = a + step;
			break;
		}
		a += step;
	}
	while (b - a > 1) {
		uint32_t m = a + (b - a) / 2;
		if (pack_taken(s, m))
			a = m;
		else
			b = m;
	}
	return a;
}

int store_max_pack_id(struct ckpt_store *s, uint32_t *out)
{
	/* Each writer allocates in its own id range (store.h, DIST_PACK_LO). */
	uint64_t lo = s->lock.part_mode ? DIST_PACK_LO(s->lock.part_rank) : 0;
	uint64_t hi = s->lock.part_mode ? DIST_PACK_LO(s->lock.part_rank + 1) : DIST_PACK_LO(0);
	/* Never below an id gc removed (or a remote holds): packids.c. */
	uint32_t mark;
	int rc = store_packid_mark(s->path, (uint32_t)(lo >> STORE_PACK_RANGE_BITS), &mark);
	if (rc)
		return rc;
	if (s->lock.part_mode) {
		/* Every rank of every save: listing the shared directories (all ranks' packs) would
		 * cost each rank O(packs of the store) per save; probing the rank's own range from
		 * this handle's last id (its previous save's, when it was this rank's) or the mark
		 * costs a few stats. */
		uint32_t last = __atomic_load_n(&s->packs.next_id, __ATOMIC_SEQ_CST);
		uint32_t from = last >= lo && last < hi ? last : (uint32_t)lo;
		*out = probe_taken(s, MAX(from, mark), (uint32_t)hi);
		return 0;
	}
	uint32_t mx = mark;
	for (unsigned i = 0; i < s->layout.ndirs; i++) {
		DIR *d = opendir(s->layout.pack_dirs[i]);
		if (!d) {
			int e = errno;
			return ckpt_fail(ckpt_errno_code(e), "open %s: %s", s->layout.pack_dirs[i],
					 strerror(e));
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			char *end;
			unsigned long v = strtoul(e->d_name, &end, 10);
			if (end != e->d_name && !strcmp(end, ".pack") && v > mx && v <= UINT32_MAX &&
			    v < hi)
				mx = (uint32_t)v;
		}
		closedir(d);
	}
	*out = mx;
	return 0;
}

void store_skip_taken_ids(struct ckpt_store *s)
{
	uint32_t lo = DIST_PACK_LO(s->lock.part_rank), hi = DIST_PACK_LO(s->lock.part_rank + 1);
	uint32_t cur = __atomic_load_n(&s->packs.next_id, __ATOMIC_SEQ_CST);
	if (!s->lock.part_mode || cur < lo || cur >= hi)
		return;
	uint32_t last = probe_taken(s, cur, hi);
	while (cur < last && !__atomic_compare_exchange_n(&s->packs.next_id, &cur, last, false,
							  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
}
