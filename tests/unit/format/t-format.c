/* On-disk structures (lib/format/format.c): round trips of the store header, pack header, record header
 * and manifests, and rejection of everything else: every truncation, every single-byte change,
 * bad magic, future versions, wrong length fields, out-of-range counts, lengths, shapes, offsets
 * and references (with the manifest trailer recomputed so that the structural checks run), and a
 * deterministic mutation loop. Every rejection must be a negative CKPT_E_* code whose message names
 * the `what` argument; a decoder must never crash, read out of bounds (run under ASan too) or try a
 * huge allocation (outside ASan the address space is limited, so such an attempt would show up as
 * -CKPT_E_NOMEM, which is counted as a failure here). */
#include "helpers.h"

#include <sys/resource.h>

#include "format/codec.h"
#include "common/common.h"
#include "format/format.h"
#include "common/hash.h"

/* Sanitizers that reserve large address ranges cannot run under an address-space limit. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define T_BIG_SHADOW 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
	__has_feature(memory_sanitizer)
#define T_BIG_SHADOW 1
#endif
#endif

static int printed;

static int valid_chunk_size_for_test(uint32_t c)
{
	return c >= CKPT_MIN_CHUNK && c <= CKPT_MAX_CHUNK && !(c & (c - 1));
}

/* rc must be a negative CKPT_E_* code (want, when want != 0), not NOMEM, and the message must name
 * what. Returns 1 when it is. */
static int fail_ok_at(const char *file, int line, int rc, const char *what, int want,
		      const char *ctx)
{
	int ok = rc < 0 && rc > -CKPT_E__COUNT && rc != -CKPT_E_NOMEM && (!want || rc == want) &&
		 strstr(ckpt_errmsg(), what) != NULL;
	if (!ok) {
		t_failures++;
		if (printed++ < 40)
			fprintf(stderr, "%s:%d: %s: expected a failure (%d) naming '%s', got %d (%s): %s\n",
				file, line, ctx, want, what, rc, ckpt_strerror(rc), ckpt_errmsg());
	}
	return ok;
}
#define EXPECT_FAIL(rc, what, want, ctx) fail_ok_at(__FILE__, __LINE__, (rc), (what), (want), (ctx))

/* ---- store header --------------------------------------------------------------------- */
static void store_fix(uint8_t *b) { put_le64(b + 56, ckpt_checksum64(b, 56)); }

static void test_store_hdr(void)
{
	const char *W = "WHAT:store-header";
	struct store_hdr h = {.version = 1, .chunk_size = 1u << 20, .codec = 1, .zstd_level = 3,
			      .created = -12345};
	for (int i = 0; i < 16; i++)
		h.uuid[i] = (uint8_t)(i * 17 + 1);
	uint8_t b[STORE_HDR_LEN + 8], c[STORE_HDR_LEN + 8];
	store_hdr_encode(&h, b);
	struct store_hdr d;
	memset(&d, 0, sizeof d);
	CHECK_OK(store_hdr_decode(b, STORE_HDR_LEN, &d, W));
	CHECK(d.version == 1 && d.chunk_size == h.chunk_size && d.codec == 1 && d.zstd_level == 3 &&
	      d.created == -12345 && !memcmp(d.uuid, h.uuid, 16));
	/* Edge settings that are valid. */
	uint32_t cs_ok[] = {CKPT_MIN_CHUNK, 1u << 17, CKPT_MAX_CHUNK};
	for (size_t i = 0; i < ARRAY_SIZE(cs_ok); i++) {
		struct store_hdr e = h;
		e.chunk_size = cs_ok[i];
		e.codec = 0;
		e.zstd_level = 22;
		store_hdr_encode(&e, c);
		CHECK_OK(store_hdr_decode(c, STORE_HDR_LEN, &d, W));
		CHECK(d.chunk_size == cs_ok[i] && d.zstd_level == 22 && d.codec == 0);
	}
	/* Every truncation. */
	for (size_t n = 0; n < STORE_HDR_LEN; n++)
		EXPECT_FAIL(store_hdr_decode(b, n, &d, W), W, 0, "store header truncated");
	/* Every byte, several bit patterns. */
	static const uint8_t masks[] = {0x01, 0x80, 0xff, 0x10};
	for (size_t i = 0; i < STORE_HDR_LEN; i++)
		for (size_t k = 0; k < ARRAY_SIZE(masks); k++) {
			memcpy(c, b, STORE_HDR_LEN);
			c[i] ^= masks[k];
			EXPECT_FAIL(store_hdr_decode(c, STORE_HDR_LEN, &d, W), W, 0, "store header byte changed");
		}
	/* Structural checks with the checksum recomputed. */
	memcpy(c, b, STORE_HDR_LEN);
	c[0] = 'X';
	store_fix(c);
	EXPECT_FAIL(store_hdr_decode(c, STORE_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "store bad magic");
	uint32_t versions[] = {0, 2, 0xffffffffu};
	for (size_t i = 0; i < ARRAY_SIZE(versions); i++) {
		memcpy(c, b, STORE_HDR_LEN);
		put_le32(c + 8, versions[i]);
		store_fix(c);
		EXPECT_FAIL(store_hdr_decode(c, STORE_HDR_LEN, &d, W), W, -CKPT_E_VERSION, "store version");
	}
	uint32_t lens[] = {0, 63, 65, 4096, 0xffffffffu};
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		memcpy(c, b, STORE_HDR_LEN);
		put_le32(c + 12, lens[i]);
		store_fix(c);
		EXPECT_FAIL(store_hdr_decode(c, STORE_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "store length");
	}
	uint32_t cs_bad[] = {0, 1, 4096, 32768, 65535, 65537, 3u << 16, 128u << 20, 0x80000000u};
	for (size_t i = 0; i < ARRAY_SIZE(cs_bad); i++) {
		memcpy(c, b, STORE_HDR_LEN);
		put_le32(c + 32, cs_bad[i]);
		store_fix(c);
		EXPECT_FAIL(store_hdr_decode(c, STORE_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "store chunk size");
	}
	memcpy(c, b, STORE_HDR_LEN);
	c[36] = 2;
	store_fix(c);
	EXPECT_FAIL(store_hdr_decode(c, STORE_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "store codec");
	memcpy(c, b, STORE_HDR_LEN);
	c[37] = 23;
	store_fix(c);
	EXPECT_FAIL(store_hdr_decode(c, STORE_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "store level");
}

/* ---- pack header ---------------------------------------------------------------------- */
static void pack_fix(uint8_t *b) { put_le64(b + 56, ckpt_checksum64(b, 56)); }

static void test_pack_hdr(void)
{
	const char *W = "WHAT:pack-header";
	struct pack_hdr h = {.version = 1, .pack_id = 0xfedcba98u, .created = 1700000000};
	for (int i = 0; i < 16; i++)
		h.uuid[i] = (uint8_t)(255 - i);
	uint8_t *b = malloc(PACK_HDR_LEN), *c = malloc(PACK_HDR_LEN);
	memset(b, 0xee, PACK_HDR_LEN); /* encode must write every byte (zero padding) */
	pack_hdr_encode(&h, b);
	for (size_t i = 64; i < PACK_HDR_LEN; i++)
		if (b[i]) {
			CHECK(!"pack header padding not zeroed");
			break;
		}
	struct pack_hdr d;
	memset(&d, 0, sizeof d);
	CHECK_OK(pack_hdr_decode(b, PACK_HDR_LEN, &d, W));
	CHECK(d.version == 1 && d.pack_id == h.pack_id && d.created == h.created &&
	      !memcmp(d.uuid, h.uuid, 16));
	for (size_t n = 0; n < PACK_HDR_LEN; n++)
		EXPECT_FAIL(pack_hdr_decode(b, n, &d, W), W, 0, "pack header truncated");
	/* Every byte of the 4 KiB block: a change in the padding must be caught too. */
	for (size_t i = 0; i < PACK_HDR_LEN; i++) {
		memcpy(c, b, PACK_HDR_LEN);
		c[i] ^= (uint8_t)(i < 64 ? 0x01 : 0x40);
		EXPECT_FAIL(pack_hdr_decode(c, PACK_HDR_LEN, &d, W), W, 0, "pack header byte changed");
		if (i < 64) {
			c[i] ^= 0x01 ^ 0xff;
			EXPECT_FAIL(pack_hdr_decode(c, PACK_HDR_LEN, &d, W), W, 0, "pack header byte changed");
		}
	}
	memcpy(c, b, PACK_HDR_LEN);
	memcpy(c, "CKPTSTOR", 8);
	pack_fix(c);
	EXPECT_FAIL(pack_hdr_decode(c, PACK_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "pack magic");
	uint32_t versions[] = {0, 2, 77};
	for (size_t i = 0; i < ARRAY_SIZE(versions); i++) {
		memcpy(c, b, PACK_HDR_LEN);
		put_le32(c + 8, versions[i]);
		pack_fix(c);
		EXPECT_FAIL(pack_hdr_decode(c, PACK_HDR_LEN, &d, W), W, -CKPT_E_VERSION, "pack version");
	}
	uint32_t lens[] = {0, 64, 4095, 4097, 8192};
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
		memcpy(c, b, PACK_HDR_LEN);
		put_le32(c + 12, lens[i]);
		pack_fix(c);
		EXPECT_FAIL(pack_hdr_decode(c, PACK_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "pack length");
	}
	free(b);
	free(c);
}

/* ---- record header -------------------------------------------------------------------- */
static void rec_fix(uint8_t *b) { put_le64(b + 56, ckpt_checksum64(b, 56)); }

static void test_rec_hdr(void)
{
	const char *W = "WHAT:record-header";
	struct rec_hdr cases[] = {
		{.codec = CKPT_CODEC_RAW, .raw_len = 1, .stored_len = 1, .pack_id = 1},
		{.codec = CKPT_CODEC_RAW, .raw_len = CKPT_MAX_CHUNK, .stored_len = CKPT_MAX_CHUNK, .pack_id = 7},
		{.codec = CKPT_CODEC_ZSTD, .raw_len = 65536, .stored_len = 100, .pack_id = 0xffffffffu},
		{.codec = CKPT_CODEC_ZSTD_BG2, .raw_len = 3, .stored_len = (uint32_t)ckpt_codec_bound(3), .pack_id = 2},
		{.codec = CKPT_CODEC_ZSTD_BG4, .raw_len = 1u << 20, .stored_len = 1, .pack_id = 3},
	};
	uint8_t b[REC_HDR_LEN], c[REC_HDR_LEN];
	for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
		struct rec_hdr h = cases[k], d;
		for (int i = 0; i < 16; i++)
			h.digest.b[i] = (uint8_t)(k * 31 + (size_t)i);
		memset(b, 0x5a, sizeof b);
		rec_hdr_encode(&h, b);
		memset(&d, 0, sizeof d);
		CHECK_OK(rec_hdr_decode(b, REC_HDR_LEN, &d, W));
		CHECK(d.codec == h.codec && d.raw_len == h.raw_len && d.stored_len == h.stored_len &&
		      d.pack_id == h.pack_id && ckpt_digest_eq(&d.digest, &h.digest));
		for (size_t n = 0; n < REC_HDR_LEN; n++)
			EXPECT_FAIL(rec_hdr_decode(b, n, &d, W), W, 0, "record truncated");
		for (size_t i = 0; i < REC_HDR_LEN; i++)
			for (int m = 0; m < 8; m++) {
				memcpy(c, b, REC_HDR_LEN);
				c[i] ^= (uint8_t)(1u << m);
				EXPECT_FAIL(rec_hdr_decode(c, REC_HDR_LEN, &d, W), W, 0, "record bit flip");
			}
	}
	struct rec_hdr base = cases[2];
	rec_hdr_encode(&base, b);
	memcpy(c, b, REC_HDR_LEN);
	c[3] = 'X';
	rec_fix(c);
	EXPECT_FAIL(rec_hdr_decode(c, REC_HDR_LEN, &(struct rec_hdr){0}, W), W, -CKPT_E_CORRUPT, "rec magic");
	/* Invalid fields with the checksum recomputed: each must hit the structural check. */
	struct {
		uint8_t codec;
		uint32_t raw, stored;
	} bad[] = {
		{CKPT_CODEC__COUNT, 100, 100}, {0xff, 100, 50},	 {CKPT_CODEC_RAW, 0, 0},
		{CKPT_CODEC_RAW, 100, 99},     {CKPT_CODEC_RAW, 100, 101},
		{CKPT_CODEC_RAW, CKPT_MAX_CHUNK + 1, CKPT_MAX_CHUNK + 1},
		{CKPT_CODEC_ZSTD, 100, 0},     {CKPT_CODEC_ZSTD, 100, (uint32_t)ckpt_codec_bound(100) + 1},
		{CKPT_CODEC_ZSTD, 0xffffffffu, 10}, {CKPT_CODEC_ZSTD_BG4, 10, 0xffffffffu},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		memcpy(c, b, REC_HDR_LEN);
		c[4] = bad[i].codec;
		put_le32(c + 24, bad[i].raw);
		put_le32(c + 28, bad[i].stored);
		rec_fix(c);
		struct rec_hdr d;
		EXPECT_FAIL(rec_hdr_decode(c, REC_HDR_LEN, &d, W), W, -CKPT_E_CORRUPT, "rec fields");
	}
}

/* ---- manifests: a generator ----------------------------------------------------------- */
struct gen {
	struct manifest m;
	size_t cap_meta, cap_t, cap_c, cap_r;
	uint64_t rng;
};

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	REQUIRE(q);
	return q;
}

static void gen_init(struct gen *g, uint64_t step, uint32_t cs, uint64_t seed)
{
	memset(g, 0, sizeof *g);
	g->m.version = CKPT_FORMAT_VERSION;
	g->m.step = step;
	g->m.time_ns = 1700000000123456789ll;
	g->m.chunk_size = cs;
	g->m.new_bytes = 123456;
	g->rng = seed;
	for (int i = 0; i < 16; i++)
		g->m.uuid[i] = (uint8_t)t_rand(&g->rng);
}

static void gen_meta(struct gen *g, const char *k, const char *v)
{
	if (g->m.n_meta == g->cap_meta) {
		g->cap_meta = g->cap_meta ? 2 * g->cap_meta : 8;
		g->m.meta = xrealloc(g->m.meta, g->cap_meta * sizeof *g->m.meta);
	}
	struct mf_meta *e = &g->m.meta[g->m.n_meta++];
	e->key = strdup(k);
	e->value = strdup(v);
	e->klen = (uint32_t)strlen(k);
	e->vlen = (uint32_t)strlen(v);
}

static uint32_t gen_chunk(struct gen *g, uint32_t raw_len, int dedup)
{
	struct manifest *m = &g->m;
	if (dedup && m->n_chunks && t_rand(&g->rng) % 3 == 0)
		for (uint32_t i = 0; i < m->n_chunks; i++)
			if (m->chunks[i].raw_len == raw_len)
				return i;
	if (m->n_chunks == g->cap_c) {
		g->cap_c = g->cap_c ? 2 * g->cap_c : 16;
		m->chunks = xrealloc(m->chunks, g->cap_c * sizeof *m->chunks);
	}
	struct mf_chunk *c = &m->chunks[m->n_chunks];
	memset(c, 0, sizeof *c);
	for (int i = 0; i < 16; i++)
		c->digest.b[i] = (uint8_t)t_rand(&g->rng);
	uint64_t r = t_rand(&g->rng);
	c->pack_id = (uint32_t)(r % 5) + 1;
	c->codec = (uint8_t)((r >> 8) % CKPT_CODEC__COUNT);
	c->flags = (uint8_t)((r >> 16) & MF_CHUNK_NEW);
	c->offset = PACK_HDR_LEN + 4096ull * ((r >> 20) % 100000);
	c->raw_len = raw_len;
	c->stored_len = c->codec == CKPT_CODEC_RAW ? raw_len
						   : 1 + (uint32_t)((r >> 40) % ckpt_codec_bound(raw_len));
	return m->n_chunks++;
}

static void gen_tensor(struct gen *g, const char *name, uint8_t dtype, unsigned ndim,
		       const uint64_t *shape, int dedup)
{
	struct manifest *m = &g->m;
	if (m->n_tensors == g->cap_t) {
		g->cap_t = g->cap_t ? 2 * g->cap_t : 16;
		m->tensors = xrealloc(m->tensors, g->cap_t * sizeof *m->tensors);
	}
	struct mf_tensor *t = &m->tensors[m->n_tensors++];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	t->name_len = (uint32_t)strlen(name);
	t->dtype = dtype;
	t->ndim = (uint8_t)ndim;
	t->shape = xrealloc(NULL, (ndim ? ndim : 1) * sizeof *t->shape);
	uint64_t n = ckpt_dtype_size(dtype);
	for (unsigned i = 0; i < ndim; i++) {
		t->shape[i] = shape[i];
		n *= shape[i];
	}
	t->nbytes = n;
	t->nrefs = n / m->chunk_size + (n % m->chunk_size != 0);
	t->first_ref = m->n_refs;
	for (uint64_t j = 0; j < t->nrefs; j++) {
		uint32_t want = (uint32_t)MIN((uint64_t)m->chunk_size, n - j * m->chunk_size);
		uint32_t ci = gen_chunk(g, want, dedup);
		if (m->n_refs == g->cap_r) {
			g->cap_r = g->cap_r ? 2 * g->cap_r : 64;
			m->refs = xrealloc(m->refs, g->cap_r * sizeof *m->refs);
		}
		m->refs[m->n_refs++] = ci;
	}
}

static void gen_free(struct gen *g)
{
	for (uint32_t i = 0; i < g->m.n_meta; i++) {
		free((char *)g->m.meta[i].key);
		free((char *)g->m.meta[i].value);
	}
	for (uint32_t i = 0; i < g->m.n_tensors; i++) {
		free((char *)g->m.tensors[i].name);
		free(g->m.tensors[i].shape);
	}
	free(g->m.meta);
	free(g->m.tensors);
	free(g->m.chunks);
	free(g->m.refs);
	memset(g, 0, sizeof *g);
}

static uint8_t *gen_encode(const struct gen *g, size_t *len)
{
	uint64_t n = manifest_encoded_len(&g->m);
	REQUIRE(n > 0);
	uint8_t *b = malloc(n);
	REQUIRE(b);
	manifest_encode(&g->m, b);
	*len = (size_t)n;
	return b;
}

/* Recomputes the length field and the trailer of a (possibly mutated) manifest. */
static void mf_fix(uint8_t *b, size_t len)
{
	if (len >= 24)
		put_le64(b + 16, len);
	if (len >= MF_TRAILER_LEN) {
		ckpt_digest d;
		ckpt_digest_of(b, len - MF_TRAILER_LEN, &d);
		memcpy(b + len - MF_TRAILER_LEN, d.b, 16);
	}
}

/* Decodes a copy (manifest_decode takes ownership of its buffer). */
static int mf_dec(const uint8_t *b, size_t len, struct manifest *m, const char *what)
{
	uint8_t *c = malloc(len ? len : 1);
	REQUIRE(c);
	if (len)
		memcpy(c, b, len);
	return manifest_decode(c, len, m, what);
}

/* Internal consistency of a successfully decoded manifest. Returns 1 when consistent. */
static int mf_consistent(const struct manifest *m, size_t len)
{
	const uint8_t *lo = m->buf, *hi = m->buf + len;
	uint64_t refs = 0;
	if (!valid_chunk_size_for_test(m->chunk_size))
		return 0;
	for (uint32_t i = 0; i < m->n_meta; i++) {
		const struct mf_meta *e = &m->meta[i];
		if ((const uint8_t *)e->key < lo || (const uint8_t *)e->key + e->klen >= hi ||
		    (const uint8_t *)e->value < lo || (const uint8_t *)e->value + e->vlen >= hi ||
		    strlen(e->key) != e->klen || strlen(e->value) != e->vlen || !e->klen)
			return 0;
	}
	for (uint32_t i = 0; i < m->n_chunks; i++) {
		const struct mf_chunk *c = &m->chunks[i];
		if (c->codec >= CKPT_CODEC__COUNT || !c->raw_len || c->raw_len > m->chunk_size ||
		    !c->stored_len || c->stored_len > ckpt_codec_bound(c->raw_len) || (c->offset & 4095) ||
		    c->offset < PACK_HDR_LEN || (c->codec == CKPT_CODEC_RAW && c->stored_len != c->raw_len))
			return 0;
	}
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const struct mf_tensor *t = &m->tensors[i];
		if ((const uint8_t *)t->name < lo || (const uint8_t *)t->name + t->name_len >= hi ||
		    strlen(t->name) != t->name_len || !t->name_len || t->ndim > CKPT_MAX_DIMS)
			return 0;
		uint64_t n = ckpt_dtype_size(t->dtype);
		if (!n)
			return 0;
		for (unsigned d = 0; d < t->ndim; d++)
			if (__builtin_mul_overflow(n, t->shape[d], &n))
				return 0;
		if (n != t->nbytes || t->first_ref != refs ||
		    t->nrefs != n / m->chunk_size + (n % m->chunk_size != 0))
			return 0;
		for (uint64_t j = 0; j < t->nrefs; j++) {
			uint32_t r = m->refs[t->first_ref + j];
			if (r >= m->n_chunks ||
			    m->chunks[r].raw_len != MIN((uint64_t)m->chunk_size, n - j * m->chunk_size))
				return 0;
		}
		refs += t->nrefs;
	}
	if (refs != m->n_refs)
		return 0;
	for (uint64_t i = 0; i < m->n_refs; i++)
		if (m->refs[i] >= m->n_chunks)
			return 0;
	return 1;
}

static int mf_equal(const struct manifest *a, const struct manifest *b)
{
	if (a->step != b->step || a->time_ns != b->time_ns || memcmp(a->uuid, b->uuid, 16) ||
	    a->chunk_size != b->chunk_size || a->new_bytes != b->new_bytes || a->n_meta != b->n_meta ||
	    a->n_tensors != b->n_tensors || a->n_chunks != b->n_chunks || a->n_refs != b->n_refs)
		return 0;
	for (uint32_t i = 0; i < a->n_meta; i++)
		if (a->meta[i].klen != b->meta[i].klen || a->meta[i].vlen != b->meta[i].vlen ||
		    strcmp(a->meta[i].key, b->meta[i].key) || strcmp(a->meta[i].value, b->meta[i].value))
			return 0;
	for (uint32_t i = 0; i < a->n_chunks; i++) {
		const struct mf_chunk *x = &a->chunks[i], *y = &b->chunks[i];
		if (!ckpt_digest_eq(&x->digest, &y->digest) || x->pack_id != y->pack_id ||
		    x->codec != y->codec || x->flags != y->flags || x->offset != y->offset ||
		    x->raw_len != y->raw_len || x->stored_len != y->stored_len)
			return 0;
	}
	for (uint32_t i = 0; i < a->n_tensors; i++) {
		const struct mf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
		if (x->name_len != y->name_len || strcmp(x->name, y->name) || x->dtype != y->dtype ||
		    x->ndim != y->ndim || x->nbytes != y->nbytes || x->first_ref != y->first_ref ||
		    x->nrefs != y->nrefs)
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

/* Byte offsets of a manifest's sections, as manifest_encode lays them out. */
struct layout {
	size_t meta0, chunks, refs, end;
	size_t tensor[8]; /* of the first 8 tensors */
};

static void mf_layout(const struct manifest *m, struct layout *L)
{
	size_t p = MF_HDR_LEN;
	L->meta0 = p;
	for (uint32_t i = 0; i < m->n_meta; i++)
		p += 8 + m->meta[i].klen + 1 + m->meta[i].vlen + 1;
	L->chunks = p;
	p += (size_t)m->n_chunks * MF_CHUNK_LEN;
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		if (i < 8)
			L->tensor[i] = p;
		p += 16 + 8 * (size_t)m->tensors[i].ndim + m->tensors[i].name_len + 1;
	}
	L->refs = p;
	p += 4 * (size_t)m->n_refs;
	L->end = p;
}

enum { NSAMPLES = 10 };

/* The sample manifests: each exercises a corner of the format. */
static void build_sample(struct gen *g, int which)
{
	static const uint8_t dts[] = {CKPT_DTYPE_BOOL, CKPT_DTYPE_U8, CKPT_DTYPE_BF16, CKPT_DTYPE_F16,
				      CKPT_DTYPE_F32, CKPT_DTYPE_I32, CKPT_DTYPE_F64, CKPT_DTYPE_U64,
				      CKPT_DTYPE_F8_E4M3};
	char name[256];
	switch (which) {
	case 0: /* nothing at all */
		gen_init(g, 0, CKPT_MIN_CHUNK, 1);
		break;
	case 1: { /* one scalar, one metadata entry with an empty value */
		gen_init(g, 1, CKPT_MIN_CHUNK, 2);
		gen_tensor(g, "s", CKPT_DTYPE_F64, 0, NULL, 0);
		gen_meta(g, "k", "");
		break;
	}
	case 2: { /* 0-byte tensors of several shapes */
		gen_init(g, 2, 1u << 20, 3);
		uint64_t z1[1] = {0}, z3[3] = {2, 0, 3}, z2[2] = {0, UINT64_MAX};
		gen_tensor(g, "empty", CKPT_DTYPE_F32, 1, z1, 0);
		gen_tensor(g, "empty3", CKPT_DTYPE_BOOL, 3, z3, 0);
		gen_tensor(g, "zero-times-max", CKPT_DTYPE_U64, 2, z2, 0);
		gen_tensor(g, "scalar.bf16", CKPT_DTYPE_BF16, 0, NULL, 0);
		break;
	}
	case 3: { /* metadata only */
		gen_init(g, 3, CKPT_MIN_CHUNK, 4);
		gen_meta(g, "lr", "0.001");
		gen_meta(g, "note", "unicode \xe2\x9c\x93 \"quoted\" \\ and\nnewline");
		gen_meta(g, "empty", "");
		gen_meta(g, "\xf0\x9f\x98\x80", "emoji key");
		break;
	}
	case 4: { /* the mixed one: multi-chunk tensors with tails, dedup, metadata */
		gen_init(g, 4, CKPT_MIN_CHUNK, 5);
		gen_meta(g, "epoch", "3");
		gen_meta(g, "config", "{\"layers\": 2}");
		for (int i = 0; i < 9; i++) {
			uint64_t sh[2] = {3 + (uint64_t)i, (CKPT_MIN_CHUNK / 7) + (uint64_t)i * 13};
			snprintf(name, sizeof name, "layer.%d.weight", i);
			gen_tensor(g, name, dts[i], 2, sh, 1);
		}
		uint64_t one[1] = {1}, exact[1] = {2 * CKPT_MIN_CHUNK};
		gen_tensor(g, "one", CKPT_DTYPE_U8, 1, one, 1);
		gen_tensor(g, "exact", CKPT_DTYPE_U8, 1, exact, 1);
		break;
	}
	case 5: { /* unusual names */
		gen_init(g, UINT64_MAX - 1, CKPT_MAX_CHUNK, 6);
		uint64_t sh[1] = {5};
		const char *names[] = {"x", " ", "a/b/../c", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
				       "tab\there", "new\nline", "quote\"back\\slash", "\x7f\x01\x1f"};
		for (size_t i = 0; i < ARRAY_SIZE(names); i++)
			gen_tensor(g, names[i], CKPT_DTYPE_I16, 1, sh, 1);
		break;
	}
	case 6: { /* a 65535-byte name (the longest allowed) and a long metadata value */
		gen_init(g, 6, CKPT_MIN_CHUNK, 7);
		char *big = malloc(65536);
		memset(big, 'n', 65535);
		big[65535] = 0;
		uint64_t sh[1] = {7};
		gen_tensor(g, big, CKPT_DTYPE_U8, 1, sh, 0);
		big[70] = 0;
		gen_tensor(g, big, CKPT_DTYPE_U8, 1, sh, 0);
		memset(big, 'v', 65535);
		big[65535] = 0;
		gen_meta(g, "long", big);
		free(big);
		break;
	}
	case 7: { /* many tensors */
		gen_init(g, 7, 1u << 22, 8);
		for (int i = 0; i < 3000; i++) {
			uint64_t sh[2] = {(uint64_t)(i % 13), (uint64_t)(i % 1031) * 97};
			snprintf(name, sizeof name, "model.layers.%d.mlp.w%d", i / 7, i % 7);
			gen_tensor(g, name, dts[i % ARRAY_SIZE(dts)], 2, sh, 1);
		}
		for (int i = 0; i < 100; i++) {
			char v[32];
			snprintf(name, sizeof name, "key%03d", i);
			snprintf(v, sizeof v, "value %d", i * i);
			gen_meta(g, name, v);
		}
		break;
	}
	case 8: { /* the most dimensions, huge logical sizes (many references to shared chunks) */
		gen_init(g, 8, CKPT_MAX_CHUNK, 9);
		uint64_t sh[CKPT_MAX_DIMS];
		for (int i = 0; i < CKPT_MAX_DIMS; i++)
			sh[i] = i % 5 == 0 ? 2 : 1;
		gen_tensor(g, "rank32", CKPT_DTYPE_F32, CKPT_MAX_DIMS, sh, 0);
		uint64_t huge[2] = {1ull << 20, (1ull << 20) + 3};
		gen_tensor(g, "1TiB", CKPT_DTYPE_U8, 2, huge, 1);
		break;
	}
	default: { /* random small ones */
		gen_init(g, 9, CKPT_MIN_CHUNK << (which % 3), (uint64_t)which * 1000);
		for (int i = 0; i < 20; i++) {
			unsigned nd = (unsigned)(t_rand(&g->rng) % 4);
			uint64_t sh[4];
			for (unsigned d = 0; d < nd; d++)
				sh[d] = t_rand(&g->rng) % 300;
			snprintf(name, sizeof name, "r%d", i);
			gen_tensor(g, name, dts[t_rand(&g->rng) % ARRAY_SIZE(dts)], nd, sh, 1);
		}
		gen_meta(g, "r", "1");
		break;
	}
	}
}

static void test_manifest_roundtrip(void)
{
	const char *W = "WHAT:manifest-rt";
	for (int s = 0; s < NSAMPLES; s++) {
		struct gen g;
		build_sample(&g, s);
		size_t len;
		uint8_t *b = gen_encode(&g, &len);
		struct layout L;
		mf_layout(&g.m, &L);
		CHECK(L.end + MF_TRAILER_LEN == len);
		struct manifest d;
		int rc = mf_dec(b, len, &d, W);
		CHECK_OK(rc);
		if (!rc) {
			CHECK(mf_equal(&g.m, &d));
			CHECK(mf_consistent(&d, len));
			/* Encoding the decoded manifest gives the same bytes. */
			uint64_t n2 = manifest_encoded_len(&d);
			CHECK(n2 == len);
			if (n2 == len) {
				uint8_t *b2 = malloc(len);
				manifest_encode(&d, b2);
				CHECK(!memcmp(b, b2, len));
				free(b2);
			}
			manifest_free(&d);
		}
		free(b);
		gen_free(&g);
	}
	/* manifest_free accepts an empty manifest and NULL. */
	manifest_free(NULL);
}

/* Every truncation (as is, and with the length field and trailer recomputed) and every single-byte
 * change must be rejected. Exhaustive on the small samples, sampled on the large ones. */
static void test_manifest_damage(void)
{
	const char *W = "WHAT:manifest-damage";
	uint64_t rng = 42;
	for (int s = 0; s < NSAMPLES; s++) {
		struct gen g;
		build_sample(&g, s);
		size_t len;
		uint8_t *b = gen_encode(&g, &len);
		uint8_t *c = malloc(len + 16);
		size_t step = len <= 8192 ? 1 : len / 1500 + 1;
		struct manifest d;
		for (size_t n = 0; n < len; n += (n < 200 || len - n < 200) ? 1 : step) {
			EXPECT_FAIL(mf_dec(b, n, &d, W), W, 0, "manifest truncated");
			/* Body cut short, trailer and length recomputed: structure checks must catch it. */
			if (n >= MF_HDR_LEN + MF_TRAILER_LEN) {
				memcpy(c, b, n - MF_TRAILER_LEN);
				mf_fix(c, n);
				EXPECT_FAIL(mf_dec(c, n, &d, W), W, -CKPT_E_CORRUPT, "manifest body cut");
			}
		}
		for (size_t i = 0; i < len; i += (i < 200 || len - i < 200) ? 1 : step) {
			uint8_t masks[3] = {0x01, 0x80, (uint8_t)(1 + t_rand(&rng) % 255)};
			for (int k = 0; k < 3; k++) {
				memcpy(c, b, len);
				c[i] ^= masks[k];
				EXPECT_FAIL(mf_dec(c, len, &d, W), W, 0, "manifest byte changed");
			}
		}
		/* Extended by junk: the length field no longer matches; with it fixed, the junk is
		 * "unexpected bytes" in the body. */
		memcpy(c, b, len);
		memset(c + len, 0, 16);
		EXPECT_FAIL(mf_dec(c, len + 16, &d, W), W, -CKPT_E_CORRUPT, "manifest extended");
		memcpy(c, b, len - MF_TRAILER_LEN);
		memset(c + len - MF_TRAILER_LEN, 0, 4);
		mf_fix(c, len + 4);
		EXPECT_FAIL(mf_dec(c, len + 4, &d, W), W, -CKPT_E_CORRUPT, "manifest trailing bytes");
		free(c);
		free(b);
		gen_free(&g);
	}
}

/* Decodes a patched copy of b (trailer recomputed) and expects a clean failure. */
static void bad_case(const uint8_t *b, size_t len, size_t off, int width, uint64_t v, int want,
		     const char *ctx)
{
	const char *W = "WHAT:manifest-structure";
	uint8_t *c = malloc(len);
	memcpy(c, b, len);
	REQUIRE(off + (size_t)width <= len);
	if (width == 1)
		c[off] = (uint8_t)v;
	else if (width == 2)
		put_le16(c + off, (uint16_t)v);
	else if (width == 4)
		put_le32(c + off, (uint32_t)v);
	else
		put_le64(c + off, v);
	if (off == 16 && width == 8) { /* the length field itself: recompute only the trailer */
		ckpt_digest dg;
		ckpt_digest_of(c, len - MF_TRAILER_LEN, &dg);
		memcpy(c + len - MF_TRAILER_LEN, dg.b, 16);
	} else {
		mf_fix(c, len);
	}
	struct manifest d;
	char what[160];
	snprintf(what, sizeof what, "%s (%s, offset %zu = %llu)", W, ctx, off, (unsigned long long)v);
	int rc = mf_dec(c, len, &d, W);
	if (!EXPECT_FAIL(rc, W, want, what) && rc == 0)
		manifest_free(&d);
	free(c);
}

static void test_manifest_structure(void)
{
	struct gen g;
	build_sample(&g, 4);
	size_t len;
	uint8_t *b = gen_encode(&g, &len);
	struct layout L;
	mf_layout(&g.m, &L);
	const struct manifest *m = &g.m;
	REQUIRE(m->n_meta >= 1 && m->n_tensors >= 2 && m->n_chunks >= 2 && m->n_refs >= 2);

	/* Header. */
	bad_case(b, len, 0, 1, 'c', -CKPT_E_CORRUPT, "magic");
	bad_case(b, len, 8, 4, 0, -CKPT_E_VERSION, "version 0");
	bad_case(b, len, 8, 4, CKPT_MANIFEST_VERSION + 1, -CKPT_E_VERSION, "future version");
	bad_case(b, len, 8, 4, 0xffffffffu, -CKPT_E_VERSION, "version max");
	bad_case(b, len, 12, 4, MF_HDR_LEN - 1, -CKPT_E_CORRUPT, "header length");
	bad_case(b, len, 12, 4, MF_HDR_LEN + 8, -CKPT_E_CORRUPT, "header length");
	uint64_t lens[] = {0, len - 1, len + 1, (uint64_t)len << 32, UINT64_MAX};
	for (size_t i = 0; i < ARRAY_SIZE(lens); i++)
		bad_case(b, len, 16, 8, lens[i], -CKPT_E_CORRUPT, "length field");
	bad_case(b, len, 24, 8, UINT64_MAX, -CKPT_E_CORRUPT, "step");
	uint32_t css[] = {0, 1, 4096, 65535, 65537, 1u << 27, 0x80000000u, CKPT_MIN_CHUNK * 2};
	for (size_t i = 0; i < ARRAY_SIZE(css); i++)
		bad_case(b, len, 56, 4, css[i], -CKPT_E_CORRUPT, "chunk size");
	/* Counts: one more than there is, and absurd values (no allocation may follow them). */
	uint64_t c32[] = {1, 1000, 1u << 20, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
	for (size_t i = 0; i < ARRAY_SIZE(c32); i++) {
		bad_case(b, len, 60, 4, m->n_meta + c32[i], -CKPT_E_CORRUPT, "n_meta");
		bad_case(b, len, 64, 4, m->n_tensors + c32[i], -CKPT_E_CORRUPT, "n_tensors");
		bad_case(b, len, 68, 4, m->n_chunks + c32[i], -CKPT_E_CORRUPT, "n_chunks");
	}
	bad_case(b, len, 60, 4, m->n_meta - 1, -CKPT_E_CORRUPT, "n_meta - 1");
	bad_case(b, len, 64, 4, m->n_tensors - 1, -CKPT_E_CORRUPT, "n_tensors - 1");
	bad_case(b, len, 68, 4, m->n_chunks - 1, -CKPT_E_CORRUPT, "n_chunks - 1");
	bad_case(b, len, 64, 4, 0, -CKPT_E_CORRUPT, "n_tensors 0");
	uint64_t c64[] = {m->n_refs - 1, m->n_refs + 1, 1ull << 32, 1ull << 62, (1ull << 62) + m->n_refs,
			  1ull << 63, (1ull << 63) + m->n_refs, (3ull << 62) + m->n_refs, UINT64_MAX,
			  UINT64_MAX / 4 + 1};
	for (size_t i = 0; i < ARRAY_SIZE(c64); i++)
		bad_case(b, len, 72, 8, c64[i], -CKPT_E_CORRUPT, "n_refs");

	/* Metadata entry 0: key/value lengths and terminators. */
	size_t me = L.meta0;
	uint32_t klen = m->meta[0].klen, vlen = m->meta[0].vlen;
	uint64_t l32[] = {0, 1, 0x7fffffffu, 0xfffffffeu, 0xffffffffu, 65536};
	for (size_t i = 0; i < ARRAY_SIZE(l32); i++) {
		if (l32[i] != klen)
			bad_case(b, len, me, 4, l32[i], -CKPT_E_CORRUPT, "meta klen");
		if (l32[i] != vlen)
			bad_case(b, len, me + 4, 4, l32[i], -CKPT_E_CORRUPT, "meta vlen");
	}
	bad_case(b, len, me, 4, klen + 1, -CKPT_E_CORRUPT, "meta klen + 1");
	bad_case(b, len, me + 4, 4, vlen - 1, -CKPT_E_CORRUPT, "meta vlen - 1");
	bad_case(b, len, me + 8, 1, 0, -CKPT_E_CORRUPT, "meta NUL in key");
	bad_case(b, len, me + 8 + klen, 1, 'x', -CKPT_E_CORRUPT, "meta key not terminated");
	bad_case(b, len, me + 8 + klen + 1 + vlen, 1, 'x', -CKPT_E_CORRUPT, "meta value not terminated");

	/* Chunk 0 and the last chunk: codec, flags, offset, lengths. */
	for (int which = 0; which < 2; which++) {
		uint32_t ci = which ? m->n_chunks - 1 : 0;
		size_t co = L.chunks + (size_t)ci * MF_CHUNK_LEN;
		const struct mf_chunk *ch = &m->chunks[ci];
		bad_case(b, len, co + 20, 1, CKPT_CODEC__COUNT, -CKPT_E_CORRUPT, "chunk codec");
		bad_case(b, len, co + 20, 1, 0xff, -CKPT_E_CORRUPT, "chunk codec");
		bad_case(b, len, co + 21, 1, 2, -CKPT_E_CORRUPT, "chunk flags");
		bad_case(b, len, co + 21, 1, 0x80, -CKPT_E_CORRUPT, "chunk flags");
		uint64_t offs[] = {0, 4095, PACK_HDR_LEN + 1, PACK_HDR_LEN + 2048, (UINT64_MAX >> 2) + 1,
				   UINT64_MAX & ~4095ull, 1ull << 63};
		for (size_t i = 0; i < ARRAY_SIZE(offs); i++)
			bad_case(b, len, co + 24, 8, offs[i], -CKPT_E_CORRUPT, "chunk offset");
		uint64_t raws[] = {0, m->chunk_size + 1ull, 0xffffffffu};
		for (size_t i = 0; i < ARRAY_SIZE(raws); i++)
			bad_case(b, len, co + 32, 4, raws[i], -CKPT_E_CORRUPT, "chunk raw_len");
		bad_case(b, len, co + 36, 4, 0, -CKPT_E_CORRUPT, "chunk stored_len 0");
		bad_case(b, len, co + 36, 4, ckpt_codec_bound(ch->raw_len) + 1, -CKPT_E_CORRUPT,
			 "chunk stored_len above bound");
		bad_case(b, len, co + 36, 4, 0xffffffffu, -CKPT_E_CORRUPT, "chunk stored_len max");
		/* raw codec: stored must equal raw */
		uint8_t *c = malloc(len);
		memcpy(c, b, len);
		c[co + 20] = CKPT_CODEC_RAW;
		put_le32(c + co + 36, ch->raw_len);
		bad_case(c, len, co + 36, 4, ch->raw_len - 1, -CKPT_E_CORRUPT, "raw stored != raw");
		free(c);
		/* A chunk of a different length than its place in the tensor needs. */
		if (ch->raw_len > 1)
			bad_case(b, len, co + 32, 4, ch->raw_len - 1, -CKPT_E_CORRUPT, "chunk wrong length");
	}

	/* Tensor 0: name length, dtype, rank, shape, size. */
	size_t to = L.tensor[0];
	const struct mf_tensor *t0 = &m->tensors[0];
	uint64_t nl[] = {0, t0->name_len + 1ull, t0->name_len - 1ull, 65536, 0x7fffffffu,
			 0xfffffffeu, 0xffffffffu};
	for (size_t i = 0; i < ARRAY_SIZE(nl); i++)
		bad_case(b, len, to, 4, nl[i], -CKPT_E_CORRUPT, "tensor name_len");
	uint8_t dt[] = {0, 16, 100, 255};
	for (size_t i = 0; i < ARRAY_SIZE(dt); i++)
		bad_case(b, len, to + 4, 1, dt[i], -CKPT_E_CORRUPT, "tensor dtype");
	uint8_t nd[] = {0, 1, 3, CKPT_MAX_DIMS + 1, 200, 255};
	for (size_t i = 0; i < ARRAY_SIZE(nd); i++)
		bad_case(b, len, to + 5, 1, nd[i], -CKPT_E_CORRUPT, "tensor ndim");
	bad_case(b, len, to + 8, 8, t0->nbytes + 1, -CKPT_E_CORRUPT, "tensor nbytes + 1");
	bad_case(b, len, to + 8, 8, 0, -CKPT_E_CORRUPT, "tensor nbytes 0");
	bad_case(b, len, to + 8, 8, UINT64_MAX, -CKPT_E_CORRUPT, "tensor nbytes max");
	/* shapes whose product overflows: with nbytes set to the wrapped product too */
	uint64_t ovf[][2] = {{1ull << 63, 4}, {1ull << 32, 1ull << 32}, {UINT64_MAX, UINT64_MAX},
			     {(1ull << 62) + 1, 8}};
	for (size_t i = 0; i < ARRAY_SIZE(ovf); i++) {
		uint8_t *c = malloc(len);
		memcpy(c, b, len);
		put_le64(c + to + 16, ovf[i][0]);
		uint64_t wrapped = ovf[i][0] * ovf[i][1] * ckpt_dtype_size(t0->dtype);
		put_le64(c + to + 8, wrapped);
		bad_case(c, len, to + 24, 8, ovf[i][1], -CKPT_E_CORRUPT, "shape overflow");
		free(c);
	}
	bad_case(b, len, to + 16, 8, t0->shape[0] + 1, -CKPT_E_CORRUPT, "shape changed");
	bad_case(b, len, to + 16 + 8 * t0->ndim, 1, 0, -CKPT_E_CORRUPT, "NUL in name");
	bad_case(b, len, to + 16 + 8 * t0->ndim + t0->name_len, 1, 'x', -CKPT_E_CORRUPT,
		 "name not terminated");
	/* A tensor that needs more references than there are (nbytes up, shape to match). */
	{
		uint8_t *c = malloc(len);
		memcpy(c, b, len);
		put_le64(c + to + 16, t0->shape[0] * 1000);
		bad_case(c, len, to + 8, 8, t0->nbytes * 1000, -CKPT_E_CORRUPT, "needs more refs");
		free(c);
	}

	/* References. */
	uint64_t rv[] = {m->n_chunks, m->n_chunks + 1ull, 0x7fffffffu, 0xffffffffu};
	for (size_t i = 0; i < ARRAY_SIZE(rv); i++) {
		bad_case(b, len, L.refs, 4, rv[i], -CKPT_E_CORRUPT, "ref out of range");
		bad_case(b, len, L.end - 4, 4, rv[i], -CKPT_E_CORRUPT, "last ref out of range");
	}
	/* A reference to an existing chunk of another length. */
	for (uint32_t k = 0; k < m->n_chunks; k++)
		if (m->chunks[k].raw_len != m->chunks[m->refs[0]].raw_len) {
			bad_case(b, len, L.refs, 4, k, -CKPT_E_CORRUPT, "ref to a chunk of another length");
			break;
		}
	free(b);
	gen_free(&g);
}

/* n_refs so large that 4 * n_refs wraps around 2^64, with tensors whose reference counts really
 * add up to it (2^14 tensors of 2^64-1 bytes at 64 KiB chunks need 2^48 references each): the
 * count check must still reject it before the references are read. */
static void test_manifest_refs_overflow(void)
{
	const char *W = "WHAT:refs-overflow";
	enum { NT = 1 << 14, K = 4 };
	size_t cap = MF_HDR_LEN + MF_CHUNK_LEN + (size_t)(NT + 1) * 48 + 4 * K + MF_TRAILER_LEN;
	uint8_t *b = calloc(1, cap), *p;
	REQUIRE(b);
	memcpy(b, "CKPTMANI", 8);
	put_le32(b + 8, CKPT_FORMAT_VERSION);
	put_le32(b + 12, MF_HDR_LEN);
	put_le64(b + 24, 5);
	put_le32(b + 56, CKPT_MIN_CHUNK);
	put_le32(b + 60, 0);
	put_le32(b + 64, NT + 1);
	put_le32(b + 68, 1);
	put_le64(b + 72, (1ull << 62) + K);
	p = b + MF_HDR_LEN;
	/* one raw chunk of a full chunk's length */
	put_le32(p + 16, 1);
	put_le64(p + 24, PACK_HDR_LEN);
	put_le32(p + 32, CKPT_MIN_CHUNK);
	put_le32(p + 36, CKPT_MIN_CHUNK);
	p += MF_CHUNK_LEN;
	for (int i = 0; i <= NT; i++) {
		char nm[16];
		int n = snprintf(nm, sizeof nm, "t%05d", i);
		put_le32(p, (uint32_t)n);
		p[4] = CKPT_DTYPE_U8;
		p[5] = 1;
		uint64_t nb = i < NT ? UINT64_MAX : (uint64_t)K * CKPT_MIN_CHUNK;
		put_le64(p + 8, nb);
		put_le64(p + 16, nb);
		memcpy(p + 24, nm, (size_t)n + 1);
		p += 24 + n + 1;
	}
	for (int i = 0; i < K; i++, p += 4)
		put_le32(p, 0);
	size_t len = (size_t)(p - b) + MF_TRAILER_LEN;
	mf_fix(b, len);
	struct manifest d;
	int rc = mf_dec(b, len, &d, W);
	EXPECT_FAIL(rc, W, -CKPT_E_CORRUPT, "n_refs * 4 wraps");
	/* It must be the count check that rejects it, not a reference read past the buffer (the
	 * trailer's bytes) that happens to be out of range. */
	if (rc < 0 && !strstr(ckpt_errmsg(), "exceed")) {
		t_failures++;
		fprintf(stderr, "refs overflow: rejected late (%s): the n_refs bound check overflows\n",
			ckpt_errmsg());
	}
	if (rc == 0)
		manifest_free(&d);
	free(b);
}

/* Deterministic mutations of valid manifests; decode succeeds consistently or fails cleanly. */
static void test_manifest_mutations(void)
{
	const char *W = "WHAT:manifest-mutation";
	static const int bases[] = {0, 1, 2, 3, 4, 5, 9};
	struct {
		uint8_t *b;
		size_t len;
	} base[ARRAY_SIZE(bases)];
	for (size_t i = 0; i < ARRAY_SIZE(bases); i++) {
		struct gen g;
		build_sample(&g, bases[i]);
		base[i].b = gen_encode(&g, &base[i].len);
		gen_free(&g);
	}
	uint64_t rng = 0x5eed;
	unsigned long ok = 0, bad = 0;
	const uint64_t interesting[] = {0, 1, 2, 3, 4, 7, 8, 16, 17, 32, 33, 40, 64, 96, 255, 4095, 4096,
					65535, 65536, 65537, 0x7fffffff, 0x80000000u, 0xfffffffeu,
					0xffffffffu, 1ull << 32, 1ull << 62, 1ull << 63, UINT64_MAX};
	for (int it = 0; it < 6000; it++) {
		size_t bi = t_rand(&rng) % ARRAY_SIZE(bases);
		size_t len = base[bi].len, cap = len + 64;
		uint8_t *c = malloc(cap);
		memcpy(c, base[bi].b, len);
		int nmut = 1 + (int)(t_rand(&rng) % 4);
		for (int k = 0; k < nmut; k++) {
			uint64_t r = t_rand(&rng);
			size_t pos = len ? (size_t)(t_rand(&rng) % len) : 0;
			switch (r % 7) {
			case 0: /* bit flip */
				if (len)
					c[pos] ^= (uint8_t)(1u << (r >> 8) % 8);
				break;
			case 1: /* byte set */
				if (len)
					c[pos] = (uint8_t)(r >> 8);
				break;
			case 2: { /* insertion */
				size_t n = 1 + (r >> 8) % 8;
				if (len + n > cap)
					break;
				memmove(c + pos + n, c + pos, len - pos);
				for (size_t j = 0; j < n; j++)
					c[pos + j] = (uint8_t)(r >> (16 + j));
				len += n;
				break;
			}
			case 3: { /* deletion */
				size_t n = 1 + (r >> 8) % 8;
				if (pos + n > len)
					n = len - pos;
				memmove(c + pos, c + pos + n, len - pos - n);
				len -= n;
				break;
			}
			case 4: { /* 32-bit field overwrite, aligned like the fields are */
				size_t p4 = pos & ~(size_t)3;
				if (p4 + 4 <= len)
					put_le32(c + p4, (uint32_t)interesting[(r >> 8) % ARRAY_SIZE(interesting)]);
				break;
			}
			case 5: { /* 64-bit field overwrite */
				size_t p8 = pos & ~(size_t)7;
				if (p8 + 8 <= len)
					put_le64(c + p8, interesting[(r >> 8) % ARRAY_SIZE(interesting)]);
				break;
			}
			case 6: { /* small arithmetic on a 32-bit value (an off-by-one count or length) */
				if (pos + 4 <= len)
					put_le32(c + pos, get_le32(c + pos) + (uint32_t)((r >> 8) % 5) - 2);
				break;
			}
			}
		}
		int fixed = t_rand(&rng) % 8 != 0;
		if (fixed)
			mf_fix(c, len);
		int same = len == base[bi].len && !memcmp(c, base[bi].b, len);
		struct manifest d;
		int rc = mf_dec(c, len, &d, W);
		if (rc == 0) {
			ok++;
			if (!mf_consistent(&d, len)) {
				t_failures++;
				fprintf(stderr, "mutation %d: decoded an inconsistent manifest\n", it);
			}
			if (!fixed && !same) {
				t_failures++;
				fprintf(stderr, "mutation %d: changed manifest accepted without its trailer\n", it);
			}
			manifest_free(&d);
		} else {
			bad++;
			EXPECT_FAIL(rc, W, 0, "mutation");
		}
		free(c);
	}
	printf("mutations: %lu decoded consistently, %lu rejected\n", ok, bad);
	CHECK(ok > 0 && bad > 0);
	for (size_t i = 0; i < ARRAY_SIZE(bases); i++)
		free(base[i].b);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
#ifndef T_BIG_SHADOW
	/* A decoder that trusts a count and asks for gigabytes gets NULL here (and fails the test
	 * by returning -CKPT_E_NOMEM) instead of quietly succeeding on a big machine. */
	struct rlimit rl = {1ull << 30, 1ull << 30};
	struct rlimit old;
	if (getrlimit(RLIMIT_AS, &old) == 0 && (old.rlim_max == RLIM_INFINITY || old.rlim_max > rl.rlim_max))
		setrlimit(RLIMIT_AS, &rl);
#endif
	test_store_hdr();
	test_pack_hdr();
	test_rec_hdr();
	test_manifest_roundtrip();
	test_manifest_damage();
	test_manifest_structure();
	test_manifest_refs_overflow();
	test_manifest_mutations();
	return t_done();
}
