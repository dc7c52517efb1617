/* The save pipeline under load, written to give ThreadSanitizer and ASan something to see:
 *
 * - Backpressure: a pool of 3 slabs (1 MiB pool, 256 KiB I/O size, 64 KiB chunks) and a state
 *   about 50 times larger completes, restores byte-identical, reports time spent waiting for pool
 *   space and a peak within the pool; a second save submitted while the first still persists waits
 *   its turn and both are correct.
 * - Concurrency: 8 worker threads, several saves in flight on one handle (overlapping content,
 *   striped over data directories, small packs), while another thread reads the committed
 *   checkpoints through its own read-only handle with the parallel restore_all.
 * - The parallel restore_all of a checkpoint spread over many packs. */
#include "t-pipe-util.h"

#include <errno.h>
#include <pthread.h>

#include "io/io.h"

#define CS (64u << 10)

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 1
#else
#define SLOW 0
#endif

/* ---- backpressure ----------------------------------------------------------------------------- */
static void test_backpressure(void)
{
	char *dir = t_tmpdir("pipe-bp");
	struct tp_opts o = TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 4, .qd = 4);
	ckpt_store *s = tp_open(dir, &o);
	/* 48 MiB (24 MiB under sanitizers): 50 (25) times the 816 KiB pool. */
	size_t nt = SLOW ? 12 : 24;
	struct tp_set *a = tp_set_new(nt, 2u << 20, 1);
	uint64_t total = 0;
	for (size_t i = 0; i < a->nt; i++)
		total += a->t[i].n;
	ckpt_stats st;
	CHECK_OK(tp_save(s, 1, a, &st));
	printf("backpressure: %.1f MiB through a pool of %llu bytes (peak %llu): %.3fs, waited %.3fs\n",
	       total / 1048576.0, (unsigned long long)st.pool_bytes, (unsigned long long)st.pool_peak,
	       st.seconds, st.wait_seconds);
	CHECK(st.pool_bytes <= (1u << 20) && st.pool_bytes >= 2 * (256u << 10));
	CHECK(total >= 25 * st.pool_bytes);
	CHECK(st.pool_peak > 0 && st.pool_peak <= st.pool_bytes);
	CHECK(st.wait_seconds > 0);
	CHECK(st.snapshot_seconds <= st.seconds);
	CHECK(st.logical_bytes == total);
	tp_check(s, 1, a);

	/* Two saves in flight through the same tiny pool: the second waits for the first. */
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 2, 3);
	struct tp_set *c = tp_set_new(nt, 2u << 20, 4);
	struct tp_set *bw = tp_set_dup(b), *cw = tp_set_dup(c);
	save1 *sb = tp_begin(s, 2, b), *sc = tp_begin(s, 3, c);
	CHECK_OK(save1_submit(sb));
	CHECK_OK(save1_submit(sc));
	CHECK(save1_poll(sc) == 0);
	ckpt_stats stb, stc;
	CHECK_OK(save1_wait_snapshot(sc));
	/* The third's state is far larger than the pool: its snapshot can end only once its slabs
	 * were written, that is once the second was committed (saves are processed in order). */
	CHECK(save1_poll(sb) == 1);
	CHECK_OK(save1_wait(sb, &stb));
	CHECK_OK(save1_wait(sc, &stc));
	CHECK(stb.wait_seconds > 0 && stc.wait_seconds > 0);
	CHECK(stb.pool_peak <= stb.pool_bytes && stc.pool_peak <= stc.pool_bytes);
	CHECK(stb.chunks_reused > 0);
	CHECK(stc.chunks_new == stc.chunks);
	tp_check(s, 1, a);
	tp_check(s, 2, bw);
	tp_check(s, 3, cw);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	tp_set_free(c);
	tp_set_free(bw);
	tp_set_free(cw);
	t_rmrf(dir);
	free(dir);
}

/* ---- concurrency ------------------------------------------------------------------------------ */
#define NSAVES 6

struct reader_arg {
	const char *dir;
	struct tp_set **want;   /* by step - 100 */
	volatile int stop;      /* set once with the lock below */
	pthread_mutex_t mu;
	int reads;
};

static int reader_stop(struct reader_arg *ra)
{
	pthread_mutex_lock(&ra->mu);
	int v = ra->stop;
	pthread_mutex_unlock(&ra->mu);
	return v;
}

/* Another handle, read-only, reads whatever is committed while saves are in flight. */
static void *reader_thread(void *arg)
{
	struct reader_arg *ra = arg;
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_READ_ONLY, 1);
	ckpt_options_set(o, CKPT_OPT_THREADS, 4);
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(ra->dir, o, &s);
	ckpt_options_free(o);
	CHECK_OK(rc);
	while (!rc) {
		int stop = reader_stop(ra);
		ckpt_info *list = NULL;
		int n = ckpt_store_list(s, 0, &list);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			uint64_t k = list[i].step - 100;
			if (k < NSAVES) {
				tp_check(s, list[i].step, ra->want[k]);
				pthread_mutex_lock(&ra->mu);
				ra->reads++;
				pthread_mutex_unlock(&ra->mu);
			}
		}
		ckpt_info_free(list);
		if (stop)
			break;
		usleep(1000);
	}
	ckpt_store_close(s);
	return NULL;
}

static void test_concurrency(void)
{
	char *dir = t_tmpdir("pipe-cc");
	char d1[4200], d2[4200];
	snprintf(d1, sizeof d1, "%s-d1", dir);
	snprintf(d2, sizeof d2, "%s-d2", dir);
	struct tp_opts o = TP_OPTS(.pool = 2u << 20, .io_size = 256u << 10, .threads = 8, .qd = 3,
				   .pack_size = 1u << 20, .data_dirs = {d1, d2});
	for (int round = 0; round < 2; round++) {
		o.compress = round; /* zstd in the second round */
		char sub[4300];
		snprintf(sub, sizeof sub, "%s/r%d", dir, round);
		ckpt_store *s = tp_open(sub, &o);
		struct tp_set *want[NSAVES], *x[NSAVES];
		want[0] = tp_set_new(SLOW ? 6 : 10, 600000, 50 + (uint64_t)round);
		for (int i = 1; i < NSAVES; i++) {
			want[i] = tp_set_dup(want[i - 1]);
			tp_set_touch(want[i], CS, 2 + (unsigned)i, (uint64_t)i);
		}
		/* Compressible halves, so that zstd has something to do. */
		for (int i = 0; round && i < NSAVES; i++)
			for (size_t t = 0; t < want[i]->nt; t++)
				memset(want[i]->t[t].data, 0, want[i]->t[t].n / 2);
		struct reader_arg ra = {.dir = sub, .want = want};
		pthread_mutex_init(&ra.mu, NULL);
		/* The first checkpoint exists before the reader starts. */
		x[0] = tp_set_dup(want[0]);
		save1 *sv[NSAVES];
		sv[0] = tp_begin(s, 100, x[0]);
		CHECK_OK(save1_commit(sv[0], NULL));
		pthread_t th;
		REQUIRE(pthread_create(&th, NULL, reader_thread, &ra) == 0);
		for (int i = 1; i < NSAVES; i++) {
			x[i] = tp_set_dup(want[i]);
			sv[i] = tp_begin(s, 100 + (uint64_t)i, x[i]);
			CHECK_OK(save1_submit(sv[i]));
		}
		/* The snapshots end in order; scribble over each as soon as it is done. */
		for (int i = 1; i < NSAVES; i++) {
			CHECK_OK(save1_wait_snapshot(sv[i]));
			for (size_t t = 0; t < x[i]->nt; t++)
				memset(x[i]->t[t].data, 0xcc, x[i]->t[t].n);
		}
		ckpt_stats st[NSAVES];
		for (int i = 1; i < NSAVES; i++) {
			CHECK_OK(save1_wait(sv[i], &st[i]));
			CHECK(st[i].data_dirs == 3);
			CHECK(st[i].threads == 8);
			CHECK(st[i].chunks_reused > 0);
			CHECK(st[i].pool_peak <= st[i].pool_bytes);
		}
		pthread_mutex_lock(&ra.mu);
		ra.stop = 1;
		pthread_mutex_unlock(&ra.mu);
		pthread_join(th, NULL);
		printf("concurrency round %d: reader restored %d checkpoints meanwhile\n", round, ra.reads);
		pthread_mutex_destroy(&ra.mu);
		for (int i = 0; i < NSAVES; i++)
			tp_check(s, 100 + (uint64_t)i, want[i]);
		/* Packs in all three directories. */
		char p[4400];
		snprintf(p, sizeof p, "%s/packs", sub);
		CHECK(tp_count_packs(p) > 0);
		snprintf(p, sizeof p, "%s/packs", d1);
		CHECK(tp_count_packs(p) > 0);
		snprintf(p, sizeof p, "%s/packs", d2);
		CHECK(tp_count_packs(p) > 0);
		ckpt_store_close(s);
		for (int i = 0; i < NSAVES; i++) {
			tp_set_free(want[i]);
			tp_set_free(x[i]);
		}
	}
	t_rmrf(dir);
	t_rmrf(d1);
	t_rmrf(d2);
	free(dir);
}

/* Several handles on distinct stores, each with saves in flight, from several threads at once:
 * process-wide state (codec contexts, fault state, error messages) is shared. */
struct hs_arg {
	int id;
	const char *base;
};

static void *handle_thread(void *arg)
{
	struct hs_arg *h = arg;
	char dir[4300];
	snprintf(dir, sizeof dir, "%s/h%d", h->base, h->id);
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 2,
					      .compress = h->id & 1));
	struct tp_set *a = tp_set_new(4, 400000, 70 + (uint64_t)h->id);
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 3, 9);
	save1 *s1 = tp_begin(s, 1, a), *s2 = tp_begin(s, 2, b);
	CHECK_OK(save1_submit(s1));
	CHECK_OK(save1_submit(s2));
	/* A failing call on this thread: its message must be this thread's. */
	reader1 *r = NULL;
	CHECK_RC(reader1_open(s, 999, &r), -CKPT_E_NOTFOUND);
	CHECK(strstr(ckpt_errmsg(), "999") != NULL || strstr(ckpt_errmsg(), "checkpoint") != NULL);
	CHECK_OK(save1_wait(s1, NULL));
	CHECK_OK(save1_wait(s2, NULL));
	tp_check(s, 1, a);
	tp_check(s, 2, b);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	return NULL;
}

static void test_handles(void)
{
	char *dir = t_tmpdir("pipe-hs");
	enum { N = 4 };
	pthread_t th[N];
	struct hs_arg ha[N];
	for (int i = 0; i < N; i++) {
		ha[i] = (struct hs_arg){i, dir};
		REQUIRE(pthread_create(&th[i], NULL, handle_thread, &ha[i]) == 0);
	}
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	t_rmrf(dir);
	free(dir);
}

/* restore_all over a checkpoint spread across many small packs, repeatedly: the reader's pack
 * table grows while other threads use it. */
static void test_restore_all_many_packs(void)
{
	char *dir = t_tmpdir("pipe-ra");
	/* One worker: every pack closes at the pack size, so many packs. */
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 1,
					      .pack_size = 1u << 20));
	struct tp_set *a = tp_set_new(SLOW ? 16 : 32, 500000, 90);
	CHECK_OK(tp_save(s, 1, a, NULL));
	ckpt_store_close(s);
	char p[4200];
	snprintf(p, sizeof p, "%s/packs", dir);
	int npacks = tp_count_packs(p);
	printf("restore_all: %d packs\n", npacks);
	CHECK(npacks >= 6);
	/* Restore with 8 threads, again and again: the reader opens packs as threads need them. */
	s = tp_open(dir, &TP_OPTS(.no_create = 1, .threads = 8, .qd = 8));
	for (int k = 0; k < (SLOW ? 4 : 20); k++)
		tp_check(s, 1, a);
	ckpt_store_close(s);
	tp_set_free(a);
	t_rmrf(dir);
	free(dir);
}

/* O_DIRECT refused at the first write (EINVAL from the fault engine on the pack header) by a save
 * in flight behind one that writes nothing: the handle switches to buffered I/O while the caller
 * waits for the first save and reads its statistics. */
static void test_direct_refused_in_flight(void)
{
	char *dir = t_tmpdir("pipe-dr");
	struct tp_opts o = TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 4);
	ckpt_store *s = tp_open(dir, &o);
	struct tp_set *a = tp_set_new(4, 300000, 5);
	CHECK_OK(tp_save(s, 1, a, NULL));
	ckpt_store_close(s);
	o.no_create = 1;
	s = tp_open(dir, &o);
	struct tp_set *b = tp_set_new(4, 300000, 6);
	/* Write 1 is the first save's manifest, write 2 the second's first pack header. */
	ckpt_io_fault_arm(IO_FAULT_WRITE, 2, EINVAL);
	save1 *sa = tp_begin(s, 2, a), *sb = tp_begin(s, 3, b);
	CHECK_OK(save1_submit(sa));
	CHECK_OK(save1_submit(sb));
	ckpt_stats sta, stb;
	CHECK_OK(save1_wait(sa, &sta));
	CHECK_OK(save1_wait(sb, &stb));
	CHECK(ckpt_io_fault_fired() == 1);
	ckpt_io_fault_disarm();
	CHECK(sta.chunks_new == 0 && sta.bytes_written == 0);
	CHECK(stb.direct_io == 0);
	tp_check(s, 2, a);
	tp_check(s, 3, b);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	test_direct_refused_in_flight();
	test_backpressure();
	test_restore_all_many_packs();
	test_concurrency();
	test_handles();
	return t_done();
}
