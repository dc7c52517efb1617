/* Makes a multi-rank checkpoint for the ckptctl tests: N ranks are N threads of this process,
 * each with its own store handle, talking through an in-process communicator (a mutex and a
 * condition variable). Public API only (include/ckpt.h).
 *
 *   mkdist STORE STEP NRANKS [--abort RANK] [--gen G] [--pool BYTES] [--meta KEY=VALUE]
 *
 * Saves "w": f32 [8,6] sharded by rows (rank r holds rows [8r/N, 8(r+1)/N)), "emb": u16
 * [1000,320] replicated on every rank (10 chunks of 64 KiB, split among the replicas) and
 * metadata "step". The values of w depend on G (default 0), so a step saved with another G
 * rewrites w's chunk but not emb's. With --abort, that rank gives up: the commit fails on every
 * rank and leaves its parts as garbage. --pool sets each rank's staging pool (CKPT_OPT_POOL_SIZE;
 * default 256 MiB a rank, too much for a small VM: tests/crash/powercut-dist-guest.sh). The
 * --meta (up to 7 times) sets one more metadata entry (every rank the same, as DCP's
 * dcp.metadata). The
 * store is created (64 KiB chunks) when missing. Exit status 0 when the checkpoint was
 * committed, 1 when not (the error of every rank printed). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

#include "../unit/t-dist-tcomm.h"

#define MAXR TC_MAXR

struct rank {
	struct tc_rank tc;
	const char *path;
	uint64_t step;
	int abort_rank;
	unsigned g;
	long long pool; /* 0: the default */
	const char *const *meta; /* --meta KEY=VALUE entries, NULL-terminated */
	int rc;
	char msg[512];
};

/* Filled before the rank threads start, read-only after: every replica holds the same data. */
static uint16_t emb[1000 * 320];

static int extra_meta(ckpt_save *d, const char *const *kvs)
{
	for (; *kvs; kvs++) {
		char key[256];
		const char *eq = strchr(*kvs, '=');
		if (!eq || eq - *kvs >= (long)sizeof key)
			return -CKPT_E_INVAL;
		snprintf(key, sizeof key, "%.*s", (int)(eq - *kvs), *kvs);
		int rc = ckpt_save_set_meta(d, key, eq + 1);
		if (rc)
			return rc;
	}
	return 0;
}

static int save(struct rank *r, ckpt_store *st)
{
	unsigned n = r->tc.sh->n, k = (unsigned)r->tc.rank;
	uint64_t r0 = 8u * k / n, r1 = 8u * (k + 1) / n;
	float w[8 * 6];
	for (uint64_t i = 0; i < (r1 - r0) * 6; i++)
		w[i] = (float)((r0 * 6 + i) * 3 + r->g) / 2.0f;
	ckpt_comm comm = tc_comm(&r->tc);
	uint64_t gw[2] = {8, 6}, off[2] = {r0, 0}, lw[2] = {r1 - r0, 6}, ge[2] = {1000, 320};
	ckpt_tensor tw = {.struct_size = sizeof tw, .name = "w", .dtype = CKPT_DTYPE_F32, .ndim = 2,
			  .shape = lw, .mem = CKPT_MEM_HOST, .data = w, .global_shape = gw,
			  .offsets = off};
	ckpt_tensor te = {.struct_size = sizeof te, .name = "emb", .dtype = CKPT_DTYPE_U16,
			  .ndim = 2, .shape = ge, .mem = CKPT_MEM_HOST, .data = emb, .replica = k,
			  .nreplicas = n};
	ckpt_save_options so = {.struct_size = sizeof so, .comm = &comm};
	ckpt_save *d;
	int rc = ckpt_save_begin(st, r->step, &so, &d);
	if (rc)
		return rc;
	char v[32];
	snprintf(v, sizeof v, "%llu", (unsigned long long)r->step);
	if ((rc = ckpt_save_add(d, &tw)) || (rc = ckpt_save_add(d, &te)) ||
	    (rc = ckpt_save_set_meta(d, "step", v)) || (rc = extra_meta(d, r->meta)) ||
	    r->tc.rank == r->abort_rank) {
		ckpt_save_abort(d);
		return rc ? rc : -CKPT_E_STATE;
	}
	return ckpt_save_commit(d, NULL);
}

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	ckpt_store *st;
	ckpt_options *o = NULL;
	if (r->pool && (!(o = ckpt_options_create()) ||
			ckpt_options_set(o, CKPT_OPT_POOL_SIZE, r->pool))) {
		r->rc = -CKPT_E_NOMEM;
		snprintf(r->msg, sizeof r->msg, "options: %s", ckpt_errmsg());
		ckpt_options_free(o);
		return NULL;
	}
	r->rc = ckpt_store_open(r->path, o, &st);
	ckpt_options_free(o);
	if (!r->rc) {
		r->rc = save(r, st);
		if (r->rc)
			snprintf(r->msg, sizeof r->msg, "%s", ckpt_errmsg());
		ckpt_store_close(st);
	} else {
		snprintf(r->msg, sizeof r->msg, "%s", ckpt_errmsg());
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: mkdist STORE STEP NRANKS [--abort RANK] [--gen G] [--pool BYTES] "
			"[--meta KEY=VALUE]\n");
		return 2;
	}
	static struct tc_shared sh;
	struct tc_rank tr[MAXR];
	unsigned n = (unsigned)atoi(argv[3]);
	int abort_rank = -1;
	unsigned g = 0;
	long long pool = 0;
	const char *meta[8] = {NULL};
	size_t nmeta = 0;
	for (int i = 4; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--abort"))
			abort_rank = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--gen"))
			g = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--pool"))
			pool = atoll(argv[i + 1]);
		else if (!strcmp(argv[i], "--meta") && nmeta + 1 < sizeof meta / sizeof *meta)
			meta[nmeta++] = argv[i + 1];
	}
	if (n < 1 || n > MAXR)
		return 2;
	tc_init(&sh, tr, n);
	for (size_t i = 0; i < sizeof emb / sizeof *emb; i++)
		emb[i] = (uint16_t)(i * 2654435761u >> 16);
	ckpt_options *o = ckpt_options_create();
	ckpt_store *st;
	if (!o || ckpt_options_set(o, CKPT_OPT_CREATE, 1) ||
	    ckpt_options_set(o, CKPT_OPT_CHUNK_SIZE, 64 << 10) || ckpt_store_open(argv[1], o, &st)) {
		fprintf(stderr, "mkdist: %s\n", ckpt_errmsg());
		return 1;
	}
	ckpt_store_close(st);
	ckpt_options_free(o);
	struct rank rk[MAXR];
	pthread_t th[MAXR];
	for (unsigned k = 0; k < n; k++) {
		rk[k] = (struct rank){.tc = tr[k], .path = argv[1],
				      .step = strtoull(argv[2], NULL, 10), .abort_rank = abort_rank,
				      .g = g, .pool = pool, .meta = meta};
		pthread_create(&th[k], NULL, rank_main, &rk[k]);
	}
	int fail = 0;
	for (unsigned k = 0; k < n; k++) {
		pthread_join(th[k], NULL);
		if (rk[k].rc) {
			fprintf(stderr, "mkdist: rank %u: %s\n", k, rk[k].msg);
			fail = 1;
		}
	}
	return fail;
}
