/* On-disk structures (lib/format.c): round trips of the store header, pack header, record header
 * and manifests, and rejection of everything else: every truncation, every single-byte change,
 * bad magic, future versions, wrong length fields, out-of-range counts, lengths, shapes, offsets
 * and references (with the manifest trailer recomputed so that the structural checks run), and a
 * deterministic mutation loop. Every rejection must be a negative CKPT_E_* code whose message names
 * the `what` argument; a decoder must never crash, read out of bounds (run under ASan too) or try a
 * huge allocation (outside ASan the address space is limited, so such an attempt would show up as
 * -CKPT_E_NOMEM, which is counted as a failure here). */
#include "helpers.h"

#include <sys/resource.h>

#include "codec.h"
#include "common.h"
#include "format.h"
#include "hash.h"

#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
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
