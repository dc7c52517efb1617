/* Restoring scattered runs of one tensor's bytes: what lib/dist's box restore asks of the reader
 * (a box of a global tensor cut into its rows in each shard). The reader knows the chunks; the
 * caller knows the geometry. */
#ifndef CKPT_READ_RUNS_H
#define CKPT_READ_RUNS_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "common/ckpt_int.h"

/* n elements of es bytes at byte off of the tensor, back to back there, go to dst, dst + step,
 * dst + 2 * step, ... (step == es: contiguous in the destination too). */
struct rd_run {
	uint64_t off, n;
	uint8_t *dst;
	uint64_t step;
};

/* Hands out the next run into *run, or returns false when there is none left. */
typedef bool (*rd_run_fn)(void *arg, struct rd_run *run);

/* Checks that mem is CKPT_MEM_HOST or a CUDA device whose provider is loaded, and that dst (when
 * not NULL) lies in that memory (ckpt_gpu_check_mem); name is the tensor's, for the messages.
 * Returns 0, -CKPT_E_INVAL (mem out of range, dst in other memory) or -CKPT_E_UNSUPPORTED (no
 * CUDA provider). */
int rd_check_mem(const char *name, int mem, const void *dst);

/* Restores the runs next() hands out into memory mem (checked by rd_check_mem), for tensor ti
 * of elements of es bytes. Runs come in increasing order of off and do not overlap, each inside
 * the tensor. Each stored chunk they touch is read and checked once (rows that share a chunk
 * share its read); chunks no run touches are not read. A run's chunks that it covers whole, when
 * it is contiguous in dst, are read in place as reader1_restore() reads them (direct reads,
 * the pipe; CUDA through the pinned staging); the other pieces are copied out of the read buffer
 * (raw chunks, checked there) or out of one decoded chunk, and for CUDA out of the staging buffer.
 * Adds to the reader's statistics: bytes_read, chunks (read), logical_bytes (of the runs).
 * Returns 0 or the errors of reader1_restore(). */
int rd_restore_runs(reader1 *r, size_t ti, unsigned es, int mem, rd_run_fn next, void *arg);

#endif
