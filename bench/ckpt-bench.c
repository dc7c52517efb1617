/*
 * ckpt-bench — measures libckpt against the machine's own limits, on one directory.
 *
 * One run of the program, for each of --runs repetitions:
 *   - memcpy of the whole state into a pinned (mlocked, pre-touched, 4 KiB-aligned) buffer,
 *     single-threaded: the floor for the snapshot;
 *   - a full save of the state into a fresh store (step 1), after a tiny warm-up save (step 0) so
 *     that the handle's pinned pool is allocated outside the timed region; the time from
 *     ckpt_save_begin() to ckpt_save_wait_snapshot() is the snapshot (the caller is blocked),
 *     the time to ckpt_save_wait() the whole save (durable and visible);
 *   - an incremental save (step 2) after one byte was changed in 5% of the chunks, spread at
 *     random over all tensors;
 *   - a full restore of the latest checkpoint with ckpt_reader_read_all() into pre-touched host
 *     buffers (the library checks every digest), then a memcmp against the state (not timed).
 * The store is deleted after each repetition. It prints one JSON object (medians, plus every
 * sample under "ckpt_bench_samples") on stdout and its progress on stderr.
 *
 * Until the library exports the asynchronous API (ckpt_save_submit / _wait_snapshot / _wait),
 * the synchronous ckpt_save_commit() is used; the caller is then blocked for the whole save and
 * snapshot_seconds equals full_save_seconds ("async": false in the output). The async symbols
 * are weak references, so this binary also picks them up from a newer libckpt.so without a
 * rebuild. Only the public header is used.
 */
#include <ckpt.h>

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#pragma weak ckpt_save_submit
#pragma weak ckpt_save_wait_snapshot
#pragma weak ckpt_save_wait

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
#define MAX_RUNS 64

/* ------------------------------------------------------------------------------------------ */

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ckpt-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void check(int rc, const char *what)
{
	if (rc < 0)
		die("%s: %s: %s", what, ckpt_strerror(rc), ckpt_errmsg());
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("ckpt-bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Parses "123", "256M", "2G", "2GiB", "64K" (binary units). Returns 0 on error. */
static uint64_t parse_size(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return 0;
	uint64_t m = 1;
	switch (*end) {
	case 'k': case 'K': m = 1024; end++; break;
	case 'm': case 'M': m = MiB; end++; break;
	case 'g': case 'G': m = GiB; end++; break;
	case 't': case 'T': m = 1024 * GiB; end++; break;
	default: break;
	}
	if (m > 1 && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return 0;
	return (uint64_t)v * m;
}

/* xoshiro256** seeded through splitmix64: fast, deterministic, good enough to defeat any
 * compression and dedup. */
struct rng { uint64_t s[4]; };

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
	s[2] ^= t; s[3] = rotl(s[3], 45);
	return res;
}

static uint64_t rng_below(struct rng *r, uint64_t n) { return n ? rng_next(r) % n : 0; }

static void rng_fill(struct rng *r, void *p, size_t n)
{
	uint8_t *b = p;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = rng_next(r);
		memcpy(b + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = rng_next(r);
		memcpy(b + i, &v, n - i);
	}
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double t[MAX_RUNS];
	memcpy(t, v, (size_t)n * sizeof *t);
	qsort(t, (size_t)n, sizeof *t, cmp_dbl);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	if (remove(p) != 0 && errno != ENOENT)
		note("cannot remove %s: %s", p, strerror(errno));
	return 0;
}

static void rm_rf(const char *path)
{
	struct stat sb;
	if (lstat(path, &sb) != 0)
		return;
	nftw(path, rm_cb, 64, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------------------------------------ */
/* The model state: named bf16 and fp32 tensors of 1 to 64 MiB, random contents. */

struct tensor {
	char name[96];
	ckpt_dtype dtype;
	unsigned ndim;
	uint64_t shape[2];
	uint64_t nbytes;
	uint8_t *data;
	uint8_t *restored;
	uint8_t *restored_base; /* restored is restore_offset bytes into it (a 4 KiB-aligned block) */
};

struct state {
	struct tensor *t;
	size_t n;
	uint64_t bytes;
};

static void *alloc_aligned(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n ? n : 1))
		die("out of memory (%zu bytes)", n);
	return p;
}

static void make_state(struct state *S, uint64_t bytes, uint64_t seed)
{
	static const char *const kinds[] = {
		"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
		"self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
		"mlp.down_proj.weight", "exp_avg", "exp_avg_sq", "master_weight",
	};
	const size_t nkinds = sizeof kinds / sizeof *kinds;
	struct rng r;
	rng_seed(&r, seed);
	size_t cap = 64;
	S->t = calloc(cap, sizeof *S->t);
	S->n = 0;
	S->bytes = 0;
	uint64_t left = bytes;
	while (left) {
		if (S->n == cap) {
			cap *= 2;
			S->t = realloc(S->t, cap * sizeof *S->t);
			if (!S->t)
				die("out of memory");
		}
		struct tensor *t = &S->t[S->n];
		memset(t, 0, sizeof *t);
		size_t k = S->n % nkinds;
		/* Weights bf16, optimizer state fp32, as in mixed-precision training. */
		t->dtype = k < 7 ? CKPT_DTYPE_BF16 : CKPT_DTYPE_F32;
		uint64_t es = ckpt_dtype_size(t->dtype);
		/* Log-uniform size from 1 to 64 MiB, rows of 1024..8192 elements: most tensors do not
		 * end on a chunk boundary. */
		uint64_t cols = 1024ull << rng_below(&r, 4);
		uint64_t target = (uint64_t)(MiB * (double)(1ull << rng_below(&r, 6)) *
					     (1.0 + (double)rng_below(&r, 1000) / 1000.0));
		uint64_t rows = target / (cols * es);
		if (rows == 0)
			rows = 1;
		uint64_t nb = rows * cols * es;
		if (nb >= left) {
			/* The last tensor takes what is left, as a 1-D tensor. */
			t->ndim = 1;
			t->shape[0] = left / es;
			nb = t->shape[0] * es;
			if (nb == 0)
				break;
		} else {
			t->ndim = 2;
			t->shape[0] = rows;
			t->shape[1] = cols;
		}
		snprintf(t->name, sizeof t->name, "model.layers.%zu.%s", S->n / nkinds, kinds[k]);
		t->nbytes = nb;
		t->data = alloc_aligned(nb);
		rng_fill(&r, t->data, nb);
		S->bytes += nb;
		left -= nb;
		S->n++;
	}
}

/* ------------------------------------------------------------------------------------------ */

struct cfg {
	const char *dir;
	uint64_t size;
	int runs;
	int threads, queue_depth, engine, sync, pool_asked;
	int64_t io_size, chunk_size, pool_size;
	double incr_fraction;
	const char *before_run;
	long restore_offset;
};

static int have_async(const struct cfg *c)
{
	return !c->sync && ckpt_save_submit && ckpt_save_wait_snapshot && ckpt_save_wait;
}

/* Sets an option the user asked for (fatal when refused) or a default of the benchmark's own
 * (a library that does not know it yet only gets a note). */
static void set_opt(ckpt_options *o, ckpt_option opt, int64_t v, const char *name, int asked)
{
	int rc = ckpt_options_set(o, opt, v);
	if (rc >= 0)
		return;
	if (asked)
		check(rc, name);
	note("option %s=%" PRId64 " refused by this libckpt (%s); using its default", name, v,
	     ckpt_errmsg());
}

static ckpt_options *make_options(const struct cfg *c)
{
	ckpt_options *o = ckpt_options_create();
	if (!o)
		die("out of memory");
	set_opt(o, CKPT_OPT_CREATE, 1, "create", 1);
	set_opt(o, CKPT_OPT_COMPRESS, CKPT_COMPRESS_NONE, "compress", 1);
	set_opt(o, CKPT_OPT_DIRECT_IO, 1, "direct_io", 1);
	if (c->chunk_size)
		set_opt(o, CKPT_OPT_CHUNK_SIZE, c->chunk_size, "chunk_size", 1);
	if (c->threads)
		set_opt(o, CKPT_OPT_THREADS, c->threads, "threads", 1);
	if (c->queue_depth)
		set_opt(o, CKPT_OPT_QUEUE_DEPTH, c->queue_depth, "queue_depth", 1);
	if (c->engine >= 0)
		set_opt(o, CKPT_OPT_IO_ENGINE, c->engine, "io_engine", 1);
	if (c->io_size)
		set_opt(o, CKPT_OPT_IO_SIZE, c->io_size, "io_size", 1);
	set_opt(o, CKPT_OPT_POOL_SIZE, c->pool_size, "pool_size", c->pool_asked);
	return o;
}

struct save_res {
	double seconds;  /* begin to durable */
	double snapshot; /* begin to wait_snapshot returned: the caller is blocked */
	ckpt_stats st;
};

static void do_save(const struct cfg *c, ckpt_store *s, uint64_t step, const struct tensor *t,
		    size_t n, struct save_res *res)
{
	char what[64];
	ckpt_save *sv;
	memset(res, 0, sizeof *res);
	res->st.struct_size = sizeof res->st;
	double t0 = now();
	snprintf(what, sizeof what, "save step %" PRIu64 ": begin", step);
	check(ckpt_save_begin(s, step, NULL, &sv), what);
	for (size_t i = 0; i < n; i++) {
		ckpt_tensor ct = {.struct_size = sizeof ct, .name = t[i].name, .dtype = t[i].dtype,
				  .ndim = t[i].ndim, .shape = t[i].shape, .mem = CKPT_MEM_HOST,
				  .data = t[i].data};
		int rc = ckpt_save_add(sv, &ct);
		if (rc < 0) {
			ckpt_save_abort(sv);
			check(rc, "add tensor");
		}
	}
	check(ckpt_save_set_meta(sv, "producer", "ckpt-bench"), "set meta");
	if (have_async(c)) {
		int rc = ckpt_save_submit(sv);
		if (rc == -CKPT_E_UNSUPPORTED) {
			note("ckpt_save_submit unsupported: %s; using ckpt_save_commit", ckpt_errmsg());
			goto sync;
		}
		if (rc < 0) {
			ckpt_save_abort(sv);
			check(rc, "submit");
		}
		rc = ckpt_save_wait_snapshot(sv);
		res->snapshot = now() - t0;
		if (rc < 0) {
			ckpt_save_wait(sv, NULL);
			check(rc, "wait_snapshot");
		}
		snprintf(what, sizeof what, "save step %" PRIu64 ": wait", step);
		check(ckpt_save_wait(sv, &res->st), what);
		res->seconds = now() - t0;
		return;
	}
sync:
	snprintf(what, sizeof what, "save step %" PRIu64 ": commit", step);
	check(ckpt_save_commit(sv, &res->st), what);
	res->seconds = now() - t0;
	res->snapshot = res->seconds;
}

struct restore_ctx {
	const struct state *S;
	int bad;
};

static struct restore_ctx *g_restore_ctx;

static void *dst_for(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	struct restore_ctx *rc = arg;
	/* Transitional: a libckpt built before the `mem` parameter was added calls
	 * dst_for(index, info, arg): `mem` then holds our context and `arg` is garbage. */
	if ((void *)mem == (void *)g_restore_ctx)
		rc = g_restore_ctx;
	else
		*mem = CKPT_MEM_HOST;
	if (index >= rc->S->n || strcmp(info->name, rc->S->t[index].name) != 0 ||
	    info->nbytes != rc->S->t[index].nbytes) {
		rc->bad = 1;
		return NULL;
	}
	return rc->S->t[index].restored;
}

/* Changes one byte in fraction of all chunks, chosen at random over every tensor. Returns the
 * number of chunks changed. */
static uint64_t touch_chunks(struct state *S, uint64_t chunk, double fraction, uint64_t seed)
{
	uint64_t total = 0;
	for (size_t i = 0; i < S->n; i++)
		total += (S->t[i].nbytes + chunk - 1) / chunk;
	uint64_t want = (uint64_t)((double)total * fraction + 0.5);
	if (want == 0)
		want = 1;
	uint32_t *idx = malloc(total * sizeof *idx);
	if (!idx)
		die("out of memory");
	for (uint64_t k = 0; k < total; k++)
		idx[k] = (uint32_t)k;
	struct rng r;
	rng_seed(&r, seed);
	for (uint64_t k = 0; k < want; k++) { /* partial Fisher-Yates */
		uint64_t j = k + rng_below(&r, total - k);
		uint32_t x = idx[k]; idx[k] = idx[j]; idx[j] = x;
	}
	for (uint64_t k = 0; k < want; k++) {
		uint64_t g = idx[k];
		size_t i = 0;
		for (; i < S->n; i++) { /* g -> (tensor, chunk) */
			uint64_t nc = (S->t[i].nbytes + chunk - 1) / chunk;
			if (g < nc)
				break;
			g -= nc;
		}
		uint64_t off = g * chunk, len = S->t[i].nbytes - off < chunk ? S->t[i].nbytes - off : chunk;
		S->t[i].data[off + rng_below(&r, len)] ^= 0x5a;
	}
	free(idx);
	return want;
}

static void usage(FILE *f)
{
	fputs("Usage: ckpt-bench --dir DIR [OPTIONS]\n"
	      "Measure libckpt (memcpy floor, full save, 5% incremental save, restore, snapshot)\n"
	      "on DIR and print a JSON object of medians on standard output.\n\n"
	      "Options:\n"
	      "  -d, --dir DIR          directory for the stores (required; must exist)\n"
	      "  -s, --size SIZE        state size (default 2G; K/M/G suffixes, binary)\n"
	      "  -r, --runs N           repetitions, median reported (default 3)\n"
	      "      --threads N        CKPT_OPT_THREADS (default: the library's)\n"
	      "      --queue-depth N    CKPT_OPT_QUEUE_DEPTH (default: the library's)\n"
	      "      --io-engine E      auto, io_uring or psync (default: the library's)\n"
	      "      --io-size SIZE     CKPT_OPT_IO_SIZE (default: the library's)\n"
	      "      --chunk-size SIZE  CKPT_OPT_CHUNK_SIZE (default 1M)\n"
	      "      --pool-size SIZE   CKPT_OPT_POOL_SIZE (default: state + 2 I/O buffers, so that\n"
	      "                         the snapshot is never throttled by the disk)\n"
	      "      --incr FRACTION    fraction of chunks changed for the incremental (default 0.05)\n"
	      "      --sync             use ckpt_save_commit even when the async API exists\n"
	      "      --before-run CMD   run CMD (sh -c) before each repetition, outside the timed\n"
	      "                         parts, with CKPT_BENCH_RUN=1..N in its environment (the\n"
	      "                         driver runs fio there, so the device's limit is measured\n"
	      "                         next to each save)\n"
	      "      --restore-offset N restore buffers start N bytes past a 4 KiB boundary (default\n"
	      "                         CKPT_RESTORE_DIRECT_OFFSET: raw chunks are read in place;\n"
	      "                         0 measures the read buffer path where O_DIRECT wants 512)\n"
	      "  -h, --help             show this help\n",
	      f);
}

enum { OPT_THREADS = 256, OPT_QD, OPT_ENGINE, OPT_IOSIZE, OPT_CHUNK, OPT_POOL, OPT_INCR, OPT_SYNC, OPT_BEFORE,
       OPT_RESTORE_OFFSET };

int main(int argc, char **argv)
{
	struct cfg c = { .size = 2 * GiB, .runs = 3, .engine = -1, .incr_fraction = 0.05,
			 .restore_offset = CKPT_RESTORE_DIRECT_OFFSET };
	static const struct option lo[] = {
		{"dir", required_argument, NULL, 'd'}, {"size", required_argument, NULL, 's'},
		{"runs", required_argument, NULL, 'r'}, {"threads", required_argument, NULL, OPT_THREADS},
		{"queue-depth", required_argument, NULL, OPT_QD},
		{"io-engine", required_argument, NULL, OPT_ENGINE},
		{"io-size", required_argument, NULL, OPT_IOSIZE},
		{"chunk-size", required_argument, NULL, OPT_CHUNK},
		{"pool-size", required_argument, NULL, OPT_POOL},
		{"incr", required_argument, NULL, OPT_INCR}, {"sync", no_argument, NULL, OPT_SYNC},
		{"before-run", required_argument, NULL, OPT_BEFORE},
		{"restore-offset", required_argument, NULL, OPT_RESTORE_OFFSET},
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
	};
	int o;
	while ((o = getopt_long(argc, argv, "d:s:r:h", lo, NULL)) != -1) {
		switch (o) {
		case 'd': c.dir = optarg; break;
		case 's':
			if (!(c.size = parse_size(optarg)))
				die("bad --size '%s'", optarg);
			break;
		case 'r': c.runs = atoi(optarg); break;
		case OPT_THREADS: c.threads = atoi(optarg); break;
		case OPT_QD: c.queue_depth = atoi(optarg); break;
		case OPT_ENGINE:
			if (!strcmp(optarg, "auto")) c.engine = CKPT_ENGINE_AUTO;
			else if (!strcmp(optarg, "io_uring")) c.engine = CKPT_ENGINE_IO_URING;
			else if (!strcmp(optarg, "psync")) c.engine = CKPT_ENGINE_PSYNC;
			else die("bad --io-engine '%s' (auto, io_uring, psync)", optarg);
			break;
		case OPT_IOSIZE:
			if (!(c.io_size = (int64_t)parse_size(optarg)))
				die("bad --io-size '%s'", optarg);
			break;
		case OPT_CHUNK:
			if (!(c.chunk_size = (int64_t)parse_size(optarg)))
				die("bad --chunk-size '%s'", optarg);
			break;
		case OPT_POOL:
			if (!(c.pool_size = (int64_t)parse_size(optarg)))
				die("bad --pool-size '%s'", optarg);
			c.pool_asked = 1;
			break;
		case OPT_INCR: c.incr_fraction = atof(optarg); break;
		case OPT_SYNC: c.sync = 1; break;
		case OPT_BEFORE: c.before_run = optarg; break;
		case OPT_RESTORE_OFFSET: c.restore_offset = strtol(optarg, NULL, 0) & 4095; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!c.dir || optind != argc) {
		usage(stderr);
		return 2;
	}
	if (c.runs < 1 || c.runs > MAX_RUNS)
		die("--runs must be 1 to %d", MAX_RUNS);
	if (c.incr_fraction <= 0 || c.incr_fraction > 1)
		die("--incr must be in (0, 1]");
	c.size &= ~4095ull;
	if (c.size < MiB)
		die("--size must be at least 1 MiB");
	uint64_t chunk = c.chunk_size ? (uint64_t)c.chunk_size : MiB;
	uint64_t io = c.io_size ? (uint64_t)c.io_size : 8 * MiB;
	if (!c.pool_size)
		c.pool_size = (int64_t)(((c.size + io - 1) / io + 2) * io);

	note("libckpt %s, state %.2f GiB, %d run(s), %s API, dir %s", ckpt_version(),
	     (double)c.size / GiB, c.runs, have_async(&c) ? "async" : "commit (sync)", c.dir);

	/* The state and the restore buffers (pre-touched, reused by every run). */
	double tg = now();
	struct state S;
	make_state(&S, c.size, 0x5eed0001);
	for (size_t i = 0; i < S.n; i++) {
		S.t[i].restored_base = alloc_aligned(S.t[i].nbytes + 4096);
		S.t[i].restored = S.t[i].restored_base + c.restore_offset;
		memset(S.t[i].restored, 0, S.t[i].nbytes);
	}
	note("state: %zu tensors, %" PRIu64 " bytes, generated in %.1f s", S.n, S.bytes, now() - tg);

	/* Pinned destination for the memcpy floor. */
	size_t pin_len = (S.bytes + 4095) & ~(size_t)4095;
	uint8_t *pin = alloc_aligned(pin_len);
	int locked = mlock(pin, pin_len) == 0;
	if (!locked)
		note("mlock of %zu bytes failed (%s): memcpy into unlocked memory", pin_len,
		     strerror(errno));
	memset(pin, 1, pin_len);

	double memcpy_s[MAX_RUNS], full_s[MAX_RUNS], snap_s[MAX_RUNS], lib_snap_s[MAX_RUNS];
	double incr_s[MAX_RUNS], restore_s[MAX_RUNS], warm_s[MAX_RUNS], incr_new[MAX_RUNS];
	double full_written[MAX_RUNS];
	ckpt_stats last_save, last_restore;
	memset(&last_save, 0, sizeof last_save);
	memset(&last_restore, 0, sizeof last_restore);
	last_restore.struct_size = sizeof last_restore;
	uint64_t changed = 0;

	char store_path[4096];
	snprintf(store_path, sizeof store_path, "%s/ckpt-bench-store", c.dir);
	rm_rf(store_path);

	for (int run = 0; run < c.runs; run++) {
		if (c.before_run) {
			char num[16];
			snprintf(num, sizeof num, "%d", run + 1);
			setenv("CKPT_BENCH_RUN", num, 1);
			fflush(NULL);
			int st = system(c.before_run);
			if (st != 0)
				die("--before-run command failed (status %d): %s", st, c.before_run);
		}
		/* memcpy floor: tensor by tensor into consecutive offsets of the pinned buffer. */
		double t0 = now();
		size_t off = 0;
		for (size_t i = 0; i < S.n; i++) {
			memcpy(pin + off, S.t[i].data, S.t[i].nbytes);
			off += S.t[i].nbytes;
		}
		memcpy_s[run] = now() - t0;
		__asm__ volatile("" : : "r"(pin) : "memory"); /* keep the copy */

		ckpt_options *opts = make_options(&c);
		ckpt_store *s;
		check(ckpt_store_open(store_path, opts, &s), "open store");
		ckpt_options_free(opts);

		/* Warm-up: a 1 MiB tensor, so that the pool is allocated before the timed save. */
		struct tensor w = { .name = "warmup", .dtype = CKPT_DTYPE_U8, .ndim = 1,
				    .shape = { MiB }, .nbytes = MiB };
		w.data = alloc_aligned(MiB);
		memset(w.data, 0xa5, MiB);
		struct save_res r;
		do_save(&c, s, 0, &w, 1, &r);
		warm_s[run] = r.seconds;
		free(w.data);

		do_save(&c, s, 1, S.t, S.n, &r);
		full_s[run] = r.seconds;
		snap_s[run] = r.snapshot;
		lib_snap_s[run] = r.st.snapshot_seconds;
		full_written[run] = (double)r.st.bytes_written;
		last_save = r.st;
		if (r.st.logical_bytes != S.bytes)
			note("full save reports %" PRIu64 " logical bytes, expected %" PRIu64,
			     r.st.logical_bytes, S.bytes);

		changed = touch_chunks(&S, chunk, c.incr_fraction, 0xc0ffee00u + (uint64_t)run);
		do_save(&c, s, 2, S.t, S.n, &r);
		incr_s[run] = r.seconds;
		incr_new[run] = (double)r.st.bytes_written;

		/* Restore the latest checkpoint (step 2) into the pre-touched buffers. */
		ckpt_reader *rd;
		struct restore_ctx rc = { .S = &S };
		g_restore_ctx = &rc;
		t0 = now();
		check(ckpt_reader_open(s, CKPT_STEP_LATEST, 0, &rd), "open reader");
		if (ckpt_reader_tensor_count(rd) != S.n)
			die("latest checkpoint has %zu tensors, expected %zu",
			    ckpt_reader_tensor_count(rd), S.n);
		check(ckpt_reader_read_all(rd, dst_for, &rc), "restore_all");
		restore_s[run] = now() - t0;
		ckpt_reader_stats(rd, &last_restore);
		ckpt_reader_close(rd);
		if (rc.bad)
			die("restore: tensor names or sizes differ from the saved state");
		for (size_t i = 0; i < S.n; i++) {
			if (memcmp(S.t[i].data, S.t[i].restored, S.t[i].nbytes) != 0)
				die("restore: tensor %s differs from the saved state", S.t[i].name);
			memset(S.t[i].restored, 0, 4096 < S.t[i].nbytes ? 4096 : S.t[i].nbytes);
		}
		ckpt_store_close(s);
		rm_rf(store_path);
		note("run %d/%d: memcpy %.3f s, full save %.3f s (snapshot %.3f s), incr %.3f s "
		     "(%.1f MiB new), restore %.3f s", run + 1, c.runs, memcpy_s[run], full_s[run],
		     snap_s[run], incr_s[run], incr_new[run] / MiB, restore_s[run]);
	}

	double b = (double)S.bytes;
	double mc = median(memcpy_s, c.runs), fs = median(full_s, c.runs);
	double rs = median(restore_s, c.runs), ss = median(snap_s, c.runs);
	printf("{\n");
	printf("  \"state_bytes\": %" PRIu64 ",\n", S.bytes);
	printf("  \"tensors\": %zu,\n", S.n);
	printf("  \"runs\": %d,\n", c.runs);
	printf("  \"library_version\": \"%s\",\n", ckpt_version());
	printf("  \"async\": %s,\n", have_async(&c) ? "true" : "false");
	printf("  \"engine\": \"%s\",\n", last_save.engine);
	printf("  \"restore_engine\": \"%s\",\n", last_restore.engine);
	printf("  \"direct_io\": %s,\n", last_save.direct_io ? "true" : "false");
	printf("  \"restore_direct_io\": %s,\n", last_restore.direct_io ? "true" : "false");
	printf("  \"restore_offset\": %ld,\n", c.restore_offset);
	printf("  \"threads\": %u,\n", last_save.threads);
	printf("  \"pool_bytes\": %" PRIu64 ",\n", last_save.pool_bytes);
	printf("  \"pool_size_requested\": %" PRId64 ",\n", c.pool_size);
	printf("  \"chunk_bytes\": %" PRIu64 ",\n", chunk);
	printf("  \"memcpy_pinned\": %s,\n", locked ? "true" : "false");
	printf("  \"memcpy_seconds\": %.6f,\n", mc);
	printf("  \"memcpy_gbps\": %.4f,\n", b / mc / 1e9);
	printf("  \"full_save_seconds\": %.6f,\n", fs);
	printf("  \"full_save_gbps\": %.4f,\n", b / fs / 1e9);
	printf("  \"full_save_bytes_written\": %.0f,\n", median(full_written, c.runs));
	printf("  \"incr5_save_seconds\": %.6f,\n", median(incr_s, c.runs));
	printf("  \"incr5_changed_chunks\": %" PRIu64 ",\n", changed);
	printf("  \"incr5_bytes_written\": %.0f,\n", median(incr_new, c.runs));
	printf("  \"restore_seconds\": %.6f,\n", rs);
	printf("  \"restore_gbps\": %.4f,\n", b / rs / 1e9);
	printf("  \"snapshot_seconds\": %.6f,\n", ss);
	printf("  \"lib_snapshot_seconds\": %.6f,\n", median(lib_snap_s, c.runs));
	printf("  \"warmup_save_seconds\": %.6f,\n", median(warm_s, c.runs));
	printf("  \"ckpt_bench_samples\": {");
	struct { const char *k; const double *v; } sm[] = {
		{"memcpy_seconds", memcpy_s}, {"full_save_seconds", full_s},
		{"snapshot_seconds", snap_s}, {"incr5_save_seconds", incr_s},
		{"restore_seconds", restore_s}, {"warmup_save_seconds", warm_s},
	};
	for (size_t k = 0; k < sizeof sm / sizeof *sm; k++) {
		printf("%s\n    \"%s\": [", k ? "," : "", sm[k].k);
		for (int i = 0; i < c.runs; i++)
			printf("%s%.6f", i ? ", " : "", sm[k].v[i]);
		printf("]");
	}
	printf("\n  }\n}\n");

	for (size_t i = 0; i < S.n; i++) {
		free(S.t[i].data);
		free(S.t[i].restored_base);
	}
	free(S.t);
	if (locked)
		munlock(pin, pin_len);
	free(pin);
	return 0;
}
