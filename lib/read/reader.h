/* Reader internals the tests look at. */
#ifndef CKPT_READER_H
#define CKPT_READER_H

#include <stdint.h>

#include "ckpt.h"

/* Chunks restored so far by r read straight into their destination (direct), and decoded from
 * the read buffer (buffered). */
void reader_path_counts(const ckpt_reader *r, uint64_t *direct, uint64_t *buffered);
/* The most group reads (and their bytes) r had submitted and not yet checked at once, over all
 * its restores so far: how far its reads run ahead of the hashing. */
void reader_inflight_max(const ckpt_reader *r, uint64_t *reads, uint64_t *bytes);

#endif
