/* The safetensors file format (https://github.com/huggingface/safetensors): a strict parser of its
 * JSON header and a writer of the canonical header.
 *
 *   8 bytes   N, the header length, unsigned little-endian
 *   N bytes   JSON object: tensor name -> {"dtype": "F32", "shape": [2, 3],
 *             "data_offsets": [begin, end]}, and an optional "__metadata__" object of
 *             string -> string; the object may be followed by spaces (0x20) only
 *   rest      the data buffer; data_offsets are relative to its start
 *
 * The parser enforces what the reference implementation does: a header of at most 100 MB that
 * begins with '{', valid UTF-8 JSON, no duplicate keys, known dtypes, offsets inside the buffer
 * whose length matches dtype size * product(shape), no overlaps and no holes (the buffer must be
 * entirely covered), no bytes after the last tensor. The writer emits the layout of the reference
 * implementation: compact JSON, "__metadata__" first, offsets contiguous from 0, padded with
 * spaces to a multiple of 8. Nothing here touches libckpt's store; only its dtype table is used. */
#ifndef CKPTCTL_SAFETENSORS_H
#define CKPTCTL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

/* Header size limit of the reference implementation. */
#define ST_MAX_HEADER (100u * 1000 * 1000)

struct st_tensor {
	char *name;       /* decoded UTF-8, NUL-terminated (names holding NUL are rejected) */
	ckpt_dtype dtype;
	unsigned ndim;
	uint64_t shape[CKPT_MAX_DIMS];
	uint64_t begin, end; /* data_offsets, relative to the data buffer */
	size_t order;        /* position in the JSON header */
};

struct st_meta {
	char *key, *value;
};

/* A parsed header. Tensors are sorted by data offset (the file's data order); metadata keeps the
 * header's order. */
struct st_header {
	struct st_tensor *tensors;
	size_t ntensors;
	struct st_meta *meta;
	size_t nmeta;
};

/* A safetensors file mapped read-only. */
struct st_file {
	int fd;
	const uint8_t *map; /* the whole file, or NULL for an empty one */
	uint64_t size;
	uint64_t header_len;
	const uint8_t *data; /* start of the data buffer */
	uint64_t data_len;
	struct st_header h;
};

/* Parses and validates the JSON header json[0..len) against a data buffer of data_len bytes.
 * Returns 0 and fills *out, or -1 with a message (without the file name) in err. */
int st_parse_header(const char *json, size_t len, uint64_t data_len, struct st_header *out,
		    char *err, size_t errlen);
void st_header_free(struct st_header *h);

/* Opens, maps (read-only) and validates path. Returns 0, or -1 with a message naming the file in
 * err. */
int st_open(const char *path, struct st_file *f, char *err, size_t errlen);
void st_close(struct st_file *f);

/* One tensor to describe in a header being written. */
struct st_out_tensor {
	const char *name;
	ckpt_dtype dtype;
	unsigned ndim;
	const uint64_t *shape;
	uint64_t nbytes;
};

/* Builds the 8-byte length and the canonical JSON header (padded with spaces to a multiple of 8)
 * for tensors laid out contiguously in the given order, and meta (nmeta key/value pairs, may be
 * 0). Returns a malloc'd buffer and its length in *len, or NULL when out of memory or when a dtype
 * is unknown. */
uint8_t *st_build_header(const struct st_out_tensor *t, size_t nt, const char *const *keys,
			 const char *const *values, size_t nmeta, size_t *len);

/* Writes s for a message: quoted, with control characters escaped, cut to at most max bytes (at a
 * UTF-8 boundary) with "..." appended. Returns buf. */
const char *st_quote(const char *s, char *buf, size_t len, size_t max);

#endif
