/* The store's layout on disk (layout.c): its directories, the names of its files, the header
 * written at creation, the data directories whose packs/ also hold packs, and the multi-rank part
 * files. Internal to lib/. */
#ifndef CKPT_LAYOUT_H
#define CKPT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "format/format.h"

#define STORE_FILE "store"
#define LOCK_FILE "LOCK"
#define PACK_DIR "packs"
#define MF_DIR "manifests"
#define PART_DIR "parts"

#define MAX_DATA_DIRS 64

struct ckpt_store;

struct store_layout {
	char *pack_dir, *mf_dir;
	/* Pack directories: pack_dirs[0] is pack_dir, then one per data directory. */
	char **pack_dirs;
	unsigned ndirs;
};

/* Opens the layout of the store at path into l (zeroed): creates the store when opts says so
 * and there is none (the header last, atomically), refuses symbolically linked directories,
 * reads the header into *hdr and sets up the pack directories (STORE/datadirs and the options'
 * data directories, recorded when new). On failure l is left for store_layout_fini. Returns 0 or
 * -CKPT_E_*. */
int store_layout_init(struct store_layout *l, const char *path, const ckpt_options *opts,
		      struct store_hdr *hdr);
void store_layout_fini(struct store_layout *l);

/* Paths of a store's files: a pack in pack directory dir. */
void store_pack_path(const struct ckpt_store *s, unsigned dir, uint32_t pack_id, char *buf, size_t len);
void store_mf_name(uint64_t step, char *buf, size_t len);

/* The part files are store layout, used by the save (a part-mode save writes its manifest
 * there), dist_merge.c (reads them) and gc (counts leftovers). */
/* STORE/parts/<step> (rank < 0) or STORE/parts/<step>/<rank>.part. */
void dist_part_path(const struct ckpt_store *s, uint64_t step, int rank, char *buf, size_t len);
/* Creates STORE/parts/ (fsynced into the store when new) and parts/<step> (not fsynced: the
 * part writes do it) and refuses either when it is a symbolic link; dir gets parts/<step>'s
 * path. Returns 0 or -CKPT_E_*. */
int store_part_dir(struct ckpt_store *s, uint64_t step, char *dir, size_t len);
/* Writes this handle's rank's part manifest STORE/parts/<step>/<rank>.part atomically and never
 * over an existing file (-CKPT_E_EXISTS: another save's part); *renamed is set when the file is
 * this call's (as io_write_new's linked). Returns 0 or -CKPT_E_*. */
int dist_write_part(struct ckpt_store *s, uint64_t step, const void *buf, size_t len, int *renamed);

#endif
