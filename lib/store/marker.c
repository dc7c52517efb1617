/* In-flight markers: every save (one-process, and every rank of a multi-rank one) announces
 * itself with a FILE, STORE/writers/<random>.writer, so that gc and prune spare what it may
 * still reference even where the store's LOCK does not exclude them: flock is node-local on some
 * shared mounts (NFS local_lock=flock|all or nolock, Lustre localflock), and a gc on another
 * node then takes the lock beside a saving one. A save's new packs are unreferenced until it
 * commits, and the chunks it deduplicates against may sit in packs of checkpoints a prune
 * removes meanwhile; while any live marker exists gc removes no pack and no leftover at all.
 *
 * Liveness: the marker holds the writer record (lock.c: pid, host, node = boot id, what, since)
 * and is share-locked by its writer. On the writer's node (same boot id) the flock is exact, as
 * for reader leases: free means the writer is dead. From another node it proves nothing, so
 * there a marker is live until it is older than the grace age (CKPT_OPT_GC_GRACE_S); one thread
 * of the writer's process refreshes the mtime of its live markers every MARKER_REFRESH_S, so a
 * live save, however long, never ages out, and a dead one's marker does after the grace age (gc
 * then removes it).
 *
 * Order: the marker is created under the writer lock before the save reads the manifests for
 * its dedup index, and gc reads the markers after the manifests no longer name what it removes
 * (as with leases): a save gc did not see loads an index without the removed packs. */
#include "store/marker.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

#define MARKER_DIR "writers"
#define MARKER_SUFFIX ".writer"

struct marker {
	int dirfd;
	struct marker_fresh f; /* its fd, refreshed while the save lives */
	char name[64];
};

/* The files the process keeps fresh (markers and reader leases), refreshed by one thread started
 * with the first (and never stopped: a thread per save or reader would come and go with each). */
static pthread_mutex_t fresh_mu = PTHREAD_MUTEX_INITIALIZER;
static struct marker_fresh *fresh;
static pthread_once_t refresher_once = PTHREAD_ONCE_INIT;

int marker_dir_open(struct ckpt_store *s, const char *name, bool create)
{
	int top = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (top < 0)
		return -errno;
	if (create && mkdirat(top, name, 0755) && errno != EEXIST) {
		int e = errno;
		close(top);
		return -e;
	}
	int fd = openat(top, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int e = errno;
	close(top);
	return fd < 0 ? -e : fd;
}

/* Touches every registered file every MARKER_REFRESH_S: its mtime says its process lives. If a
 * touch fails the file ages out, and gc then takes its owner for dead. */
#ifdef CKPT_TEST_HOOKS
/* Test builds: a test stops the refreshes, as a node that stopped refreshing its markers, to age
 * one with no refresh racing it. Set under fresh_mu: once it returns, no touch is in flight. */
static bool test_paused;
void marker_test_pause_refresh(bool on);
void marker_test_pause_refresh(bool on)
{
	pthread_mutex_lock(&fresh_mu);
	test_paused = on;
	pthread_mutex_unlock(&fresh_mu);
}
static bool marker_test_paused(void) { return test_paused; }
#else
static bool marker_test_paused(void) { return false; }
#endif

static void *refresh_main(void *arg)
{
	(void)arg;
	long ms = MARKER_REFRESH_S * 1000L;
#ifdef CKPT_TEST_HOOKS
	/* CKPT_TEST_REFRESH_MS (test builds only): a shorter period, so that a test sees a refresh
	 * (t-lease-node) */
	const char *t = getenv("CKPT_TEST_REFRESH_MS");
	if (t && atol(t) > 0)
		ms = atol(t);
#endif
	for (;;) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		pthread_mutex_lock(&fresh_mu);
		for (struct marker_fresh *f = fresh; f && !marker_test_paused(); f = f->next)
			(void)futimens(f->fd, NULL);
		pthread_mutex_unlock(&fresh_mu);
	}
	return NULL;
}

/* Without the thread a marker or lease still guards its owner for the grace age. */
static void start_refresher(void)
{
	pthread_t t;
	pthread_attr_t at;
	sigset_t all, old;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	sigfillset(&all); /* it takes no signal meant for the application's threads */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	(void)pthread_create(&t, &at, refresh_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
}

void marker_fresh_add(struct marker_fresh *f)
{
	pthread_once(&refresher_once, start_refresher);
	pthread_mutex_lock(&fresh_mu);
	f->next = fresh;
	fresh = f;
	pthread_mutex_unlock(&fresh_mu);
}

void marker_fresh_del(struct marker_fresh *f)
{
	pthread_mutex_lock(&fresh_mu);
	for (struct marker_fresh **pp = &fresh; *pp; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	pthread_mutex_unlock(&fresh_mu);
}

void marker_random_name(char *buf, size_t len, const char *suffix)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
		r = (uint64_t)ckpt_wall_ns() * 0x9e3779b97f4a7c15ull + (uint64_t)getpid();
	snprintf(buf, len, "%016llx%s", (unsigned long long)r, suffix);
}

int marker_write_file(int dirfd, const char *name, const char *text, size_t len)
{
	int w = openat(dirfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (w < 0)
		return -errno;
	int e = 0;
	for (size_t off = 0; off < len && !e;) {
		ssize_t n = pwrite(w, text + off, len - off, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			e = n < 0 ? errno : EIO;
		else
			off += (size_t)n;
	}
	if (!e && ftruncate(w, (off_t)len))
		e = errno;
	if (close(w) && !e)
		e = errno;
	return -e;
}

bool marker_file_name(const char *name, const char *suffix, bool *tmp)
{
	size_t len = strlen(name), sl = strlen(suffix);
	*tmp = name[0] == '.' && len > 4 && !strcmp(name + len - 4, ".tmp");
	return *tmp || (len > sl && !strcmp(name + len - sl, suffix));
}

bool marker_aged(int fd, int64_t grace_s)
{
	struct stat st;
	if (fstat(fd, &st))
		return false;
	return (int64_t)time(NULL) - (int64_t)st.st_mtim.tv_sec >= grace_s;
}

/* Creates the marker file: under a temporary name, share-locked, the record written through a
 * second descriptor that is closed (marker_write_file), then renamed into place. Returns 0,
 * -EEXIST (name taken) or -errno. */
static int create_marker(struct ckpt_store *s, struct marker *m, const char *what)
{
	char tmp[160], rec[512];
	marker_random_name(m->name, sizeof m->name, MARKER_SUFFIX);
	/* The temporary name says whose it is (pid and node): a writer killed before its record is
	 * written leaves a file only its name describes (marker_dead). */
	snprintf(tmp, sizeof tmp, ".%s.%ld.%s.tmp", m->name, (long)getpid(), store_node(s));
	int fd = openat(m->dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int n = store_format_record(s, what, rec, sizeof rec), e = 0;
	if (flock(fd, LOCK_SH))
		e = errno;
	else if ((e = -marker_write_file(m->dirfd, tmp, rec, (size_t)n)) == 0 &&
		 renameat(m->dirfd, tmp, m->dirfd, m->name))
		e = errno;
	if (e) {
		unlinkat(m->dirfd, tmp, 0);
		close(fd);
		return -e;
	}
	m->f.fd = fd;
	return 0;
}

int marker_begin(struct ckpt_store *s, const char *what)
{
	if (s->lock.marker) {
		futimens(s->lock.marker->f.fd, NULL);
		return 0;
	}
	struct marker *m = calloc(1, sizeof *m);
	if (!m)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	m->f.fd = -1;
	m->dirfd = marker_dir_open(s, MARKER_DIR, true);
	int e = m->dirfd < 0 ? m->dirfd : -EEXIST;
	for (int attempt = 0; attempt < 8 && e == -EEXIST; attempt++)
		e = create_marker(s, m, what);
	if (e) {
		if (m->dirfd >= 0)
			close(m->dirfd);
		free(m);
		return ckpt_fail(e == -ELOOP ? CKPT_E_PERM : ckpt_errno_code(-e),
				 "in-flight marker in %s/%s: %s", s->path, MARKER_DIR,
				 e == -ELOOP ? "is a symbolic link; refusing it" : strerror(-e));
	}
	marker_fresh_add(&m->f);
	s->lock.marker = m;
	return 0;
}

void marker_end(struct ckpt_store *s)
{
	struct marker *m = s->lock.marker;
	if (!m)
		return;
	s->lock.marker = NULL;
	marker_fresh_del(&m->f); /* out of the list before its fd is closed */
	unlinkat(m->dirfd, m->name, 0); /* before the unlock: gc never sees a free marker of ours */
	close(m->f.fd);
	close(m->dirfd);
	free(m);
}

/* A temporary marker ".NAME.PID.NODE.tmp" of this node whose writer process is gone (it was
 * killed before writing its record, which an empty file cannot tell). */
static bool tmp_writer_gone(struct ckpt_store *s, const char *name)
{
	size_t len = strlen(name), nl = strlen(store_node(s));
	if (name[0] != '.' || len < nl + 6 || strcmp(name + len - 4, ".tmp") ||
	    strncmp(name + len - 4 - nl, store_node(s), nl) || name[len - 5 - nl] != '.')
		return false;
	const char *p = name + len - 5 - nl; /* the '.' before NODE */
	while (p > name && p[-1] >= '0' && p[-1] <= '9')
		p--;
	long pid = strtol(p, NULL, 10);
	return pid > 0 && p[-1] == '.' && kill((pid_t)pid, 0) && errno == ESRCH;
}

/* Whether the marker name, open at fd, is dead, and its record into r (false: none yet). */
static bool marker_dead(struct ckpt_store *s, const char *name, int fd, int64_t grace_s,
			struct writer_rec *r, bool *have)
{
	char buf[513];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	*have = store_parse_record(buf, r);
	if (*have && !strcmp(r->node, store_node(s)))
		return flock(fd, LOCK_EX | LOCK_NB) == 0;
	if (!*have && tmp_writer_gone(s, name))
		return true;
	return marker_aged(fd, grace_s);
}

int marker_scan(struct ckpt_store *s, int64_t grace_s, bool remove, struct marker_set *ms)
{
	memset(ms, 0, sizeof *ms);
	int dfd = marker_dir_open(s, MARKER_DIR, false);
	if (dfd == -ENOENT)
		return 0;
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	if (!d) {
		int e = dfd < 0 ? -dfd : errno;
		if (dfd >= 0)
			close(dfd);
		return ckpt_fail(CKPT_E_IO, "%s/%s: %s; no pack is removed while saves in flight are "
				 "unknown", s->path, MARKER_DIR, strerror(e));
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		bool tmp;
		if (!marker_file_name(e->d_name, MARKER_SUFFIX, &tmp))
			continue;
		int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue; /* gone: its save ended */
		struct writer_rec r;
		bool have;
		if (marker_dead(s, e->d_name, fd, grace_s, &r, &have)) {
			ms->dead++;
			if (remove)
				unlinkat(dfd, e->d_name, 0);
		} else if (!ms->live++) {
			if (have)
				snprintf(ms->who, sizeof ms->who, "process %ld on host %s (%s since %s)",
					 r.pid, r.host, r.what, r.since);
			else
				snprintf(ms->who, sizeof ms->who, "%s/%s/%s (its writer not recorded "
					 "yet)", s->path, MARKER_DIR, e->d_name);
		}
		close(fd);
	}
	closedir(d);
	return 0;
}
