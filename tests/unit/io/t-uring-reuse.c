/* io_uring rings torn down and mapped again at the same address by another thread (what a save's
 * ring and a later reader's ring do). liburing maps rings with raw system calls that
 * ThreadSanitizer does not see, so without the engine's annotations a TSan build reports the new
 * ring's completion thread racing with the old one's (flaky in make check before the fix: it
 * depends on mmap handing back the same address). Here each round hands the address back on
 * purpose: thread A creates a ring, writes through it and destroys it; only then, told through a
 * relaxed atomic (no happens-before), thread B creates its ring at the address A's had and writes
 * through it. Under TSan (halt_on_error) a report fails the test; in other builds it checks the
 * writes landed. Skips where io_uring is unavailable. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#include "io/engine.h"
#include "helpers.h"

enum { ROUNDS = 20, LEN = 4096 };

static atomic_int turn;   /* relaxed only: which thread may use a ring now */
static int fd;
static int unavailable;

static void done(struct io_req *r) { (void)r; }

static void one_ring(int round)
{
	struct io_engine *e;
	int rc = io_engine_create(CKPT_ENGINE_IO_URING, 4, NULL, 0, 0, &e);
	if (rc) {
		unavailable = 1;
		return;
	}
	static char buf[2][LEN];
	char *b = buf[round & 1];
	memset(b, 'a' + round % 26, LEN);
	struct io_req r = {.op = IO_WRITE, .fd = fd, .buf = b, .len = LEN,
			   .off = (uint64_t)round * LEN, .buf_index = -1, .done = done};
	CHECK(io_engine_run(e, &r) == LEN);
	io_engine_destroy(e);
}

static void *side(void *arg)
{
	int me = (int)(intptr_t)arg;
	for (int round = me; round < ROUNDS; round += 2) {
		while (atomic_load_explicit(&turn, memory_order_relaxed) != round)
			sched_yield();
		if (!unavailable)
			one_ring(round);
		atomic_store_explicit(&turn, round + 1, memory_order_relaxed);
	}
	return NULL;
}

int main(void)
{
	char *dir = t_tmpdir("uring-reuse");
	char path[4096];
	snprintf(path, sizeof path, "%s/f", dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0);
	pthread_t a, b;
	REQUIRE(pthread_create(&a, NULL, side, (void *)(intptr_t)0) == 0);
	REQUIRE(pthread_create(&b, NULL, side, (void *)(intptr_t)1) == 0);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	if (unavailable) {
		printf("skip: io_uring unavailable here\n");
		close(fd);
		t_rmrf(dir);
		return 77;
	}
	char got[LEN];
	for (int round = 0; round < ROUNDS; round++) {
		CHECK(pread(fd, got, LEN, (off_t)round * LEN) == LEN);
		CHECK(got[0] == 'a' + round % 26 && got[LEN - 1] == 'a' + round % 26);
	}
	close(fd);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
