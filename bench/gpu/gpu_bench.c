/*
 * gpu_bench — checkpoints of a state held in CUDA device memory (device 0).
 *
 * Measures, for a state of --gib GiB in --tensors CUDA tensors (random bytes, so nothing dedups):
 *   - d2h: cudaMemcpyAsync of the whole state into pinned host memory (the copy floor);
 *   - a full save (step 1) and an incremental save (step 2, one byte changed in every 20th chunk),
 *     each as a trainer would run it: ckpt_save_submit() + ckpt_save_fence() on the trainer's
 *     stream ("blocked": the time the calling thread spent in them), the time until the fence
 *     passes on the GPU (the trainer's next kernels could run), and the whole save (durable);
 *   - the full save again into a fresh store whose pool holds a quarter of the state: the
 *     trainer's stream then waits at the fence until all but one pool's worth is written
 *     ("trainer_stall_seconds", reported for every save: fence passed less blocked);
 *   - a restore of step 2 into fresh device memory (ckpt_reader_read_all, mem 0) and into
 *     pinned host memory, then a comparison of the restored device bytes with the state.
 * Prints a table on stderr and one JSON object on stdout (and into --json FILE).
 * Exits 77 when there is no CUDA device or no CUDA provider. Links libckpt.so, which loads
 * libckpt-cuda.so.0 from beside itself.
 *
 * Usage: gpu_bench [--gib N] [--tensors N] [--dir DIR] [--pool-mib N] [--threads N]
 *                  [--chunk-kib N] [--json FILE]
 */
#include <ckpt.h>

#include <cuda_runtime_api.h>

#include "cudart.h"

#include <ftw.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)
#define PIECE (64 * MiB)

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("gpu_bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define CUDA_OK(x)                                                                                \
	do {                                                                                      \
		cudaError_t e_ = (x);                                                             \
		if (e_ != cudaSuccess)                                                            \
			die("%s: %s", #x, cudaGetErrorString(e_));                                \
	} while (0)
#define CKPT_OK(x)                                                                                \
	do {                                                                                      \
		int rc_ = (x);                                                                    \
		if (rc_ < 0)                                                                      \
			die("%s: %s: %s", #x, ckpt_strerror(rc_), ckpt_errmsg());                 \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void rm_rf(const char *path)
{
	nftw(path, rm_cb, 64, FTW_DEPTH | FTW_PHYS);
}

struct state {
	size_t n;
	void **d;      /* device buffers */
	size_t *bytes; /* their sizes */
	char (*names)[48];
	uint64_t total;
};

struct save_result {
	double blocked, fence_passed, total; /* the trainer's stream stalls fence_passed - blocked */
	ckpt_stats st;
};

static struct save_result timed_save(ckpt_store *s, uint64_t step, const struct state *S,
				     cudaStream_t user)
{
	struct save_result r;
	memset(&r, 0, sizeof r);
	r.st.struct_size = sizeof r.st;
	CUDA_OK(cudaDeviceSynchronize());
	double t0 = now_s();
	ckpt_save *sv = NULL;
	CKPT_OK(ckpt_save_begin(s, step, NULL, &sv));
	for (size_t i = 0; i < S->n; i++) {
		uint64_t shape[1] = { S->bytes[i] };
		ckpt_tensor t = { .struct_size = sizeof t, .name = S->names[i],
				  .dtype = CKPT_DTYPE_U8, .ndim = 1, .shape = shape, .mem = 0,
				  .data = S->d[i] };
		CKPT_OK(ckpt_save_add(sv, &t));
	}
	CKPT_OK(ckpt_save_after_stream(sv, user));
	CKPT_OK(ckpt_save_submit(sv));
	CKPT_OK(ckpt_save_fence(sv, user));
	r.blocked = now_s() - t0;
	CUDA_OK(cudaStreamSynchronize(user));
	r.fence_passed = now_s() - t0;
	CKPT_OK(ckpt_save_wait(sv, &r.st));
	r.total = now_s() - t0;
	return r;
}

struct restore_arg {
	const struct state *S;
	void **dst;
	int mem;
};

static void *dst_for(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	struct restore_arg *a = arg;
	if (index >= a->S->n || info->nbytes != a->S->bytes[index])
		die("restore: tensor %zu '%s' has %llu bytes, expected %zu", index, info->name,
		    (unsigned long long)info->nbytes, index < a->S->n ? a->S->bytes[index] : 0);
	*mem = a->mem;
	return a->dst[index];
}

static double timed_restore(ckpt_store *s, uint64_t step, const struct state *S, void **dst, int mem,
			    ckpt_stats *st)
{
	CUDA_OK(cudaDeviceSynchronize());
	double t0 = now_s();
	ckpt_reader *r = NULL;
	CKPT_OK(ckpt_reader_open(s, step, 0, &r));
	struct restore_arg a = { S, dst, mem };
	CKPT_OK(ckpt_reader_read_all(r, dst_for, &a));
	if (mem >= 0)
		CUDA_OK(cudaDeviceSynchronize());
	double t = now_s() - t0;
	st->struct_size = sizeof *st;
	CKPT_OK(ckpt_reader_stats(r, st));
	ckpt_reader_close(r);
	return t;
}

static double gbps(uint64_t bytes, double s)
{
	return s > 0 ? (double)bytes / s / 1e9 : 0;
}

/* How long the trainer's stream waited at the fence: from the fence call's return to the
 * fence passing on the GPU. With the state larger than the pool the last copies wait for slabs
 * that writing frees, so the stream waits until all but one pool's worth is on disk: reported
 * next to the fence time for a pool of a quarter of the state. */
static double stall(const struct save_result *r)
{
	return r->fence_passed > r->blocked ? r->fence_passed - r->blocked : 0;
}

static void json_save(FILE *f, const char *key, const struct save_result *r, uint64_t total)
{
	fprintf(f,
		"  \"%s\": {\"blocked_seconds\": %.6f, \"fence_passed_seconds\": %.6f, "
		"\"total_seconds\": %.6f, \"snapshot_seconds\": %.6f, \"persist_seconds\": %.6f, "
		"\"wait_seconds\": %.6f, \"chunks\": %llu, \"chunks_new\": %llu, "
		"\"bytes_written\": %llu, \"pool_bytes\": %llu, \"threads\": %u, \"engine\": \"%s\", "
		"\"gpu\": \"%s\", \"gbps\": %.3f, \"trainer_stall_seconds\": %.6f},\n",
		key, r->blocked, r->fence_passed, r->total, r->st.snapshot_seconds,
		r->st.persist_seconds, r->st.wait_seconds, (unsigned long long)r->st.chunks,
		(unsigned long long)r->st.chunks_new, (unsigned long long)r->st.bytes_written,
		(unsigned long long)r->st.pool_bytes, r->st.threads, r->st.engine, r->st.gpu,
		gbps(total, r->total), stall(r));
}

/* A full save of S into a fresh store at dir/NAME with a pool of pool_bytes. */
static struct save_result save_in_pool(const char *dir, const char *name, uint64_t pool_bytes,
				       long threads, long chunk_kib, const struct state *S,
				       cudaStream_t user)
{
	char sd[4200];
	snprintf(sd, sizeof sd, "%s/%s", dir, name);
	rm_rf(sd);
	ckpt_options *o = ckpt_options_create();
	if (!o)
		die("out of memory");
	CKPT_OK(ckpt_options_set(o, CKPT_OPT_CREATE, 1));
	CKPT_OK(ckpt_options_set(o, CKPT_OPT_COMPRESS, CKPT_COMPRESS_NONE));
	CKPT_OK(ckpt_options_set(o, CKPT_OPT_POOL_SIZE, (int64_t)pool_bytes));
	if (threads)
		CKPT_OK(ckpt_options_set(o, CKPT_OPT_THREADS, threads));
	if (chunk_kib)
		CKPT_OK(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, chunk_kib * 1024));
	ckpt_store *s = NULL;
	CKPT_OK(ckpt_store_open(sd, o, &s));
	ckpt_options_free(o);
	struct save_result r = timed_save(s, 1, S, user);
	ckpt_store_close(s);
	rm_rf(sd);
	return r;
}

int main(int argc, char **argv)
{
	double gib = 4;
	size_t ntensors = 16;
	const char *dir = NULL, *json_path = NULL;
	long pool_mib = 0, threads = 0, chunk_kib = 0;
	static const struct option lo[] = {
		{ "gib", required_argument, 0, 'g' },     { "tensors", required_argument, 0, 'n' },
		{ "dir", required_argument, 0, 'd' },     { "pool-mib", required_argument, 0, 'p' },
		{ "threads", required_argument, 0, 't' }, { "chunk-kib", required_argument, 0, 'c' },
		{ "json", required_argument, 0, 'j' },    { "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "g:n:d:p:t:c:j:h", lo, NULL)) != -1) {
		switch (c) {
		case 'g': gib = atof(optarg); break;
		case 'n': ntensors = (size_t)atol(optarg); break;
		case 'd': dir = optarg; break;
		case 'p': pool_mib = atol(optarg); break;
		case 't': threads = atol(optarg); break;
		case 'c': chunk_kib = atol(optarg); break;
		case 'j': json_path = optarg; break;
		default:
			fprintf(stderr, "usage: gpu_bench [--gib N] [--tensors N] [--dir DIR] "
					"[--pool-mib N] [--threads N] [--chunk-kib N] [--json FILE]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (gib <= 0 || ntensors < 1 || ntensors > 4096)
		die("--gib must be > 0 and --tensors 1 to 4096");

	int ndev = 0;
	if (cudart_load()) {
		printf("skip: no CUDA runtime\n");
		return 77;
	}
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev < 1) {
		printf("skip: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return 77;
	}
	CUDA_OK(cudaSetDevice(0));
	/* The device name would need cudaGetDeviceProperties, whose ABI differs between CUDA 12 and
	 * 13; the runtime's soname is reported instead. */
	struct {
		const char *name;
	} prop = { t_cudart_name };

	/* The state: ntensors buffers of about equal size (odd sizes, multiples of 4 bytes). */
	struct state S;
	memset(&S, 0, sizeof S);
	S.n = ntensors;
	S.d = calloc(S.n, sizeof *S.d);
	S.bytes = calloc(S.n, sizeof *S.bytes);
	S.names = calloc(S.n, sizeof *S.names);
	if (!S.d || !S.bytes || !S.names)
		die("out of memory");
	uint64_t want_total = (uint64_t)(gib * (double)GiB);
	for (size_t i = 0; i < S.n; i++) {
		uint64_t b = want_total / S.n;
		if (b > 16384)
			b = (b & ~(uint64_t)3) - (i % 3) * 4096 + (i % 2) * 12;
		S.bytes[i] = (size_t)(b ? b : 4);
		S.total += S.bytes[i];
		snprintf(S.names[i], sizeof S.names[i], "layer%03zu.weight", i);
	}
	fprintf(stderr, "gpu_bench: %s, state %.2f GiB in %zu tensors\n", prop.name,
		(double)S.total / (double)GiB, S.n);

	/* Fill with random bytes through a pinned staging buffer. */
	uint8_t *stage;
	CUDA_OK(cudaHostAlloc((void **)&stage, PIECE, cudaHostAllocDefault));
	double t0 = now_s();
	for (size_t i = 0; i < S.n; i++) {
		CUDA_OK(cudaMalloc(&S.d[i], S.bytes[i]));
		uint64_t seed = 0x1234 + i;
		for (size_t off = 0; off < S.bytes[i]; off += PIECE) {
			size_t len = S.bytes[i] - off < PIECE ? S.bytes[i] - off : PIECE;
			for (size_t k = 0; k < len; k += 8) {
				uint64_t v = splitmix(&seed);
				memcpy(stage + k, &v, len - k < 8 ? len - k : 8);
			}
			CUDA_OK(cudaMemcpy((uint8_t *)S.d[i] + off, stage, len, cudaMemcpyHostToDevice));
		}
	}
	fprintf(stderr, "gpu_bench: filled in %.1f s\n", now_s() - t0);

	/* The floor: device-to-host copy of the whole state into pinned memory (best of 3). */
	uint8_t *pinned;
	t0 = now_s();
	CUDA_OK(cudaHostAlloc((void **)&pinned, S.total, cudaHostAllocDefault));
	double pin_alloc = now_s() - t0;
	cudaStream_t cs;
	CUDA_OK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
	double d2h = 1e30;
	for (int rep = 0; rep < 3; rep++) {
		t0 = now_s();
		size_t off = 0;
		for (size_t i = 0; i < S.n; i++) {
			CUDA_OK(cudaMemcpyAsync(pinned + off, S.d[i], S.bytes[i], cudaMemcpyDeviceToHost, cs));
			off += S.bytes[i];
		}
		CUDA_OK(cudaStreamSynchronize(cs));
		double t = now_s() - t0;
		if (t < d2h)
			d2h = t;
	}

	/* The store. */
	char dflt[4096];
	if (!dir) {
		const char *b = getenv("B");
		snprintf(dflt, sizeof dflt, "%s/bench/gpu-work", b && *b ? b : "build");
		dir = dflt;
	}
	char store_dir[4200];
	snprintf(store_dir, sizeof store_dir, "%s/store", dir);
	mkdir(dir, 0755);
	rm_rf(store_dir);
	ckpt_options *o = ckpt_options_create();
	if (!o)
		die("out of memory");
	CKPT_OK(ckpt_options_set(o, CKPT_OPT_CREATE, 1));
	CKPT_OK(ckpt_options_set(o, CKPT_OPT_COMPRESS, CKPT_COMPRESS_NONE));
	if (pool_mib)
		CKPT_OK(ckpt_options_set(o, CKPT_OPT_POOL_SIZE, (int64_t)pool_mib * (int64_t)MiB));
	if (threads)
		CKPT_OK(ckpt_options_set(o, CKPT_OPT_THREADS, threads));
	if (chunk_kib)
		CKPT_OK(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, chunk_kib * 1024));
	ckpt_store *s = NULL;
	CKPT_OK(ckpt_store_open(store_dir, o, &s));
	ckpt_options_free(o);

	cudaStream_t user;
	CUDA_OK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));

	/* Warm-up: a tiny save allocates the pinned pool and starts the pipeline. */
	{
		struct state W = { 1, S.d, &(size_t){ 4096 }, S.names, 4096 };
		struct save_result w = timed_save(s, 0, &W, user);
		fprintf(stderr, "gpu_bench: warm-up save %.3f s (pool %llu MiB, gpu %s)\n", w.total,
			(unsigned long long)(w.st.pool_bytes / MiB), w.st.gpu);
		if (strcmp(w.st.gpu, "cuda"))
			die("the save did not use the CUDA provider (gpu '%s')", w.st.gpu);
	}

	struct save_result full = timed_save(s, 1, &S, user);

	/* Incremental: one byte changed in every 20th chunk of the whole state. */
	uint64_t chunk = chunk_kib ? (uint64_t)chunk_kib * 1024 : 1 * MiB;
	uint64_t changed = 0;
	for (size_t i = 0; i < S.n; i++)
		for (uint64_t off = ((uint64_t)i * 7) % 20 * chunk; off < S.bytes[i]; off += 20 * chunk) {
			CUDA_OK(cudaMemset((uint8_t *)S.d[i] + off, (int)(changed & 0xff) ^ 0x5a, 1));
			changed++;
		}
	struct save_result incr = timed_save(s, 2, &S, user);
	/* The state over the pool: a quarter of it (at least 16 MiB), a fresh store. */
	uint64_t small = S.total / 4 < 16 * MiB ? 16 * MiB : S.total / 4 / MiB * MiB;
	struct save_result over = save_in_pool(dir, "store-small-pool", small, threads, chunk_kib,
					       &S, user);

	/* Restore into fresh device memory, and into pinned host memory. */
	void **rd = calloc(S.n, sizeof *rd);
	void **rh = calloc(S.n, sizeof *rh);
	if (!rd || !rh)
		die("out of memory");
	size_t off = 0;
	for (size_t i = 0; i < S.n; i++) {
		CUDA_OK(cudaMalloc(&rd[i], S.bytes[i]));
		CUDA_OK(cudaMemset(rd[i], 0, S.bytes[i]));
		rh[i] = pinned + off;
		off += S.bytes[i];
	}
	ckpt_stats rst_gpu, rst_host;
	double restore_gpu = timed_restore(s, 2, &S, rd, 0, &rst_gpu);
	double restore_host = timed_restore(s, 2, &S, rh, CKPT_MEM_HOST, &rst_host);

	/* Verify: restored device bytes == state == restored host bytes. */
	uint8_t *stage2;
	CUDA_OK(cudaHostAlloc((void **)&stage2, PIECE, cudaHostAllocDefault));
	int verified = 1;
	for (size_t i = 0; i < S.n && verified; i++)
		for (size_t o2 = 0; o2 < S.bytes[i]; o2 += PIECE) {
			size_t len = S.bytes[i] - o2 < PIECE ? S.bytes[i] - o2 : PIECE;
			CUDA_OK(cudaMemcpy(stage, (uint8_t *)S.d[i] + o2, len, cudaMemcpyDeviceToHost));
			CUDA_OK(cudaMemcpy(stage2, (uint8_t *)rd[i] + o2, len, cudaMemcpyDeviceToHost));
			if (memcmp(stage, stage2, len) || memcmp(stage, (uint8_t *)rh[i] + o2, len)) {
				fprintf(stderr, "gpu_bench: tensor %zu differs after restore (offset %zu)\n",
					i, o2);
				verified = 0;
				break;
			}
		}

	double gb = (double)S.total / 1e9;
	fprintf(stderr, "\n%-34s %10s %10s\n", "gpu_bench (device 0)", "seconds", "GB/s");
	fprintf(stderr, "%-34s %10.3f %10.2f\n", "cudaMemcpy D2H -> pinned (floor)", d2h, gb / d2h);
	fprintf(stderr, "%-34s %10.3f\n", "cudaHostAlloc of the state", pin_alloc);
	const struct save_result *rs[2] = { &full, &incr };
	const char *lab[2] = { "full save", "incremental save" };
	for (int k = 0; k < 2; k++) {
		char l[64];
		snprintf(l, sizeof l, "%s: caller blocked", lab[k]);
		fprintf(stderr, "%-34s %10.3f\n", l, rs[k]->blocked);
		snprintf(l, sizeof l, "%s: fence passed", lab[k]);
		fprintf(stderr, "%-34s %10.3f %10.2f\n", l, rs[k]->fence_passed, gb / rs[k]->fence_passed);
		snprintf(l, sizeof l, "%s: durable", lab[k]);
		fprintf(stderr, "%-34s %10.3f %10.2f   (%llu new chunks of %llu)\n", l, rs[k]->total,
			gb / rs[k]->total, (unsigned long long)rs[k]->st.chunks_new,
			(unsigned long long)rs[k]->st.chunks);
	}
	fprintf(stderr, "%-34s %10.3f\n", "full save: trainer stream stall", stall(&full));
	fprintf(stderr, "%-34s %10.3f %10.2f   (pool %llu MiB: a quarter of the state)\n",
		"state over the pool: fence passed", over.fence_passed, gb / over.fence_passed,
		(unsigned long long)(over.st.pool_bytes / MiB));
	fprintf(stderr, "%-34s %10.3f   (durable after %.3f s)\n",
		"state over the pool: stream stall", stall(&over), over.total);
	fprintf(stderr, "%-34s %10.3f %10.2f\n", "restore into the GPU", restore_gpu, gb / restore_gpu);
	fprintf(stderr, "%-34s %10.3f %10.2f\n", "restore into pinned host memory", restore_host,
		gb / restore_host);
	fprintf(stderr, "%-34s %10s\n", "restored bytes match", verified ? "yes" : "NO");
	fprintf(stderr, "(pool %llu MiB, %u threads, engine %s, direct I/O %d, %llu chunks changed)\n\n",
		(unsigned long long)(full.st.pool_bytes / MiB), full.st.threads, full.st.engine,
		full.st.direct_io, (unsigned long long)changed);

	FILE *outs[2] = { stdout, json_path ? fopen(json_path, "w") : NULL };
	if (json_path && !outs[1])
		die("cannot write %s", json_path);
	for (int k = 0; k < 2; k++) {
		FILE *f = outs[k];
		if (!f)
			continue;
		fprintf(f, "{\n  \"gpu_bench\": {\"device\": \"%s\", \"state_bytes\": %llu, \"tensors\": %zu},\n",
			prop.name, (unsigned long long)S.total, S.n);
		fprintf(f, "  \"d2h\": {\"seconds\": %.6f, \"gbps\": %.3f, \"pin_alloc_seconds\": %.6f},\n",
			d2h, gb / d2h, pin_alloc);
		json_save(f, "save_full", &full, S.total);
		json_save(f, "save_incremental", &incr, S.total);
		json_save(f, "save_over_pool", &over, S.total);
		fprintf(f,
			"  \"restore_gpu\": {\"seconds\": %.6f, \"gbps\": %.3f, \"bytes_read\": %llu},\n"
			"  \"restore_host\": {\"seconds\": %.6f, \"gbps\": %.3f},\n"
			"  \"blocked_vs_d2h\": %.4f,\n  \"snapshot_gbps_vs_d2h_peak\": %.4f,\n"
			"  \"verified\": %s\n}\n",
			restore_gpu, gb / restore_gpu, (unsigned long long)rst_gpu.bytes_read,
			restore_host, gb / restore_host, full.blocked / d2h,
			full.st.snapshot_seconds > 0 ? d2h / full.st.snapshot_seconds : 0,
			verified ? "true" : "false");
		if (k == 1)
			fclose(f);
	}

	ckpt_store_close(s);
	rm_rf(store_dir);
	for (size_t i = 0; i < S.n; i++) {
		CUDA_OK(cudaFree(S.d[i]));
		CUDA_OK(cudaFree(rd[i]));
	}
	CUDA_OK(cudaFreeHost(pinned));
	CUDA_OK(cudaFreeHost(stage));
	CUDA_OK(cudaFreeHost(stage2));
	CUDA_OK(cudaStreamDestroy(user));
	CUDA_OK(cudaStreamDestroy(cs));
	free(rd);
	free(rh);
	free(S.d);
	free(S.bytes);
	free(S.names);
	return verified ? 0 : 1;
}
