/* The asynchronous save API: save1_submit / wait_snapshot / poll / wait / abort.
 *
 * - submit returns before the save is durable: fdatasync() is gated by this test (the definition
 *   below takes precedence over libc's for the statically linked library), so the save provably
 *   cannot finish while the gate is closed; poll says 0, no manifest is visible, then 1.
 * - After wait_snapshot the caller overwrites every tensor: the checkpoint still restores the
 *   original bytes, for the copy snapshot and for the hash-first (incremental) snapshot.
 * - wait returns the statistics (snapshot <= total time, engine, pool size and peak).
 * - Calls in the wrong state fail with -CKPT_E_STATE and change nothing.
 * - abort of a submitted save cancels it: no manifest, no pack left, earlier checkpoints intact;
 *   an abort that comes once the manifest is visible must not damage that checkpoint.
 * - Several saves in flight on one handle commit in submission order, restore, and deduplicate
 *   against each other; a write failure injected at every position of three saves in flight
 *   fails only the save it hits, cleanly, and every checkpoint that was made is complete. */
#include "t-pipe-util.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "io/io.h"

#define CS (64u << 10)

/* ---- gates on fdatasync() and on the manifests directory's fsync() --------------------------- */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int sync_gate_closed, sync_waiters;
static int mfdir_gate_closed, mfdir_waiters;

static void gate_pass(int *closed, int *waiters)
{
	pthread_mutex_lock(&gate_mu);
	if (*closed) {
		++*waiters;
		pthread_cond_broadcast(&gate_cv);
		while (*closed)
			pthread_cond_wait(&gate_cv, &gate_mu);
		--*waiters;
	}
	pthread_mutex_unlock(&gate_mu);
}

static void gate_set(int *closed, int v)
{
	pthread_mutex_lock(&gate_mu);
	*closed = v;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

/* Waits (at most 20 s) until someone is held at the gate. */
static int gate_wait_held(int *waiters)
{
	double t0 = tp_now();
	pthread_mutex_lock(&gate_mu);
	while (!*waiters && tp_now() - t0 < 20) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&gate_cv, &gate_mu, &ts);
	}
	int held = *waiters;
	pthread_mutex_unlock(&gate_mu);
	return held;
}

int fdatasync(int fd)
{
	gate_pass(&sync_gate_closed, &sync_waiters);
	return (int)syscall(SYS_fdatasync, fd);
}

static int is_manifests_dir(int fd)
{
	struct stat st;
	if (fstat(fd, &st) || !S_ISDIR(st.st_mode))
		return 0;
	char link[64], path[4096];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof path - 1);
	if (n <= 0)
		return 0;
	path[n] = 0;
	return n >= 10 && !strcmp(path + n - 10, "/manifests");
}

int fsync(int fd)
{
	if (is_manifests_dir(fd))
		gate_pass(&mfdir_gate_closed, &mfdir_waiters);
	return (int)syscall(SYS_fsync, fd);
}

/* Polls until sv finishes (at most 30 s). */
static int poll_until_done(save1 *sv)
{
	double t0 = tp_now();
	while (!save1_poll(sv) && tp_now() - t0 < 30)
		usleep(1000);
	return save1_poll(sv);
}

static uint64_t set_bytes(const struct tp_set *s)
{
	uint64_t n = 0;
	for (size_t i = 0; i < s->nt; i++)
		n += s->t[i].n;
	return n;
}

static uint64_t set_chunks(const struct tp_set *s, uint32_t cs)
{
	uint64_t n = 0;
	for (size_t i = 0; i < s->nt; i++)
		n += (s->t[i].n + cs - 1) / cs;
	return n;
}

static void scribble(struct tp_set *s, uint64_t seed)
{
	for (size_t i = 0; i < s->nt; i++) {
		t_fill(s->t[i].data, s->t[i].n, seed + i);
		for (uint64_t k = 0; k < s->t[i].n; k += 4096)
			s->t[i].data[k] ^= 0xff;
	}
}

/* ---- submit / poll / snapshot / stats --------------------------------------------------------- */
static void test_basic(void)
{
	char *dir = t_tmpdir("async");
	/* Pool (4 slabs of 1 MiB) smaller than the state (8 MiB): the snapshot streams. */
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 4u << 20, .io_size = 1u << 20, .threads = 2));
	struct tp_set *cur = tp_set_new(8, 1u << 20, 1);
	struct tp_set *want = tp_set_dup(cur);

	gate_set(&sync_gate_closed, 1);
	save1 *sv = tp_begin(s, 1, cur);
	CHECK(save1_poll(sv) == 0);
	CHECK_RC(save1_wait_snapshot(sv), -CKPT_E_STATE);
	CHECK_RC(save1_fence(sv, NULL), -CKPT_E_STATE);
	CHECK_OK(save1_submit(sv));
	CHECK(save1_poll(sv) == 0);
	/* Wrong state after submit: nothing changes. */
	uint64_t sh[1] = {16};
	uint8_t extra[16] = {0};
	CHECK_RC(save1_submit(sv), -CKPT_E_STATE);
	CHECK_RC(save1_add_tensor(sv, "late", CKPT_DTYPE_U8, 1, sh, CKPT_MEM_HOST, extra),
		 -CKPT_E_STATE);
	CHECK_RC(save1_set_meta(sv, "late", "x"), -CKPT_E_STATE);
	CHECK_RC(save1_after_stream(sv, NULL), -CKPT_E_STATE);
	CHECK_OK(save1_wait_snapshot(sv));
	CHECK_OK(save1_wait_snapshot(sv)); /* again: still fine */
	/* The caller owns its tensors again. */
	scribble(cur, 999);
	/* The commit is held at fdatasync: not durable, not visible, not finished. */
	CHECK(gate_wait_held(&sync_waiters));
	CHECK(save1_poll(sv) == 0);
	CHECK(!tp_manifest_exists(s, 1));
	ckpt_info *list = NULL;
	CHECK(ckpt_store_list(s, 1, &list) == 0);
	ckpt_info_free(list);
	gate_set(&sync_gate_closed, 0);
	CHECK(poll_until_done(sv) == 1);
	CHECK(save1_poll(sv) == 1);
	ckpt_stats st;
	memset(&st, 0xee, sizeof st);
	CHECK_OK(save1_wait(sv, &st));
	CHECK(tp_manifest_exists(s, 1));
	CHECK(st.step == 1);
	CHECK(st.tensors == want->nt);
	CHECK(st.logical_bytes == set_bytes(want));
	CHECK(st.chunks == set_chunks(want, CS));
	CHECK(st.chunks_new == st.chunks && st.chunks_reused == 0);
	CHECK(st.bytes_hashed == st.logical_bytes);
	CHECK(st.bytes_written >= st.logical_bytes);
	CHECK(st.seconds > 0);
	CHECK(st.snapshot_seconds >= 0 && st.snapshot_seconds <= st.seconds);
	CHECK(st.persist_seconds >= 0 && st.persist_seconds <= st.seconds);
	CHECK(!strcmp(st.engine, "io_uring") || !strcmp(st.engine, "psync"));
	CHECK(!strcmp(st.gpu, "host"));
	CHECK(st.pool_bytes > 0 && st.pool_bytes <= (4u << 20));
	CHECK(st.pool_peak > 0 && st.pool_peak <= st.pool_bytes);
	CHECK(st.threads == 2);
	CHECK(st.data_dirs == 1);
	printf("basic: %.3fs (snapshot %.3fs, waited %.3fs), engine %s, pool %llu peak %llu\n",
	       st.seconds, st.snapshot_seconds, st.wait_seconds, st.engine,
	       (unsigned long long)st.pool_bytes, (unsigned long long)st.pool_peak);
	tp_check(s, 1, want);

	/* Steps 2..7 alternate dense and sparse changes, so that the handle snapshots by copy and by
	 * hash-first (chunks the store holds are hashed, not copied); every time the caller
	 * overwrites everything right after the snapshot. */
	for (uint64_t step = 2; step <= 7; step++) {
		tp_set_free(cur);
		cur = tp_set_dup(want);
		if (step % 3 == 2)
			for (size_t i = 0; i < cur->nt; i++)
				t_fill(cur->t[i].data, cur->t[i].n, step * 77 + i);
		else
			tp_set_touch(cur, CS, 4, step);
		tp_set_free(want);
		want = tp_set_dup(cur);
		sv = tp_begin(s, step, cur);
		CHECK_OK(save1_submit(sv));
		CHECK_OK(save1_wait_snapshot(sv));
		scribble(cur, step * 1000);
		CHECK_OK(save1_wait(sv, &st));
		CHECK(st.snapshot_seconds <= st.seconds);
		CHECK(st.pool_peak <= st.pool_bytes);
		if (step % 3 != 2)
			CHECK(st.chunks_reused > 0);
		tp_check(s, step, want);
	}
	ckpt_store_close(s);

	/* A fresh handle sees the same. */
	s = tp_open(dir, &TP_OPTS(.no_create = 1));
	tp_check(s, 7, want);
	ckpt_store_close(s);
	tp_set_free(cur);
	tp_set_free(want);
	t_rmrf(dir);
	free(dir);
}

/* ---- abort ------------------------------------------------------------------------------------ */
static void test_abort(void)
{
	char *dir = t_tmpdir("async-abort");
	char packs[4200];
	snprintf(packs, sizeof packs, "%s/packs", dir);
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 2));
	struct tp_set *a = tp_set_new(4, 1u << 20, 10);
	CHECK_OK(tp_save(s, 10, a, NULL));
	int packs_before = tp_count_packs(packs);

	/* Abort right after submit (the save is far from done: held at fdatasync at the latest). */
	struct tp_set *b = tp_set_new(16, 1u << 20, 11);
	gate_set(&sync_gate_closed, 1);
	save1 *sv = tp_begin(s, 11, b);
	CHECK_OK(save1_submit(sv));
	save1_abort(sv);
	gate_set(&sync_gate_closed, 0);
	CHECK(!tp_manifest_exists(s, 11));
	CHECK(tp_count_packs(packs) == packs_before);
	uint64_t got;
	CHECK_OK(ckpt_store_resolve(s, CKPT_STEP_LATEST, &got));
	CHECK(got == 10);
	tp_check(s, 10, a);

	/* Abort after the snapshot. */
	sv = tp_begin(s, 11, b);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	save1_abort(sv);
	CHECK(!tp_manifest_exists(s, 11));
	CHECK(tp_count_packs(packs) == packs_before);

	/* Abort of a save that was never submitted, and of NULL. */
	sv = tp_begin(s, 11, b);
	save1_abort(sv);
	save1_abort(NULL);

	/* The step is free again, and nothing deduplicates against the aborted saves. */
	CHECK_OK(tp_save(s, 11, b, NULL));
	tp_check(s, 10, a);
	tp_check(s, 11, b);
	ckpt_store_close(s);
	s = tp_open(dir, &TP_OPTS(.no_create = 1));
	tp_check(s, 10, a);
	tp_check(s, 11, b);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	t_rmrf(dir);
	free(dir);
}

/* An abort that arrives while the manifest is already renamed into place (held at the manifests
 * directory's fsync): the save may report the cancel or success, but the store must never be left
 * with a visible manifest whose packs were removed. */
struct abort_arg {
	save1 *sv;
};

static void *abort_thread(void *arg)
{
	struct abort_arg *a = arg;
	save1_abort(a->sv);
	return NULL;
}

static void test_abort_at_commit(void)
{
	char *dir = t_tmpdir("async-abort2");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.threads = 2));
	struct tp_set *a = tp_set_new(4, 300000, 20);
	CHECK_OK(tp_save(s, 20, a, NULL));
	struct tp_set *b = tp_set_new(4, 300000, 21);
	gate_set(&mfdir_gate_closed, 1);
	save1 *sv = tp_begin(s, 21, b);
	CHECK_OK(save1_submit(sv));
	REQUIRE(gate_wait_held(&mfdir_waiters));
	/* The manifest of 21 is in place; cancel now. */
	CHECK(tp_manifest_exists(s, 21));
	struct abort_arg aa = {sv};
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, abort_thread, &aa) == 0);
	usleep(200 * 1000); /* let the abort record its cancel */
	gate_set(&mfdir_gate_closed, 0);
	pthread_join(th, NULL);
	if (tp_manifest_exists(s, 21)) {
		ckpt_store_close(s);
		s = tp_open(dir, &TP_OPTS(.no_create = 1));
		if (tp_check(s, 21, b))
			fprintf(stderr, "BUG: an abort during the commit left checkpoint 21 visible "
					"with its packs removed\n");
	}
	tp_check(s, 20, a);
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	t_rmrf(dir);
	free(dir);
}

/* ---- several saves in flight ------------------------------------------------------------------ */
static uint64_t touched_chunks(const struct tp_set *s, uint32_t cs, unsigned every)
{
	uint64_t n = 0;
	for (size_t i = 0; i < s->nt; i++)
		for (uint64_t off = 0, k = 0; off < s->t[i].n; off += cs, k++)
			n += k % every == 0;
	return n;
}

static void test_in_flight(void)
{
	char *dir = t_tmpdir("async-fifo");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 2u << 20, .io_size = 512u << 10, .threads = 4));
	struct tp_set *x[3];
	x[0] = tp_set_new(6, 700000, 30);
	x[1] = tp_set_dup(x[0]);
	tp_set_touch(x[1], CS, 5, 1);
	x[2] = tp_set_dup(x[0]);
	tp_set_touch(x[2], CS, 7, 2);
	struct tp_set *want[3];
	save1 *sv[3];
	for (int i = 0; i < 3; i++) {
		want[i] = tp_set_dup(x[i]);
		sv[i] = tp_begin(s, 31 + (uint64_t)i, x[i]);
		CHECK_OK(save1_submit(sv[i]));
	}
	/* A step being saved cannot be begun again. */
	save1 *dupl = NULL;
	CHECK_RC(save1_begin(s, 32, &dupl), -CKPT_E_EXISTS);
	CHECK(dupl == NULL);
	/* Commit order: polled from the last to the first, a later save is never done before an
	 * earlier one. */
	int order_ok = 1;
	double t0 = tp_now();
	for (;;) {
		int d2 = save1_poll(sv[2]), d1 = save1_poll(sv[1]), d0 = save1_poll(sv[0]);
		if ((d2 && !d1) || (d1 && !d0))
			order_ok = 0;
		if (d0 && d1 && d2)
			break;
		if (tp_now() - t0 > 60) {
			CHECK(!"saves in flight did not finish in 60 s");
			break;
		}
		usleep(200);
	}
	CHECK(order_ok);
	ckpt_stats st[3];
	for (int i = 0; i < 3; i++) {
		CHECK_OK(save1_wait_snapshot(sv[i]));
		scribble(x[i], 5000 + (uint64_t)i);
		CHECK_OK(save1_wait(sv[i], &st[i]));
	}
	uint64_t total = set_chunks(want[0], CS);
	CHECK(st[0].chunks_new == total);
	/* The second and third write only what changed relative to the first. */
	CHECK(st[1].chunks == total && st[1].chunks_new == touched_chunks(want[0], CS, 5));
	CHECK(st[1].chunks_reused == total - st[1].chunks_new);
	CHECK(st[2].chunks == total && st[2].chunks_new == touched_chunks(want[0], CS, 7));
	printf("in flight: new chunks %llu, %llu, %llu of %llu\n", (unsigned long long)st[0].chunks_new,
	       (unsigned long long)st[1].chunks_new, (unsigned long long)st[2].chunks_new,
	       (unsigned long long)total);
	for (int i = 0; i < 3; i++)
		tp_check(s, 31 + (uint64_t)i, want[i]);
	ckpt_store_close(s);
	s = tp_open(dir, &TP_OPTS(.no_create = 1));
	for (int i = 0; i < 3; i++)
		tp_check(s, 31 + (uint64_t)i, want[i]);
	ckpt_store_close(s);
	for (int i = 0; i < 3; i++) {
		tp_set_free(x[i]);
		tp_set_free(want[i]);
	}
	t_rmrf(dir);
	free(dir);
}

/* A write fault (error or short write) at every position of three saves in flight. */
static void test_in_flight_faults(int err)
{
	struct tp_set *base = tp_set_new(4, 300000, 40);
	struct tp_set *want[3];
	want[0] = tp_set_dup(base);
	want[1] = tp_set_dup(base);
	tp_set_touch(want[1], CS, 3, 1);
	want[2] = tp_set_dup(base);
	tp_set_touch(want[2], CS, 2, 2);
	int nfailed_total = 0;
	for (unsigned long nth = 1; nth < 200; nth++) {
		char *dir = t_tmpdir("async-fault");
		ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10,
						      .threads = 3, .qd = 2));
		CHECK_OK(tp_save(s, 1, base, NULL)); /* an earlier checkpoint */
		ckpt_store_close(s);
		s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 3, .qd = 2,
					  .no_create = 1));
		struct tp_set *x[3];
		save1 *sv[3];
		ckpt_io_fault_arm(IO_FAULT_WRITE, nth, err);
		for (int i = 0; i < 3; i++) {
			x[i] = tp_set_dup(want[i]);
			sv[i] = tp_begin(s, 10 + (uint64_t)i, x[i]);
			CHECK_OK(save1_submit(sv[i]));
		}
		int rc[3], nfailed = 0;
		for (int i = 0; i < 3; i++) {
			rc[i] = save1_wait(sv[i], NULL);
			if (rc[i]) {
				nfailed++;
				int want_rc = err == ENOSPC ? -CKPT_E_NOSPC : -CKPT_E_IO;
				if (rc[i] != want_rc)
					fprintf(stderr, "nth %lu err %d: save %d: %d (%s)\n", nth, err, i,
						rc[i], ckpt_errmsg());
				CHECK(rc[i] == want_rc);
				char want_step[32];
				snprintf(want_step, sizeof want_step, "checkpoint %d", 10 + i);
				CHECK(strstr(ckpt_errmsg(), want_step) != NULL);
			}
		}
		unsigned long fired = ckpt_io_fault_fired();
		ckpt_io_fault_disarm();
		if (err == 0)
			CHECK(nfailed == 0); /* a short write is finished, never an error */
		else
			CHECK(nfailed == (fired ? 1 : 0));
		nfailed_total += nfailed;
		/* Every checkpoint made is complete, from this handle and from a fresh one. */
		for (int pass = 0; pass < 2; pass++) {
			tp_check(s, 1, base);
			for (int i = 0; i < 3; i++) {
				if (rc[i] == 0)
					tp_check(s, 10 + (uint64_t)i, want[i]);
				else
					CHECK(!tp_manifest_exists(s, 10 + (uint64_t)i));
			}
			ckpt_store_close(s);
			s = tp_open(dir, &TP_OPTS(.no_create = 1));
		}
		/* A failed step can be saved again and is complete. */
		for (int i = 0; i < 3; i++)
			if (rc[i]) {
				CHECK_OK(tp_save(s, 10 + (uint64_t)i, want[i], NULL));
				tp_check(s, 10 + (uint64_t)i, want[i]);
			}
		ckpt_store_close(s);
		for (int i = 0; i < 3; i++)
			tp_set_free(x[i]);
		t_rmrf(dir);
		free(dir);
		if (!fired)
			break;
	}
	if (err)
		CHECK(nfailed_total > 0);
	for (int i = 0; i < 3; i++)
		tp_set_free(want[i]);
	tp_set_free(base);
}

/* ---- zero tensors ----------------------------------------------------------------------------- */
static void test_empty(void)
{
	char *dir = t_tmpdir("async-empty");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.threads = 1));
	struct tp_set *none = tp_set_new(0, 0, 0);
	save1 *sv = tp_begin(s, 5, none);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	CHECK(poll_until_done(sv) == 1);
	ckpt_stats st;
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.tensors == 0 && st.chunks == 0 && st.logical_bytes == 0);
	CHECK(st.snapshot_seconds <= st.seconds);
	tp_check(s, 5, none);
	/* wait without submit: -CKPT_E_STATE, and the save is freed. */
	sv = tp_begin(s, 6, none);
	CHECK_RC(save1_wait(sv, NULL), -CKPT_E_STATE);
	CHECK(!tp_manifest_exists(s, 6));
	ckpt_store_close(s);
	tp_set_free(none);
	t_rmrf(dir);
	free(dir);
}

/* ---- a failing save, closing with saves in flight, overwriting in flight ---------------------- */
static void test_failure_and_close(void)
{
	char *dir = t_tmpdir("async-misc");
	struct tp_opts o = TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10, .threads = 2);
	ckpt_store *s = tp_open(dir, &o);
	struct tp_set *a = tp_set_new(8, 1u << 20, 60);
	/* The first write fails: wait_snapshot returns 0 or the error, wait the error. */
	ckpt_io_fault_arm(IO_FAULT_WRITE, 1, EIO);
	save1 *sv = tp_begin(s, 1, a);
	CHECK_OK(save1_submit(sv));
	int rc = save1_wait_snapshot(sv);
	CHECK(rc == 0 || rc == -CKPT_E_IO);
	CHECK(poll_until_done(sv) == 1);
	CHECK_RC(save1_wait(sv, NULL), -CKPT_E_IO);
	CHECK(strstr(ckpt_errmsg(), "checkpoint 1") != NULL);
	ckpt_io_fault_disarm();
	CHECK(!tp_manifest_exists(s, 1));

	/* Two saves of one step in flight with CKPT_OPT_OVERWRITE: the later one wins. */
	ckpt_store_close(s);
	struct tp_opts ow = o;
	ow.no_create = 1;
	ckpt_options *op = tp_options(&ow);
	REQUIRE(ckpt_options_set(op, CKPT_OPT_OVERWRITE, 1) == 0);
	s = NULL;
	REQUIRE(ckpt_store_open(dir, op, &s) == 0);
	ckpt_options_free(op);
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 2, 8);
	save1 *s1 = tp_begin(s, 50, a), *s2 = tp_begin(s, 50, b);
	CHECK_OK(save1_submit(s1));
	CHECK_OK(save1_submit(s2));
	CHECK_OK(save1_wait(s1, NULL));
	CHECK_OK(save1_wait(s2, NULL));
	tp_check(s, 50, b);
	ckpt_store_close(s);

	/* Closing the handle right after submitting: the saves in flight still complete. */
	s = tp_open(dir, &TP_OPTS(.no_create = 1, .pool = 1u << 20, .io_size = 256u << 10));
	struct tp_set *c = tp_set_new(8, 1u << 20, 61);
	s1 = tp_begin(s, 60, a);
	s2 = tp_begin(s, 61, c);
	CHECK_OK(save1_submit(s1));
	CHECK_OK(save1_submit(s2));
	save1 *s3 = tp_begin(s, 62, c); /* never submitted: aborted */
	(void)s3;
	ckpt_store_close(s);
	s = tp_open(dir, &TP_OPTS(.no_create = 1));
	tp_check(s, 50, b);
	tp_check(s, 60, a);
	tp_check(s, 61, c);
	CHECK(!tp_manifest_exists(s, 62));
	ckpt_store_close(s);
	tp_set_free(a);
	tp_set_free(b);
	tp_set_free(c);
	t_rmrf(dir);
	free(dir);
}

/* Aborting one of several saves in flight: the others commit, intact, and nothing references
 * what the aborted one wrote. */
static void test_abort_in_flight(void)
{
	for (int victim = 0; victim < 3; victim++) {
		char *dir = t_tmpdir("async-abort3");
		ckpt_store *s = tp_open(dir, &TP_OPTS(.pool = 1u << 20, .io_size = 256u << 10,
						      .threads = 3));
		struct tp_set *want[3], *x[3];
		want[0] = tp_set_new(6, 1u << 20, 70);
		want[1] = tp_set_dup(want[0]);
		tp_set_touch(want[1], CS, 3, 1);
		want[2] = tp_set_dup(want[1]);
		tp_set_touch(want[2], CS, 4, 2);
		save1 *sv[3];
		for (int i = 0; i < 3; i++) {
			x[i] = tp_set_dup(want[i]);
			sv[i] = tp_begin(s, 70 + (uint64_t)i, x[i]);
			CHECK_OK(save1_submit(sv[i]));
		}
		save1_abort(sv[victim]);
		for (int i = 0; i < 3; i++)
			if (i != victim)
				CHECK_OK(save1_wait(sv[i], NULL));
		for (int pass = 0; pass < 2; pass++) {
			for (int i = 0; i < 3; i++) {
				/* The victim may have committed before the abort came; if it did, it is
				 * complete. */
				if (i != victim || tp_manifest_exists(s, 70 + (uint64_t)i))
					tp_check(s, 70 + (uint64_t)i, want[i]);
			}
			ckpt_store_close(s);
			s = tp_open(dir, &TP_OPTS(.no_create = 1));
		}
		ckpt_store_close(s);
		for (int i = 0; i < 3; i++) {
			tp_set_free(want[i]);
			tp_set_free(x[i]);
		}
		t_rmrf(dir);
		free(dir);
	}
}

int main(void)
{
	test_abort_in_flight();
	test_failure_and_close();
	test_basic();
	test_abort();
	test_empty();
	test_in_flight();
	test_in_flight_faults(EIO);
	test_in_flight_faults(ENOSPC);
	test_in_flight_faults(0);
	test_abort_at_commit();
	return t_done();
}
