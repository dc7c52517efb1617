/* Multi-rank save benchmark, run by bench/dist_bench.sh under mpirun (in its own directory: bench.mk builds bench/*.c without MPI):
 *
 *   dist-bench STORE shards BYTES       every rank saves its 1/N of a BYTES state (one u8 tensor
 *                                       sharded by ranges): prints the wall time from the common
 *                                       start to the last rank's commit and the aggregate GB/s
 *   dist-bench STORE replicated BYTES   every rank holds the same BYTES tensor, saved once as a
 *                                       replicated tensor (each replica copies, hashes and writes
 *                                       about 1/N): prints each rank's snapshot time (the
 *                                       part's snapshot_seconds) and the wall time
 *   dist-bench STORE async BYTES        every rank saves its 1/N of a BYTES state asynchronously
 *                                       (ckpt_save_submit, the collective in wait):
 *                                       prints each rank's blocked time, from begin to
 *                                       ckpt_save_wait_snapshot() returning
 *   dist-bench STORE single BYTES       a one-process save_async (ckpt_save_submit) of BYTES on
 *                                       every rank, each into its own store STORE-rR when there
 *                                       are several: its blocked time the same way, the
 *                                       reference for async (alone, and N at once)
 *
 * In async and single the pool holds this rank's state (plus 8 MiB), so that the disk does not
 * throttle the snapshot in either and the two measure the same copy.
 *
 * The store is created; the same save is done once before (step 1, other data), so that the
 * measured one (step 2) finds each rank's pipeline and buffer pool as a training job's second
 * checkpoint does. Data are random (xorshift), so nothing deduplicates. One JSON line on rank 0's
 * standard output. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_mpi.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void fill(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (uint64_t i = 0; i + 8 <= n; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
}

static void die(const ckpt_mpi_comm *cm, const char *what)
{
	fprintf(stderr, "dist-bench: rank %d: %s: %s\n", cm->comm.rank, what, ckpt_errmsg());
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Saves step: the state at buf (filled from seed first), as shards or as a replicated tensor.
 * Returns this rank's seconds from the common start to its commit's return; *st its part. */
static double save(ckpt_store *s, ckpt_mpi_comm *cm, uint64_t step, bool rep, uint64_t total,
		   uint8_t *buf, uint64_t seed, ckpt_stats *st)
{
	int rank = cm->comm.rank, n = cm->comm.size;
	uint64_t per = rep ? total : total / (uint64_t)n, off = per * (uint64_t)rank;
	fill(buf, per, rep ? seed : seed * 1000 + (uint64_t)rank);
	ckpt_save_options o = {.struct_size = sizeof o, .comm = &cm->comm};
	/* replicated: the whole tensor on every rank; shards: this rank's box of it. */
	ckpt_tensor t = {.struct_size = sizeof t, .name = "state", .dtype = CKPT_DTYPE_U8,
			 .ndim = 1, .mem = CKPT_MEM_HOST, .data = buf};
	if (rep) {
		t.shape = &total;
		t.replica = (unsigned)rank;
		t.nreplicas = (unsigned)n;
	} else {
		t.shape = &per;
		t.global_shape = &total;
		t.offsets = &off;
	}
	ckpt_save *d;
	memset(st, 0, sizeof *st);
	st->struct_size = sizeof *st;
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now();
	if (ckpt_save_begin(s, step, &o, &d))
		die(cm, "begin");
	if (ckpt_save_add(d, &t))
		die(cm, "add");
	if (ckpt_save_commit(d, st))
		die(cm, "commit");
	return now() - t0;
}

/* async / single: this rank's seconds from begin to the end of wait_snapshot (*blocked), and
 * from the common start to the end of its wait. */
static double save_async(ckpt_store *s, ckpt_mpi_comm *cm, uint64_t step, bool single,
			 uint64_t total, uint8_t *buf, uint64_t seed, double *blocked)
{
	int rank = cm->comm.rank, n = cm->comm.size;
	uint64_t per = single ? total : total / (uint64_t)n, off = per * (uint64_t)rank;
	fill(buf, per, seed * 1000 + (uint64_t)rank);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now();
	/* single: this rank's whole state, one process; else its box of the global state. */
	ckpt_tensor t = {.struct_size = sizeof t, .name = "state", .dtype = CKPT_DTYPE_U8,
			 .ndim = 1, .shape = &per, .mem = CKPT_MEM_HOST, .data = buf,
			 .global_shape = single ? NULL : &total, .offsets = single ? NULL : &off};
	ckpt_save_options o = {.struct_size = sizeof o, .comm = &cm->comm};
	const char *what = single ? "one-process save" : "async save";
	ckpt_save *sv;
	if (ckpt_save_begin(s, step, single ? NULL : &o, &sv) || ckpt_save_add(sv, &t) ||
	    ckpt_save_submit(sv) || ckpt_save_wait_snapshot(sv))
		die(cm, what);
	*blocked = now() - t0;
	if (ckpt_save_wait(sv, NULL))
		die(cm, single ? "one-process save: wait" : "async save: wait");
	return now() - t0;
}

/* async / single: the warm-up save and the measured one; one JSON line on rank 0. */
static void run_async(ckpt_store *s, ckpt_mpi_comm *cm, const char *mode, uint64_t total,
		      uint8_t *buf)
{
	bool single = !strcmp(mode, "single");
	double blocked, wall = 0;
	save_async(s, cm, 1, single, total, buf, 1, &blocked);
	double mine = save_async(s, cm, 2, single, total, buf, 2, &blocked);
	int rank = cm->comm.rank, n = cm->comm.size;
	double *bl = rank == 0 ? calloc((size_t)n, sizeof *bl) : NULL;
	MPI_Reduce(&mine, &wall, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	MPI_Gather(&blocked, 1, MPI_DOUBLE, bl, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("{\"mode\": \"%s\", \"ranks\": %d, \"bytes\": %" PRIu64 ", \"seconds\": %.6f, "
		       "\"blocked_seconds\": [", mode, n, total, wall);
		for (int r = 0; r < n; r++)
			printf("%s%.6f", r ? ", " : "", bl[r]);
		printf("]}\n");
	}
	free(bl);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	ckpt_mpi_comm cm;
	if (argc != 4 || ckpt_mpi_comm_init(&cm, MPI_COMM_WORLD)) {
		fprintf(stderr, "usage: dist-bench STORE shards|replicated|async|single BYTES\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int rank = cm.comm.rank, n = cm.comm.size;
	bool rep = !strcmp(argv[2], "replicated"), single = !strcmp(argv[2], "single");
	uint64_t total = strtoull(argv[3], NULL, 10);
	uint64_t per = rep || single ? total : total / (uint64_t)n;
	uint8_t *buf = malloc(per);
	if (!buf)
		die(&cm, "out of memory");
	bool async = single || !strcmp(argv[2], "async");
	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	if (async)
		ckpt_options_set(o, CKPT_OPT_POOL_SIZE, (int64_t)(per + (8 << 20)));
	/* single on N ranks: N one-process saves at once, each into its own store (the reference
	 * that shares the machine as the N ranks of async do). */
	char path[4096];
	snprintf(path, sizeof path, single && n > 1 ? "%s-r%d" : "%s", argv[1], rank);
	ckpt_store *s;
	if (ckpt_store_open(path, o, &s))
		die(&cm, "open the store");
	ckpt_options_free(o);
	if (async) {
		run_async(s, &cm, argv[2], total, buf);
		free(buf);
		ckpt_store_close(s);
		ckpt_mpi_comm_free(&cm);
		MPI_Finalize();
		return 0;
	}
	ckpt_stats st;
	save(s, &cm, 1, rep, total, buf, 1, &st); /* the same save once before: steady state */
	double mine = save(s, &cm, 2, rep, total, buf, 2, &st), wall = 0;
	MPI_Reduce(&mine, &wall, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	double snap = st.snapshot_seconds, *snaps = rank == 0 ? calloc((size_t)n, sizeof *snaps) : NULL;
	MPI_Gather(&snap, 1, MPI_DOUBLE, snaps, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("{\"mode\": \"%s\", \"ranks\": %d, \"bytes\": %" PRIu64 ", \"seconds\": %.6f, "
		       "\"gbps\": %.4f, \"snapshot_seconds\": [", argv[2], n, total, wall,
		       (double)total / wall / 1e9);
		for (int r = 0; r < n; r++)
			printf("%s%.6f", r ? ", " : "", snaps[r]);
		printf("]}\n");
	}
	free(snaps);
	free(buf);
	ckpt_store_close(s);
	ckpt_mpi_comm_free(&cm);
	MPI_Finalize();
	return 0;
}
