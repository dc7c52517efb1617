/* The checkpoint side of bench/remote_bench.sh: makes the checkpoints that are
 * pushed and pulled, and times a restore straight from the remote. Only the public API.
 *
 *   remote-bench save STORE SIZE           step 1: SIZE bytes (incompressible, 64 MiB tensors)
 *                                          into a new store (the packs a real save makes)
 *   remote-bench change STORE SIZE PCT     step 2: the state of step 1 with one byte changed in
 *                                          PCT percent of the chunks, spread evenly; prints
 *                                          {"new_bytes": N} (bytes the save wrote to packs)
 *   remote-bench restore STORE URL         adopts an empty STORE from URL (ckpt_remote_adopt)
 *                                          and restores its latest checkpoint from the remote
 *                                          without pulling it; prints the seconds
 * The state is the same for the same SIZE (a fixed generator), so step 2 shares step 1's chunks. */
#include <ckpt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TENSOR (64ull << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "remote-bench: %s: %s\n", what, rc ? ckpt_errmsg() : "failed");
	return 1;
}

/* Incompressible bytes (xorshift64*), a function of the offset's 64 MiB tensor only. */
static void fill(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (uint64_t i = 0; i + 8 <= n; i += 8) {
		x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
		uint64_t v = x * 0x2545F4914F6CDD1Dull;
		memcpy(p + i, &v, 8);
	}
}

static int open_store(const char *path, int create, ckpt_store **s)
{
	ckpt_options *o = ckpt_options_create();
	if (!o)
		return fail("options", 0);
	ckpt_options_set(o, CKPT_OPT_CREATE, create);
	int rc = ckpt_store_open(path, o, s);
	ckpt_options_free(o);
	return rc ? fail(path, rc) : 0;
}

/* Saves step (1: the state as generated; 2: pct percent of its chunks changed). */
static int save(const char *path, uint64_t size, uint64_t step, double pct)
{
	ckpt_store *s;
	if (open_store(path, step == 1, &s))
		return 1;
	uint64_t nt = (size + TENSOR - 1) / TENSOR, chunk = 1u << 20;
	uint8_t *mem = malloc(nt * TENSOR);
	if (!mem)
		return fail("out of memory", 0);
	for (uint64_t t = 0; t < nt; t++)
		fill(mem + t * TENSOR, TENSOR, t);
	uint64_t nchunks = nt * TENSOR / chunk, every = pct > 0 ? (uint64_t)(100.0 / pct) : 0;
	for (uint64_t c = 0; every && c < nchunks; c += every)
		mem[c * chunk + 17] ^= 0x5a;
	ckpt_save *sv;
	int rc = ckpt_save_begin(s, step, NULL, &sv);
	char name[32];
	for (uint64_t t = 0; !rc && t < nt; t++) {
		uint64_t shape[1] = {TENSOR};
		snprintf(name, sizeof name, "layer.%03llu", (unsigned long long)t);
		ckpt_tensor ct = {.struct_size = sizeof ct, .name = name, .dtype = CKPT_DTYPE_U8,
				  .ndim = 1, .shape = shape, .mem = CKPT_MEM_HOST,
				  .data = mem + t * TENSOR};
		rc = ckpt_save_add(sv, &ct);
	}
	ckpt_stats st = {.struct_size = sizeof st};
	if (rc)
		ckpt_save_abort(sv);
	else
		rc = ckpt_save_commit(sv, &st);
	if (!rc && step == 2)
		printf("{\"new_bytes\": %llu}\n", (unsigned long long)st.bytes_written);
	free(mem);
	ckpt_store_close(s);
	return rc ? fail("save", rc) : 0;
}

static void *dst_for(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	uint8_t *base = arg;
	return base + index * TENSOR;
}

/* Node loss without a pull: an empty store bound to the remote, its latest checkpoint read from
 * the remote (every record range-read and checked) into memory. */
static int restore(const char *path, const char *url)
{
	ckpt_store *s;
	int rc = ckpt_remote_adopt(url, NULL, path);
	if (rc)
		return fail("adopt", rc);
	if (open_store(path, 0, &s))
		return 1;
	double t0 = now();
	ckpt_reader *rd = NULL;
	ckpt_remote *rm;
	if ((rc = ckpt_remote_open(s, url, 0, &rm)) ||
	    (rc = ckpt_reader_open(s, CKPT_STEP_LATEST, 0, &rd)))
		return fail("open the remote checkpoint", rc);
	size_t n = ckpt_reader_tensor_count(rd);
	uint8_t *mem = malloc(n * TENSOR);
	if (!mem)
		return fail("out of memory", 0);
	rc = ckpt_reader_read_all(rd, dst_for, mem);
	ckpt_reader_close(rd);
	double t = now() - t0;
	int bad = 0;
	for (size_t i = 0; !rc && i < n && !bad; i++) { /* the bytes of step 1 (not timed) */
		uint8_t *want = malloc(TENSOR);
		fill(want, TENSOR, i);
		bad = memcmp(want, mem + i * TENSOR, TENSOR) != 0;
		free(want);
	}
	free(mem);
	ckpt_store_close(s);
	if (rc)
		return fail("restore", rc);
	if (bad)
		return fail("the restored state differs from the saved one", 0);
	printf("%.3f\n", t);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "save"))
		return save(argv[2], strtoull(argv[3], NULL, 0), 1, 0);
	if (argc == 5 && !strcmp(argv[1], "change"))
		return save(argv[2], strtoull(argv[3], NULL, 0), 2, atof(argv[4]));
	if (argc == 4 && !strcmp(argv[1], "restore"))
		return restore(argv[2], argv[3]);
	fprintf(stderr, "usage: remote-bench save STORE SIZE | change STORE SIZE PCT | "
			"restore STORE URL\n");
	return 2;
}
