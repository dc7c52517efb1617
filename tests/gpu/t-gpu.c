/* Checkpoints of CUDA tensors through the CUDA provider (lib/gpu/cuda): save from device memory (sizes
 * from 0 bytes to several pools, odd sizes), the fence on a user stream (work queued after it must
 * not reach the checkpoint), save1_after_stream (work queued before must), the legacy default
 * stream, restore into device and host memory, incremental saves from the GPU, host and device
 * tensors mixed in one save. Exits 77 (skip) when the CUDA provider is not available: no module,
 * no driver or no device. Built by lib/gpu/cuda/cuda.mk (it uses the CUDA runtime directly). */
#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
#define CHUNK (64 * KiB)

/* A tensor of the test: its host pattern and its device copy. */
struct gt {
	const char *name;
	ckpt_dtype dtype;
	unsigned ndim;
	uint64_t shape[3];
	size_t n;      /* bytes */
	uint8_t *want; /* the bytes the checkpoint must hold */
	void *d;       /* device memory (at least 1 byte) */
};

#define GT(nm, dt, nd, ...) { .name = nm, .dtype = dt, .ndim = nd, .shape = { __VA_ARGS__ } }

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t nbytes_of(const struct gt *t)
{
	size_t n = ckpt_dtype_size(t->dtype);
	for (unsigned i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

static void gt_init(struct gt *t, uint64_t seed)
{
	t->n = nbytes_of(t);
	t->want = malloc(t->n ? t->n : 1);
	REQUIRE(t->want);
	t_fill(t->want, t->n, seed);
	CUDA_OK(cudaMalloc(&t->d, t->n ? t->n : 1));
	if (t->n)
		CUDA_OK(cudaMemcpy(t->d, t->want, t->n, cudaMemcpyHostToDevice));
}

static void gt_free(struct gt *t)
{
	free(t->want);
	CUDA_OK(cudaFree(t->d));
}

/* A small pool (4 buffers of 256 KiB) so that tensors larger than it stream through it. */
static ckpt_store *open_store(const char *dir)
{
	ckpt_options *o = ckpt_options_create();
	REQUIRE(o);
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_CREATE, 1));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, CHUNK));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_COMPRESS, CKPT_COMPRESS_NONE));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_IO_SIZE, 256 * KiB));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_POOL_SIZE, 1 * MiB));
	CHECK_OK(ckpt_options_set(o, CKPT_OPT_THREADS, 4));
	ckpt_store *s = NULL;
	int rc = ckpt_store_open(dir, o, &s);
	ckpt_options_free(o);
	if (rc)
		fprintf(stderr, "open %s: %s\n", dir, ckpt_errmsg());
	REQUIRE(rc == 0 && s);
	return s;
}

static int add(save1 *sv, const struct gt *t, int mem, const void *data)
{
	return save1_add_tensor(sv, t->name, t->dtype, t->ndim, t->shape, mem, data);
}

/* Compares device memory d (n bytes) with want. */
static int dev_equals(const void *d, const uint8_t *want, size_t n)
{
	if (!n)
		return 1;
	uint8_t *h = malloc(n);
	REQUIRE(h);
	CUDA_OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
	int eq = memcmp(h, want, n) == 0;
	if (!eq) {
		size_t i = 0;
		while (h[i] == want[i])
			i++;
		fprintf(stderr, "  first difference at byte %zu of %zu: %02x, want %02x\n", i, n, h[i],
			want[i]);
	}
	free(h);
	return eq;
}

/* Restores every tensor of step from the store into device memory (mem 0) and into host memory
 * and compares with want. */
static void check_restore(ckpt_store *s, uint64_t step, struct gt *ts, size_t nt)
{
	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, step, &r));
	REQUIRE(r);
	CHECK(reader1_tensor_count(r) == nt);
	for (size_t i = 0; i < nt; i++) {
		const struct gt *t = &ts[i];
		long idx = reader1_find(r, t->name);
		CHECK(idx >= 0);
		if (idx < 0)
			continue;
		ckpt_tensor_info info;
		CHECK_OK(reader1_tensor(r, (size_t)idx, &info));
		CHECK(info.nbytes == t->n);
		/* Into the GPU. */
		void *d = NULL;
		CUDA_OK(cudaMalloc(&d, t->n ? t->n : 1));
		CUDA_OK(cudaMemset(d, 0xA5, t->n ? t->n : 1));
		CHECK_OK(reader1_restore(r, (size_t)idx, 0, d, t->n));
		if (!dev_equals(d, t->want, t->n)) {
			fprintf(stderr, "step %llu tensor '%s' (%zu bytes) restored into the GPU differs\n",
				(unsigned long long)step, t->name, t->n);
			t_failures++;
		}
		/* A wrong size is refused. */
		CHECK_RC(reader1_restore(r, (size_t)idx, 0, d, t->n + 1), -CKPT_E_INVAL);
		CUDA_OK(cudaFree(d));
		/* Into host memory. */
		uint8_t *h = malloc(t->n ? t->n : 1);
		REQUIRE(h);
		CHECK_OK(reader1_restore(r, (size_t)idx, CKPT_MEM_HOST, h, t->n));
		if (memcmp(h, t->want, t->n)) {
			fprintf(stderr, "step %llu tensor '%s' restored into the host differs\n",
				(unsigned long long)step, t->name);
			t_failures++;
		}
		free(h);
	}
	reader1_close(r);
}

/* A host function that holds its stream until the test opens the gate: trainer work that cannot
 * have finished when the save is submitted, without depending on how long anything takes. */
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

/* --- the tensors of most cases --------------------------------------------------------------- */

static struct gt base[] = {
	GT("empty", CKPT_DTYPE_U8, 1, 0),
	GT("one", CKPT_DTYPE_U8, 1, 1),
	GT("scalar", CKPT_DTYPE_F64, 0, 0),
	GT("odd", CKPT_DTYPE_U8, 1, 65537),
	GT("f32", CKPT_DTYPE_F32, 3, 3, 333, 77),
	GT("chunks", CKPT_DTYPE_BF16, 2, 64, 2048),          /* exactly 4 chunks */
	GT("big", CKPT_DTYPE_U8, 1, 5 * MiB + 12345),         /* 5x the pool */
	GT("bigger", CKPT_DTYPE_I32, 2, 1000, 3001),          /* ~11.4 MiB */
};
#define NBASE (sizeof base / sizeof base[0])

static void base_init(uint64_t seed)
{
	for (size_t i = 0; i < NBASE; i++)
		gt_init(&base[i], seed * 100 + i);
}

static void base_free(void)
{
	for (size_t i = 0; i < NBASE; i++)
		gt_free(&base[i]);
}

/* Submit + fence on a user stream, then mutate every tensor on that stream: the checkpoint holds
 * the bytes from before the fence. */
static void test_fence(const char *dir)
{
	printf("fence on a user stream\n");
	ckpt_store *s = open_store(dir);
	base_init(1);
	cudaStream_t user;
	CUDA_OK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
	CUDA_OK(cudaDeviceSynchronize());

	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	REQUIRE(sv);
	for (size_t i = 0; i < NBASE; i++)
		CHECK_OK(add(sv, &base[i], 0, base[i].d));
	CHECK_OK(save1_set_meta(sv, "test", "t-gpu"));
	double t0 = now_s();
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_fence(sv, user));
	double blocked = now_s() - t0;
	/* The next "optimizer step": overwrites every tensor, queued after the fence. */
	for (size_t i = 0; i < NBASE; i++)
		if (base[i].n)
			CUDA_OK(cudaMemsetAsync(base[i].d, 0xEE, base[i].n, user));
	ckpt_stats st;
	memset(&st, 0, sizeof st);
	CHECK_OK(save1_wait(sv, &st));
	printf("  blocked %.3f ms, save %.3f s, snapshot %.3f s, gpu '%s', pool %llu\n",
	       blocked * 1e3, st.seconds, st.snapshot_seconds, st.gpu,
	       (unsigned long long)st.pool_bytes);
	CHECK(!strcmp(st.gpu, "cuda"));
	uint64_t total = 0;
	for (size_t i = 0; i < NBASE; i++)
		total += base[i].n;
	CHECK(st.logical_bytes == total);
	CHECK(st.tensors == NBASE);

	/* The mutation did happen (the test would prove nothing otherwise). */
	CUDA_OK(cudaStreamSynchronize(user));
	uint8_t *ee = malloc(base[NBASE - 1].n);
	REQUIRE(ee);
	memset(ee, 0xEE, base[NBASE - 1].n);
	CHECK(dev_equals(base[NBASE - 1].d, ee, base[NBASE - 1].n));
	free(ee);

	check_restore(s, 1, base, NBASE);
	CUDA_OK(cudaStreamDestroy(user));
	base_free();
	ckpt_store_close(s);
}

/* save1_wait_snapshot (no fence), and the fence on the legacy default stream (NULL). */
static void test_snapshot_and_legacy(const char *dir)
{
	printf("wait_snapshot, and a fence on the legacy default stream\n");
	ckpt_store *s = open_store(dir);
	base_init(2);
	CUDA_OK(cudaDeviceSynchronize());

	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 10, &sv));
	for (size_t i = 0; i < NBASE; i++)
		CHECK_OK(add(sv, &base[i], 0, base[i].d));
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_wait_snapshot(sv));
	for (size_t i = 0; i < NBASE; i++)
		CUDA_OK(cudaMemset(base[i].d, 0x11, base[i].n ? base[i].n : 1));
	CHECK_OK(save1_wait(sv, NULL));
	check_restore(s, 10, base, NBASE);

	/* The tensors now hold 0x11; make that the expected content and save with a NULL fence. */
	for (size_t i = 0; i < NBASE; i++)
		memset(base[i].want, 0x11, base[i].n);
	CHECK_OK(save1_begin(s, 11, &sv));
	for (size_t i = 0; i < NBASE; i++)
		CHECK_OK(add(sv, &base[i], 0, base[i].d));
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_fence(sv, NULL));
	for (size_t i = 0; i < NBASE; i++)
		if (base[i].n)
			CUDA_OK(cudaMemsetAsync(base[i].d, 0x22, base[i].n, (cudaStream_t)0));
	CHECK_OK(save1_wait(sv, NULL));
	check_restore(s, 11, base, NBASE);
	base_free();
	ckpt_store_close(s);
}

/* Work queued before submit (a stream held by a gate, then the write of the tensor) is seen by the
 * snapshot: through save1_after_stream on a user stream, and by default on the legacy stream.
 * The gate opens only after submit and fence, so a copy not ordered after the write reads the old
 * bytes whatever the timing. */
static void test_after_stream(const char *dir)
{
	printf("copies ordered after the trainer's queued work\n");
	ckpt_store *s = open_store(dir);
	struct gt t = GT("late", CKPT_DTYPE_U8, 1, 3 * MiB + 7);
	gt_init(&t, 3);
	uint8_t *pinned;
	CUDA_OK(cudaHostAlloc((void **)&pinned, t.n, cudaHostAllocDefault));
	cudaStream_t user;
	CUDA_OK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));

	/* A first CUDA save pins the pool (cudaHostRegister), which CUDA may order after work on the
	 * device: done before any stream is held. */
	save1 *warm = NULL;
	CHECK_OK(save1_begin(s, 19, &warm));
	CHECK_OK(add(warm, &t, 0, t.d));
	CHECK_OK(save1_commit(warm, NULL));
	for (int variant = 0; variant < 2; variant++) {
		cudaStream_t q = variant == 0 ? user : (cudaStream_t)0;
		uint64_t seed = 40 + (uint64_t)variant;
		CUDA_OK(cudaDeviceSynchronize());
		t_fill(pinned, t.n, seed);
		memcpy(t.want, pinned, t.n);
		gate_set(0);
		CUDA_OK(cudaLaunchHostFunc(q, gate_fn, NULL));
		CUDA_OK(cudaMemcpyAsync(t.d, pinned, t.n, cudaMemcpyHostToDevice, q));
		save1 *sv = NULL;
		CHECK_OK(save1_begin(s, 20 + (uint64_t)variant, &sv));
		CHECK_OK(add(sv, &t, 0, t.d));
		if (variant == 0)
			CHECK_OK(save1_after_stream(sv, user));
		CHECK_OK(save1_submit(sv));
		CHECK_RC(save1_after_stream(sv, user), -CKPT_E_STATE);
		CHECK_OK(save1_fence(sv, q));
		CUDA_OK(cudaMemsetAsync(t.d, 0x33, t.n, q));
		gate_set(1);
		CHECK_OK(save1_wait(sv, NULL));
		CUDA_OK(cudaDeviceSynchronize());
		check_restore(s, 20 + (uint64_t)variant, &t, 1);
	}
	CUDA_OK(cudaStreamDestroy(user));
	CUDA_OK(cudaFreeHost(pinned));
	gt_free(&t);
	ckpt_store_close(s);
}

/* An incremental save from the GPU writes only the changed chunks. */
static void test_incremental(const char *dir)
{
	printf("incremental save from the GPU\n");
	ckpt_store *s = open_store(dir);
	base_init(5);
	ckpt_stats st;
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	for (size_t i = 0; i < NBASE; i++)
		CHECK_OK(add(sv, &base[i], 0, base[i].d));
	CHECK_OK(save1_commit(sv, &st));
	uint64_t first_new = st.chunks_new;
	CHECK(first_new > 0);

	/* Change 10 bytes inside chunk 7 of "big" and the last byte of "odd": 2 new chunks. */
	struct gt *big = &base[6], *odd = &base[3];
	CHECK(!strcmp(big->name, "big") && !strcmp(odd->name, "odd"));
	size_t at = 7 * CHUNK + 100;
	memset(big->want + at, 0x42, 10);
	CUDA_OK(cudaMemcpy((uint8_t *)big->d + at, big->want + at, 10, cudaMemcpyHostToDevice));
	odd->want[odd->n - 1] ^= 0xff;
	CUDA_OK(cudaMemcpy((uint8_t *)odd->d + odd->n - 1, odd->want + odd->n - 1, 1,
			   cudaMemcpyHostToDevice));

	CHECK_OK(save1_begin(s, 2, &sv));
	for (size_t i = 0; i < NBASE; i++)
		CHECK_OK(add(sv, &base[i], 0, base[i].d));
	CHECK_OK(save1_submit(sv));
	CHECK_OK(save1_fence(sv, NULL));
	memset(&st, 0, sizeof st);
	CHECK_OK(save1_wait(sv, &st));
	printf("  step 1: %llu new chunks; step 2: %llu new of %llu\n",
	       (unsigned long long)first_new, (unsigned long long)st.chunks_new,
	       (unsigned long long)st.chunks);
	CHECK(st.chunks_new == 2);

	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 2, &r));
	for (size_t i = 0; r && i < reader1_tensor_count(r); i++) {
		ckpt_tensor_info info;
		CHECK_OK(reader1_tensor(r, i, &info));
		uint64_t want = !strcmp(info.name, "big") || !strcmp(info.name, "odd") ? 1 : 0;
		if (info.chunks_new != want) {
			fprintf(stderr, "tensor '%s': %llu new chunks, want %llu\n", info.name,
				(unsigned long long)info.chunks_new, (unsigned long long)want);
			t_failures++;
		}
	}
	reader1_close(r);
	check_restore(s, 2, base, NBASE);
	base_free();
	ckpt_store_close(s);
}

/* Host and device tensors in one save; each restored into the other memory, also through
 * reader1_restore_all with a callback that picks the memory. */
struct dst_arg {
	void *dev[8];
	void *host[8];
};

static void *dst_for(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	struct dst_arg *a = arg;
	if (index >= 8)
		return NULL;
	if (index % 2 == 0) {
		*mem = 0;
		CUDA_OK(cudaMalloc(&a->dev[index], info->nbytes ? info->nbytes : 1));
		return a->dev[index];
	}
	a->host[index] = malloc(info->nbytes ? info->nbytes : 1);
	return a->host[index];
}

static void test_mixed(const char *dir)
{
	printf("host and device tensors in one save\n");
	ckpt_store *s = open_store(dir);
	struct gt ts[] = {
		GT("d.weight", CKPT_DTYPE_F16, 2, 512, 1025),
		GT("h.step", CKPT_DTYPE_I64, 0, 0),
		GT("d.bias", CKPT_DTYPE_F32, 1, 1027),
		GT("h.rng", CKPT_DTYPE_U8, 1, 3 * MiB + 1),
		GT("d.moment", CKPT_DTYPE_F32, 1, 777777),
		GT("h.empty", CKPT_DTYPE_U8, 1, 0),
	};
	size_t nt = sizeof ts / sizeof ts[0];
	for (size_t i = 0; i < nt; i++)
		gt_init(&ts[i], 60 + i);
	save1 *sv = NULL;
	CHECK_OK(save1_begin(s, 1, &sv));
	for (size_t i = 0; i < nt; i++) {
		int host = ts[i].name[0] == 'h';
		CHECK_OK(add(sv, &ts[i], host ? CKPT_MEM_HOST : 0, host ? (void *)ts[i].want : ts[i].d));
	}
	ckpt_stats st;
	memset(&st, 0, sizeof st);
	CHECK_OK(save1_commit(sv, &st));
	CHECK(!strcmp(st.gpu, "cuda"));
	check_restore(s, 1, ts, nt);

	reader1 *r = NULL;
	CHECK_OK(reader1_open(s, 1, &r));
	struct dst_arg a;
	memset(&a, 0, sizeof a);
	CHECK_OK(reader1_restore_all(r, dst_for, &a));
	for (size_t i = 0; i < nt; i++) {
		ckpt_tensor_info info;
		CHECK_OK(reader1_tensor(r, i, &info));
		const struct gt *t = &ts[i];
		CHECK(!strcmp(info.name, t->name));
		int ok = i % 2 == 0 ? dev_equals(a.dev[i], t->want, t->n)
				    : memcmp(a.host[i], t->want, t->n) == 0;
		if (!ok) {
			fprintf(stderr, "restore_all: tensor '%s' differs\n", t->name);
			t_failures++;
		}
		if (a.dev[i])
			CUDA_OK(cudaFree(a.dev[i]));
		free(a.host[i]);
	}
	reader1_close(r);

	/* A device that does not exist is refused (when adding or when submitting). */
	int ndev = 0;
	CUDA_OK(cudaGetDeviceCount(&ndev));
	if (ndev < 16) {
		CHECK_OK(save1_begin(s, 2, &sv));
		int rc = add(sv, &ts[0], ndev, ts[0].d);
		if (rc == 0) {
			rc = save1_submit(sv);
			if (rc == 0) {
				rc = save1_wait(sv, NULL);
				sv = NULL;
			}
		}
		printf("  tensor on missing device %d: %d (%s)\n", ndev, rc, ckpt_errmsg());
		CHECK(rc < 0);
		save1_abort(sv);
		reader1 *r2 = NULL;
		CHECK_RC(reader1_open(s, 2, &r2), -CKPT_E_NOTFOUND);
	}
	for (size_t i = 0; i < nt; i++)
		gt_free(&ts[i]);
	ckpt_store_close(s);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* This program links the static library, so the loader looks for the module beside the
	 * program; point it at the build tree's module unless told otherwise. */
	char mod[4096];
	const char *b = getenv("B");
	if (!getenv("CKPT_CUDA_MODULE")) {
		snprintf(mod, sizeof mod, "%s/lib/%s", b && *b ? b : "build", CKPT_GPU_MODULE);
		setenv("CKPT_CUDA_MODULE", mod, 1);
	}
	int ndev = 0;
	if (cudart_load()) {
		printf("skip: no CUDA runtime\n");
		return 77;
	}
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess)
		ndev = 0;
	const struct ckpt_gpu_ops *ops = ckpt_gpu_cuda();
	if (!ops) {
		if (ndev > 0) {
			fprintf(stderr, "%d CUDA device(s), but the CUDA provider did not load: %s\n", ndev,
				ckpt_gpu_cuda_error());
			return 1;
		}
		printf("skip: no CUDA provider: %s\n", ckpt_gpu_cuda_error());
		return 77;
	}
	int rtv = 0;
	CUDA_OK(cudaRuntimeGetVersion(&rtv));
	printf("CUDA provider '%s', %d device(s), runtime %s (%d)\n", ops->name, ndev, t_cudart_name,
	       rtv);

	char *dir = t_tmpdir("gpu");
	char sub[4200];
	snprintf(sub, sizeof sub, "%s/fence", dir);
	test_fence(sub);
	snprintf(sub, sizeof sub, "%s/snap", dir);
	test_snapshot_and_legacy(sub);
	snprintf(sub, sizeof sub, "%s/after", dir);
	test_after_stream(sub);
	snprintf(sub, sizeof sub, "%s/incr", dir);
	test_incremental(sub);
	snprintf(sub, sizeof sub, "%s/mixed", dir);
	test_mixed(sub);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
