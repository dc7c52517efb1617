/* The multi-rank scenario shared by tests/unit/t-dist.c (ranks are forked processes talking over
 * pipes) and tests/mpi/t-mpi.c (ranks are MPI processes): what each rank saves at a step, and
 * checks of a checkpoint against the data it must hold, for any world size and any box. */
#ifndef T_DIST_SCEN_H
#define T_DIST_SCEN_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

/* "w": F32 [W_ROWS, W_COLS], sharded by rows at save; "emb": U16 [E_ROWS, E_COLS], replicated on
 * every rank. Chunks of 64 KiB: w is 12 chunks, emb 10. */
#define W_ROWS 512u
#define W_COLS 384u
#define E_ROWS 1000u
#define E_COLS 320u
#define SCEN_CHUNK (64u << 10)

static uint32_t scen_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint32_t)x;
}

/* Element i of w at step: rows below 64 change at every step (an incremental step rewrites only
 * the chunks holding them), the others only with step / 1000. */
static float scen_w(uint64_t step, uint64_t i)
{
	uint64_t gen = i / W_COLS < 64 ? step : step / 1000;
	return (float)(scen_mix(i * 7919 + gen) % 100000) / 7.0f;
}

static uint16_t scen_e(uint64_t i)
{
	return (uint16_t)scen_mix(i + 12345);
}

/* The rank that gives up (ckpt_save_abort) instead of committing, or -1. */
static int scen_abort_rank = -1;

/* Saves rank's part of step in a world of size ranks (rows of w split evenly). Returns the
 * commit's result; *st (may be NULL) gets the part's statistics. Public API only: the MPI tests
 * (tests/mpi) use this too. */
static int scen_save(ckpt_store *s, const ckpt_comm *comm, uint64_t step, ckpt_stats *st)
{
	unsigned r = (unsigned)comm->rank, n = (unsigned)comm->size;
	uint64_t r0 = (uint64_t)W_ROWS * r / n, r1 = (uint64_t)W_ROWS * (r + 1) / n;
	float *w = malloc((r1 - r0) * W_COLS * sizeof *w + 1);
	uint16_t *e = malloc((size_t)E_ROWS * E_COLS * sizeof *e);
	if (!w || !e)
		abort();
	for (uint64_t i = 0; i < (r1 - r0) * W_COLS; i++)
		w[i] = scen_w(step, r0 * W_COLS + i);
	for (uint64_t i = 0; i < (uint64_t)E_ROWS * E_COLS; i++)
		e[i] = scen_e(i);
	uint64_t gw[2] = {W_ROWS, W_COLS}, off[2] = {r0, 0}, lw[2] = {r1 - r0, W_COLS};
	uint64_t ge[2] = {E_ROWS, E_COLS};
	ckpt_save_options so = {.struct_size = sizeof so, .comm = comm};
	ckpt_tensor tw = {.struct_size = sizeof tw, .name = "w", .dtype = CKPT_DTYPE_F32, .ndim = 2,
			  .shape = lw, .mem = CKPT_MEM_HOST, .data = w, .global_shape = gw,
			  .offsets = off};
	ckpt_tensor te = {.struct_size = sizeof te, .name = "emb", .dtype = CKPT_DTYPE_U16,
			  .ndim = 2, .shape = ge, .mem = CKPT_MEM_HOST, .data = e, .replica = r,
			  .nreplicas = n};
	if (st)
		st->struct_size = sizeof *st;
	ckpt_save *d;
	int rc = ckpt_save_begin(s, step, &so, &d);
	if (rc) {
		free(w);
		free(e);
		return rc;
	}
	char v[32];
	snprintf(v, sizeof v, "%" PRIu64, step);
	if ((rc = ckpt_save_add(d, &tw)) || (rc = ckpt_save_add(d, &te)) ||
	    (rc = ckpt_save_set_meta(d, "step", v)) || comm->rank == scen_abort_rank) {
		ckpt_save_abort(d);
		rc = rc ? rc : -CKPT_E_STATE;
	} else {
		rc = ckpt_save_commit(d, st);
	}
	free(w);
	free(e);
	return rc;
}

/* Restores box (o, l) of w and of emb from checkpoint step and compares every byte. Returns the
 * number of differences (or -1 when the restore itself failed; the message is printed). */
static long scen_check_box(ckpt_store *s, uint64_t step, const uint64_t o[2], const uint64_t l[2])
{
	ckpt_reader *r;
	if (ckpt_reader_open(s, step, 0, &r)) {
		fprintf(stderr, "open step %" PRIu64 ": %s\n", step, ckpt_errmsg());
		return -1;
	}
	long bad = 0, iw = ckpt_reader_find(r, "w"), ie = ckpt_reader_find(r, "emb");
	float *w = malloc(l[0] * l[1] * sizeof *w + 1);
	uint64_t le[2] = {l[0] * E_ROWS / W_ROWS, l[1] * E_COLS / W_COLS};
	uint16_t *e = malloc(le[0] * le[1] * sizeof *e + 1);
	uint64_t oe[2] = {o[0] * E_ROWS / W_ROWS, o[1] * E_COLS / W_COLS};
	ckpt_region bw = {.struct_size = sizeof bw, .offsets = o, .lengths = l};
	ckpt_region be = {.struct_size = sizeof be, .offsets = oe, .lengths = le};
	if (iw < 0 || ie < 0 ||
	    ckpt_reader_read(r, (size_t)iw, &bw, CKPT_MEM_HOST, w, l[0] * l[1] * sizeof *w) ||
	    ckpt_reader_read(r, (size_t)ie, &be, CKPT_MEM_HOST, e, le[0] * le[1] * sizeof *e)) {
		fprintf(stderr, "restore step %" PRIu64 ": %s\n", step, ckpt_errmsg());
		bad = -1;
	}
	for (uint64_t i = 0; bad >= 0 && i < l[0]; i++)
		for (uint64_t j = 0; j < l[1]; j++) {
			float want = scen_w(step, (o[0] + i) * W_COLS + o[1] + j);
			bad += memcmp(&w[i * l[1] + j], &want, sizeof want) != 0;
		}
	for (uint64_t i = 0; bad >= 0 && i < le[0]; i++)
		for (uint64_t j = 0; j < le[1]; j++)
			bad += e[i * le[1] + j] != scen_e((oe[0] + i) * E_COLS + oe[1] + j);
	free(w);
	free(e);
	ckpt_reader_close(r);
	return bad;
}

/* Checks what rank q of a world of n ranks restores of step: its rows, then its columns.
 * Returns the number of differences, or -1 when a restore failed. */
static long scen_check_rank(ckpt_store *s, uint64_t step, unsigned q, unsigned n)
{
	uint64_t ro[2] = {W_ROWS * q / n, 0}, rl[2] = {W_ROWS * (q + 1) / n - ro[0], W_COLS};
	uint64_t co[2] = {0, W_COLS * q / n}, cl[2] = {W_ROWS, W_COLS * (q + 1) / n - co[1]};
	long a = scen_check_box(s, step, ro, rl), b = a < 0 ? a : scen_check_box(s, step, co, cl);
	return a < 0 || b < 0 ? -1 : a + b;
}

/* Checks step as a world of n ranks would restore it: by rows, then by columns. */
static long scen_check_layout(ckpt_store *s, uint64_t step, unsigned n)
{
	long bad = 0;
	for (unsigned q = 0; q < n && bad >= 0; q++) {
		long x = scen_check_rank(s, step, q, n);
		bad = x < 0 ? -1 : bad + x;
	}
	return bad;
}

#endif
