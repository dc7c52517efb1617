/* Pack writer: appends 4 KiB-aligned chunk records to new pack files through large aligned
 * writes (I/O size independent of chunk size), O_DIRECT when the file system allows it. */
#ifndef CKPT_PACKW_H
#define CKPT_PACKW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct packw {
	struct ckpt_store *s;
	int fd;
	uint32_t id, next_id;
	uint64_t off;       /* file offset where buf will be written */
	uint8_t *buf;
	size_t len, cap;
	bool direct;        /* O_DIRECT in effect on the current pack */
	bool direct_ok;     /* O_DIRECT has worked (or not been refused) so far */
	uint32_t *created;  /* packs this save created, for cleanup on failure */
	size_t ncreated;
	uint64_t bytes_written;
	char path[4096];
};

/* Prepares a writer for packs numbered from next_id, with a buffer for records of up to
 * max_record bytes. Returns 0 or -CKPT_E_NOMEM. */
int packw_init(struct packw *w, struct ckpt_store *s, uint32_t next_id, size_t max_record);

/* Returns a pointer where a record of up to span bytes can be built; the record is then added by
 * packw_commit() with its real span (a multiple of 4 KiB). Returns NULL and an error in *rc. */
uint8_t *packw_reserve(struct packw *w, size_t span, int *rc);
/* Adds the record built at the reserved pointer. Sets *pack_id and *offset to its location. */
int packw_commit(struct packw *w, size_t span, uint32_t *pack_id, uint64_t *offset);

/* Writes what is buffered, makes every pack durable (fdatasync, then the directory entry).
 * Returns 0 or -CKPT_E_*. */
int packw_finish(struct packw *w);
/* Frees the writer; when remove is set, unlinks every pack it created (a failed save). */
void packw_free(struct packw *w, bool remove);

#endif
