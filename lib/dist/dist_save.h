/* Internal to lib/dist: a multi-rank save's handle, shared by dist.c (begin, the adds, the
 * part and the collective commit) and dist_async.c (submit, the commit thread, the deferred
 * release, wait and abort). */
#ifndef CKPT_DIST_SAVE_H
#define CKPT_DIST_SAVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "common/ckpt_int.h"

struct dsave {
	ckpt_store *s;
	ckpt_comm comm;
	uint64_t step;
	save1 *part;
	int lock_fd;             /* shared flock held from begin to the global commit */
	int claim_fd;            /* rank 0: the step's claim (dist_parts.c), or -1 */
	char **keys;             /* reserved metadata of the part, added at commit */
	size_t nkeys;
	/* Asynchronous saves (dsave_submit). */
	bool submitted, threaded, deferred;
	int submit_rc;           /* submit's own failure: the part never ran */
	struct async_commit *ac; /* threaded: the commit thread's state */
};

/* What each rank tells the others at commit: its part's outcome, and the remote its handle
 * uploads to in the background (store_upload_key, 0: none); rank 0's reply the same. */
struct part_msg {
	int32_t rc;
	uint32_t pad;
	uint64_t size;
	uint64_t upkey;
	uint8_t digest[16];
	char msg[216];
};

/* A threaded asynchronous save: a library thread waits for the part and runs the collective
 * commit, because the caller's communicator allows collectives from another thread. The caller
 * may still fence or wait for the snapshot on the part meanwhile: the thread frees the part only
 * once the snapshot is done and no such call is inside it. */
struct async_commit {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int inside;              /* caller calls on the part in progress */
	bool snap_done, done;
	bool released;           /* CKPT_SAVE_DEFER: dsave_release() was called */
	bool gathering;          /* the commit's exchange began: no more late metadata */
	int rel_rc;              /* its outcome for this rank (0 or a negative CKPT_E_*) */
	char rel_msg[216];
	char **late;             /* metadata set after submit: key, value, key, value, ... */
	size_t nlate;
	int snap_rc, rc;
	char snap_msg[512], msg[1024];
	ckpt_stats st;
};

/* dist.c */
void dist_free(dsave *d, bool committed);
/* The crash-test hook (test builds: CKPT_DIST_KILL_AT=RANK:N raises SIGKILL at rank's Nth point). */
void dist_kill_point(int rank);
/* Adds the reserved metadata and submits the part's save; 0 or the error (the part is gone). */
int dist_submit_part(dsave *d);
/* The rest of a save after submit: the part durable, the exchange, rank 0's commit. */
int dist_finish(dsave *d, ckpt_stats *st);
/* The exchange of the parts' outcome and rank 0's commit, broadcast to every rank. */
int dist_commit_all(dsave *d, ckpt_stats *st, struct part_msg *mine);
/* After a failed save: the handle's dedup index must not name the part's chunks. */
void dist_forget_part(struct ckpt_store *s);

/* dist_async.c */
/* CKPT_SAVE_DEFER: waits for the release; a release with an error becomes *m's outcome. */
void dist_await_release(dsave *d, struct part_msg *m);
/* Metadata set after a deferred submit, until the release. */
int dist_late_meta(dsave *d, const char *key, const char *value);
/* Rank 0's late metadata (key, value, ...), read once the exchange began. */
const char *const *dist_late_list(const dsave *d);
size_t dist_late_count(const dsave *d);

#endif
