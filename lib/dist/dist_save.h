/* Internal to lib/dist: a multi-rank save's handle, shared by dsave.c, which moves a save through
 * its phases, and the phases' files: dsave_begin.c, dsave_add.c, dsave_snapshot.c,
 * dsave_persist.c and dsave_commit.c. */
#ifndef CKPT_DIST_SAVE_H
#define CKPT_DIST_SAVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "common/ckpt_int.h"

/* Where a multi-rank save is (the comment atop dsave.c walks them). A save on the caller's thread
 * stays SUBMITTED until it ends; a threaded one goes on from SNAPSHOT on the commit thread. */
enum dsave_state {
	DSAVE_OPEN,      /* begun: tensors, metadata, tags and streams go into the part */
	DSAVE_SUBMITTED, /* no commit thread: dsave_commit() or dsave_wait() runs the rest */
	DSAVE_SNAPSHOT,  /* threaded: the part's snapshot runs, the caller may fence or wait on it */
	DSAVE_PERSIST,   /* threaded: the snapshot is done (ac->snap_rc answers the caller); the
			  * thread takes the part once no caller is inside it, and makes it durable */
	DSAVE_HELD,      /* threaded, deferred: the part is durable, its outcome waits for the release */
	DSAVE_EXCHANGE,  /* threaded: the ranks exchange their parts' outcome, rank 0 commits */
	DSAVE_DONE,      /* threaded: the outcome is in ac, dsave_wait() joins the thread */
};

/* CKPT_SAVE_DEFER, beside the state: the caller may release in any state before EXCHANGE. */
enum dsave_defer {
	DSAVE_NOT_DEFERRED,
	DSAVE_DEFERRED,  /* not released yet: metadata set now is kept (ac->late) */
	DSAVE_RELEASED,  /* dsave_release() was called, with ac->rel_rc */
};

struct dsave {
	ckpt_store *s;
	ckpt_comm comm;
	uint64_t step;
	save1 *part;
	int lock_fd;             /* shared flock held from begin to the global commit */
	int claim_fd;            /* rank 0: the step's claim (dist_parts.c), or -1 */
	char **keys;             /* reserved metadata of the part, added at commit */
	size_t nkeys;
	/* Once a commit thread runs, state and defer change under mu and cv wakes who waits for
	 * them; other threads read them with dist_state(). */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	enum dsave_state state;
	enum dsave_defer defer;
	int submit_rc;           /* submit's own failure: the part never ran */
	struct async_commit *ac; /* threaded: the commit thread and its outcome */
};

/* The state of d, and its deferral in *defer unless NULL, read under d->mu. */
static inline enum dsave_state dist_state(const dsave *d, enum dsave_defer *defer)
{
	pthread_mutex_t *mu = (pthread_mutex_t *)&d->mu; /* poll and progress have a const d */
	pthread_mutex_lock(mu);
	enum dsave_state state = d->state;
	if (defer)
		*defer = d->defer;
	pthread_mutex_unlock(mu);
	return state;
}

/* Whether a commit thread runs (or ran) the save from state on. */
static inline bool dist_threaded(enum dsave_state state)
{
	return state >= DSAVE_SNAPSHOT;
}

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
 * once the snapshot is done and no such call is inside it. Its fields are written under d->mu
 * until the thread ends. */
struct async_commit {
	pthread_t th;
	int inside;              /* caller calls on the part in progress (under d->mu) */
	int rel_rc;              /* the release's outcome for this rank (0 or a negative CKPT_E_*) */
	char rel_msg[216];
	char **late;             /* metadata set after submit: key, value, key, value, ... */
	size_t nlate;
	int snap_rc, rc;
	char snap_msg[512], msg[1024];
	ckpt_stats st;
};

/* dsave_begin.c */
/* Ends the handle: the part's keys, the step's claim (released; its file removed when
 * committed), the lock and the handle's part mode. */
void dist_free(dsave *d, bool committed);
/* The crash-test hook (test builds: CKPT_DIST_KILL_AT=RANK:N raises SIGKILL at rank's Nth point). */
void dist_kill_point(int rank);
/* A failed collective call of c (what: which one) as this save's error; returns the code. */
int dist_comm_error(const ckpt_comm *c, uint64_t step, int rc, const char *what);
/* -CKPT_E_INVAL for a NULL save, else -CKPT_E_STATE: d was not submitted. */
int dist_not_submitted(const dsave *d);

/* dsave_snapshot.c */
/* Adds the reserved metadata and submits the part's save; 0 or the error (the part is gone). */
int dist_submit_part(dsave *d);

/* dsave_persist.c */
/* Waits until the part is durable and describes it in *m (rc: submit's failure, or 0). */
void dist_persist_part(dsave *d, int rc, ckpt_stats *st, struct part_msg *m);

/* dsave_commit.c */
/* The exchange of the parts' outcome and rank 0's commit, broadcast to every rank. */
int dist_commit_all(dsave *d, ckpt_stats *st, struct part_msg *mine);
/* After a failed save: the handle's dedup index must not name the part's chunks. */
void dist_forget_part(struct ckpt_store *s);

#endif
