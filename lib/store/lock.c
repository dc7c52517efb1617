/* The store's writer lock: flock on STORE/LOCK, exclusive for a single-process save, a prune, a
 * delete or a gc, shared by the ranks of a multi-rank save. The holder records who it is in the
 * file (the writer record) so that a refused writer's -CKPT_E_BUSY names it; with
 * CKPT_OPT_LOCK_WAIT_MS a writer waits for the lock instead of being refused at once. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"
#include "store/marker.h"
#include "store/store.h"

/* The record is written whole, at offset 0, in one pwrite of this size (newline padded): ranks
 * sharing the lock overwrite each other's record without a truncation between them. */
#define REC_SIZE 256
#define MAX_HOLDERS 64


/* The pids holding a flock on fd's file, from /proc/locks ("1: FLOCK ADVISORY WRITE PID
 * MAJ:MIN:INODE ..."; several for a shared lock). Returns their count, or -1 when /proc/locks
 * cannot be read. The pid in the writer record would name the last libckpt writer, which may
 * be long gone while something else (flock(1), say) holds the lock: the record counts only
 * when its pid is one of these. */
static int flock_holders(int fd, long *pids, int max)
{
	struct stat st;
	if (fstat(fd, &st))
		return -1;
	FILE *f = fopen("/proc/locks", "re");
	if (!f)
		return -1;
	char line[256];
	int n = 0;
	while (n < max && fgets(line, sizeof line, f)) {
		char kind[16], mode[16];
		long pid;
		unsigned maj, min;
		unsigned long long ino;
		if (sscanf(line, "%*d: %15s %*s %15s %ld %x:%x:%llu", kind, mode, &pid, &maj, &min, &ino) == 6 &&
		    !strcmp(kind, "FLOCK") && ino == (unsigned long long)st.st_ino &&
		    maj == major(st.st_dev) && min == minor(st.st_dev) && pid > 0)
			pids[n++] = pid;
	}
	fclose(f);
	return n;
}

/* Opens STORE/LOCK, into which the lock holder writes its record: never through a symbolic
 * link, and only a plain file with one link (a hard link to another file would be overwritten
 * just the same). Returns the fd or -CKPT_E_*. */
static int open_lock_file(const char *p)
{
	int fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
	if (fd < 0 && errno == ELOOP)
		return ckpt_fail(CKPT_E_PERM, "lock file %s is a symbolic link; refusing to write "
				 "through it (remove it: a real one is created)", p);
	if (fd < 0) {
		int e = errno;
		return ckpt_fail(ckpt_errno_code(e), "open lock file %s: %s", p, strerror(e));
	}
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
		close(fd);
		return ckpt_fail(CKPT_E_PERM, "lock file %s is not a plain file with one link; "
				 "refusing to write to it (remove it: a real one is created)", p);
	}
	return fd;
}

/* "pid N\nhost H\nwhat W\nsince YYYY-MM-DDTHH:MM:SSZ\nnode B\n": only for the busy message of
 * the next writer; the flock itself is the lock. A record that cannot be written still locks. */
static void write_record(struct ckpt_store *s, int fd, const char *what)
{
	char rec[REC_SIZE];
	int n = store_format_record(s, what, rec, sizeof rec);
	memset(rec + n, '\n', REC_SIZE - (size_t)n);
	/* if it fails, the message of a refused writer says there is no record */
	(void)!pwrite(fd, rec, REC_SIZE, 0);
}

/* Parses the record in fd; false when there is none (an empty file, an older libckpt's bare
 * pid, garbage). */
static bool read_record(int fd, struct writer_rec *r)
{
	char buf[REC_SIZE + 1];
	ssize_t n = pread(fd, buf, REC_SIZE, 0);
	if (n <= 0)
		return false;
	buf[n] = 0;
	return store_parse_record(buf, r);
}

/* Whether the record names a writer holding the lock now: its pid among the holders, or, where
 * the holders are unknown (no /proc/locks, or the lock is held on another machine of a shared
 * file system), a record of another host (which cannot be checked from here) or of a live
 * process of this one. */
static bool record_live(const struct writer_rec *r, const long *pids, int n)
{
	char host[96];
	store_host(host, sizeof host);
	for (int i = 0; i < n; i++)
		if (pids[i] == r->pid)
			return !strcmp(r->host, host);
	if (n > 0)
		return false;
	if (strcmp(r->host, host))
		return true;
	return kill((pid_t)r->pid, 0) == 0 || errno == EPERM;
}

/* Who holds the lock, for "store S is busy: WHO is writing to it (lock P)". */
static void describe_holder(int fd, char *who, size_t len)
{
	long pids[MAX_HOLDERS];
	int n = flock_holders(fd, pids, MAX_HOLDERS);
	struct writer_rec r;
	bool have = read_record(fd, &r);
	if (have && record_live(&r, pids, n < 0 ? 0 : n)) {
		if (r.pid == (long)getpid())
			snprintf(who, len, "another handle of this process (%s since %s)", r.what, r.since);
		else
			snprintf(who, len, "process %ld on host %s (%s since %s)", r.pid, r.host, r.what,
				 r.since);
		return;
	}
	char note[200];
	if (have)
		snprintf(note, sizeof note, "its writer record names process %ld on host %s, which "
			 "no longer holds the lock", r.pid, r.host);
	else
		snprintf(note, sizeof note, "it left no writer record");
	if (n > 0 && pids[0] == (long)getpid())
		snprintf(who, len, "another handle of this process (%s)", note);
	else if (n > 0)
		snprintf(who, len, "process %ld (%s)", pids[0], note);
	else
		snprintf(who, len, "another process (%s)", note);
}

static double mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* flock(fd, op | LOCK_NB), retried for up to wait_ms (polling: a blocking flock could not be
 * given up at the deadline). Returns 0 or the errno of the last try. */
static int flock_wait(int fd, int op, int64_t wait_ms)
{
#ifdef CKPT_TEST_HOOKS
	/* CKPT_TEST_LOCAL_LOCK=1 (test builds only): every lock is granted, as a node-local flock
	 * on a shared mount grants it on every node (the in-flight markers must then keep gc off
	 * a save's packs; tests/unit/gc/t-gc-inflight). */
	const char *local = getenv("CKPT_TEST_LOCAL_LOCK");
	if (local && !strcmp(local, "1"))
		return 0;
#endif
	double deadline = mono_ms() + (double)wait_ms;
	long nap_us = 1000;
	for (;;) {
		if (!flock(fd, op | LOCK_NB))
			return 0;
		int e = errno;
		double left = deadline - mono_ms();
		if ((e != EWOULDBLOCK && e != EINTR) || left <= 0)
			return e;
		/* from 1 ms up to 50 ms between tries: a short wait notices a release at once */
		long us = nap_us < (long)(left * 1e3) ? nap_us : (long)(left * 1e3) + 1;
		struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
		nanosleep(&ts, NULL);
		if (nap_us < 50000)
			nap_us *= 2;
	}
}

/* The lock, and for a save (marker) its in-flight marker, made after the lock is held and
 * before the save reads the manifests for its dedup index (store_begin_write). */
static int lock_take(struct ckpt_store *s, const char *what, bool marker)
{
	if (s->opt.read_only)
		return ckpt_fail(CKPT_E_PERM, "store %s was opened read-only", s->path);
	if (s->lock.fd >= 0)
		return 0;
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", s->path, LOCK_FILE);
	int fd = open_lock_file(p);
	if (fd < 0)
		return fd;
	/* Ranks writing parts share the lock (they never collide); prune and gc take it
	 * exclusively, so they exclude every writer. */
	int e = flock_wait(fd, s->lock.part_mode ? LOCK_SH : LOCK_EX, s->opt.lock_wait_ms);
	if (e == EWOULDBLOCK) {
		char who[512], waited[64] = "";
		describe_holder(fd, who, sizeof who);
		close(fd);
		if (s->opt.lock_wait_ms > 0)
			snprintf(waited, sizeof waited, "; still after waiting %.3g s",
				 (double)s->opt.lock_wait_ms / 1e3);
		return ckpt_fail(CKPT_E_BUSY, "store %s is busy: %s is writing to it (lock %s)%s",
				 s->path, who, p, waited);
	}
	if (e) {
		close(fd);
		return ckpt_fail(CKPT_E_IO, "lock %s: %s", p, strerror(e));
	}
	write_record(s, fd, what);
	s->lock.fd = fd;
	int rc = marker ? marker_begin(s, what) : 0;
	if (rc)
		store_unlock(s);
	return rc;
}

int store_lock(struct ckpt_store *s, const char *what)
{
	return lock_take(s, what, true);
}

int store_lock_maint(struct ckpt_store *s, const char *what)
{
	return lock_take(s, what, false);
}

void store_unlock(struct ckpt_store *s)
{
	/* A rank's marker outlives its part save: the rank's packs are unreferenced until rank 0
	 * commits the global manifest, so dist_claim_release() ends it. */
	if (!s->lock.part_mode)
		marker_end(s);
	if (s->lock.fd < 0)
		return;
	/* An exclusive holder is the only one: its record goes with the lock. Ranks sharing the
	 * lock leave theirs (another rank may still hold it; a stale one is recognised). */
	if (!s->lock.part_mode)
		(void)!ftruncate(s->lock.fd, 0); /* if it fails, a stale record is recognised */
	close(s->lock.fd);
	s->lock.fd = -1;
}

void store_lock_init(struct store_lock *l)
{
	pthread_mutex_init(&l->mu, NULL);
	l->fd = -1;
}

void store_lock_fini(struct store_lock *l)
{
	free(l->warning);
	pthread_mutex_destroy(&l->mu);
}
