/* Pack ids (packids.c): the id ranges of writers, the marks of STORE/packids, and the handle's
 * allocator of new pack ids with how its packs are written (O_DIRECT, the io ops). Internal to
 * lib/. */
#ifndef CKPT_PACKIDS_H
#define CKPT_PACKIDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/io.h"

struct ckpt_store;

/* Pack ids of multi-rank saves: rank r allocates in [DIST_PACK_LO(r), DIST_PACK_LO(r+1)),
 * single-process saves and gc below DIST_PACK_LO(0), so writers of one save never collide. */
#define DIST_PACK_SPAN (1u << 22)
#define DIST_PACK_LO(r) (((uint32_t)(r) + 1) * DIST_PACK_SPAN)
#define DIST_MAX_RANKS 1022u
/* STORE/packids (packids.c; docs/format.md): per id range (id >> STORE_PACK_RANGE_BITS: 0 for
 * single-process saves and gc, r + 1 for rank r), the highest id a pack ever had that may be
 * gone now; writers allocate above it, so no id names two packs (a remote holds packs by id). */
#define STORE_PACKIDS "packids"
#define STORE_PACK_RANGE_BITS 22
#define STORE_PACK_RANGES 1024u
/* *mark: range's mark in the store of directory dir (0 without one). Returns 0 or -CKPT_E_*
 * (-CKPT_E_CORRUPT naming a file that does not parse). */
int store_packid_mark(const char *dir, uint32_t range, uint32_t *mark);
/* Raises the marks of the store in dir to cover ids[0..n) (each range to its highest id there),
 * writing the file atomically and durably when a mark changes. Callers hold the writer lock
 * exclusively, or own a store nobody uses yet. Returns 0 or -CKPT_E_*. */
int store_packids_raise(const char *dir, const uint32_t *ids, size_t n);

/* The pack writer state of a handle. */
struct store_packs {
	uint32_t next_id;          /* last pack id used (store_new_pack_id; atomic) */
	bool direct_refused;       /* the file system refused O_DIRECT (atomic) */
	const struct ckpt_io_ops *io; /* the io ops packs are written with (store_begin_write) */
};

void store_packs_init(struct store_packs *p);

/* A pack id no other pack of this writer has (thread-safe; under the writer lock). */
uint32_t store_new_pack_id(struct ckpt_store *s);
/* Whether new packs are opened with O_DIRECT: the option, unless the file system refused it
 * (store_refuse_direct, after which this handle writes buffered). Thread-safe. */
bool store_direct_io(const struct ckpt_store *s);
void store_refuse_direct(struct ckpt_store *s);

/* The pack id after which this writer allocates: the highest pack id in its range present in
 * any pack directory (0 if none), listing them. In part_mode (every rank of a multi-rank save,
 * at every save) the directories, shared by every rank, are not listed: *out is the last id of
 * the run of taken ids that follows the handle's last id in the rank's range (or the range's
 * start), found by a few stat() probes (packids.c, probe_taken). Returns 0 or -CKPT_E_*. */
int store_max_pack_id(struct ckpt_store *s, uint32_t *out);
/* Part mode, after create_pack found its new id taken (the same rank of another job saving a
 * step, or a pack a crashed save left): moves the id counter past the whole run of taken ids
 * at once (thread-safe), instead of one O_EXCL failure per id. No-op in other modes. */
void store_skip_taken_ids(struct ckpt_store *s);

#endif
