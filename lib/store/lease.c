/* Reader leases: readers announce which packs they may read, so that gc and prune defer removing
 * those packs (an open reader holds a manifest in memory that prune may remove or compaction may
 * rewrite; its packs must outlive it, as an open file outlives its unlink).
 *
 * A lease is STORE/leases/<random>.lease, held with a shared flock by the reader for as long as it
 * is open. It is created under a temporary name, locked, and only then renamed into place, so a
 * visible lease is either locked by a live reader or belongs to a dead one: a lock held by a dead
 * process disappears with it (that is why a lock beats a pid file). gc takes each lease with
 * LOCK_EX|LOCK_NB: success means the reader is gone, and the lease is removed.
 *
 * Contents: "pending\n" while the reader loads its manifest (gc then defers every removal), then
 * "packs N\n" followed by N pack ids and "end\n". The reader publishes its lease before it reads
 * the manifest, and gc scans the leases after the manifests no longer name what it removes: a
 * reader gc did not see loads a manifest that does not need the removed packs. */
#include "store/lease.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

#define LEASE_DIR "leases"
#define LEASE_SUFFIX ".lease"

struct lease {
	int dirfd;
	int fd;
	char name[64];
};

/* Opens (creating) STORE/leases; never through a symbolic link. Returns the fd or -errno. */
static int open_lease_dir(struct ckpt_store *s, bool create)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", s->path, LEASE_DIR);
	if (create && mkdir(p, 0755) && errno != EEXIST)
		return -errno;
	int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int write_text(int fd, const char *text, size_t len)
{
	if (ftruncate(fd, 0))
		return -errno;
	for (size_t off = 0; off < len;) {
		ssize_t n = pwrite(fd, text + off, len - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		off += (size_t)n;
	}
	return 0;
}

int lease_take(struct ckpt_store *s, struct lease **out)
{
	*out = NULL;
	/* Read-only handles (verify, export) take leases too: the lease is not store data. */
	struct lease *l = calloc(1, sizeof *l);
	if (!l)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	l->fd = -1;
	l->dirfd = open_lease_dir(s, true);
	if (l->dirfd < 0) {
		int e = -l->dirfd;
		free(l);
		/* A store this user may not write to: read without a lease, as before. */
		if (e == EACCES || e == EROFS || e == EPERM)
			return 0;
		return ckpt_fail(e == ELOOP ? CKPT_E_PERM : CKPT_E_IO, "%s/%s: %s", s->path, LEASE_DIR,
				 e == ELOOP ? "is a symbolic link; refusing it" : strerror(e));
	}
	for (int attempt = 0; attempt < 8 && l->fd < 0; attempt++) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
			r = (uint64_t)ckpt_wall_ns() * 0x9e3779b97f4a7c15ull + (uint64_t)attempt;
		char tmp[80];
		snprintf(l->name, sizeof l->name, "%016llx" LEASE_SUFFIX, (unsigned long long)r);
		snprintf(tmp, sizeof tmp, ".%s.tmp", l->name);
		int fd = openat(l->dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0 && errno == EEXIST)
			continue;
		if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
			/* leases/ exists but is not ours to write: read without a lease */
			close(l->dirfd);
			free(l);
			return 0;
		}
		if (fd < 0 || flock(fd, LOCK_SH) || write_text(fd, "pending\n", 8) ||
		    renameat(l->dirfd, tmp, l->dirfd, l->name)) {
			/* gc may have taken an unlocked temporary file for a dead reader's: retry */
			int e = errno;
			if (fd >= 0)
				close(fd);
			unlinkat(l->dirfd, tmp, 0);
			if (e == ENOENT)
				continue;
			close(l->dirfd);
			free(l);
			return ckpt_fail(ckpt_errno_code(e), "reader lease in %s/%s: %s", s->path,
					 LEASE_DIR, strerror(e));
		}
		l->fd = fd;
	}
	if (l->fd < 0) {
		close(l->dirfd);
		free(l);
		return ckpt_fail(CKPT_E_IO, "reader lease in %s/%s: no free name", s->path, LEASE_DIR);
	}
	*out = l;
	return 0;
}

int lease_publish(struct lease *l, const struct manifest *m)
{
	if (!l)
		return 0;
	size_t cap = 32 + (size_t)m->n_chunks * 11, len = 0;
	char *text = malloc(cap);
	if (!text)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	/* Distinct ids in manifest order; duplicates cost only bytes, so only runs are folded. */
	size_t n = 0;
	for (uint32_t c = 0; c < m->n_chunks; c++)
		n += !c || m->chunks[c].pack_id != m->chunks[c - 1].pack_id;
	len += (size_t)snprintf(text + len, cap - len, "packs %zu\n", n);
	for (uint32_t c = 0; c < m->n_chunks; c++)
		if (!c || m->chunks[c].pack_id != m->chunks[c - 1].pack_id)
			len += (size_t)snprintf(text + len, cap - len, "%u\n", m->chunks[c].pack_id);
	len += (size_t)snprintf(text + len, cap - len, "end\n");
	int e = write_text(l->fd, text, len);
	free(text);
	if (e)
		return ckpt_fail(CKPT_E_IO, "write reader lease %s: %s", l->name, strerror(-e));
	return 0;
}

void lease_drop(struct lease *l)
{
	if (!l)
		return;
	unlinkat(l->dirfd, l->name, 0); /* before the unlock: gc never sees a free lease of ours */
	close(l->fd);
	close(l->dirfd);
	free(l);
}

/* Adds the packs a live lease names to ls (or marks everything needed). */
static int parse_lease(int fd, struct lease_set *ls)
{
	char buf[1 << 16];
	FILE *f = fdopen(dup(fd), "r");
	if (!f) {
		ls->all = true;
		return 0;
	}
	size_t n = 0;
	bool done = false;
	if (fgets(buf, sizeof buf, f) && sscanf(buf, "packs %zu", &n) == 1) {
		uint32_t *v = realloc(ls->ids, (ls->n + n + 1) * sizeof *v);
		if (!v) {
			fclose(f);
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		}
		ls->ids = v;
		size_t got = 0;
		unsigned id;
		while (got < n && fgets(buf, sizeof buf, f) && sscanf(buf, "%u", &id) == 1)
			ls->ids[ls->n + got++] = id;
		done = got == n && fgets(buf, sizeof buf, f) && !strcmp(buf, "end\n");
		if (done)
			ls->n += n;
	}
	fclose(f);
	if (!done)
		ls->all = true; /* pending, or being rewritten: it may need anything */
	return 0;
}

/* Whether a directory entry is a lease or a lease's temporary file. */
static bool lease_name(const char *n, bool *tmp)
{
	size_t len = strlen(n), sl = strlen(LEASE_SUFFIX);
	*tmp = n[0] == '.' && len > 4 && !strcmp(n + len - 4, ".tmp");
	return *tmp || (len > sl && !strcmp(n + len - sl, LEASE_SUFFIX));
}

int lease_scan(struct ckpt_store *s, struct lease_set *ls)
{
	memset(ls, 0, sizeof *ls);
	int dfd = open_lease_dir(s, false);
	if (dfd == -ENOENT)
		return 0;
	if (dfd < 0)
		return ckpt_fail(CKPT_E_IO, "%s/%s: %s; no pack is removed while readers are unknown",
				 s->path, LEASE_DIR, strerror(-dfd));
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return ckpt_fail(CKPT_E_IO, "%s/%s: %s", s->path, LEASE_DIR, strerror(errno));
	}
	struct dirent *e;
	int rc = 0;
	while (!rc && (e = readdir(d))) {
		bool tmp;
		if (!lease_name(e->d_name, &tmp))
			continue;
		int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue; /* gone: its reader closed */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			unlinkat(dfd, e->d_name, 0); /* its reader is dead */
			ls->stale++;
		} else if (!tmp) {
			ls->live++;
			rc = parse_lease(fd, ls);
		}
		close(fd);
	}
	closedir(d);
	return rc;
}

bool lease_needs(const struct lease_set *ls, uint32_t pack_id)
{
	if (ls->all)
		return true;
	for (size_t i = 0; i < ls->n; i++)
		if (ls->ids[i] == pack_id)
			return true;
	return false;
}

void lease_set_free(struct lease_set *ls)
{
	free(ls->ids);
	memset(ls, 0, sizeof *ls);
}
