/* The CUDA provider's ordering and memory rules, one case per way they can be broken:
 * compressed restore into the GPU (staging overflow), the fence does not block the CPU even when
 * the state is larger than the pool, tensors on two devices each fenced on their own stream, a
 * device pointer declared as host memory, a retried submit, the pool's memory kind after a
 * host-only save, no context on a device the process does not use. Runs against the CUDA test
 * double in `make check` and against the real runtime on a GPU machine (the cases that need the
 * double's counters or error injection are skipped there). Exits 77 without a CUDA provider. */
#include <cuda_runtime_api.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cudart.h"
#include "gpu/gpu.h"
#include "helpers.h"

#define CUDA_OK(x)                                                                                \
	do {                                                                                      \
		cudaError_t e_ = (x);                                                             \
		if (e_ != cudaSuccess) {                                                          \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                \
				cudaGetErrorString(e_));                                          \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

static int ndev;

/* A function of the CUDA test double, or NULL against the real runtime. */
static void *dbl(const char *name)
{
	return dlsym(t_cudart, name);
}

static long dbl_count(const char *name)
{
	long (*f)(void);
	void *s = dbl(name);
	if (!s)
		return -1;
	memcpy(&f, &s, sizeof s);
	return f();
}

static void dbl_fail(const char *name, long nth)
{
	void (*f)(const char *, long);
	void *s = dbl("cudadouble_fail");
	REQUIRE(s);
	memcpy(&f, &s, sizeof s);
	f(name, nth);
}

static ckpt_store *open_store(const char *dir, int compress, uint64_t pool)
{
	ckpt_options *o = ckpt_options_create();
	REQUIRE(o);
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_CREATE, 1));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 64 * KiB));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_COMPRESS, compress));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_IO_SIZE, 256 * KiB));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_POOL_SIZE, pool));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_THREADS, 3));
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(dir, o, &s);
	ckpt_options_free(o);
	if (rc)
		fprintf(stderr, "open %s: %s\n", dir, ckpt_errmsg());
	REQUIRE(rc == 0 && s);
	return s;
}

/* Device memory of n bytes on device dev holding want. */
static void *dev_copy(int dev, const uint8_t *want, size_t n)
{
	void *d;
	CUDA_OK(cudaSetDevice(dev));
	CUDA_OK(cudaMalloc(&d, n));
	CUDA_OK(cudaMemcpy(d, want, n, cudaMemcpyHostToDevice));
	return d;
}

static int dev_equals(const void *d, const uint8_t *want, size_t n, const char *what)
{
	uint8_t *h = malloc(n);
	REQUIRE(h);
	CUDA_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
	size_t i = 0;
	while (i < n && h[i] == want[i])
		i++;
	if (i < n)
		fprintf(stderr, "%s: first difference at byte %zu of %zu: %02x, want %02x\n", what, i,
			n, h[i], want[i]);
	free(h);
	return i == n;
}

/* Restores tensor name of step into fresh memory on device dev and compares with want. */
static void check_dev_restore(ckpt_store *s, uint64_t step, const char *name, int dev,
			      const uint8_t *want, size_t n)
{
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, step, &r));
	REQUIRE(r);
	long i = reader1_find(r, name);
	CHECK(i >= 0);
	void *d;
	CUDA_OK(cudaSetDevice(dev));
	CUDA_OK(cudaMalloc(&d, n));
	CUDA_OK(cudaMemset(d, 0xA5, n));
	if (i >= 0) {
		CHECK_OK(reader1_restore(r, (size_t)i, dev, d, n));
		char what[256];
		snprintf(what, sizeof what, "step %llu '%s' on device %d", (unsigned long long)step,
			 name, dev);
		CHECK(dev_equals(d, want, n, what));
	}
	CUDA_OK(cudaFree(d));
	reader1_close(r);
}

/* Bytes with 4 random bits each: zstd halves them, so a read group of compressed records decodes
 * to about twice its size on disk. */
static void fill_half_entropy(uint8_t *p, size_t n, uint64_t seed)
{
	t_fill(p, n, seed);
	for (size_t i = 0; i < n; i++)
		p[i] &= 0x0f;
}

/* Restoring zstd records into device memory decoded a whole read group (bounded by its
 * size on disk) into a staging buffer of the read buffer's size. */
static void test_compressed(const char *dir)
{
	printf("compressed checkpoint restored into the GPU\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_ZSTD, 1 * MiB);
	size_t n = 4 * MiB + 4097;
	uint8_t *want = malloc(n);
	REQUIRE(want);
	fill_half_entropy(want, n, 7);
	void *d = dev_copy(0, want, n);
	save1 *sv = NULL;
	uint64_t shape[1] = { n };
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	ckpt_stats st;
	CHECK_OK(save1_commit(sv, &st));
	printf("  %llu bytes stored for %zu\n", (unsigned long long)st.bytes_stored, n);
	CHECK(st.bytes_stored < n * 3 / 4);
	check_dev_restore(s, 1, "w", 0, want, n);
	CUDA_OK(cudaFree(d));
	free(want);
	ckpt_store_close(s);
}

/* A host function that holds its stream until the test opens the gate: GPU work that cannot
 * finish before the test says so, without any timing. */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void gate_fn(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate_mu);
	while (!gate_open)
		pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
}

static void gate_set(int open)
{
	pthread_mutex_lock(&gate_mu);
	gate_open = open;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

/* The fence returns while no copy can have run (the trainer's stream is held, and the
 * copies are ordered after it), with a state 8 times the pool. A fence that blocks the CPU never
 * returns here; the alarm turns that hang into a failure. */
static void test_fence_nonblocking(const char *dir)
{
	printf("the fence does not block the CPU (state 8x the pool, trainer's stream held)\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n = 8 * MiB + 123;
	uint8_t *want = malloc(n), *ee = malloc(n);
	REQUIRE(want && ee);
	t_fill(want, n, 11);
	memset(ee, 0xEE, n);
	void *d = dev_copy(0, want, n);
	cudaStream_t user;
	CUDA_OK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
	/* A first CUDA save pins the pool (cudaHostRegister), which CUDA may order after work on the
	 * device: done here, before the trainer's stream is held. */
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 0, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	CHECK_OK(save1_commit(sv, NULL));
	gate_set(0);
	CUDA_OK(cudaLaunchHostFunc(user, gate_fn, NULL));

	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	CHECK_OK(save1_after_stream(sv, user));
	CHECK_OK(save1_submit(sv));
	alarm(120);
	CHECK_OK(save1_fence(sv, user));
	alarm(0);
	printf("  fence returned with the trainer's stream held\n");
	/* The next optimizer step, queued after the fence; the stream is forced at once, so without
	 * a device-side wait it would overwrite the tensor before the copies. */
	CUDA_OK(cudaMemsetAsync(d, 0xEE, n, user));
	gate_set(1);
	CUDA_OK(cudaStreamSynchronize(user));
	CHECK(dev_equals(d, ee, n, "tensor after the next step"));
	CHECK_OK(save1_wait(sv, NULL));
	check_dev_restore(s, 1, "w", 0, want, n);
	CUDA_OK(cudaStreamDestroy(user));
	CUDA_OK(cudaFree(d));
	free(want);
	free(ee);
	ckpt_store_close(s);
}

/* Tensors on two devices in one save, each device's trainer stream fenced. */
static void test_two_devices(const char *dir)
{
	if (ndev < 2) {
		printf("two devices: skipped (%d device)\n", ndev);
		return;
	}
	printf("tensors on two devices, a fence on each device's stream\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n[2] = { 3 * MiB + 5, 2 * MiB + 77 };
	uint8_t *want[2];
	void *d[2];
	cudaStream_t st[2];
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	for (int k = 0; k < 2; k++) {
		want[k] = malloc(n[k]);
		REQUIRE(want[k]);
		t_fill(want[k], n[k], 20 + (uint64_t)k);
		d[k] = dev_copy(k, want[k], n[k]);
		CUDA_OK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
		uint64_t shape[1] = { n[k] };
		CHECK_OK(save1_add_tensor(sv, k ? "dev1" : "dev0", CKPT_DTYPE_U8, 1, shape, k, d[k]));
	}
	CHECK_OK(save1_submit(sv));
	for (int k = 0; k < 2; k++) {
		CUDA_OK(cudaSetDevice(k));
		CHECK_OK(save1_fence(sv, st[k]));
		CUDA_OK(cudaMemsetAsync(d[k], 0x77, n[k], st[k]));
		CUDA_OK(cudaStreamSynchronize(st[k]));
	}
	ckpt_stats stats;
	CHECK_OK(save1_wait(sv, &stats));
	CHECK(stats.tensors == 2);
	for (int k = 0; k < 2; k++) {
		check_dev_restore(s, 1, k ? "dev1" : "dev0", k, want[k], n[k]);
		/* And into the other device. */
		check_dev_restore(s, 1, k ? "dev1" : "dev0", 1 - k, want[k], n[k]);
		CUDA_OK(cudaSetDevice(k));
		CUDA_OK(cudaStreamDestroy(st[k]));
		CUDA_OK(cudaFree(d[k]));
		free(want[k]);
	}
	CUDA_OK(cudaSetDevice(0));
	ckpt_store_close(s);
}

/* Tensors on two devices, each written by its own trainer stream (held until the test
 * opens the gate): save1_after_stream on both streams orders each copy after its writer. The
 * library's workers wait for their own copies without cudaStreamSynchronize on shared streams. */
static void test_two_writer_streams(const char *dir)
{
	if (ndev < 2) {
		printf("two writer streams: skipped (%d device)\n", ndev);
		return;
	}
	printf("tensors on two devices, each written by its own stream before the save\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n = 2 * MiB + 17;
	uint8_t *old = malloc(n), *want[2], *pinned[2];
	REQUIRE(old);
	t_fill(old, n, 70);
	void *d[2];
	cudaStream_t st[2];
	/* Allocations first (CUDA may order them after held work), and a first save that pins the
	 * pool; only then are the writers held. */
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 0, &sv));
	for (int k = 0; k < 2; k++) {
		want[k] = malloc(n);
		REQUIRE(want[k]);
		t_fill(want[k], n, 71 + (uint64_t)k);
		d[k] = dev_copy(k, old, n);
		CUDA_OK(cudaHostAlloc((void **)&pinned[k], n, 0));
		memcpy(pinned[k], want[k], n);
		CUDA_OK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
		uint64_t shape[1] = { n };
		CHECK_OK(save1_add_tensor(sv, k ? "dev1" : "dev0", CKPT_DTYPE_U8, 1, shape, k, d[k]));
	}
	CHECK_OK(save1_commit(sv, NULL));
	gate_set(0);
	CHECK_OK(save1_begin(s, 1, &sv));
	for (int k = 0; k < 2; k++) {
		CUDA_OK(cudaSetDevice(k));
		CUDA_OK(cudaLaunchHostFunc(st[k], gate_fn, NULL));
		CUDA_OK(cudaMemcpyAsync(d[k], pinned[k], n, cudaMemcpyHostToDevice, st[k]));
		uint64_t shape[1] = { n };
		CHECK_OK(save1_add_tensor(sv, k ? "dev1" : "dev0", CKPT_DTYPE_U8, 1, shape, k, d[k]));
		CHECK_OK(save1_after_stream(sv, st[k]));
	}
	long syncs = dbl_count("cudadouble_stream_syncs");
	CHECK_OK(save1_submit(sv));
	for (int k = 0; k < 2; k++) {
		CUDA_OK(cudaSetDevice(k));
		CHECK_OK(save1_fence(sv, st[k]));
	}
	gate_set(1);
	CHECK_OK(save1_wait(sv, NULL));
	if (syncs >= 0) {
		syncs = dbl_count("cudadouble_stream_syncs") - syncs;
		printf("  cudaStreamSynchronize calls during the save: %ld\n", syncs);
		CHECK(syncs == 0);
	}
	for (int k = 0; k < 2; k++) {
		CUDA_OK(cudaSetDevice(k));
		CUDA_OK(cudaStreamSynchronize(st[k]));
		check_dev_restore(s, 1, k ? "dev1" : "dev0", k, want[k], n);
		CUDA_OK(cudaStreamDestroy(st[k]));
		CUDA_OK(cudaFree(d[k]));
		CUDA_OK(cudaFreeHost(pinned[k]));
		free(want[k]);
	}
	free(old);
	CUDA_OK(cudaSetDevice(0));
	ckpt_store_close(s);
}

/* Device memory declared as host memory (or as another device's) is refused; the
 * library must not touch it with memcpy (the double faults then, as a GPU would). */
static void test_wrong_memory_type(const char *dir)
{
	printf("device memory declared as host memory\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n = 100000;
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 30);
	void *d = dev_copy(0, want, n);
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	int rc = save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, d);
	printf("  add: %d (%s)\n", rc, ckpt_errmsg());
	CHECK(rc == -CKPT_E_INVAL);
	CHECK(strstr(ckpt_errmsg(), "device 0") != NULL);
	/* Host memory declared as device memory. */
	rc = save1_add_tensor(sv, "h", CKPT_DTYPE_U8, 1, shape, 0, want);
	printf("  add: %d (%s)\n", rc, ckpt_errmsg());
	CHECK(rc == -CKPT_E_INVAL);
	if (ndev > 1) {
		rc = save1_add_tensor(sv, "w1", CKPT_DTYPE_U8, 1, shape, 1, d);
		CHECK(rc == -CKPT_E_INVAL);
	}
	save1_abort(sv);
	/* A valid save, then a restore into device memory declared as host memory. */
	CHECK_OK(save1_begin(s, 2, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	CHECK_OK(save1_commit(sv, NULL));
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 2, &r));
	rc = reader1_restore(r, 0, CKPT_MEM_HOST, d, n);
	printf("  restore: %d (%s)\n", rc, ckpt_errmsg());
	CHECK(rc == -CKPT_E_INVAL);
	reader1_close(r);
	CUDA_OK(cudaFree(d));
	free(want);
	ckpt_store_close(s);
}

/* A submit that failed (here: the stream could not be created, by the double's error
 * injection) can be retried; the retry saves the right bytes once. */
static void test_resubmit(const char *dir)
{
	if (!dbl("cudadouble_fail")) {
		printf("retried submit: skipped (needs the CUDA test double)\n");
		return;
	}
	printf("a failed submit retried\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n = 8 * MiB + 3; /* 33 slab jobs: more than the job table's first capacity */
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 40);
	void *d = dev_copy(0, want, n);
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	dbl_fail("cudaStreamCreateWithFlags", 1);
	int rc = save1_submit(sv);
	dbl_fail(NULL, -1);
	printf("  first submit: %d (%s)\n", rc, ckpt_errmsg());
	CHECK(rc < 0);
	CHECK_OK(save1_submit(sv));
	ckpt_stats st;
	memset(&st, 0, sizeof st);
	CHECK_OK(save1_wait(sv, &st));
	CHECK(st.logical_bytes == n);
	CHECK(st.chunks == (n + 64 * KiB - 1) / (64 * KiB));
	check_dev_restore(s, 1, "w", 0, want, n);
	CUDA_OK(cudaFree(d));
	free(want);
	ckpt_store_close(s);
}

/* One save of the device tensor d after the trainer's stream us queued a write of b: the kth
 * CUDA call from the submit on fails. When the submit failed, the trainer queues one more write
 * (c) and the retry must save it; when the submit passed (its k-1 calls all ran), the save must
 * hold b or, when the failing call came later, on a copy thread, fail. Returns whether the
 * injection hit the submit. */
static int resubmit_at(ckpt_store *s, uint64_t step, long k, void *d, cudaStream_t us,
		       const uint8_t *b, const uint8_t *c, size_t n)
{
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, step, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	CHECK_OK(save1_after_stream(sv, us));
	CUDA_OK(cudaMemcpyAsync(d, b, n, cudaMemcpyHostToDevice, us));
	dbl_fail("*", k);
	int rc = save1_submit(sv), wrc = 0;
	if (rc) {
		dbl_fail(NULL, -1);
		CUDA_OK(cudaMemcpyAsync(d, c, n, cudaMemcpyHostToDevice, us)); /* the last write */
		CHECK_OK(save1_submit(sv));
	}
	wrc = save1_wait(sv, NULL);
	dbl_fail(NULL, -1);
	if (rc) {
		CHECK_OK(wrc);
		if (!wrc)
			check_dev_restore(s, step, "w", 0, c, n);
	} else if (!wrc) {
		check_dev_restore(s, step, "w", 0, b, n);
	}
	CUDA_OK(cudaStreamSynchronize(us));
	return rc != 0;
}

/* A submit failing at any CUDA call of its path (stream, event, wait, pool
 * registration), then retried, saves the trainer's last write, never older bytes. */
static void test_resubmit_order(const char *dir)
{
	if (!dbl("cudadouble_fail")) {
		printf("retried submit, ordering: skipped (needs the CUDA test double)\n");
		return;
	}
	size_t n = 1 * MiB + 5;
	uint8_t *a = malloc(n), *b, *c;
	CUDA_OK(cudaHostAlloc((void **)&b, n, 0)); /* pinned: the trainer's copies are queued */
	CUDA_OK(cudaHostAlloc((void **)&c, n, 0));
	REQUIRE(a);
	t_fill(a, n, 61);
	t_fill(b, n, 62);
	t_fill(c, n, 63);
	cudaStream_t us;
	CUDA_OK(cudaStreamCreateWithFlags(&us, cudaStreamNonBlocking));
	long k = 1, hits = 0;
	for (; k < 200; k++) {
		ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 2 * MiB); /* a fresh pipeline */
		void *d = dev_copy(0, a, n);
		int hit = resubmit_at(s, (uint64_t)k, k, d, us, b, c, n);
		CUDA_OK(cudaFree(d));
		ckpt_store_close(s);
		hits += hit;
		if (!hit)
			break; /* the submit makes fewer than k calls: every one of them was failed once */
	}
	printf("retried submit, ordering: the submit failed at each of its %ld CUDA calls, every "
	       "retry saved the trainer's last write\n", hits);
	/* The stream and its ordering at least (6 calls with a CUDA 13 runtime, 2 with 12's). */
	CHECK(hits >= 2 && k < 200);
	CUDA_OK(cudaStreamDestroy(us));
	CUDA_OK(cudaFreeHost(b));
	CUDA_OK(cudaFreeHost(c));
	free(a);
}

/* Saves checkpoint step of the k host tensors names[], each the n bytes at data. */
static void save_host(ckpt_store *s, uint64_t step, const char *const *names, int k,
		      const uint8_t *data, size_t n)
{
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, step, &sv));
	for (int i = 0; i < k; i++)
		CHECK_OK(save1_add_tensor(sv, names[i], CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST,
					      data));
	CHECK_OK(save1_commit(sv, NULL));
}

static void *dst_dev0(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	void **out = arg;
	*mem = 0;
	return out[index];
}

/* A CUDA restore keeps the copies of several read groups in flight while the next
 * groups are read and decoded (a ring of pinned staging buffers, each copy waited for by an event
 * only when its buffer comes round again), never synchronizes a whole stream per group, and
 * restore_all's threads give their staging back to the store instead of freeing it. */
static void test_restore_overlap(const char *dir)
{
	if (dbl_count("cudadouble_max_copies_in_flight") < 0) {
		printf("restores in flight: skipped (needs the CUDA test double)\n");
		return;
	}
	printf("CUDA restores keep groups in flight\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 2 * MiB);
	size_t n = 4 * MiB + 333; /* 256 KiB read groups: 17 of them */
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 90);
	save_host(s, 1, (const char *const[]){ "a", "b" }, 2, want, n);
	void *d[2];
	CUDA_OK(cudaMalloc(&d[0], n));
	CUDA_OK(cudaMalloc(&d[1], n));
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	long syncs = dbl_count("cudadouble_stream_syncs");
	(void)dbl_count("cudadouble_max_copies_in_flight"); /* from here */
	CHECK_OK(reader1_restore(r, 0, 0, d[0], n));
	long most = dbl_count("cudadouble_max_copies_in_flight");
	syncs = dbl_count("cudadouble_stream_syncs") - syncs;
	CHECK(dev_equals(d[0], want, n, "restore of 'a' into device 0"));
	long frees = dbl_count("cudadouble_host_frees");
	CHECK_OK(reader1_restore_all(r, dst_dev0, d));
	frees = dbl_count("cudadouble_host_frees") - frees;
	CHECK(dev_equals(d[1], want, n, "restore_all's 'b' on device 0"));
	reader1_close(r);
	printf("  one restore: up to %ld copies in flight, %ld stream synchronizations; "
	       "restore_all: %ld cudaFreeHost\n", most, syncs, frees);
	CHECK(syncs == 0 && frees == 0);
	if (!getenv("CUDADOUBLE_EAGER")) /* lazy: a copy runs only when its event is waited for */
		CHECK(most >= 2);
	CUDA_OK(cudaFree(d[0]));
	CUDA_OK(cudaFree(d[1]));
	free(want);
	ckpt_store_close(s);
}

/* reader1_after_stream: the caller's stream still has a write of the
 * destination queued (the trainer's last use of the buffer); the restore's copies follow it, so
 * the restored bytes are what remains, without the caller synchronizing its stream first. */
static void test_reader_after_stream(const char *dir)
{
	printf("a restore ordered after the caller's stream\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 2 * MiB);
	size_t n = 1 * MiB + 77;
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 95);
	save_host(s, 1, (const char *const[]){ "w" }, 1, want, n);
	void *d;
	CUDA_OK(cudaMalloc(&d, n));
	cudaStream_t us;
	CUDA_OK(cudaStreamCreateWithFlags(&us, cudaStreamNonBlocking));
	/* Queued, not run: the double runs a stream's work only when something needs it (on a
	 * GPU it may or may not have run by the restore; either way the order must hold). */
	CUDA_OK(cudaMemsetAsync(d, 0x3c, n, us));
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	CHECK_OK(reader1_after_stream(r, us));
	CHECK_OK(reader1_restore(r, 0, 0, d, n)); /* its copies follow us's memset */
	CUDA_OK(cudaStreamSynchronize(us));
	CHECK(dev_equals(d, want, n, "restore after the caller's queued write"));
	reader1_close(r);
	CUDA_OK(cudaStreamDestroy(us));
	CUDA_OK(cudaFree(d));
	free(want);
	ckpt_store_close(s);
}

/* The double's per-thread default stream: the caller orders a restore_all after
 * cudaStreamPerThread, which names its own thread's stream. restore_all's copies run on worker
 * threads, whose cudaStreamPerThread is another stream: the ordering must be made on the
 * caller's thread (the write it queued on its per-thread stream lands before the restore). */
static void test_per_thread_stream(const char *dir)
{
	printf("restore_all ordered after the caller's per-thread stream\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 2 * MiB);
	size_t n = 2 * MiB + 5;
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 99);
	save_host(s, 1, (const char *const[]){ "a", "b" }, 2, want, n);
	void *d[2];
	CUDA_OK(cudaMalloc(&d[0], n));
	CUDA_OK(cudaMalloc(&d[1], n));
	CUDA_OK(cudaMemsetAsync(d[0], 0x11, n, cudaStreamPerThread)); /* queued (lazy double) */
	CUDA_OK(cudaMemsetAsync(d[1], 0x22, n, cudaStreamPerThread));
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	CHECK_OK(reader1_after_stream(r, cudaStreamPerThread));
	CHECK_OK(reader1_restore_all(r, dst_dev0, d));
	CUDA_OK(cudaStreamSynchronize(cudaStreamPerThread));
	CHECK(dev_equals(d[0], want, n, "restore_all's 'a' after the per-thread stream's write"));
	CHECK(dev_equals(d[1], want, n, "restore_all's 'b' after the per-thread stream's write"));
	reader1_close(r);
	CUDA_OK(cudaFree(d[0]));
	CUDA_OK(cudaFree(d[1]));
	free(want);
	ckpt_store_close(s);
}

/* A host-only first save does not fix the pool to pageable memory; the pool costs at
 * most one pinned allocation, not one per slab. */
static void test_pool_kind(const char *dir)
{
	if (dbl_count("cudadouble_pageable_copies") < 0) {
		printf("pool memory kind: skipped (needs the CUDA test double)\n");
		return;
	}
	printf("pool memory after a host-only first save\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 2 * MiB);
	size_t n = 3 * MiB + 1;
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 50);
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "h", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, want));
	CHECK_OK(save1_commit(sv, NULL));
	void *d = dev_copy(0, want, n);
	long pageable = dbl_count("cudadouble_pageable_copies");
	long allocs = dbl_count("cudadouble_host_allocs");
	CHECK_OK(save1_begin(s, 2, &sv));
	CHECK_OK(save1_add_tensor(sv, "d", CKPT_DTYPE_U8, 1, shape, 0, d));
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_fence(sv, NULL));
	CHECK_OK(save1_wait(sv, NULL));
	pageable = dbl_count("cudadouble_pageable_copies") - pageable;
	allocs = dbl_count("cudadouble_host_allocs") - allocs;
	printf("  device save: %ld copies into pageable memory, %ld cudaHostAlloc calls\n", pageable,
	       allocs);
	CHECK(pageable == 0);
	CHECK(allocs <= 1);
	/* Restores through one reader allocate their pinned staging once: a buffer for
	 * pieces and the ring of groups in flight. The staging is the store's: a
	 * second reader allocates none, and nothing is freed before the store closes (cudaFreeHost
	 * synchronizes the device under a trainer running beside the restore). */
	allocs = dbl_count("cudadouble_host_allocs");
	long frees = dbl_count("cudadouble_host_frees");
	for (int rd = 0; rd < 2; rd++) {
		reader1 *r = NULL;
		CHECK_OK(reader1_open(s, 2, &r));
		for (int k = 0; k < 5; k++)
			CHECK_OK(reader1_restore(r, 0, 0, d, n));
		reader1_close(r);
	}
	allocs = dbl_count("cudadouble_host_allocs") - allocs;
	frees = dbl_count("cudadouble_host_frees") - frees;
	printf("  2 readers x 5 restores: %ld cudaHostAlloc calls, %ld cudaFreeHost\n", allocs,
	       frees);
	CHECK(allocs <= 4 && frees == 0);
	check_dev_restore(s, 2, "d", 0, want, n);
	CUDA_OK(cudaFree(d));
	free(want);
	ckpt_store_close(s);
}

/* Runs this program again as "self MODE DIR [ARG]" (env "NAME=VALUE" set in the child, or NULL)
 * and counts a failure, naming what, unless it exits 0: the cases that need a fresh process. */
static void run_child(const char *self, const char *mode, const char *dir, const char *arg,
		      const char *env, const char *what)
{
	fflush(stdout);
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		if (env)
			putenv((char *)env);
		execl(self, self, mode, dir, arg, (char *)NULL);
		_exit(127);
	}
	int status = 0;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "child %s failed (status %#x)\n", what, status);
		t_failures++;
	}
}

/* restore_all into the GPU, for the child below. */
static void *dst_dev1(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	void **out = arg;
	*mem = 1;
	CUDA_OK(cudaMalloc(&out[index], info->nbytes));
	return out[index];
}

struct fresh_add {
	save1 *sv;
	void *dev_ptr, *host_ptr;
	uint64_t n;
	int rc[3];
};

/* On a thread that never used CUDA (no current context): the memory checks of add_tensor. */
static void *fresh_thread_add(void *arg)
{
	struct fresh_add *a = arg;
	uint64_t shape[1] = { a->n };
	a->rc[0] = save1_add_tensor(a->sv, "fresh", CKPT_DTYPE_U8, 1, shape, 1, a->dev_ptr);
	a->rc[1] = save1_add_tensor(a->sv, "fresh-host", CKPT_DTYPE_U8, 1, shape,
					CKPT_MEM_HOST, a->host_ptr);
	a->rc[2] = save1_add_tensor(a->sv, "wrong", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST,
					a->dev_ptr); /* still told apart */
	return NULL;
}

/* In a fresh process (this program run again with "only-dev1 DIR"): a process that uses
 * only device 1 restores (restore_all, on worker threads without a context) and saves, adding
 * tensors from a thread without a context too (the pointer query there used to
 * create device 0's context); no context may appear on device 0. */
static int child_only_dev1(const char *dir)
{
	CUDA_OK(cudaSetDevice(1));
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	void *out[1] = { NULL };
	CHECK_OK(reader1_restore_all(r, dst_dev1, out));
	ckpt_tensor_info info;
	CHECK_OK(reader1_tensor(r, 0, &info));
	reader1_close(r);
	save1 *sv = NULL;
	uint64_t shape[1] = { info.nbytes };
	CHECK_OK(save1_begin(s, 2, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 1, out[0]));
	uint8_t host[64] = { 1 };
	struct fresh_add fa = { sv, out[0], host, sizeof host, { 1, 1, 1 } };
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, fresh_thread_add, &fa) == 0);
	pthread_join(th, NULL);
	CHECK_OK(fa.rc[0]);
	CHECK_OK(fa.rc[1]);
	CHECK(fa.rc[2] == -CKPT_E_INVAL);
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_fence(sv, NULL));
	CHECK_OK(save1_wait(sv, NULL));
	ckpt_store_close(s);
	CUDA_OK(cudaFree(out[0]));
	int c0 = cuda_ctx_active(0), c1 = cuda_ctx_active(1);
	printf("  contexts: device 0 %d, device 1 %d\n", c0, c1);
	CHECK(c0 == 0);
	CHECK(c1 == 1);
	return t_done();
}

static void test_unused_device(const char *dir, const char *self)
{
	if (ndev < 2 || cuda_ctx_active(0) < 0) {
		printf("no context on an unused device: skipped (%d device(s))\n", ndev);
		return;
	}
	printf("no context on a device the process does not use\n");
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n = 2 * MiB + 9;
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 60);
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, want));
	CHECK_OK(save1_commit(sv, NULL));
	ckpt_store_close(s);
	free(want);
	run_child(self, "only-dev1", dir, NULL, NULL, "using device 1 only");
}

/* In a fresh process (this program run again with "host-fence DIR", before it
 * loads a runtime itself): the fence of a host-only save is its snapshot; it loads neither the
 * CUDA module (nor, through it, a runtime and the driver). */
static int child_host_fence(const char *dir)
{
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	uint8_t buf[8192];
	t_fill(buf, sizeof buf, 70);
	uint64_t shape[1] = { sizeof buf };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "h", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, buf));
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_fence(sv, NULL));
	CHECK_OK(save1_wait(sv, NULL));
	ckpt_store_close(s);
	void *m = dlopen(getenv("CKPT_CUDA_MODULE"), RTLD_NOW | RTLD_NOLOAD);
	printf("  after a host-only save's fence the CUDA module is %s\n",
	       m ? "loaded" : "not loaded");
	CHECK(!m);
	if (m)
		dlclose(m);
	return t_done();
}

static void test_host_fence(const char *dir, const char *self)
{
	printf("a host-only save's fence leaves CUDA alone\n");
	run_child(self, "host-fence", dir, NULL, NULL, "fencing a host-only save");
}

/* In a fresh process with CUDADOUBLE_NO_MEMOPS=1 (this program run again with
 * "no-memops DIR"): without stream memory operations the fence waits on the calling thread for
 * the snapshot, never parking a CUDA callback thread in a host function (which would hold back
 * the trainer's own host functions of every stream); the trainer's writes after the fence do not
 * reach the checkpoint. */
static int child_no_memops(const char *dir)
{
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n = 3 * MiB + 11; /* three times the pool */
	uint8_t *want = malloc(n);
	REQUIRE(want);
	t_fill(want, n, 80);
	void *d = dev_copy(0, want, n);
	cudaStream_t us;
	CUDA_OK(cudaStreamCreateWithFlags(&us, cudaStreamNonBlocking));
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	CHECK_OK(save1_after_stream(sv, us));
	long before = dbl_count("cudadouble_host_funcs");
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_fence(sv, us));
	long launched = dbl_count("cudadouble_host_funcs") - before;
	printf("  without stream memory operations: %ld host functions queued by the fence\n",
	       launched);
	CHECK(launched == 0);
	CUDA_OK(cudaMemsetAsync(d, 0x5a, n, us)); /* the next step, once the fence passed */
	CHECK_OK(save1_wait(sv, NULL));
	CUDA_OK(cudaStreamSynchronize(us));
	check_dev_restore(s, 1, "w", 0, want, n);
	CUDA_OK(cudaStreamDestroy(us));
	CUDA_OK(cudaFree(d));
	free(want);
	ckpt_store_close(s);
	return t_done();
}

static void test_no_memops(const char *dir, const char *self)
{
	if (!dbl("cudadouble_host_funcs")) {
		printf("fence without stream memory operations: skipped (needs the CUDA test double)\n");
		return;
	}
	printf("fence without stream memory operations\n");
	run_child(self, "no-memops", dir, NULL, "CUDADOUBLE_NO_MEMOPS=1",
		  "without stream memory operations");
}

/* The double's asynchronous and sticky errors, in a fresh process (this program run
 * again with "async-error DIR"): a copy of a device save fails on the device after the call
 * that queued it succeeded. The save must fail, naming CUDA, leave nothing visible, and keep the
 * earlier checkpoint restorable (into host memory: CUDA answers nothing but the error now). */
static int child_async_restore(const char *dir, void (*fail_async)(long), size_t n, void *d)
{
	/* A restore whose third copy into the device fails there: the call must fail too, never
	 * report data that is not on the device. */
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	fail_async(3);
	int rc = r ? reader1_restore(r, 0, 0, d, n) : -1;
	printf("  restore with a failing device copy: %d (%s)\n", rc, ckpt_errmsg());
	CHECK(rc < 0 && strstr(ckpt_errmsg(), "cudaErrorLaunchFailure"));
	reader1_close(r);
	ckpt_store_close(s);
	return t_done();
}

static int child_async_error(const char *dir, const char *what)
{
	void (*fail_async)(long);
	void *sym = dbl("cudadouble_fail_async");
	REQUIRE(sym);
	memcpy(&fail_async, &sym, sizeof sym);
	ckpt_store *s = open_store(dir, CKPT_COMPRESS_NONE, 1 * MiB);
	size_t n = 3 * MiB + 21;
	uint8_t *want = malloc(n), *got = malloc(n);
	REQUIRE(want && got);
	t_fill(want, n, 97);
	void *d = dev_copy(0, want, n);
	uint64_t shape[1] = { n };
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	CHECK_OK(save1_commit(sv, NULL));
	if (!strcmp(what, "restore")) {
		ckpt_store_close(s);
		int res = child_async_restore(dir, fail_async, n, d);
		free(want);
		free(got);
		return res;
	}
	fail_async(5); /* the fifth copy of the next save fails on the device */
	CHECK_OK(save1_begin(s, 2, &sv));
	CHECK_OK(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, 0, d));
	int rc = save1_submit(sv);
	if (!rc)
		rc = save1_wait(sv, NULL);
	else
		save1_abort(sv);
	printf("  save with a failing device copy: %d (%s)\n", rc, ckpt_errmsg());
	CHECK(rc < 0 && strstr(ckpt_errmsg(), "cudaErrorLaunchFailure"));
	uint64_t got_step = 0;
	CHECK(ckpt_store_resolve(s, 2, &got_step) == -CKPT_E_NOTFOUND);
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	if (r) {
		CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, got, n));
		CHECK(!memcmp(got, want, n));
		reader1_close(r);
	}
	ckpt_store_close(s);
	free(want);
	free(got);
	return t_done();
}

static void test_async_error(const char *dir, const char *self)
{
	if (!dbl("cudadouble_fail_async")) {
		printf("asynchronous CUDA error: skipped (needs the CUDA test double)\n");
		return;
	}
	printf("a device copy that fails asynchronously (a sticky error)\n");
	static const char *const what[2] = { "save", "restore" };
	for (int k = 0; k < 2; k++) {
		char sub[4300], label[64];
		snprintf(sub, sizeof sub, "%s-%s", dir, what[k]);
		snprintf(label, sizeof label, "with an asynchronous CUDA error in a %s", what[k]);
		run_child(self, "async-error", sub, what[k], NULL, label);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	char mod[4096];
	const char *b = getenv("B");
	if (!getenv("CKPT_CUDA_MODULE")) {
		snprintf(mod, sizeof mod, "%s/lib/%s", b && *b ? b : "build", CKPT_GPU_MODULE);
		setenv("CKPT_CUDA_MODULE", mod, 1);
	}
	if (argc == 3 && !strcmp(argv[1], "host-fence"))
		return child_host_fence(argv[2]);
	if (cudart_load()) {
		printf("skip: no CUDA runtime\n");
		return 77;
	}
	if (cudaGetDeviceCount(&ndev) != cudaSuccess)
		ndev = 0;
	if (argc == 3 && !strcmp(argv[1], "only-dev1"))
		return child_only_dev1(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "no-memops"))
		return child_no_memops(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "async-error"))
		return child_async_error(argv[2], argv[3]);
	const struct ckpt_gpu_ops *ops = ckpt_gpu_cuda();
	if (!ops) {
		if (ndev > 0) {
			fprintf(stderr, "%d CUDA device(s), but no CUDA provider: %s\n", ndev,
				ckpt_gpu_cuda_error());
			return 1;
		}
		printf("skip: no CUDA provider: %s\n", ckpt_gpu_cuda_error());
		return 77;
	}
	printf("CUDA runtime %s, %d device(s)%s\n", t_cudart_name, ndev,
	       dbl("cudadouble_fail") ? " (the CUDA test double)" : "");
	/* The provider uses the runtime already in the process, never a second one. */
	if (dbl("cudadouble_runtimes")) {
		int (*nrt)(void);
		void *sym = dbl("cudadouble_runtimes");
		memcpy(&nrt, &sym, sizeof sym);
		printf("CUDA runtimes loaded in the process: %d\n", nrt());
		CHECK(nrt() == 1);
	}

	char *dir = t_tmpdir("gpu-order");
	char sub[4200];
	/* First: the child must start from a store this process made before using any device. */
	snprintf(sub, sizeof sub, "%s/unused", dir);
	test_unused_device(sub, "/proc/self/exe");
	snprintf(sub, sizeof sub, "%s/hostfence", dir);
	test_host_fence(sub, "/proc/self/exe");
	snprintf(sub, sizeof sub, "%s/nomemops", dir);
	test_no_memops(sub, "/proc/self/exe");
	snprintf(sub, sizeof sub, "%s/asyncerr", dir);
	test_async_error(sub, "/proc/self/exe");
	CUDA_OK(cudaSetDevice(0));
	snprintf(sub, sizeof sub, "%s/zstd", dir);
	test_compressed(sub);
	snprintf(sub, sizeof sub, "%s/fence", dir);
	test_fence_nonblocking(sub);
	snprintf(sub, sizeof sub, "%s/two", dir);
	test_two_devices(sub);
	snprintf(sub, sizeof sub, "%s/writers", dir);
	test_two_writer_streams(sub);
	snprintf(sub, sizeof sub, "%s/memtype", dir);
	test_wrong_memory_type(sub);
	snprintf(sub, sizeof sub, "%s/resubmit", dir);
	test_resubmit(sub);
	snprintf(sub, sizeof sub, "%s/reorder", dir);
	test_resubmit_order(sub);
	snprintf(sub, sizeof sub, "%s/pool", dir);
	test_pool_kind(sub);
	snprintf(sub, sizeof sub, "%s/overlap", dir);
	test_restore_overlap(sub);
	snprintf(sub, sizeof sub, "%s/rafter", dir);
	test_reader_after_stream(sub);
	snprintf(sub, sizeof sub, "%s/ptds", dir);
	test_per_thread_stream(sub);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
