/* I/O engines of the save pipeline, forced: CKPT_OPT_IO_ENGINE psync and io_uring, and the
 * CKPT_IO_ENGINE environment variable (which overrides only AUTO), each with queue depths 1 and 64
 * and 1 and 8 worker threads. The statistics name the engine that ran, and every configuration
 * makes the same checkpoints (same tensors, chunks, new chunks, stored bytes; same bytes back). */
#include "t-pipe-util.h"

#define CS (64u << 10)

struct cfg {
	const char *label;
	int engine;
	const char *env;     /* CKPT_IO_ENGINE, or NULL */
	const char *expect;  /* engine name in the statistics */
	int needs_uring;
};

static const struct cfg CFGS[] = {
	{"psync", CKPT_ENGINE_PSYNC, NULL, "psync", 0},
	{"io_uring", CKPT_ENGINE_IO_URING, NULL, "io_uring", 1},
	{"auto, env psync", CKPT_ENGINE_AUTO, "psync", "psync", 0},
	{"auto, env io_uring", CKPT_ENGINE_AUTO, "io_uring", "io_uring", 1},
	{"io_uring, env psync", CKPT_ENGINE_IO_URING, "psync", "io_uring", 1},
	{"psync, env io_uring", CKPT_ENGINE_PSYNC, "io_uring", "psync", 0},
};
enum { NCFG = sizeof CFGS / sizeof *CFGS };

/* What must be identical across engines. */
struct shape {
	ckpt_info info[2];
	uint64_t tchunks[2][16], tnew[2][16], tbytes_new[2][16];
};

static int uring_available(void)
{
	char *dir = t_tmpdir("eng-probe");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.engine = CKPT_ENGINE_IO_URING, .threads = 1));
	struct tp_set *a = tp_set_new(1, 1000, 1);
	save1 *sv = tp_begin(s, 1, a);
	int rc = save1_commit(sv, NULL);
	if (rc)
		printf("io_uring unavailable here (%s): its configurations are skipped\n", ckpt_errmsg());
	CHECK(rc == 0 || rc == -CKPT_E_UNSUPPORTED || rc == -CKPT_E_NOMEM);
	ckpt_store_close(s);
	tp_set_free(a);
	t_rmrf(dir);
	free(dir);
	return rc == 0;
}

static void run(const struct cfg *c, unsigned qd, unsigned threads, const struct tp_set *a,
		const struct tp_set *b, struct shape *out)
{
	char *dir = t_tmpdir("eng");
	if (c->env)
		setenv("CKPT_IO_ENGINE", c->env, 1);
	else
		unsetenv("CKPT_IO_ENGINE");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.engine = c->engine, .qd = qd, .threads = threads,
					      .pool = 1u << 20, .io_size = 256u << 10));
	ckpt_stats st[2];
	CHECK_OK(tp_save(s, 1, a, &st[0]));
	/* The second asynchronously. */
	save1 *sv = tp_begin(s, 2, b);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait(sv, &st[1]));
	for (int i = 0; i < 2; i++) {
		if (strcmp(st[i].engine, c->expect)) {
			fprintf(stderr, "%s, qd %u, %u threads: engine %s, expected %s\n", c->label, qd,
				threads, st[i].engine, c->expect);
			t_failures++;
		}
		CHECK(st[i].threads == threads);
		CHECK(st[i].pool_peak <= st[i].pool_bytes);
	}
	tp_check(s, 1, a);
	tp_check(s, 2, b);
	for (int i = 0; i < 2; i++) {
		reader1 *r = NULL;
		CHECK_OK(reader1_open(s, 1 + (uint64_t)i, &r));
		if (!r)
			continue;
		reader1_info(r, &out->info[i]);
		out->info[i].time = 0;
		for (size_t k = 0; k < reader1_tensor_count(r) && k < 16; k++) {
			ckpt_tensor_info ti;
			CHECK_OK(reader1_tensor(r, k, &ti));
			out->tchunks[i][k] = ti.chunks;
			out->tnew[i][k] = ti.chunks_new;
			out->tbytes_new[i][k] = ti.bytes_new;
		}
		reader1_close(r);
	}
	ckpt_store_close(s);
	unsetenv("CKPT_IO_ENGINE");
	t_rmrf(dir);
	free(dir);
}

int main(void)
{
	int have_uring = uring_available();
	struct tp_set *a = tp_set_new(8, 700000, 3);
	for (size_t i = 0; i < a->nt; i += 2) /* some compressible, some not: same either way */
		memset(a->t[i].data, 7, a->t[i].n / 3);
	struct tp_set *b = tp_set_dup(a);
	tp_set_touch(b, CS, 3, 5);
	struct shape ref, cur;
	int have_ref = 0, runs = 0;
	static const unsigned qds[] = {1, 64}, ths[] = {1, 8};
	for (int c = 0; c < NCFG; c++) {
		if (CFGS[c].needs_uring && !have_uring)
			continue;
		for (int q = 0; q < 2; q++)
			for (int t = 0; t < 2; t++) {
				memset(&cur, 0, sizeof cur);
				run(&CFGS[c], qds[q], ths[t], a, b, &cur);
				runs++;
				if (!have_ref) {
					ref = cur;
					have_ref = 1;
				} else if (memcmp(&ref, &cur, sizeof ref)) {
					fprintf(stderr, "%s, qd %u, %u threads: checkpoints differ from the "
						"first configuration's (stored %llu vs %llu, new chunks %llu vs %llu)\n",
						CFGS[c].label, qds[q], ths[t],
						(unsigned long long)cur.info[1].stored_bytes,
						(unsigned long long)ref.info[1].stored_bytes,
						(unsigned long long)cur.info[1].new_chunks,
						(unsigned long long)ref.info[1].new_chunks);
					t_failures++;
				}
			}
	}
	printf("%d engine configurations, io_uring %s\n", runs, have_uring ? "tested" : "skipped");
	/* AUTO without the environment variable: io_uring when it works. */
	char *dir = t_tmpdir("eng-auto");
	unsetenv("CKPT_IO_ENGINE");
	ckpt_store *s = tp_open(dir, &TP_OPTS(.threads = 2));
	ckpt_stats st;
	CHECK_OK(tp_save(s, 1, a, &st));
	CHECK(!strcmp(st.engine, have_uring ? "io_uring" : "psync"));
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
	tp_set_free(a);
	tp_set_free(b);
	return t_done();
}
