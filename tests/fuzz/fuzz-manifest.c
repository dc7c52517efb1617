/* libFuzzer target: manifest_decode (lib/format/format.c).
 *
 * Every input is decoded twice: as it is (almost always stopped by the length field or the
 * XXH3-128 trailer), and with the length field and trailer recomputed, so that the fuzzer reaches
 * the structural checks behind them. A decode must either fail cleanly (a negative CKPT_E_* code,
 * a message that names the file) or yield an internally consistent manifest that survives an
 * encode/decode round trip. Anything else aborts.
 *
 * Build and run it as tests/fuzz/README.md describes (clang -fsanitize=fuzzer,address). The
 * corpus (tests/fuzz/corpus/) is replayed by tests/unit/format/t-fuzz-replay.c, which includes
 * this file with FUZZ_ENTRY renamed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/codec.h"
#include "common/common.h"
#include "format/format.h"
#include "common/hash.h"
#include "fuzz-common.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);

#define FM_WHAT "fuzz-manifest-input"

static void fm_die(const char *why)
{
	fprintf(stderr, "fuzz-manifest: %s (last message: %s)\n", why, ckpt_errmsg());
	abort();
}

static void fm_check(const struct manifest *m, size_t len)
{
	const uint8_t *lo = m->buf, *hi = m->buf + len;
	if (m->chunk_size < CKPT_MIN_CHUNK || m->chunk_size > CKPT_MAX_CHUNK ||
	    (m->chunk_size & (m->chunk_size - 1)))
		fm_die("accepted an invalid chunk size");
	for (uint32_t i = 0; i < m->n_meta; i++) {
		const struct mf_meta *e = &m->meta[i];
		if ((const uint8_t *)e->key < lo || (const uint8_t *)e->key + e->klen >= hi ||
		    (const uint8_t *)e->value < lo || (const uint8_t *)e->value + e->vlen >= hi ||
		    strlen(e->key) != e->klen || strlen(e->value) != e->vlen || !e->klen)
			fm_die("metadata entry inconsistent");
	}
	for (uint32_t i = 0; i < m->n_chunks; i++) {
		const struct mf_chunk *c = &m->chunks[i];
		if (c->codec >= CKPT_CODEC__COUNT || !c->raw_len || c->raw_len > m->chunk_size ||
		    !c->stored_len || c->stored_len > ckpt_codec_bound(c->raw_len) ||
		    (c->offset & 4095) || c->offset < PACK_HDR_LEN ||
		    (c->codec == CKPT_CODEC_RAW && c->stored_len != c->raw_len))
			fm_die("chunk entry inconsistent");
	}
	uint64_t refs = 0;
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const struct mf_tensor *t = &m->tensors[i];
		if ((const uint8_t *)t->name < lo || (const uint8_t *)t->name + t->name_len >= hi ||
		    strlen(t->name) != t->name_len || !t->name_len || t->ndim > CKPT_MAX_DIMS)
			fm_die("tensor name or rank inconsistent");
		uint64_t n = ckpt_dtype_size((ckpt_dtype)t->dtype);
		if (!n)
			fm_die("tensor dtype invalid");
		for (unsigned d = 0; d < t->ndim; d++)
			if (__builtin_mul_overflow(n, t->shape[d], &n))
				fm_die("tensor shape overflows");
		if (n != t->nbytes || t->first_ref != refs ||
		    t->nrefs != n / m->chunk_size + (n % m->chunk_size != 0))
			fm_die("tensor size or references inconsistent");
		for (uint64_t j = 0; j < t->nrefs; j++) {
			uint32_t r = m->refs[t->first_ref + j];
			if (r >= m->n_chunks)
				fm_die("reference out of range");
			if (m->chunks[r].raw_len != MIN((uint64_t)m->chunk_size, n - j * m->chunk_size))
				fm_die("reference to a chunk of the wrong length");
		}
		refs += t->nrefs;
	}
	if (refs != m->n_refs)
		fm_die("sum of tensor references != n_refs");
}

static int fm_equal(const struct manifest *a, const struct manifest *b)
{
	if (a->step != b->step || a->time_ns != b->time_ns || memcmp(a->uuid, b->uuid, 16) ||
	    a->chunk_size != b->chunk_size || a->new_bytes != b->new_bytes || a->n_meta != b->n_meta ||
	    a->n_tensors != b->n_tensors || a->n_chunks != b->n_chunks || a->n_refs != b->n_refs)
		return 0;
	for (uint32_t i = 0; i < a->n_meta; i++)
		if (strcmp(a->meta[i].key, b->meta[i].key) || strcmp(a->meta[i].value, b->meta[i].value))
			return 0;
	for (uint32_t i = 0; i < a->n_chunks; i++)
		if (memcmp(&a->chunks[i].digest, &b->chunks[i].digest, 16) ||
		    a->chunks[i].pack_id != b->chunks[i].pack_id || a->chunks[i].codec != b->chunks[i].codec ||
		    a->chunks[i].flags != b->chunks[i].flags || a->chunks[i].offset != b->chunks[i].offset ||
		    a->chunks[i].raw_len != b->chunks[i].raw_len ||
		    a->chunks[i].stored_len != b->chunks[i].stored_len)
			return 0;
	for (uint32_t i = 0; i < a->n_tensors; i++) {
		const struct mf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
		if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim ||
		    x->nbytes != y->nbytes || x->nrefs != y->nrefs)
			return 0;
		for (unsigned d = 0; d < x->ndim; d++)
			if (x->shape[d] != y->shape[d])
				return 0;
	}
	for (uint64_t i = 0; i < a->n_refs; i++)
		if (a->refs[i] != b->refs[i])
			return 0;
	return 1;
}

static void fm_one(const uint8_t *data, size_t size)
{
	struct manifest m;
	int rc = fuzz_decode_copy(data, size, FM_WHAT, &m);
	if (rc == 1)
		return;
	if (rc < 0) {
		if (rc <= -CKPT_E__COUNT || !strstr(ckpt_errmsg(), FM_WHAT))
			fm_die("failure without a valid code or without naming the file");
		return;
	}
	if (rc != 0)
		fm_die("positive return code"); /* 1 is fuzz_decode_copy's, taken above */
	fm_check(&m, size);
	/* What was accepted encodes to the same length and decodes to the same manifest. */
	uint64_t n = manifest_encoded_len(&m);
	if (n != size)
		fm_die("re-encoded length differs");
	uint8_t *e = malloc(size);
	if (e) {
		manifest_encode(&m, e);
		struct manifest m2;
		if (manifest_decode(e, size, &m2, FM_WHAT))
			fm_die("re-encoded manifest does not decode");
		if (!fm_equal(&m, &m2))
			fm_die("re-encoded manifest decodes differently");
		manifest_free(&m2);
	}
	manifest_free(&m);
}

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
	fuzz_manifest_twice(data, size, fm_one);
	return 0;
}
