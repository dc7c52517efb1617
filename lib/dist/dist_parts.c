/* STORE/parts/<step>: who may write a multi-rank checkpoint's part files, and which of them gc
 * may take.
 *
 * The claim: rank 0 of a job saving step holds an exclusive flock on parts/<step>/CLAIM from
 * begin to the end of its commit. The store's LOCK is shared by every multi-rank writer (ranks
 * must not exclude each other), so without it two jobs saving one step would write the same part
 * names and race to the global manifest. Holding the claim, rank 0 checks that the checkpoint
 * does not exist yet and clears what a dead save of the step left, before any rank writes; part
 * files and the global manifest are then created without ever replacing a file, so a rank of a
 * dead save still running can make the new save fail but never damage what it commits.
 *
 * gc and du: a parts/<step> directory is the checkpoint's when its global manifest exists (then
 * only <R>.part for R below its world are), leftovers otherwise. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "dist/dist.h"
#include "format/format.h"
#include "store/marker.h"
#include "store/store.h"

#define CLAIM_FILE "CLAIM"

static bool dot_name(const char *n)
{
	return n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]));
}

static bool mf_exists(struct ckpt_store *s, uint64_t step)
{
	char name[64], p[4096];
	store_mf_name(step, name, sizeof name);
	snprintf(p, sizeof p, "%s/%s", s->layout.mf_dir, name);
	return access(p, F_OK) == 0 || errno != ENOENT;
}

static int exists_error(struct ckpt_store *s, uint64_t step)
{
	return ckpt_fail(CKPT_E_EXISTS, "checkpoint %" PRIu64 " already exists in store %s "
			 "(committed by another job)", step, s->path);
}

/* Removes every entry of parts/<step> but the claim: a dead save's parts and temporary files
 * (symbolic links are removed, never followed). */
static int clear_step_dir(int dfd, const char *dir)
{
	DIR *d = fdopendir(dup(dfd));
	if (!d)
		return ckpt_fail(ckpt_errno_code(errno), "open %s: %s", dir, strerror(errno));
	struct dirent *e;
	int rc = 0, removed = 0;
	while ((e = readdir(d)) && !rc) {
		struct stat st;
		if (dot_name(e->d_name) || !strcmp(e->d_name, CLAIM_FILE) ||
		    fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) || S_ISDIR(st.st_mode))
			continue;
		if (unlinkat(dfd, e->d_name, 0) && errno != ENOENT)
			rc = ckpt_fail(ckpt_errno_code(errno), "remove %s/%s (left by an earlier save "
				       "of this step): %s", dir, e->d_name, strerror(errno));
		removed++;
	}
	closedir(d);
	/* Durable before any rank writes: a power cut must not bring a dead save's part back
	 * beside the new ones. Nothing removed (the usual case) costs no fsync at begin. */
	if (!rc && removed && fsync(dfd))
		rc = ckpt_fail(CKPT_E_IO, "fsync %s: %s", dir, strerror(errno));
	return rc;
}

/* Records who holds the claim, for the error of a job that finds it taken. */
static void write_holder(int fd, unsigned world)
{
	char host[256] = "?", when[32] = "?", buf[512];
	gethostname(host, sizeof host - 1);
	time_t now = time(NULL);
	struct tm tm;
	if (gmtime_r(&now, &tm))
		strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
	int n = snprintf(buf, sizeof buf, "a save of %u ranks, rank 0 pid %ld on host %s since %s",
			 world, (long)getpid(), host, when);
	if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, (size_t)n, 0) < 0)
		return; /* only a message is lost */
}

static int busy_error(struct ckpt_store *s, uint64_t step, int fd)
{
	char who[512];
	ssize_t n = pread(fd, who, sizeof who - 1, 0);
	who[n > 0 ? n : 0] = 0;
	return ckpt_fail(CKPT_E_BUSY, "checkpoint %" PRIu64 " of store %s is being saved by another "
			 "job (%s); one job at a time saves a step", step, s->path,
			 n > 0 ? who : "its holder not recorded yet");
}

int dist_claim_step(struct ckpt_store *s, uint64_t step, unsigned world, int *out)
{
	*out = -1;
	char dir[4096];
	int rc = store_part_dir(s, step, dir, sizeof dir);
	if (rc)
		return rc;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int fd = dfd < 0 ? -1 : openat(dfd, CLAIM_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
				       0644);
	if (fd < 0)
		rc = ckpt_fail(ckpt_errno_code(errno), "claim %s/%s: %s", dir, CLAIM_FILE,
			       strerror(errno));
	else if (flock(fd, LOCK_EX | LOCK_NB))
		rc = errno != EWOULDBLOCK ? ckpt_fail(ckpt_errno_code(errno), "flock %s/%s: %s", dir,
						      CLAIM_FILE, strerror(errno)) :
		     mf_exists(s, step) ? exists_error(s, step) : busy_error(s, step, fd);
	/* Checked again holding the claim: another job may have committed since begin looked. */
	else if (mf_exists(s, step))
		rc = exists_error(s, step);
	else if (!(rc = clear_step_dir(dfd, dir)))
		write_holder(fd, world);
	if (dfd >= 0)
		close(dfd);
	if (rc && fd >= 0)
		close(fd); /* the file stays: unlinking it could let two jobs hold two claims */
	if (!rc)
		*out = fd;
	return rc;
}

void dist_claim_release(struct ckpt_store *s, uint64_t step, int fd, bool committed)
{
	/* Every rank's in-flight marker ends here, not with its part save: the rank's packs are
	 * unreferenced until the global manifest names them (store_unlock keeps it in part_mode). */
	pthread_mutex_lock(&s->lock.mu);
	marker_end(s);
	pthread_mutex_unlock(&s->lock.mu);
	if (fd < 0)
		return;
	/* After a commit the file can go: a job that still opens the old one and locks it finds
	 * the manifest and stops with EXISTS. After a failure it stays (the next claimer or gc
	 * takes the directory). */
	if (committed) {
		char p[4096];
		dist_part_path(s, step, -1, p, sizeof p);
		size_t l = strlen(p);
		snprintf(p + l, sizeof p - l, "/%s", CLAIM_FILE);
		unlink(p);
	}
	close(fd);
}

/* Opens directory name (relative to at) for reading, never through a symbolic link; NULL when
 * it is missing, a link or not a directory. */
static DIR *opendir_nofollow(int at, const char *name)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d && fd >= 0)
		close(fd);
	return d;
}

/* What gc keeps of one parts/<step> directory. */
enum { KEEP_NONE = -2, KEEP_ALL = -1 }; /* or >= 0: the part files of ranks below it */

static bool kept(const char *name, long keep)
{
	if (keep == KEEP_ALL || keep == KEEP_NONE)
		return keep == KEEP_ALL;
	char canon[32], *end;
	unsigned long r = strtoul(name, &end, 10);
	snprintf(canon, sizeof canon, "%lu.part", r);
	return name[0] >= '0' && name[0] <= '9' && r < (unsigned long)keep && !strcmp(canon, name);
}

/* Counts (the kept files when live, the others when not) and, when remove, removes what is not
 * kept of one parts/<step> directory, then the directory when nothing is kept. The claim is
 * removed with the rest but never counted: it is not data. */
static uint64_t scan_part_dir(int top, const char *name, long keep, bool live, bool remove,
			      uint64_t *count)
{
	DIR *d = opendir_nofollow(top, name);
	if (!d)
		return 0;
	uint64_t bytes = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (dot_name(e->d_name) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode))
			continue;
		bool claim = !strcmp(e->d_name, CLAIM_FILE), k = !claim && kept(e->d_name, keep);
		if (!claim && k == live) {
			bytes += (uint64_t)st.st_size;
			(*count)++;
		}
		if (remove && !k)
			unlinkat(dirfd(d), e->d_name, 0);
	}
	if (remove && keep != KEEP_NONE)
		fsync(dirfd(d));
	closedir(d);
	if (remove && keep == KEEP_NONE)
		unlinkat(top, name, AT_REMOVEDIR);
	return bytes;
}

static bool in_list(uint64_t step, const uint64_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == step)
			return true;
	return false;
}

/* What of parts/<step> belongs to checkpoint step: nothing when it has no manifest file (a save
 * that never committed, a pruned one), is among gone (what a dry-run prune would remove) or is a
 * single-process one (a failed multi-rank save of the same step preceded it); everything when
 * its manifest does not decode (the parts may be what a repaired checkpoint needs); else the
 * parts of its world's ranks (a dead save of more ranks may have left others). */
static long step_keep(struct ckpt_store *s, uint64_t step, const uint64_t *gone, size_t ngone)
{
	if (in_list(step, gone, ngone) || !mf_exists(s, step))
		return KEEP_NONE;
	struct manifest m;
	if (store_load_manifest(s, step, &m))
		return KEEP_ALL;
	long keep = m.version < CKPT_MANIFEST_V_DIST ? KEEP_NONE : KEEP_ALL;
	for (uint32_t i = 0; i < m.n_meta && keep == KEEP_ALL; i++) {
		const char *v = m.meta[i].value;
		uint64_t w;
		if (!strcmp(m.meta[i].key, DIST_WORLD) && !dist_parse_u64(&v, DIST_MAX_RANKS, &w) &&
		    !*v && w)
			keep = (long)w;
	}
	manifest_free(&m);
	return keep;
}

/* Walks parts/: counts what belongs to checkpoints (live) or not (!live), and removes what does
 * not when remove (gc, holding the store's lock exclusively: no save is in flight). */
static uint64_t walk_parts(struct ckpt_store *s, bool live, bool remove, const uint64_t *gone,
			   size_t ngone, uint64_t *count)
{
	char top[4096];
	snprintf(top, sizeof top, "%s/%s", s->path, PART_DIR);
	/* A symlinked parts/ is not followed (gc would remove files outside the store through it);
	 * scan_part_dir does not follow a symlinked parts/<step> either. */
	DIR *d = opendir_nofollow(AT_FDCWD, top);
	if (!d)
		return 0;
	uint64_t bytes = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		unsigned long long step = strtoull(e->d_name, &end, 10);
		if (strlen(e->d_name) != 20 || *end)
			continue;
		long keep = step_keep(s, step, gone, ngone);
		if (live && keep == KEEP_NONE)
			continue;
		bytes += scan_part_dir(dirfd(d), e->d_name, keep, live, remove, count);
	}
	if (remove)
		fsync(dirfd(d));
	closedir(d);
	return bytes;
}

uint64_t dist_part_leftovers(struct ckpt_store *s, bool remove, const uint64_t *gone, size_t ngone,
			     uint64_t *count)
{
	return walk_parts(s, false, remove, gone, ngone, count);
}

uint64_t dist_part_live(struct ckpt_store *s, uint64_t *count)
{
	return walk_parts(s, true, false, NULL, 0, count);
}
