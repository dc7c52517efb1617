/* The writer lock's busy message and CKPT_OPT_LOCK_WAIT_MS: a second writer is
 * told who holds the store (pid, host, what, since when, from the holder's record in
 * STORE/LOCK), and with the option it waits for the lock instead of being refused at once.
 * The holder is a child process that begins a save and commits it when the parent says so
 * (pipes). That the waiter really waited is made certain, without timing, by the flock()
 * below: it tells the parent when a try was refused, and only then is the holder released. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

/* The library's flock (the test links its objects): the real one, and, when armed, a note on
 * refused_pipe at the first EWOULDBLOCK. */
static volatile int refused_pipe = -1;

int flock(int fd, int op)
{
	int rc = (int)syscall(SYS_flock, fd, op);
	int e = errno;
	int p = __atomic_exchange_n(&refused_pipe, -1, __ATOMIC_SEQ_CST);
	if (rc && e == EWOULDBLOCK && p >= 0) {
		if (write(p, "r", 1) != 1)
			abort();
	} else if (p >= 0) {
		__atomic_store_n(&refused_pipe, p, __ATOMIC_SEQ_CST);
	}
	errno = e;
	return rc;
}

static ckpt_store *open_waiting(const char *dir, int64_t wait_ms)
{
	ckpt_options *o = ckpt_options_create();
	REQUIRE(o && ckpt_options_set(o, CKPT_OPT_LOCK_WAIT_MS, wait_ms) == 0);
	ckpt_store *s = NULL;
	REQUIRE(ckpt_store_open(dir, o, &s) == 0);
	ckpt_options_free(o);
	return s;
}

static int save_one(ckpt_store *s, uint64_t step)
{
	static float x[64];
	uint64_t shape[1] = {64};
	save1 *sv;
	int rc = save1_begin(s, step, &sv);
	if (rc)
		return rc;
	if ((rc = save1_add_tensor(sv, "x", CKPT_DTYPE_F32, 1, shape, CKPT_MEM_HOST, x))) {
		save1_abort(sv);
		return rc;
	}
	return save1_commit(sv, NULL);
}

struct holder {
	pid_t pid;
	int held, release; /* read: "h" once the save is begun; write: commit it */
};

/* A child that begins a save of step and commits it when told (or never: killed). */
static struct holder hold(const char *dir, uint64_t step)
{
	int a[2], b[2];
	REQUIRE(pipe(a) == 0 && pipe(b) == 0);
	struct holder h = {.pid = fork()};
	REQUIRE(h.pid >= 0);
	if (h.pid == 0) {
		ckpt_store *s = t_open_store(dir, 0, 0);
		static float x[64];
		uint64_t shape[1] = {64};
		save1 *sv;
		char c;
		if (save1_begin(s, step, &sv) ||
		    save1_add_tensor(sv, "x", CKPT_DTYPE_F32, 1, shape, CKPT_MEM_HOST, x) ||
		    write(a[1], "h", 1) != 1 || read(b[0], &c, 1) != 1)
			_exit(1);
		_exit(save1_commit(sv, NULL) ? 2 : 0);
	}
	close(a[1]);
	close(b[0]);
	h.held = a[0];
	h.release = b[1];
	char c;
	REQUIRE(read(h.held, &c, 1) == 1);
	return h;
}

static int finish(struct holder *h)
{
	int st = -1;
	if (write(h->release, "c", 1) != 1)
		return -1;
	waitpid(h->pid, &st, 0);
	close(h->held);
	close(h->release);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Refused at once: the message names the holder from its record; the refused writer does not
 * touch the record; the same process's other handle is named as such. */
static void names_holder(const char *dir)
{
	struct holder h = hold(dir, 5);
	char host[96] = "", want[256];
	gethostname(host, sizeof host - 1);
	ckpt_store *s = t_open_store(dir, 0, 0);
	CHECK_RC(save_one(s, 6), -CKPT_E_BUSY);
	snprintf(want, sizeof want, "is busy: process %d on host %s (save since ", (int)h.pid, host);
	CHECK(strstr(ckpt_errmsg(), want) != NULL);
	CHECK(strstr(ckpt_errmsg(), "Z) is writing to it (lock ") != NULL);
	if (!strstr(ckpt_errmsg(), want))
		fprintf(stderr, "message: %s\n", ckpt_errmsg());
	gc_report *rep = NULL;
	CHECK_RC(retain_gc(s, 0, 0, &rep), -CKPT_E_BUSY);
	CHECK(strstr(ckpt_errmsg(), want) != NULL);
	char p[4096], buf[512] = "";
	snprintf(p, sizeof p, "%s/LOCK", dir);
	FILE *f = fopen(p, "r");
	REQUIRE(f);
	CHECK(fread(buf, 1, sizeof buf - 1, f) > 0);
	fclose(f);
	snprintf(want, sizeof want, "pid %d\nhost %s\nwhat save\nsince ", (int)h.pid, host);
	CHECK(!strncmp(buf, want, strlen(want)));
	CHECK(finish(&h) == 0);

	/* Another handle of this very process. */
	ckpt_store *s2 = t_open_store(dir, 0, 0);
	save1 *sv;
	CHECK_OK(save1_begin(s, 7, &sv));
	CHECK_RC(save_one(s2, 8), -CKPT_E_BUSY);
	CHECK(strstr(ckpt_errmsg(), "is busy: another handle of this process (save since ") != NULL);
	save1_abort(sv);
	/* Released: the record went with the lock; a lock held by something that is not a
	 * libckpt writer is named by pid, and the message says there is no record. */
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
	CHECK_RC(save_one(s2, 8), -CKPT_E_BUSY);
	CHECK(strstr(ckpt_errmsg(), "another handle of this process (it left no writer record) "
			 "is writing to it") != NULL);
	close(fd);
	ckpt_store_close(s2);
	ckpt_store_close(s);
}

/* A holder killed keeps its record; whoever holds the lock next without writing one is not
 * described by it. */
static void stale_record(const char *dir)
{
	struct holder h = hold(dir, 9);
	kill(h.pid, SIGKILL);
	waitpid(h.pid, NULL, 0);
	char p[4096], want[128];
	snprintf(p, sizeof p, "%s/LOCK", dir);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0);
	ckpt_store *s = t_open_store(dir, 0, 0);
	CHECK_RC(save_one(s, 10), -CKPT_E_BUSY);
	snprintf(want, sizeof want, "its writer record names process %d on host ", (int)h.pid);
	CHECK(strstr(ckpt_errmsg(), want) != NULL);
	CHECK(strstr(ckpt_errmsg(), "which no longer holds the lock") != NULL);
	close(fd);
	close(h.held);
	close(h.release);
	ckpt_store_close(s);
}

struct waiter {
	const char *dir;
	int64_t wait_ms;
	int rc;
	char msg[1024];
};

static void *wait_and_save(void *arg)
{
	struct waiter *w = arg;
	ckpt_store *s = open_waiting(w->dir, w->wait_ms);
	w->rc = save_one(s, 12);
	snprintf(w->msg, sizeof w->msg, "%s", ckpt_errmsg());
	ckpt_store_close(s);
	return NULL;
}

/* A waiter refused once while the holder holds the lock gets it when the holder commits. */
static void waits_for_commit(const char *dir)
{
	struct holder h = hold(dir, 11);
	int r[2];
	REQUIRE(pipe(r) == 0);
	__atomic_store_n(&refused_pipe, r[1], __ATOMIC_SEQ_CST);
	struct waiter w = {.dir = dir, .wait_ms = 10 * 60 * 1000};
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, wait_and_save, &w) == 0);
	char c;
	REQUIRE(read(r[0], &c, 1) == 1); /* the waiter's first try was refused */
	CHECK(finish(&h) == 0);
	pthread_join(t, NULL);
	CHECK_RC(w.rc, 0);
	if (w.rc)
		fprintf(stderr, "waiter: %s\n", w.msg);
	ckpt_store *s = t_open_store(dir, 0, 0);
	uint64_t got;
	CHECK_OK(ckpt_store_resolve(s, 11, &got));
	CHECK_OK(ckpt_store_resolve(s, 12, &got));
	ckpt_store_close(s);
	close(r[0]);
	close(r[1]);
}

/* A wait that runs out (the holder never lets go meanwhile) is BUSY, naming the holder. */
static void wait_expires(const char *dir)
{
	struct holder h = hold(dir, 13);
	struct waiter w = {.dir = dir, .wait_ms = 30};
	wait_and_save(&w);
	CHECK_RC(w.rc, -CKPT_E_BUSY);
	char want[64];
	snprintf(want, sizeof want, "is busy: process %d on host ", (int)h.pid);
	CHECK(strstr(w.msg, want) != NULL);
	CHECK(strstr(w.msg, "; still after waiting 0.03 s") != NULL);
	if (!strstr(w.msg, "still after"))
		fprintf(stderr, "message: %s\n", w.msg);
	CHECK(finish(&h) == 0);
}

static void option_bounds(void)
{
	ckpt_options *o = ckpt_options_create();
	REQUIRE(o);
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_LOCK_WAIT_MS, 0));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_LOCK_WAIT_MS, CKPT_MAX_LOCK_WAIT_MS));
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_LOCK_WAIT_MS, -1), -CKPT_E_INVAL);
	CHECK_RC(ckpt_options_set(o, CKPT_OPT_LOCK_WAIT_MS, CKPT_MAX_LOCK_WAIT_MS + 1), -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), "lock wait") != NULL);
	ckpt_options_free(o);
}

int main(void)
{
	char *dir = t_tmpdir("lockw");
	ckpt_store *s = t_open_store(dir, 0, 0);
	ckpt_store_close(s);
	option_bounds();
	names_holder(dir);
	stale_record(dir);
	waits_for_commit(dir);
	wait_expires(dir);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
