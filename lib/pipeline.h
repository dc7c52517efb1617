/* The save pipeline of a store: a dispatcher that grants pool slabs in order, worker threads that
 * copy (snapshot), hash, deduplicate, compress and lay out records, one I/O engine per data
 * directory that writes them, and a commit step per save, in submission order. */
#ifndef CKPT_PIPELINE_H
#define CKPT_PIPELINE_H

#include <stdbool.h>

#include "save.h"
#include "store.h"

/* Creates the store's pipeline on first use; its pool is CUDA-pinned memory when want_cuda and
 * the CUDA provider is loaded. Returns 0 or -CKPT_E_*. */
int pipe_ensure(struct ckpt_store *s, bool want_cuda);
/* Stops the pipeline (no save may be in flight). */
void pipe_destroy(struct ckpt_store *s);
/* Starts sv in the background. Returns 0 or -CKPT_E_* (then nothing was started). */
int pipe_submit(struct ckpt_save *sv);
/* Waits for the snapshot / for the end of sv. Return the save's error or 0. */
int pipe_wait_snapshot(struct ckpt_save *sv);
int pipe_wait(struct ckpt_save *sv);
/* Waits until every copy of sv is queued on its CUDA streams (for fences). */
int pipe_wait_enqueued(struct ckpt_save *sv);
/* Makes stream (NULL: the legacy default stream) wait on the device for the save's copies. */
int pipe_fence(struct ckpt_save *sv, void *stream);
int pipe_poll(const struct ckpt_save *sv);

#endif
