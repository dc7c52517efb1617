/* The remote tier: a store's checkpoints copied to a remote (lib/remote) and brought back, in the
 * layout of docs/format.md, "Remote layout". Above every other folder of lib/. Internal to lib/.
 *
 * Push order (the crash safety of the remote): the store header (once, never replaced), then
 * every pack the checkpoint references that the remote lacks (sizes checked after each put), then
 * a multi-rank checkpoint's part files, then the manifest, with RMT_PUT_NOREPLACE. A checkpoint
 * exists on the remote only once its manifest is there, so a killed push leaves at worst packs no
 * remote manifest references, which the next push finds and skips. Packs are put never replacing,
 * and one found present counts only when it is the same pack (its header's nonce), so two writers
 * of one store id are refused, not mixed; a push and a remote gc fence each other through their
 * markers (tier_fence.c). Pull is the mirror: packs
 * (each record the manifest names checked against its digest before the pack is linked into
 * place), parts, and the manifest last. */
#ifndef CKPT_TIER_H
#define CKPT_TIER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ckpt.h"
#include "common/ckpt_int.h"
#include "format/codec.h"
#include "remote/remote.h"
#include "store/store.h"

#define TIER_ROOT "libckpt1" /* the remote layout's version: docs/format.md */
#define TIER_ID_LEN 32        /* a store id: its uuid in lowercase hex */
/* Rank 0's background upload of a multi-rank checkpoint waits this long for a sharing rank that
 * makes no progress (CKPT_REMOTE_SHARE_WAIT_S overrides), then sends that rank's share itself. */
#define TIER_SHARE_WAIT_S 300

/* One store's place on one remote. */
struct tier_ref {
	struct rmt *r;
	char id[TIER_ID_LEN + 1];
};


/* ---- tier_layout.c -------------------------------------------------------------------------- */
void tier_id_of(const uint8_t uuid[16], char out[TIER_ID_LEN + 1]);
/* Parses a store id (32 hex digits). Returns 0, or -CKPT_E_INVAL naming it. */
int tier_parse_id(const char *id, uint8_t uuid[16]);
/* The keys of docs/format.md's remote layout, for store id. */
void tier_key_hdr(const struct tier_ref *t, char *buf, size_t len);
void tier_key_pack(const struct tier_ref *t, uint32_t id, char *buf, size_t len);
void tier_key_mf(const struct tier_ref *t, uint64_t step, char *buf, size_t len);
void tier_key_part(const struct tier_ref *t, uint64_t step, unsigned rank, char *buf, size_t len);
/* The steps whose manifests the remote holds for t, ascending, into *steps (malloc'd). Returns
 * the count or -CKPT_E_*. */
long tier_remote_steps(const struct tier_ref *t, uint64_t **steps);
/* The ids of the packs the remote holds for t (any order), into *ids (malloc'd). Returns the
 * count or -CKPT_E_*. */
long tier_remote_packs(const struct tier_ref *t, uint32_t **ids);
/* The ids of the stores on remote r, into ids (up to max). Returns the count or -CKPT_E_*. */
long tier_remote_stores(struct rmt *r, char (*ids)[TIER_ID_LEN + 1], size_t max);
/* Reads a whole object (at most max bytes) into a malloc'd buffer. Returns 0 or -CKPT_E_*. */
int tier_get_all(const struct tier_ref *t, const char *key, uint64_t max, uint8_t **out,
		 uint64_t *len);
/* Fetches and decodes the remote manifest of step (CKPT_STEP_LATEST: the newest that decodes)
 * and checks it belongs to uuid; *raw keeps its bytes (for the local copy). Returns 0 or
 * -CKPT_E_* (NOTFOUND, CORRUPT/CHECKSUM naming the object). */
int tier_fetch_manifest(const struct tier_ref *t, const uint8_t uuid[16], uint64_t step,
			struct manifest *m, uint8_t **raw, uint64_t *rawlen);
/* The world of a multi-rank checkpoint (its DIST_WORLD metadata), 0 for a one-process one. */
unsigned tier_world(const struct manifest *m);
/* The distinct pack ids m references, into *ids (malloc'd, ascending). Returns the count or
 * -CKPT_E_NOMEM. */
long tier_packs_of(const struct manifest *m, uint32_t **ids);

/* Runs one(ctx, i) for i in [0, n) on up to threads threads (TIER_MAX_THREADS at most), stopping
 * at the first failure or when *cancel (may be NULL) turns true. Returns 0, the first failure
 * (its message on the caller's thread) or -CKPT_E_CANCELED. */
#define TIER_MAX_THREADS 64
struct tier_par {
	int (*one)(void *ctx, size_t i);
	void *ctx;
	size_t n;
	const bool *cancel;
	/* The run's state. */
	pthread_mutex_t mu;
	size_t next;
	int rc;
	char msg[1024];
};
int tier_parallel(struct tier_par *p, unsigned threads);

/* ---- tier_push.c ---------------------------------------------------------------------------- */
/* Pushes checkpoint step (a committed local one) of s to t: the order above. progress gets bytes
 * sent over the bytes to send; cancel (may be NULL) is polled between and inside puts. Returns 0
 * or -CKPT_E_* (the message names the object and the cause). */
int tier_push(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, ckpt_remote_stats *st,
	      rmt_progress_cb progress, void *arg, const bool *cancel);

/* The remote store header: put once (never replacing); one already there must be this store's
 * byte for byte. Returns 0 or -CKPT_E_*. */
int tier_ensure_hdr(struct ckpt_store *s, const struct tier_ref *t);
/* Sends the local packs ids[0..n) the remote lacks, cfg.parallel at a time, each checked by size
 * once put; a remote pack of the same id that is another pack is -CKPT_E_CORRUPT. st (counts
 * added), progress and cancel as tier_push's. Returns 0 or -CKPT_E_*. */
int tier_push_packs(struct ckpt_store *s, const struct tier_ref *t, const uint32_t *ids, size_t n,
		    ckpt_remote_stats *st, rmt_progress_cb progress, void *arg, const bool *cancel);
/* Whether the remote still holds packs ids[0..n): 0, or -CKPT_E_IO naming the first gone. */
int tier_check_present(const struct tier_ref *t, const uint32_t *ids, size_t n);
/* Puts rank's local part file of step unless the remote holds those bytes already; another
 * object there (a stale part of a save that never reached the remote) is replaced. */
int tier_put_part(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, unsigned rank);
/* Deletes upload marker mark (when set), keeping the message of failure rc for the caller. */
void tier_unmark_keep_error(const struct tier_ref *t, const char *mark, int rc);

/* ---- tier_share.c --------------------------------------------------------------------------- */
/* The background upload of multi-rank checkpoint step by the handle of rank (docs/format.md,
 * "Remote layout"): the packs of the rank's own id range that the global manifest references and
 * the remote lacks, then its part object. Rank 0 then waits until the part objects of the ranks
 * with sharing[r] (nshare entries) are there, as long as one of them makes progress within
 * wait_ms, and pushes the rest (tier_push: what is missing, the parts, the manifest last). st
 * gets what this handle sent. Returns 0 or -CKPT_E_*. */
int tier_push_dist(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, unsigned rank,
		   const bool *sharing, unsigned nshare, int64_t wait_ms, ckpt_remote_stats *st,
		   const bool *cancel);
/* Background upload counters of s's handle (what its upload thread sent), for tests. */
void tier_upload_stats(struct ckpt_store *s, ckpt_remote_stats *st);

/* ---- tier_pull.c ---------------------------------------------------------------------------- */
/* Pulls checkpoint step (CKPT_STEP_LATEST: the remote's newest) of t into s, under the store's
 * writer lock. *got is the step pulled. Returns 0 or -CKPT_E_*; a damaged remote object is
 * -CKPT_E_CHECKSUM or -CKPT_E_CORRUPT naming it, and nothing of it is kept. */
int tier_pull(struct ckpt_store *s, const struct tier_ref *t, uint64_t step, uint64_t *got,
	      ckpt_remote_stats *st, rmt_progress_cb progress, void *arg);
/* Creates a local store at path holding the remote store's header (its uuid, so the two are one
 * store), or accepts one that has it already. id NULL: the remote's only store. Returns 0 or
 * -CKPT_E_* (-CKPT_E_INVAL when the remote holds several stores and id is NULL, -CKPT_E_EXISTS
 * when path holds another store). */
int tier_adopt(struct rmt *r, const char *id, const char *path);

/* ---- tier_fence.c ---------------------------------------------------------------------------- */
/* A remote gc's marker (TIER_ROOT/ID/gc/RANDOM.gc) is re-put every TIER_GC_REFRESH_S while it
 * deletes; one unchanged for TIER_GC_STALE_S (CKPT_REMOTE_GC_STALE_S overrides; the refresh
 * scales with it) is a dead gc's. */
#define TIER_GC_STALE_S 120
#define TIER_GC_REFRESH_S 10
int64_t tier_gc_stale_s(void);
struct tier_gc_mark {
	char key[160];
	unsigned round;
	double at;   /* ckpt_now() of the last put */
	bool lapsed; /* a refresh came later than half the stale age: pushes may have gone on */
};
/* Puts a new gc marker. Returns 0 or -CKPT_E_*. */
int tier_gc_mark(const struct tier_ref *t, struct tier_gc_mark *g);
/* Whether the marker is due for its refresh (and the gc for another look at the uploads). */
bool tier_gc_due(const struct tier_gc_mark *g);
int tier_gc_refresh(const struct tier_ref *t, struct tier_gc_mark *g);
void tier_gc_unmark(const struct tier_ref *t, const struct tier_gc_mark *g);
/* The gc markers a push has seen, each with the last time (ckpt_now) it saw it change. */
struct tier_gc_seen {
	struct {
		char key[160];
		int64_t mtime;
		uint64_t size;
		double changed;
		bool listed;
	} m[16];
	size_t n;
};
/* Lists the gc markers of t into g (those gone are dropped, changes noted). */
int tier_gc_look(const struct tier_ref *t, struct tier_gc_seen *g);
/* Waits until every gc in g has ended (its marker gone) or died (unchanged for the stale age),
 * looking again with a backoff up to 1 s. Returns 0, -CKPT_E_CANCELED or a listing's error. */
int tier_gc_wait(const struct tier_ref *t, struct tier_gc_seen *g, const bool *cancel);
/* Puts (replaces) this store's writer record TIER_ROOT/ID/writers/H.writer: host, path, pid and
 * the time of its last push, so that two writers of one store id can be named. */
int tier_note_writer(struct ckpt_store *s, const struct tier_ref *t);
/* "host:path (last push T), ..." of every writer recorded for t, into out. */
void tier_describe_writers(const struct tier_ref *t, char *out, size_t len);
#ifdef CKPT_TEST_HOOKS
/* Test builds: called at named points (tests/unit/tier/t-remote-fence.c forces interleavings). */
extern void (*tier_test_hook)(const char *point);
#endif

/* ---- tier_info.c ---------------------------------------------------------------------------- */
/* The key of store t's info object (TIER_ROOT/ID/info: "host H\npath P\n", who pushed last). */
void tier_key_info(const struct tier_ref *t, char *buf, size_t len);
/* Puts s's info object on t unless the one there says the same (a push calls it: the remote then
 * names the store a replacement node would look for). Returns 0 or -CKPT_E_*. */
int tier_put_info(struct ckpt_store *s, const struct tier_ref *t);
/* The stores on r (those with a header), by id, with their info and what a listing of r counts
 * (ckpt_remote_stores()). Returns the count or -CKPT_E_*. */
long tier_remote_summary(struct rmt *r, ckpt_remote_store **out);

/* ---- tier_gc.c ------------------------------------------------------------------------------ */
/* An upload marker (TIER_ROOT/ID/uploads/RANDOM.upload: pid, host, since) put at a push's start
 * and deleted at its end (key gets its name); a remote gc removes no pack while one younger than
 * the grace age exists (a killed push's ages out). */
int tier_mark_upload(const struct tier_ref *t, char *key, size_t len);
void tier_unmark_upload(const struct tier_ref *t, const char *key);
/* Removes the packs of store t no valid remote manifest references, the part files of steps
 * without a manifest, and dead upload markers (older than grace_s); nothing while a manifest is
 * damaged (-CKPT_E_CORRUPT) unless CKPT_GC_FORCE, no pack or part while an upload is live
 * (counted as spared). CKPT_GC_DRY_RUN: only counts. Returns 0 or -CKPT_E_*. */
int tier_gc(const struct tier_ref *t, const uint8_t uuid[16], int64_t grace_s, int flags,
	    rgc_report *rep);
/* Removes the remote manifests of store t that retention r does not keep, as a local prune
 * chooses them (gc/gc.h; never a damaged one: its step is kept); their packs are left to
 * tier_gc. While a remote manifest is damaged, nothing is removed (-CKPT_E_CORRUPT naming its
 * key) unless CKPT_GC_FORCE. *removed (malloc'd, rep->manifests_removed entries, ascending) gets the steps removed
 * (CKPT_GC_DRY_RUN: that would be). Returns 0 or -CKPT_E_*. */
int tier_prune(const struct tier_ref *t, const uint8_t uuid[16], const retain_rules *r,
	       int flags, rgc_report *rep, uint64_t **removed);

/* ---- tier_fetch.c --------------------------------------------------------------------------- */
/* The tier listener's pack read (store_remote_pack): an anonymous file (the fd) holding pack id's
 * header and the records m references in it, range-read from t and each checked against its
 * digest; what gets the remote object's name; *bytes (atomic) counts the bytes read. Returns the
 * fd or -CKPT_E_* (a damaged record: -CKPT_E_CHECKSUM / -CKPT_E_CORRUPT naming the object). */
int tier_fetch_pack(struct ckpt_store *s, const struct tier_ref *t, const struct manifest *m,
		    uint32_t id, char *what, size_t len, uint64_t *bytes);
/* Checks one record read from a remote (rec: its header and payload, as in the pack) against
 * manifest entry c: the header, then the decoded bytes (into out, c->raw_len at least) against the
 * digest. what names the object. Returns 0, -CKPT_E_CHECKSUM or -CKPT_E_CORRUPT. */
int tier_check_record(ckpt_codec_ctx *codec, uint8_t *out, const uint8_t *rec,
		      const struct mf_chunk *c, const char *what);
/* Bytes the readers of s read from its remote so far (tier_fetch_pack), for tests. */
uint64_t tier_bytes_fetched(struct ckpt_store *s);

#endif
