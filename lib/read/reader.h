/* Reader internals the tests look at, and the record checks a pull from a remote shares
 * (lib/tier). */
#ifndef CKPT_READER_H
#define CKPT_READER_H

#include <stdint.h>

#include "ckpt.h"
#include "common/ckpt_int.h"

/* Chunks restored so far by r read straight into their destination (direct), and decoded from
 * the read buffer (buffered). */
void reader_path_counts(const reader1 *r, uint64_t *direct, uint64_t *buffered);
/* The most group reads (and their bytes) r had submitted and not yet checked at once, over all
 * its restores so far: how far its reads run ahead of the hashing. */
void reader_inflight_max(const reader1 *r, uint64_t *reads, uint64_t *bytes);

struct mf_chunk;
/* Checks a record's header (REC_HDR_LEN bytes at rec) against the manifest's chunk c: digest,
 * lengths, codec and pack id. Returns 0 or -CKPT_E_CORRUPT naming path and the offset. */
int rd_check_hdr(const uint8_t *rec, const struct mf_chunk *c, const char *path);
/* Checks the decoded bytes of chunk c (raw_len at out) against its digest. Returns 0 or
 * -CKPT_E_CHECKSUM naming path and the offset. */
int rd_check_digest(const uint8_t *out, const struct mf_chunk *c, const char *path);
/* Checks the zero padding of a record (rec: its whole span, rec_span(c->stored_len) bytes): the
 * digest does not cover it. Returns 0 or -CKPT_E_CORRUPT naming path and the offset. */
int rd_check_padding(const uint8_t *rec, const struct mf_chunk *c, const char *path);

#endif
