/* Encoding and decoding of every on-disk structure (docs/format.md): the store header, pack
 * headers, chunk record headers and manifests. Bytes only, no I/O: every decoder takes a buffer and
 * its length, checks magic, version, lengths, offsets and checksums, and returns -CKPT_E_* with a
 * message that names `what` (the file) on any inconsistency. Fuzzed by tests/unit/format/t-format. */
#ifndef CKPT_FORMAT_H
#define CKPT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/hash.h"

#define CKPT_FORMAT_VERSION 1
/* Manifests go up to 3: 2 for a multi-rank global manifest (docs/format.md, "Format version 2"),
 * 3 for one where a rank holds several boxes of a tensor (a flattened range, "Format version 3"). */
#define CKPT_MANIFEST_V_DIST 2
#define CKPT_MANIFEST_V_PIECES 3
#define CKPT_MANIFEST_VERSION 3
/* The metadata key that makes a manifest of version 2 or 3 what it is: its world size (lib/dist's
 * DIST_WORLD). The decoder refuses such a manifest without it. */
#define MF_DIST_WORLD "ckpt.dist.world"

#define STORE_HDR_LEN 64
#define PACK_HDR_LEN 4096
#define REC_HDR_LEN 64
#define MF_HDR_LEN 96
#define MF_TRAILER_LEN 16
#define MF_CHUNK_LEN 40
#define MF_MAX_LEN (1ull << 32)  /* a manifest above 4 GiB is refused as corrupt */

#define CKPT_MIN_CHUNK (64u << 10)
#define CKPT_MAX_CHUNK (64u << 20)

struct store_hdr {
	uint32_t version;
	uint8_t uuid[16];
	uint32_t chunk_size;
	uint8_t codec;      /* CKPT_COMPRESS_* default */
	uint8_t zstd_level;
	int64_t created;    /* unix seconds */
};
void store_hdr_encode(const struct store_hdr *h, uint8_t out[STORE_HDR_LEN]);
int store_hdr_decode(const uint8_t *buf, size_t len, struct store_hdr *h, const char *what);

struct pack_hdr {
	uint32_t version;
	uint8_t uuid[16];
	uint32_t pack_id;
	int64_t created;
	/* 64 random bits drawn when the pack is written (ckpt_random64), 0 in packs of a libckpt
	 * before them: with the id they name the pack's bytes, so that a remote tells one writer's
	 * pack N from another's (two writers of one store id allocate the same ids). */
	uint64_t nonce;
};
/* Encodes into a full PACK_HDR_LEN block (zero padded). */
void pack_hdr_encode(const struct pack_hdr *h, uint8_t out[PACK_HDR_LEN]);
int pack_hdr_decode(const uint8_t *buf, size_t len, struct pack_hdr *h, const char *what);

struct rec_hdr {
	uint8_t codec;
	ckpt_digest digest;  /* of the raw chunk */
	uint32_t raw_len;
	uint32_t stored_len;
	uint32_t pack_id;
};
void rec_hdr_encode(const struct rec_hdr *h, uint8_t out[REC_HDR_LEN]);
int rec_hdr_decode(const uint8_t *buf, size_t len, struct rec_hdr *h, const char *what);
/* Bytes a record occupies in a pack: header + payload, padded to 4 KiB. */
static inline uint64_t rec_span(uint32_t stored_len)
{
	return ((uint64_t)REC_HDR_LEN + stored_len + 4095) & ~(uint64_t)4095;
}

/* Chunk table entry of a manifest: where a chunk lives. */
#define MF_CHUNK_NEW 1 /* written by this checkpoint (the others were reused) */
struct mf_chunk {
	ckpt_digest digest;
	uint32_t pack_id;
	uint8_t codec;
	uint8_t flags;
	uint64_t offset;     /* of the record in the pack, 4 KiB aligned */
	uint32_t raw_len;
	uint32_t stored_len;
};

struct mf_tensor {
	const char *name;    /* NUL-terminated */
	uint32_t name_len;
	uint8_t dtype;
	uint8_t ndim;
	uint64_t *shape;
	uint64_t nbytes;
	uint64_t first_ref;  /* index into refs */
	uint64_t nrefs;      /* ceil(nbytes / chunk_size) */
};

struct mf_meta {
	const char *key, *value;
	uint32_t klen, vlen;
};

struct manifest {
	uint32_t version;
	uint64_t step;
	int64_t time_ns;
	uint8_t uuid[16];
	uint32_t chunk_size;
	uint64_t new_bytes;
	uint32_t n_meta, n_tensors, n_chunks;
	uint64_t n_refs;
	struct mf_meta *meta;
	struct mf_tensor *tensors;
	struct mf_chunk *chunks;
	uint32_t *refs;
	/* Owned storage for decoded manifests (strings point into buf). */
	uint8_t *buf;
	void *alloc;
};

/* Returns the encoded size of m, or 0 when it exceeds MF_MAX_LEN. */
uint64_t manifest_encoded_len(const struct manifest *m);
/* Encodes m into out (exactly manifest_encoded_len(m) bytes). */
void manifest_encode(const struct manifest *m, uint8_t *out);
/* Decodes buf[0..len) and takes ownership of buf (a malloc'd block) in every case. Returns 0 and
 * fills *m (free with manifest_free), or a negative CKPT_E_* code. */
int manifest_decode(uint8_t *buf, size_t len, struct manifest *m, const char *what);
void manifest_free(struct manifest *m);

/* Tags (tags.c; the rule is docs/format.md's "Tags"): the reserved metadata entry CKPT_TAGS_KEY
 * holds a checkpoint's tags joined by ','. */
#define CKPT_TAGS_KEY "ckpt.tags"
/* Returns 0 when tag follows the rule, else -CKPT_E_INVAL with a message that says why. */
int tag_check(const char *tag);
/* Writes into out (cap bytes; may be list itself) the list with tag appended, unless it holds it
 * already. Returns 0, or -CKPT_E_INVAL for a bad tag, a full list or one over cap bytes. */
int tags_add(const char *list, const char *tag, char *out, size_t cap);
/* How many tags the (valid) list holds; whether it holds tag. */
size_t tags_count(const char *list);
bool tags_match(const char *list, const char *tag);
/* The tags of m: its CKPT_TAGS_KEY value, or "" when it has none or one that breaks the rule. */
const char *manifest_tags(const struct manifest *m);

#endif
