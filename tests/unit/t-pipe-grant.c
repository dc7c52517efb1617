/* Pool slabs go to the jobs waiting for them without a thread handoff ("a pipeline that
 * scales with cores"). A dispatcher thread used to take the jobs one at a time and block in the
 * pool: once the pool was full it was woken for every released slab and then woke a worker, two
 * handoffs and one voluntary context switch per slab on the critical path. Now the release grants
 * the slab to the next job in order, on the thread that released it.
 *
 * Through the test builds' discard engine (writes complete at once, on the worker) with one worker
 * and a pool of 15 slabs, a save of 128 slab jobs checks:
 * - the pipeline runs on its workers alone: the process has the caller and one worker thread
 *   (and the in-flight markers' refresher, one per process, started by the first save:
 *   store/marker.c);
 * - the save blocks about as often as a save of one chunk does (the caller's wait, the commit's
 *   fsyncs), not once per slab: counted with getrusage, not timed;
 * - at most one copy per worker waits with a slab granted: the save holds 2 slabs at a time (the
 *   one being copied and written, the next one), so with a fast disk the copies reuse the slab
 *   released last, warm in the caches, instead of cycling through the whole pool; the pool is
 *   never empty, so no backpressure is reported.
 * Under ThreadSanitizer, whose runtime has a thread of its own that wakes up periodically, only
 * the last checks run (the test is then there for the races of the grant path). */
#include "t-pipe-util.h"

#include <dirent.h>
#include <sys/resource.h>

#ifdef __SANITIZE_THREAD__
#define TSAN 1
#else
#define TSAN 0
#endif

static int task_count(void)
{
	DIR *d = opendir("/proc/self/task");
	REQUIRE(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Voluntary context switches of the whole process during a synchronous save of set. */
static long save_blocks(ckpt_store *s, uint64_t step, const struct tp_set *set, ckpt_stats *st)
{
	struct rusage a, b;
	REQUIRE(getrusage(RUSAGE_SELF, &a) == 0);
	CHECK_OK(tp_save(s, step, set, st));
	REQUIRE(getrusage(RUSAGE_SELF, &b) == 0);
	return b.ru_nvcsw - a.ru_nvcsw;
}

int main(void)
{
	if (setenv("CKPT_IO_ENGINE", "discard", 1))
		return 1;
	char *dir = t_tmpdir("pipe-grant");
	/* Slabs of 4 records of 64 KiB + 4 KiB (an I/O size of 256 KiB rounds to 272 KiB), 15 of
	 * them in a 4 MiB pool; 32 MiB of state is 128 slab jobs. */
	struct tp_opts o = TP_OPTS(.pool = 4u << 20, .io_size = 256u << 10, .threads = 1);
	ckpt_store *s = tp_open(dir, &o);
	struct tp_set *one = tp_set_new(1, 64u << 10, 1);
	struct tp_set *big = tp_set_new(16, 2u << 20, 2);
	struct tp_set *one2 = tp_set_new(1, 64u << 10, 3);
	ckpt_stats st;
	CHECK_OK(tp_save(s, 1, one, &st)); /* starts the pipeline */
	int tasks = task_count();
	printf("threads of the process with one worker, the discard engine and the markers' "
	       "refresher: %d\n", tasks);
	CHECK(TSAN || tasks == 3);
	long small = save_blocks(s, 2, one2, &st);
	long many = save_blocks(s, 3, big, &st);
	uint64_t jobs = st.chunks / 4;
	printf("voluntary context switches: %ld for one chunk, %ld for %llu slab jobs; waited %.4fs, "
	       "pool peak %llu of %llu\n", small, many, (unsigned long long)jobs, st.wait_seconds,
	       (unsigned long long)st.pool_peak, (unsigned long long)st.pool_bytes);
	CHECK(jobs >= 100);
	CHECK(TSAN || many - small < (long)jobs / 4);
	uint64_t slab = st.pool_bytes / 15;
	CHECK(st.pool_bytes == 15 * slab);
	CHECK(st.pool_peak > 0 && st.pool_peak <= 2 * slab);
	CHECK(st.wait_seconds == 0);
	CHECK(st.chunks_new == st.chunks && st.bytes_hashed == st.logical_bytes);
	ckpt_store_close(s);
	tp_set_free(one);
	tp_set_free(one2);
	tp_set_free(big);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
