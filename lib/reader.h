/* Reader internals the tests look at. */
#ifndef CKPT_READER_H
#define CKPT_READER_H

#include <stdint.h>

#include "ckpt.h"

/* Chunks restored so far by r read straight into their destination (direct), and decoded from
 * the read buffer (buffered). */
void reader_path_counts(const ckpt_reader *r, uint64_t *direct, uint64_t *buffered);

#endif
