/* Verifying the part manifests of a multi-rank checkpoint against its global manifest. The chunks
 * themselves are verified through the global manifest (its chunk table is the union of the
 * parts'); what only this check sees is a part file that is missing, damaged, or not the one its
 * rank made durable (docs/format.md, "Format version 2"). Also the strict parsers of the reserved
 * metadata's numbers, part records and part tensor descriptions, shared with dist_layout.c and
 * dist_merge.c (and the fuzz target tests/fuzz/fuzz-dist.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "dist/dist.h"
#include "format/format.h"
#include "io/io.h"
#include "store/store.h"

/* Digits by hand: strtoull takes blanks, signs ("-1" is 2^64 - 1) and wraps nothing into
 * errors without an end check at every call. */
int dist_parse_u64(const char **p, uint64_t max, uint64_t *out)
{
	const char *q = *p;
	uint64_t v = 0;
	if (*q < '0' || *q > '9')
		return -1;
	for (; *q >= '0' && *q <= '9'; q++)
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *q - '0', &v))
			return -1;
	if (v > max || (*q && (*q != ' ' || !q[1] || q[1] == ' ')))
		return -1;
	*p = *q ? q + 1 : q;
	*out = v;
	return 0;
}

size_t dist_piece_suffix(const char *name, unsigned k)
{
	char sfx[16];
	size_t n = strlen(name), l = (size_t)snprintf(sfx, sizeof sfx, "#%u", k);
	return n > l && !strcmp(name + n - l, sfx) ? n - l : 0;
}

/* A part's numbers were read with strtoull, which took "-1" as 2^64 - 1, junk as 0 and ignored
 * what followed; a crafted part could then describe a box of more dimensions than its tensor
 * has, which the merge read past the tensor's shape. */
int dist_parse_piece(const char *v, const struct mf_tensor *t, struct dist_piece *out)
{
	uint64_t nd, es = ckpt_dtype_size((ckpt_dtype)t->dtype), gb = es, k = 0;
	if ((v[0] != 'S' && v[0] != 'R' && v[0] != 'P') || v[1] != ' ')
		return -1;
	const char *p = v + 2;
	out->kind = v[0] == 'P' ? 'S' : v[0];
	if (v[0] == 'P' && (*p == '0' || dist_parse_u64(&p, DIST_RANGE_PIECES - 1, &k) || k == 0 ||
			    !dist_piece_suffix(t->name, (unsigned)k)))
		return -1;
	out->piece = (unsigned)k;
	if (dist_parse_u64(&p, 32, &nd) || (out->kind == 'S' && nd != t->ndim) ||
	    (out->kind == 'R' && t->ndim != 1) || !es)
		return -1;
	out->ndim = (unsigned)nd;
	for (unsigned i = 0; i < out->ndim; i++)
		if (dist_parse_u64(&p, UINT64_MAX, &out->gshape[i]) ||
		    __builtin_mul_overflow(gb, out->gshape[i], &gb))
			return -1;
	memset(out->off, 0, sizeof out->off);
	for (unsigned i = 0; i < (out->kind == 'S' ? out->ndim : 1); i++)
		if (dist_parse_u64(&p, UINT64_MAX, &out->off[i]))
			return -1;
	if (*p)
		return -1;
	if (out->kind == 'R')
		return out->off[0] > gb || t->nbytes > gb - out->off[0] ? -1 : 0;
	for (unsigned i = 0; i < out->ndim; i++)
		if (out->off[i] > out->gshape[i] || t->shape[i] > out->gshape[i] - out->off[i])
			return -1;
	return 0;
}

int dist_parse_sum(const char *v, struct dist_part_sum *out)
{
	const char *p = v;
	if (dist_parse_u64(&p, UINT64_MAX, &out->size) || strlen(p) != 32 ||
	    strspn(p, "0123456789abcdefABCDEF") != 32)
		return -1;
	for (int b = 0; b < 16; b++) {
		unsigned x;
		if (sscanf(p + 2 * b, "%2x", &x) != 1)
			return -1;
		out->digest[b] = (uint8_t)x;
	}
	return 0;
}

static int cmp_digest(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(ckpt_digest));
}

/* The global manifest's chunk digests, sorted, into *out (*n of them). Returns 0 or -CKPT_E_*. */
static int global_digests(struct ckpt_store *s, uint64_t step, ckpt_digest **out, size_t *n)
{
	struct manifest g;
	int rc = store_load_manifest(s, step, &g);
	if (rc)
		return rc;
	ckpt_digest *v = malloc(((size_t)g.n_chunks + 1) * sizeof *v);
	for (uint32_t i = 0; v && i < g.n_chunks; i++)
		v[i] = g.chunks[i].digest;
	*n = g.n_chunks;
	manifest_free(&g);
	if (!v)
		return ckpt_fail(CKPT_E_NOMEM, "out of memory");
	qsort(v, *n, sizeof *v, cmp_digest);
	*out = v;
	return 0;
}

/* Checks part rank of step against what the global manifest records (rec, or NULL when it has no
 * entry) and that the global chunk table (gd, ng sorted) holds every chunk of the part, so that
 * verifying the global manifest's chunks verifies the part's. Returns 0 when intact, else a
 * CKPT_E_* code with the reason in msg. */
static int check_part(struct ckpt_store *s, uint64_t step, unsigned rank, const char *rec,
		      const char *path, const ckpt_digest *gd, size_t ng, char *msg, size_t mlen)
{
	struct dist_part_sum want;
	if (!rec || dist_parse_sum(rec, &want)) {
		snprintf(msg, mlen, "rank %u: the global manifest has no valid record of this part "
			 "(%s%u)", rank, DIST_PART, rank);
		return CKPT_E_CORRUPT;
	}
	uint8_t *buf;
	size_t len;
	int rc = io_slurp(path, MF_MAX_LEN, &buf, &len);
	if (rc) {
		snprintf(msg, mlen, "rank %u: %s", rank, ckpt_errmsg());
		return -rc;
	}
	if (len != want.size || len < 16 || memcmp(buf + len - 16, want.digest, 16)) {
		free(buf);
		snprintf(msg, mlen, "rank %u: part %s is not the one the global manifest records "
			 "(%zu bytes, expected %" PRIu64 "; or its checksum differs)", rank, path,
			 len, want.size);
		return CKPT_E_CHECKSUM;
	}
	struct manifest m;
	if ((rc = manifest_decode(buf, len, &m, path))) {
		snprintf(msg, mlen, "rank %u: %s", rank, ckpt_errmsg());
		return -rc;
	}
	if (m.step != step || memcmp(m.uuid, s->hdr.uuid, 16)) {
		snprintf(msg, mlen, "rank %u: part %s belongs to another step or store", rank, path);
		rc = -CKPT_E_CORRUPT;
	}
	for (uint32_t c = 0; !rc && c < m.n_chunks; c++)
		if (!bsearch(&m.chunks[c].digest, gd, ng, sizeof *gd, cmp_digest)) {
			snprintf(msg, mlen, "rank %u: chunk %u of part %s is missing from the global "
				 "manifest's chunk table", rank, c, path);
			rc = -CKPT_E_CORRUPT;
		}
	manifest_free(&m);
	return -rc;
}

long dist_verify_parts(struct ckpt_store *s, uint64_t step, unsigned world, reader1 *r,
		       ckpt_damage_fn on_damage, void *arg)
{
	size_t ng = 0;
	ckpt_digest *gd = NULL;
	int rc = global_digests(s, step, &gd, &ng);
	if (rc)
		return rc;
	long bad = 0;
	for (unsigned rank = 0; rank < world; rank++) {
		char key[64], path[4096], msg[4096 + 256];
		snprintf(key, sizeof key, "%s%u", DIST_PART, rank);
		dist_part_path(s, step, (int)rank, path, sizeof path);
		int err = check_part(s, step, rank, reader1_get_meta(r, key), path, gd, ng, msg,
				     sizeof msg);
		if (!err)
			continue;
		bad++;
		if (on_damage) {
			ckpt_damage dm = {.step = step, .file = path, .error = err, .message = msg};
			on_damage(&dm, arg);
		}
	}
	free(gd);
	return bad;
}
