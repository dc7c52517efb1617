/* pipe-sweep: how far the save pipeline is from the CPU's limit. Two figures on the same state:
 *   floor    one thread copying every 1 MiB chunk into an aligned staging buffer and hashing it
 *            with XXH3-128: the work a save must do per byte, at memory speed;
 *   ceiling  full saves through the real pipeline (snapshot, hash, dedup, record layout, commit)
 *            with an I/O engine that discards writes (a disk of infinite speed; test builds only,
 *            hence this program links the tests' archive), at 1, 2, ... threads.
 * A pipeline without serialization reaches threads x floor (up to the cores); the ratio
 * ceiling / (threads x floor) says how much is lost. Two more floors on one thread say how much
 * of that is the memory system: the same memcpy + XXH3 into a ring the size of the pool
 * (floor_pool_copy_hash_gbps: a destination not in the cache, as the pipeline's slabs are), and
 * the pipeline's own fused copy into that ring (floor_fused_gbps: ckpt_copy_digest, which
 * streams into the slab), each with its ratio per sweep entry. Each entry also runs that fused
 * copy on as many threads at once, with no pipeline (parallel_fused_floor_gbps): the memory
 * system's limit for the pipeline's copy at that thread count. Prints one JSON object.
 * Each sweep entry also gives load-independent counts of the timed save (getrusage of the
 * process; a loaded machine makes the wall-clock ratios noise): voluntary context switches per
 * MiB (a thread blocked: a handoff or a lock wait), involuntary ones, minor faults, and CPU ns
 * per byte in user space and the kernel, to compare with floor_cpu_ns_per_byte (the floor
 * thread's own CPU time).
 * Usage: pipe-sweep --dir DIR [--size BYTES] [--runs N] [--threads 1,2,16] [--pool BYTES] */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "common/ckpt_int.h"
#include "common/hash.h"

#define CHUNK (1u << 20)
#define TENSOR (16u << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* What the timed save cost the process beyond wall time, load-independent evidence of
 * serialization: voluntary context switches (a thread blocked), involuntary ones, minor faults
 * and CPU seconds in user space and the kernel. */
struct cost { double vcsw, ivcsw, minflt, user_s, sys_s; };

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6; }

static struct cost cost_between(const struct rusage *a, const struct rusage *b)
{
	return (struct cost){(double)(b->ru_nvcsw - a->ru_nvcsw),
			     (double)(b->ru_nivcsw - a->ru_nivcsw),
			     (double)(b->ru_minflt - a->ru_minflt),
			     tv_s(b->ru_utime) - tv_s(a->ru_utime), tv_s(b->ru_stime) - tv_s(a->ru_stime)};
}

/* One thread copying every chunk of the state in turn into a ring of `ring` bytes and hashing
 * it: memcpy + XXH3-128 of the copy, or (fused) ckpt_copy_digest, the pipeline's copy. GB/s; the
 * thread's CPU ns per byte in *cpu_ns_per_byte. */
static double floor_gbps(uint8_t **t, size_t nt, int runs, size_t ring, bool fused,
			 double *cpu_ns_per_byte)
{
	size_t slots = ring / CHUNK;
	uint8_t *stage = aligned_alloc(4096, slots * CHUNK);
	double s[16], cpu[16];
	memset(stage, 0, slots * CHUNK);
	for (int r = 0; r < runs; r++) {
		ckpt_digest d;
		size_t slot = 0;
		struct rusage ru0, ru1;
		getrusage(RUSAGE_THREAD, &ru0);
		double t0 = now();
		for (size_t i = 0; i < nt; i++)
			for (size_t off = 0; off < TENSOR; off += CHUNK, slot = (slot + 1) % slots) {
				uint8_t *dst = stage + slot * CHUNK;
				if (fused) {
					ckpt_copy_digest(dst, t[i] + off, CHUNK, &d);
					continue;
				}
				memcpy(dst, t[i] + off, CHUNK);
				ckpt_digest_of(dst, CHUNK, &d);
			}
		s[r] = (double)nt * TENSOR / (now() - t0) / 1e9;
		getrusage(RUSAGE_THREAD, &ru1);
		cpu[r] = (tv_s(ru1.ru_utime) + tv_s(ru1.ru_stime) - tv_s(ru0.ru_utime) -
			  tv_s(ru0.ru_stime)) * 1e9 / ((double)nt * TENSOR);
	}
	free(stage);
	*cpu_ns_per_byte = median(cpu, runs);
	return median(s, runs);
}

/* The fused copy on `threads` threads at once, each over its share of the tensors into its own
 * ring of pool / threads bytes (the pool the pipeline's copies share): what the memory system
 * gives this copy at that many threads, with no pipeline around it. GB/s of all threads. */
struct par { uint8_t **t; size_t nt, ring; int id, n; pthread_barrier_t *bar; };

static void *par_run(void *arg)
{
	struct par *a = arg;
	size_t slots = a->ring / CHUNK, slot = 0;
	uint8_t *stage = aligned_alloc(4096, a->ring);
	ckpt_digest d;
	memset(stage, 0, a->ring);
	pthread_barrier_wait(a->bar);
	for (size_t i = (size_t)a->id; i < a->nt; i += (size_t)a->n)
		for (size_t off = 0; off < TENSOR; off += CHUNK, slot = (slot + 1) % slots)
			ckpt_copy_digest(stage + slot * CHUNK, a->t[i] + off, CHUNK, &d);
	free(stage);
	return NULL;
}

static double par_fused_gbps(uint8_t **t, size_t nt, int threads, uint64_t pool, int runs)
{
	double s[16];
	size_t per = (size_t)(pool / (uint64_t)threads / CHUNK);
	for (int r = 0; r < runs; r++) {
		pthread_t th[256];
		struct par a[256];
		pthread_barrier_t bar;
		pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
		for (int k = 0; k < threads; k++) {
			a[k] = (struct par){t, nt, (per < 8 ? 8 : per) * CHUNK, k, threads, &bar};
			pthread_create(&th[k], NULL, par_run, &a[k]);
		}
		pthread_barrier_wait(&bar);
		double t0 = now();
		for (int k = 0; k < threads; k++)
			pthread_join(th[k], NULL);
		s[r] = (double)nt * TENSOR / (now() - t0) / 1e9;
		pthread_barrier_destroy(&bar);
	}
	return median(s, runs);
}

/* One full save of the state into a fresh store under dir with `threads` workers; GB/s. */
static double ceiling_once(const char *dir, uint8_t **t, size_t nt, int threads, uint64_t pool,
			   struct cost *c)
{
	char path[4096];
	snprintf(path, sizeof path, "rm -rf '%s/pipe-sweep-store'", dir);
	if (system(path) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/pipe-sweep-store", dir);
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_options_set(o, CKPT_OPT_THREADS, threads);
	ckpt_options_set(o, CKPT_OPT_POOL_SIZE, (int64_t)pool);
	ckpt_store *s;
	save1 *sv;
	int rc = ckpt_store_open(path, o, &s);
	ckpt_options_free(o);
	uint64_t one = 1 << 20, shape = TENSOR;
	if (rc == 0 && (rc = save1_begin(s, 0, &sv)) == 0) { /* warm-up: allocates the pool */
		save1_add_tensor(sv, "warm", CKPT_DTYPE_U8, 1, &one, CKPT_MEM_HOST, t[0]);
		rc = save1_commit(sv, NULL);
	}
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	double t0 = now();
	if (rc == 0 && (rc = save1_begin(s, 1, &sv)) == 0) {
		for (size_t i = 0; i < nt && rc == 0; i++) {
			char name[64];
			snprintf(name, sizeof name, "layers.%zu.weight", i);
			rc = save1_add_tensor(sv, name, CKPT_DTYPE_U8, 1, &shape, CKPT_MEM_HOST, t[i]);
		}
		rc = rc ? rc : save1_commit(sv, NULL);
	}
	double el = now() - t0;
	getrusage(RUSAGE_SELF, &ru1);
	*c = cost_between(&ru0, &ru1);
	if (rc)
		fprintf(stderr, "pipe-sweep: save: %s\n", ckpt_errmsg());
	ckpt_store_close(s);
	return rc ? -1 : (double)nt * TENSOR / el / 1e9;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *tlist = NULL;
	uint64_t size = 1ull << 30, pool = 256u << 20;
	int runs = 3;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
		else if (!strcmp(argv[i], "--size")) size = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads")) tlist = argv[i + 1];
		else if (!strcmp(argv[i], "--pool")) pool = strtoull(argv[i + 1], NULL, 0);
	}
	if (!dir || runs < 1 || runs > 15 || size < TENSOR || pool < (1u << 20)) {
		fprintf(stderr, "usage: pipe-sweep --dir DIR [--size BYTES>=16M] [--runs 1-15] [--threads 1,2,N] "
			"[--pool BYTES>=1M]\n");
		return 2;
	}
	setenv("CKPT_IO_ENGINE", "discard", 1);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	char deflist[64];
	snprintf(deflist, sizeof deflist, cores > 2 ? "1,2,%ld" : cores == 2 ? "1,2" : "1", cores);
	tlist = tlist ? tlist : deflist;
	size_t nt = size / TENSOR;
	uint8_t **t = calloc(nt, sizeof *t);
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < nt; i++) {
		t[i] = aligned_alloc(4096, TENSOR);
		for (size_t k = 0; k < TENSOR / 8; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			memcpy(t[i] + 8 * k, &x, 8);
		}
	}
	/* floor_copy_hash_gbps is the first floor: an 8-chunk ring, a destination that stays in
	 * the CPU's caches. The pipeline copies into its pool, which does not: the same copy into a
	 * pool-sized ring, and the fused copy the pipeline uses, say what is the pipeline and what
	 * the memory system. */
	size_t pool_ring = (size_t)(pool / CHUNK < 8 ? 8 : pool / CHUNK) * CHUNK;
	double fl_cpu, fl = floor_gbps(t, nt, runs, 8u * CHUNK, false, &fl_cpu);
	double flp_cpu, flp = floor_gbps(t, nt, runs, pool_ring, false, &flp_cpu);
	double flf_cpu, flf = floor_gbps(t, nt, runs, pool_ring, true, &flf_cpu);
	printf("{\"state_bytes\": %llu, \"runs\": %d, \"cores\": %ld, \"floor_copy_hash_gbps\": %.3f, "
	       "\"floor_cpu_ns_per_byte\": %.3f, \"pool_bytes\": %zu, \"floor_pool_copy_hash_gbps\": %.3f, "
	       "\"floor_pool_cpu_ns_per_byte\": %.3f, \"floor_fused_gbps\": %.3f, "
	       "\"floor_fused_cpu_ns_per_byte\": %.3f, \"ceiling_sweep\": [",
	       (unsigned long long)nt * TENSOR, runs, cores, fl, fl_cpu, pool_ring, flp, flp_cpu, flf,
	       flf_cpu);
	double last = 0;
	int last_t = 0;
	char *list = strdup(tlist);
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		int th = atoi(tok);
		if (th < 1 || th > 256) {
			fprintf(stderr, "pipe-sweep: threads %s: not in 1-256\n", tok);
			return 2;
		}
		double s[16], vc[16], ivc[16], flt[16], us[16], ss[16];
		for (int r = 0; r < runs; r++) {
			struct cost c;
			if ((s[r] = ceiling_once(dir, t, nt, th, pool, &c)) < 0)
				return 1;
			vc[r] = c.vcsw, ivc[r] = c.ivcsw, flt[r] = c.minflt;
			us[r] = c.user_s, ss[r] = c.sys_s;
		}
		last = median(s, runs), last_t = th;
		double par = par_fused_gbps(t, nt, th, pool, runs);
		double mib = (double)nt * TENSOR / (1 << 20);
		printf("%s{\"threads\": %d, \"gbps\": %.3f, \"vs_threads_x_floor\": %.3f, "
		       "\"vs_threads_x_pool_floor\": %.3f, \"vs_threads_x_fused_floor\": %.3f, "
		       "\"parallel_fused_floor_gbps\": %.3f, \"vs_parallel_fused_floor\": %.3f, "
		       "\"vcsw_per_mib\": %.3f, \"ivcsw_per_mib\": %.3f, \"minflt_per_mib\": %.2f, "
		       "\"user_ns_per_byte\": %.3f, \"sys_ns_per_byte\": %.3f}",
		       tok == list ? "" : ", ", th, last, last / (th * fl), last / (th * flp),
		       last / (th * flf), par, last / par, median(vc, runs) / mib,
		       median(ivc, runs) / mib, median(flt, runs) / mib,
		       median(us, runs) * 1e9 / (mib * (1 << 20)), median(ss, runs) * 1e9 / (mib * (1 << 20)));
	}
	printf("], \"ceiling_save_gbps\": %.3f, \"threads\": %d}\n", last, last_t);
	char cmd[4200];
	snprintf(cmd, sizeof cmd, "rm -rf '%s/pipe-sweep-store'", dir);
	return system(cmd) != 0;
}
