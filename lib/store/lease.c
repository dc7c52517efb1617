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
 * "packs N\n" followed by N pack ids and "end\n"; after either, the reader's record (record.c:
 * pid, host, what "reader of step S", since, node = boot id). The reader publishes its lease
 * before it reads the manifest, and gc scans the leases after the manifests no longer name what it
 * removes: a reader gc did not see loads a manifest that does not need the removed packs.
 *
 * Other nodes: where flock is node-local (NFS local_lock, Lustre localflock) a gc on
 * another node takes the lock of a live reader's lease. So, as for in-flight markers (marker.c,
 * whose refresh thread and file helpers this shares), the record says the reader's node: a lease
 * of this node is judged by its flock, one of another node is live until its mtime, refreshed
 * every MARKER_REFRESH_S by the reader, is older than the grace age (CKPT_OPT_GC_GRACE_S). A lease
 * without a record that is exactly an older libckpt's ("pending\n", or a complete pack list) is
 * judged by its flock, as that libckpt's gc did; any other content (a lease being rewritten, seen
 * half-written) is live while locked or younger than the grace age. */
#include "store/lease.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "store/marker.h"

#define LEASE_DIR "leases"
#define LEASE_SUFFIX ".lease"
#define LEASE_MAX_BYTES (64u << 20) /* a longer file is not a lease libckpt wrote */

struct lease {
	struct ckpt_store *s;
	int dirfd;
	struct marker_fresh f; /* the locked fd, its mtime refreshed while the reader is open */
	char name[64];
};

/* The lease's text: head ("pending\n" or the pack list) then the reader's record for what. */
static int lease_write(struct lease *l, const char *name, const char *head, size_t hlen,
		       const char *what)
{
	char rec[512];
	int n = store_format_record(l->s, what, rec, sizeof rec);
	char *text = malloc(hlen + (size_t)n);
	if (!text)
		return -ENOMEM;
	memcpy(text, head, hlen);
	memcpy(text + hlen, rec, (size_t)n);
	int e = marker_write_file(l->dirfd, name, text, hlen + (size_t)n);
	free(text);
	return e;
}

/* One try at creating the lease under a fresh name: a temporary file, share-locked, written, then
 * renamed into place. Returns 0, -EEXIST or -ENOENT (try again: the name was taken, or a gc took
 * the unlocked temporary file for a dead reader's) or -errno. */
static int lease_create(struct lease *l)
{
	char tmp[80];
	marker_random_name(l->name, sizeof l->name, LEASE_SUFFIX);
	snprintf(tmp, sizeof tmp, ".%s.tmp", l->name);
	int fd = openat(l->dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int e = flock(fd, LOCK_SH) ? -errno : lease_write(l, tmp, "pending\n", 8, "reader");
	if (!e && renameat(l->dirfd, tmp, l->dirfd, l->name))
		e = -errno;
	if (e) {
		close(fd);
		unlinkat(l->dirfd, tmp, 0);
		return e;
	}
	l->f.fd = fd;
	return 0;
}

int lease_take(struct ckpt_store *s, struct lease **out)
{
	*out = NULL;
	/* Read-only handles (verify, export) take leases too: the lease is not store data. */
	struct lease *l = calloc(1, sizeof *l);
	if (!l)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	l->s = s;
	l->f.fd = -1;
	l->dirfd = marker_dir_open(s, LEASE_DIR, true);
	bool dir = l->dirfd >= 0;
	int e = dir ? -EEXIST : l->dirfd;
	for (int attempt = 0; dir && attempt < 8 && (e == -EEXIST || e == -ENOENT); attempt++)
		e = lease_create(l);
	if (e && dir)
		close(l->dirfd);
	if (e)
		free(l);
	/* A store (or leases/) this user may not write to: read without a lease, as before. */
	if (e == -EACCES || e == -EROFS || e == -EPERM)
		return 0;
	if (dir && (e == -EEXIST || e == -ENOENT))
		return ckpt_fail(CKPT_E_IO, "reader lease in %s/%s: no free name", s->path, LEASE_DIR);
	if (e)
		return ckpt_fail(e == -ELOOP ? CKPT_E_PERM : ckpt_errno_code(-e), "reader lease in "
				 "%s/%s: %s", s->path, LEASE_DIR,
				 e == -ELOOP ? "is a symbolic link; refusing it" : strerror(-e));
	marker_fresh_add(&l->f);
	*out = l;
	return 0;
}

int lease_publish(struct lease *l, const struct manifest *m)
{
	if (!l)
		return 0;
	size_t cap = 32 + (size_t)m->n_chunks * 11, len = 0;
	char *text = malloc(cap), what[64];
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
	snprintf(what, sizeof what, "reader of step %llu", (unsigned long long)m->step);
	int e = lease_write(l, l->name, text, len, what);
	free(text);
	if (e)
		return ckpt_fail(CKPT_E_IO, "write reader lease %s/%s/%s: %s", l->s->path, LEASE_DIR,
				 l->name, strerror(-e));
	return 0;
}

void lease_drop(struct lease *l)
{
	if (!l)
		return;
	marker_fresh_del(&l->f); /* out of the refresh list before its fd is closed */
	unlinkat(l->dirfd, l->name, 0); /* before the unlock: gc never sees a free lease of ours */
	close(l->f.fd);
	close(l->dirfd);
	free(l);
}

/* A lease's content, parsed. */
struct lease_text {
	bool packs;           /* a complete pack list (else pending, or unreadable) */
	bool exact;           /* exactly an older libckpt's lease: a head and nothing after */
	bool have;            /* a complete record follows the head */
	struct writer_rec r;
	uint32_t *ids;
	size_t n;
};

/* The next line of *p (NUL-terminated in place), or NULL at the end. */
static char *next_line(char **p)
{
	char *line = *p, *nl = line ? strchr(line, '\n') : NULL;
	if (!nl)
		return NULL;
	*nl = 0;
	*p = nl + 1;
	return line;
}

/* Parses text (changed in place) into t. Returns 0 or -CKPT_E_NOMEM. */
static int parse_text(char *text, struct lease_text *t)
{
	char *p = text, *line = next_line(&p), *end;
	bool head = line && !strcmp(line, "pending");
	size_t n;
	if (line && sscanf(line, "packs %zu", &n) == 1 && n < LEASE_MAX_BYTES / 2) {
		if (!(t->ids = malloc((n + 1) * sizeof *t->ids)))
			return ckpt_fail(CKPT_E_NOMEM, "out of memory");
		while (t->n < n && (line = next_line(&p))) {
			unsigned long id = strtoul(line, &end, 10);
			if (end == line || *end || id > UINT32_MAX)
				break;
			t->ids[t->n++] = (uint32_t)id;
		}
		head = t->packs = t->n == n && (line = next_line(&p)) && !strcmp(line, "end");
	}
	if (head) {
		t->exact = !*p;
		t->have = store_parse_record(p, &t->r);
	}
	return 0;
}

/* Reads the lease open at fd into t. Returns 0 (an unreadable one parses as nothing) or
 * -CKPT_E_NOMEM. */
static int read_lease(int fd, struct lease_text *t)
{
	memset(t, 0, sizeof *t);
	struct stat st;
	if (fstat(fd, &st) || st.st_size > LEASE_MAX_BYTES)
		return 0;
	char *text = malloc((size_t)st.st_size + 1);
	if (!text)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	ssize_t got = pread(fd, text, (size_t)st.st_size, 0);
	text[got > 0 ? got : 0] = 0;
	int rc = parse_text(text, t);
	free(text);
	return rc;
}

/* Whether the lock of the lease open at fd, read as t, is free (taking it). */
static bool lock_free(struct ckpt_store *s, int fd, const struct lease_text *t)
{
#ifdef CKPT_TEST_HOOKS
	/* CKPT_TEST_LOCAL_LOCK=1 (test builds only): the lock of a reader whose record names another
	 * node is not seen, as where flock is node-local (t-lease-node) */
	const char *local = getenv("CKPT_TEST_LOCAL_LOCK");
	if (local && !strcmp(local, "1") && t->have && strcmp(t->r.node, store_node(s)))
		return true;
#endif
	return flock(fd, LOCK_EX | LOCK_NB) == 0;
}

/* Whether the lease open at fd, read as t, belongs to a reader that is gone. */
static bool lease_dead(struct ckpt_store *s, int fd, const struct lease_text *t)
{
	if (t->have && strcmp(t->r.node, store_node(s)))
		return marker_aged(fd, s->opt.gc_grace_s); /* another node's: its flock proves nothing */
	bool unlocked = lock_free(s, fd, t);
	if (t->have || t->exact)
		return unlocked;
	return unlocked && marker_aged(fd, s->opt.gc_grace_s); /* half-written: any node's */
}

/* Adds the live lease t (its packs, or everything) to ls, naming its reader if it is the first. */
static int add_live(struct lease_set *ls, struct lease_text *t, const char *store,
		    const char *name)
{
	if (!ls->live++) {
		if (t->have)
			snprintf(ls->who, sizeof ls->who, "process %ld on host %s (%s since %s)",
				 t->r.pid, t->r.host, t->r.what, t->r.since);
		else
			snprintf(ls->who, sizeof ls->who, "%.120s/%s/%.40s (its reader not "
				 "recorded: an older libckpt's, or being written)", store, LEASE_DIR,
				 name);
	}
	if (!t->packs) {
		ls->all = true; /* pending, or being rewritten: it may need anything */
		return 0;
	}
	uint32_t *v = realloc(ls->ids, (ls->n + t->n + 1) * sizeof *v);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	ls->ids = v;
	memcpy(ls->ids + ls->n, t->ids, t->n * sizeof *v);
	ls->n += t->n;
	return 0;
}

/* Judges one directory entry of leases/ (open at dfd) into ls. Returns 0 or -CKPT_E_*. */
static int scan_one(struct ckpt_store *s, int dfd, const char *name, struct lease_set *ls)
{
	bool tmp;
	if (!marker_file_name(name, LEASE_SUFFIX, &tmp))
		return 0;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0; /* gone: its reader closed */
	struct lease_text t;
	int rc = 0;
	if (tmp) {
		/* A reader's lease being made (a retry follows if gc takes it), or a dead one's. */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			unlinkat(dfd, name, 0);
			ls->stale++;
		}
	} else if (!(rc = read_lease(fd, &t))) {
		if (lease_dead(s, fd, &t)) {
			unlinkat(dfd, name, 0);
			ls->stale++;
		} else {
			rc = add_live(ls, &t, s->path, name);
		}
		free(t.ids);
	}
	close(fd);
	return rc;
}

int lease_scan(struct ckpt_store *s, struct lease_set *ls)
{
	memset(ls, 0, sizeof *ls);
	int dfd = marker_dir_open(s, LEASE_DIR, false);
	if (dfd == -ENOENT)
		return 0;
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	if (!d) {
		int e = dfd < 0 ? -dfd : errno;
		if (dfd >= 0)
			close(dfd);
		return ckpt_fail(CKPT_E_IO, "%s/%s: %s; no pack is removed while readers are unknown",
				 s->path, LEASE_DIR, strerror(e));
	}
	struct dirent *e;
	int rc = 0;
	while (!rc && (e = readdir(d)))
		rc = scan_one(s, dfd, e->d_name, ls);
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
