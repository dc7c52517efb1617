/* A save in progress: what the caller added (tensors, metadata), the pipeline request it becomes
 * at submit, and the manifest written from what the pipeline built. Internal to lib/. */
#ifndef CKPT_SAVE_H
#define CKPT_SAVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ckpt_int.h"
#include "format/format.h"
#include "save/pipeline.h"
#include "store/store.h"

/* The save layer's state of a store handle. Every public ckpt_store is allocated as the store
 * member of one of these (handle.c), so the save layer finds its state from the store without
 * the store knowing of saves. */
struct save_store {
	struct ckpt_store store;
	pthread_mutex_t mu;        /* live, pipe (its creation and replacement); before s->mu */
	struct save1 *live;    /* begun and not yet finished */
	struct pipe *pipe;         /* made by the first submit (or ckpt_store_reserve) */
};

static inline struct save_store *save_store_of(struct ckpt_store *s)
{
	return (struct save_store *)(void *)((char *)s - offsetof(struct save_store, store));
}

struct save1 {
	struct ckpt_store *s;
	struct save1 *next_live; /* the handle's list of saves not yet finished */
	uint64_t step;
	uint32_t gen;
	uint32_t chunk_size;
	int compress, level;
	bool sync;                /* save1_commit(): the caller waits for the whole save */
	/* Filled by the caller. */
	struct pipe_tensor *t;
	size_t nt, capt;
	uint32_t *names;
	size_t names_cap;
	struct mf_meta *meta;
	size_t nmeta, capmeta;
	/* The pipeline's request, filled at submit; its output (chunk table, references,
	 * statistics) is the manifest's input. */
	struct pipe_save ps;
};

/* Finishes every live save of the handle (submitted ones are waited for, the others aborted):
 * the first step of ckpt_store_close. */
void save_drain(struct save_store *ss);
/* Releases everything the save holds; the handle forgets it. */
void save_destroy(struct save1 *sv);

#endif
