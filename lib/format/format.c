/* On-disk structures, little-endian, as specified in docs/format.md. Decoders trust nothing: every
 * count is bounded by the bytes that remain before it is used to allocate. */
#include "format/format.h"

#include <stdlib.h>

#include "format/codec.h"
#include "common/common.h"

static const uint8_t STORE_MAGIC[8] = "CKPTSTOR";
static const uint8_t PACK_MAGIC[8] = "CKPTPACK";
static const uint8_t REC_MAGIC[4] = "CKRC";
static const uint8_t MF_MAGIC[8] = "CKPTMANI";

/* ---- store header ---------------------------------------------------------------------- */
void store_hdr_encode(const struct store_hdr *h, uint8_t out[STORE_HDR_LEN])
{
	memset(out, 0, STORE_HDR_LEN);
	memcpy(out, STORE_MAGIC, 8);
	put_le32(out + 8, h->version);
	put_le32(out + 12, STORE_HDR_LEN);
	memcpy(out + 16, h->uuid, 16);
	put_le32(out + 32, h->chunk_size);
	out[36] = h->codec;
	out[37] = h->zstd_level;
	put_le64(out + 40, (uint64_t)h->created);
	put_le64(out + 56, ckpt_checksum64(out, 56));
}

static int valid_chunk_size(uint32_t c)
{
	return c >= CKPT_MIN_CHUNK && c <= CKPT_MAX_CHUNK && !(c & (c - 1));
}

int store_hdr_decode(const uint8_t *buf, size_t len, struct store_hdr *h, const char *what)
{
	if (len < STORE_HDR_LEN)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: store header truncated (%zu of %d bytes)", what,
				 len, STORE_HDR_LEN);
	if (memcmp(buf, STORE_MAGIC, 8))
		return ckpt_fail(CKPT_E_CORRUPT, "%s: not a libckpt store header (bad magic)", what);
	h->version = get_le32(buf + 8);
	if (h->version == 0 || h->version > CKPT_FORMAT_VERSION)
		return ckpt_fail(CKPT_E_VERSION, "%s: store format version %u (this libckpt reads 1 to %d)",
				 what, h->version, CKPT_FORMAT_VERSION);
	if (get_le32(buf + 12) != STORE_HDR_LEN)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: bad store header length %u", what, get_le32(buf + 12));
	if (get_le64(buf + 56) != ckpt_checksum64(buf, 56))
		return ckpt_fail(CKPT_E_CHECKSUM, "%s: store header checksum mismatch", what);
	memcpy(h->uuid, buf + 16, 16);
	h->chunk_size = get_le32(buf + 32);
	h->codec = buf[36];
	h->zstd_level = buf[37];
	h->created = (int64_t)get_le64(buf + 40);
	if (!valid_chunk_size(h->chunk_size) || h->codec > CKPT_COMPRESS_ZSTD || h->zstd_level > 22)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: store header has invalid settings", what);
	return 0;
}

/* ---- pack header ----------------------------------------------------------------------- */
void pack_hdr_encode(const struct pack_hdr *h, uint8_t out[PACK_HDR_LEN])
{
	memset(out, 0, PACK_HDR_LEN);
	memcpy(out, PACK_MAGIC, 8);
	put_le32(out + 8, h->version);
	put_le32(out + 12, PACK_HDR_LEN);
	memcpy(out + 16, h->uuid, 16);
	put_le32(out + 32, h->pack_id);
	put_le64(out + 40, (uint64_t)h->created);
	put_le64(out + 48, h->nonce);
	put_le64(out + 56, ckpt_checksum64(out, 56));
}

int pack_hdr_decode(const uint8_t *buf, size_t len, struct pack_hdr *h, const char *what)
{
	/* The whole 4 KiB block is the header (fixed by tests/unit/format/t-format): a shorter buffer is
	 * truncated, and the padding after the checksummed 64 bytes must be zero, or damage there
	 * would go unnoticed. */
	if (len < PACK_HDR_LEN)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: pack header truncated (%zu of %d bytes)", what,
				 len, PACK_HDR_LEN);
	if (memcmp(buf, PACK_MAGIC, 8))
		return ckpt_fail(CKPT_E_CORRUPT, "%s: not a pack file (bad magic)", what);
	h->version = get_le32(buf + 8);
	if (h->version == 0 || h->version > CKPT_FORMAT_VERSION)
		return ckpt_fail(CKPT_E_VERSION, "%s: pack format version %u not supported", what,
				 h->version);
	if (get_le32(buf + 12) != PACK_HDR_LEN)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: bad pack header length", what);
	if (get_le64(buf + 56) != ckpt_checksum64(buf, 56))
		return ckpt_fail(CKPT_E_CHECKSUM, "%s: pack header checksum mismatch", what);
	for (size_t i = 64; i < PACK_HDR_LEN; i++)
		if (buf[i])
			return ckpt_fail(CKPT_E_CORRUPT, "%s: pack header padding damaged (byte %zu)",
					 what, i);
	memcpy(h->uuid, buf + 16, 16);
	h->pack_id = get_le32(buf + 32);
	h->created = (int64_t)get_le64(buf + 40);
	h->nonce = get_le64(buf + 48);
	return 0;
}

/* ---- record header --------------------------------------------------------------------- */
void rec_hdr_encode(const struct rec_hdr *h, uint8_t out[REC_HDR_LEN])
{
	memset(out, 0, REC_HDR_LEN);
	memcpy(out, REC_MAGIC, 4);
	out[4] = h->codec;
	memcpy(out + 8, h->digest.b, 16);
	put_le32(out + 24, h->raw_len);
	put_le32(out + 28, h->stored_len);
	put_le32(out + 32, h->pack_id);
	put_le64(out + 56, ckpt_checksum64(out, 56));
}

int rec_hdr_decode(const uint8_t *buf, size_t len, struct rec_hdr *h, const char *what)
{
	if (len < REC_HDR_LEN)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: record header truncated", what);
	if (memcmp(buf, REC_MAGIC, 4))
		return ckpt_fail(CKPT_E_CORRUPT, "%s: bad record magic", what);
	if (get_le64(buf + 56) != ckpt_checksum64(buf, 56))
		return ckpt_fail(CKPT_E_CHECKSUM, "%s: record header checksum mismatch", what);
	h->codec = buf[4];
	memcpy(h->digest.b, buf + 8, 16);
	h->raw_len = get_le32(buf + 24);
	h->stored_len = get_le32(buf + 28);
	h->pack_id = get_le32(buf + 32);
	if (h->codec >= CKPT_CODEC__COUNT || h->raw_len == 0 || h->raw_len > CKPT_MAX_CHUNK ||
	    h->stored_len == 0 || h->stored_len > ckpt_codec_bound(h->raw_len) ||
	    (h->codec == CKPT_CODEC_RAW && h->stored_len != h->raw_len))
		return ckpt_fail(CKPT_E_CORRUPT, "%s: record header has invalid lengths or codec", what);
	return 0;
}

/* ---- manifest -------------------------------------------------------------------------- */
static uint64_t tensor_rec_len(const struct mf_tensor *t)
{
	return 4 + 1 + 1 + 2 + 8 + 8ull * t->ndim + t->name_len + 1;
}

uint64_t manifest_encoded_len(const struct manifest *m)
{
	uint64_t n = MF_HDR_LEN + MF_TRAILER_LEN;
	for (uint32_t i = 0; i < m->n_meta; i++)
		n += 8 + (uint64_t)m->meta[i].klen + 1 + m->meta[i].vlen + 1;
	n += (uint64_t)m->n_chunks * MF_CHUNK_LEN;
	for (uint32_t i = 0; i < m->n_tensors; i++)
		n += tensor_rec_len(&m->tensors[i]);
	n += 4 * m->n_refs;
	return n > MF_MAX_LEN ? 0 : n;
}

void manifest_encode(const struct manifest *m, uint8_t *out)
{
	uint64_t len = manifest_encoded_len(m);
	uint8_t *p = out;
	memset(p, 0, MF_HDR_LEN);
	memcpy(p, MF_MAGIC, 8);
	/* Version 2 or 3 only where the manifest needs it (a multi-rank global manifest; one with
	 * flattened ranges), so that older readers keep reading what they can. */
	put_le32(p + 8, m->version >= CKPT_MANIFEST_V_DIST && m->version <= CKPT_MANIFEST_VERSION ?
				m->version : CKPT_FORMAT_VERSION);
	put_le32(p + 12, MF_HDR_LEN);
	put_le64(p + 16, len);
	put_le64(p + 24, m->step);
	put_le64(p + 32, (uint64_t)m->time_ns);
	memcpy(p + 40, m->uuid, 16);
	put_le32(p + 56, m->chunk_size);
	put_le32(p + 60, m->n_meta);
	put_le32(p + 64, m->n_tensors);
	put_le32(p + 68, m->n_chunks);
	put_le64(p + 72, m->n_refs);
	put_le64(p + 80, m->new_bytes);
	p += MF_HDR_LEN;
	for (uint32_t i = 0; i < m->n_meta; i++) {
		const struct mf_meta *e = &m->meta[i];
		put_le32(p, e->klen);
		put_le32(p + 4, e->vlen);
		p += 8;
		memcpy(p, e->key, e->klen);
		p[e->klen] = 0;
		p += e->klen + 1;
		memcpy(p, e->value, e->vlen);
		p[e->vlen] = 0;
		p += e->vlen + 1;
	}
	for (uint32_t i = 0; i < m->n_chunks; i++) {
		const struct mf_chunk *c = &m->chunks[i];
		memcpy(p, c->digest.b, 16);
		put_le32(p + 16, c->pack_id);
		p[20] = c->codec;
		p[21] = c->flags;
		put_le16(p + 22, 0);
		put_le64(p + 24, c->offset);
		put_le32(p + 32, c->raw_len);
		put_le32(p + 36, c->stored_len);
		p += MF_CHUNK_LEN;
	}
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const struct mf_tensor *t = &m->tensors[i];
		put_le32(p, t->name_len);
		p[4] = t->dtype;
		p[5] = t->ndim;
		put_le16(p + 6, 0);
		put_le64(p + 8, t->nbytes);
		p += 16;
		for (unsigned d = 0; d < t->ndim; d++, p += 8)
			put_le64(p, t->shape[d]);
		memcpy(p, t->name, t->name_len);
		p[t->name_len] = 0;
		p += t->name_len + 1;
	}
	for (uint64_t i = 0; i < m->n_refs; i++, p += 4)
		put_le32(p, m->refs[i]);
	ckpt_digest d;
	ckpt_digest_of(out, (size_t)(p - out), &d);
	memcpy(p, d.b, 16);
}

void manifest_free(struct manifest *m)
{
	if (!m)
		return;
	free(m->buf);
	free(m->alloc);
	free(m->meta);
	memset(m, 0, sizeof *m);
}

/* A bounds-checked cursor over the manifest bytes. */
struct cur {
	const uint8_t *p, *end;
};

static int take(struct cur *c, uint64_t n, const uint8_t **out)
{
	if (n > (uint64_t)(c->end - c->p))
		return -1;
	*out = c->p;
	c->p += n;
	return 0;
}

/* A string of len bytes followed by NUL, with no NUL inside (names are C strings). */
static int take_str(struct cur *c, uint32_t len, const char **out)
{
	const uint8_t *s;
	if (take(c, (uint64_t)len + 1, &s) || s[len] != 0 || memchr(s, 0, len))
		return -1;
	*out = (const char *)s;
	return 0;
}

static int mul_ovf(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r);
}

/* The decoder's stages, each returning 0 or a negative CKPT_E_* code with a message naming the
 * manifest (what) and the entry. BAD is a corrupt manifest. */
#define BAD(...) return ckpt_fail(CKPT_E_CORRUPT, __VA_ARGS__)

/* Fixed header and trailer: magic, version, lengths, checksum, then the header fields. */
static int mf_decode_header(const uint8_t *buf, size_t len, struct manifest *m, const char *what)
{
	if (len < MF_HDR_LEN + MF_TRAILER_LEN)
		BAD("%s: manifest truncated (%zu bytes)", what, len);
	if (memcmp(buf, MF_MAGIC, 8))
		BAD("%s: not a manifest (bad magic)", what);
	m->version = get_le32(buf + 8);
	if (m->version == 0 || m->version > CKPT_MANIFEST_VERSION)
		return ckpt_fail(CKPT_E_VERSION, "%s: manifest format version %u not supported (max %d)",
				 what, m->version, CKPT_MANIFEST_VERSION);
	if (get_le32(buf + 12) != MF_HDR_LEN)
		BAD("%s: bad manifest header length", what);
	if (get_le64(buf + 16) != len)
		BAD("%s: manifest length field %llu but file has %zu bytes (truncated or extended)",
		    what, (unsigned long long)get_le64(buf + 16), len);
	ckpt_digest d;
	ckpt_digest_of(buf, len - MF_TRAILER_LEN, &d);
	if (memcmp(d.b, buf + len - MF_TRAILER_LEN, 16))
		return ckpt_fail(CKPT_E_CHECKSUM, "%s: manifest checksum mismatch (file damaged)", what);
	m->step = get_le64(buf + 24);
	m->time_ns = (int64_t)get_le64(buf + 32);
	memcpy(m->uuid, buf + 40, 16);
	m->chunk_size = get_le32(buf + 56);
	m->n_meta = get_le32(buf + 60);
	m->n_tensors = get_le32(buf + 64);
	m->n_chunks = get_le32(buf + 68);
	m->n_refs = get_le64(buf + 72);
	m->new_bytes = get_le64(buf + 80);
	if (!valid_chunk_size(m->chunk_size))
		BAD("%s: invalid chunk size %u", what, m->chunk_size);
	if (m->step == UINT64_MAX)
		BAD("%s: invalid step", what);
	return 0;
}

static int mf_decode_meta(struct cur *c, struct manifest *m, const char *what)
{
	m->meta = calloc(m->n_meta ? m->n_meta : 1, sizeof *m->meta);
	if (!m->meta)
		return ckpt_fail(CKPT_E_NOMEM, "%s: out of memory", what);
	for (uint32_t i = 0; i < m->n_meta; i++) {
		const uint8_t *h;
		if (take(c, 8, &h))
			BAD("%s: metadata entry %u truncated", what, i);
		m->meta[i].klen = get_le32(h);
		m->meta[i].vlen = get_le32(h + 4);
		if (take_str(c, m->meta[i].klen, &m->meta[i].key) ||
		    take_str(c, m->meta[i].vlen, &m->meta[i].value) || m->meta[i].klen == 0)
			BAD("%s: metadata entry %u is malformed", what, i);
	}
	return 0;
}

static int mf_decode_chunks(struct cur *c, struct manifest *m, const char *what)
{
	for (uint32_t i = 0; i < m->n_chunks; i++) {
		const uint8_t *p;
		if (take(c, MF_CHUNK_LEN, &p))
			BAD("%s: chunk table truncated", what);
		struct mf_chunk *ch = &m->chunks[i];
		memcpy(ch->digest.b, p, 16);
		ch->pack_id = get_le32(p + 16);
		ch->codec = p[20];
		ch->flags = p[21];
		ch->offset = get_le64(p + 24);
		ch->raw_len = get_le32(p + 32);
		ch->stored_len = get_le32(p + 36);
		if (ch->codec >= CKPT_CODEC__COUNT || ch->raw_len == 0 || ch->raw_len > m->chunk_size ||
		    ch->stored_len == 0 || ch->stored_len > ckpt_codec_bound(ch->raw_len) ||
		    (ch->codec == CKPT_CODEC_RAW && ch->stored_len != ch->raw_len) ||
		    ch->offset < PACK_HDR_LEN || (ch->offset & 4095) || (ch->flags & ~MF_CHUNK_NEW) ||
		    ch->offset > (UINT64_MAX >> 2))
			BAD("%s: chunk %u has invalid location or lengths", what, i);
	}
	return 0;
}

/* One tensor entry: dtype, rank, shape (into shapes[*shape_used..shape_cap)), name; its chunk
 * references start at *next_ref. */
static int mf_decode_tensor(struct cur *c, struct manifest *m, uint32_t i, uint64_t *shapes,
			    size_t shape_cap, size_t *shape_used, uint64_t *next_ref, const char *what)
{
	const uint8_t *p;
	struct mf_tensor *t = &m->tensors[i];
	if (take(c, 16, &p))
		BAD("%s: tensor %u truncated", what, i);
	t->name_len = get_le32(p);
	t->dtype = p[4];
	t->ndim = p[5];
	t->nbytes = get_le64(p + 8);
	size_t esz = ckpt_dtype_size(t->dtype);
	if (!esz || t->ndim > CKPT_MAX_DIMS || t->name_len == 0 || t->name_len > 65535)
		BAD("%s: tensor %u has invalid dtype, rank or name length", what, i);
	const uint8_t *sp;
	if (take(c, 8ull * t->ndim, &sp) || *shape_used + t->ndim > shape_cap)
		BAD("%s: tensor %u shape truncated", what, i);
	t->shape = shapes + *shape_used;
	*shape_used += t->ndim;
	uint64_t n = esz;
	for (unsigned dd = 0; dd < t->ndim; dd++) {
		t->shape[dd] = get_le64(sp + 8 * dd);
		if (mul_ovf(n, t->shape[dd], &n))
			BAD("%s: tensor %u shape overflows", what, i);
	}
	if (n != t->nbytes)
		BAD("%s: tensor %u size %llu does not match its shape and dtype", what, i,
		    (unsigned long long)t->nbytes);
	if (take_str(c, t->name_len, &t->name))
		BAD("%s: tensor %u name is malformed", what, i);
	t->first_ref = *next_ref;
	t->nrefs = t->nbytes / m->chunk_size + (t->nbytes % m->chunk_size != 0);
	*next_ref += t->nrefs;
	if (*next_ref > m->n_refs)
		BAD("%s: tensors need more chunk references than the manifest has", what);
	return 0;
}

/* The reference table, which must end the body, and the length every reference's position needs. */
static int mf_decode_refs(struct cur *c, struct manifest *m, const char *what)
{
	const uint8_t *rp;
	if (take(c, 4 * m->n_refs, &rp))
		BAD("%s: chunk references truncated", what);
	for (uint64_t i = 0; i < m->n_refs; i++) {
		m->refs[i] = get_le32(rp + 4 * i);
		if (m->refs[i] >= m->n_chunks)
			BAD("%s: chunk reference %llu out of range", what, (unsigned long long)i);
	}
	if (c->p != c->end)
		BAD("%s: %zu unexpected bytes after the chunk references", what, (size_t)(c->end - c->p));
	for (uint32_t i = 0; i < m->n_tensors; i++) {
		const struct mf_tensor *t = &m->tensors[i];
		for (uint64_t j = 0; j < t->nrefs; j++) {
			uint64_t want = MIN((uint64_t)m->chunk_size, t->nbytes - j * m->chunk_size);
			if (m->chunks[m->refs[t->first_ref + j]].raw_len != want)
				BAD("%s: tensor '%s' chunk %llu has the wrong length", what, t->name,
				    (unsigned long long)j);
		}
	}
	return 0;
}
#undef BAD

/* A multi-rank manifest (version 2 or 3) states its world size: without it, a reader that goes
 * by the tensors would take the shards NAME@R for whole tensors (verify and export did) while
 * the box reader refuses the shard tables, so every reader refuses it here, as damage. Its value
 * is lib/dist's to check. */
static int mf_check_world(const struct manifest *m, const char *what)
{
	if (m->version < CKPT_MANIFEST_V_DIST)
		return 0;
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (!strcmp(m->meta[i].key, MF_DIST_WORLD))
			return 0;
	return ckpt_fail(CKPT_E_CORRUPT, "%s: version %u (multi-rank) manifest without %s", what,
			 m->version, MF_DIST_WORLD);
}

/* Decodes the body after the header: entry counts bounded by the size, one block for chunks,
 * tensors, shapes and references, then each table in file order. */
static int mf_decode_body(uint8_t *buf, size_t len, struct manifest *m, const char *what)
{
	struct cur c = {buf + MF_HDR_LEN, buf + len - MF_TRAILER_LEN};
	uint64_t avail = (uint64_t)(c.end - c.p);
	/* Each entry takes at least this many bytes, so these bounds keep allocations honest.
	 * n_refs is 64-bit: "n_refs * 4 > avail" wrapped for n_refs >= 2^62 and let the reference
	 * loop run past the buffer, hence the division (fixed by tests/unit/format/t-format). */
	if ((uint64_t)m->n_meta * 10 > avail || (uint64_t)m->n_chunks * MF_CHUNK_LEN > avail ||
	    (uint64_t)m->n_tensors * 17 > avail || m->n_refs > avail / 4)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: entry counts exceed the manifest's size", what);
	int rc = mf_decode_meta(&c, m, what);
	if (rc)
		return rc;
	if ((rc = mf_check_world(m, what)))
		return rc;
	size_t chunks_sz = (size_t)m->n_chunks * sizeof(struct mf_chunk);
	size_t tens_sz = (size_t)m->n_tensors * sizeof(struct mf_tensor);
	size_t shape_cap = (size_t)(avail / 8 + 1);
	size_t refs_sz = (size_t)m->n_refs * 4;
	m->alloc = malloc(chunks_sz + tens_sz + shape_cap * 8 + refs_sz + 16);
	if (!m->alloc)
		return ckpt_fail(CKPT_E_NOMEM, "%s: out of memory", what);
	m->chunks = (struct mf_chunk *)m->alloc;
	m->tensors = (struct mf_tensor *)((uint8_t *)m->alloc + chunks_sz);
	uint64_t *shapes = (uint64_t *)((uint8_t *)m->tensors + tens_sz);
	m->refs = (uint32_t *)(shapes + shape_cap);
	if ((rc = mf_decode_chunks(&c, m, what)))
		return rc;
	size_t shape_used = 0;
	uint64_t next_ref = 0;
	for (uint32_t i = 0; i < m->n_tensors; i++)
		if ((rc = mf_decode_tensor(&c, m, i, shapes, shape_cap, &shape_used, &next_ref, what)))
			return rc;
	if (next_ref != m->n_refs)
		return ckpt_fail(CKPT_E_CORRUPT, "%s: %llu chunk references, tensors need %llu", what,
				 (unsigned long long)m->n_refs, (unsigned long long)next_ref);
	return mf_decode_refs(&c, m, what);
}

int manifest_decode(uint8_t *buf, size_t len, struct manifest *m, const char *what)
{
	memset(m, 0, sizeof *m);
	m->buf = buf;
	int rc = mf_decode_header(buf, len, m, what);
	if (rc == 0)
		rc = mf_decode_body(buf, len, m, what);
	if (rc)
		manifest_free(m);
	return rc;
}
