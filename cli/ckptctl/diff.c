/* ckptctl diff: what changed between two checkpoints. Tensors are matched by name; for a tensor in
 * both with the same dtype and shape, the changed bytes are the raw bytes of the chunks whose
 * digests differ (from the manifests, no data read) — or, when the two were saved with different
 * chunk sizes, of the chunk-sized ranges whose bytes differ (the data is then read and checked). A
 * tensor whose dtype or shape changed counts as changed entirely. Metadata is compared too. */
#include "ckptctl.h"
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct diff_args {
	bool json, all;
};

static const struct cli_opt diff_opts[] = {
	{CLI_OPT(CLI_FLAG, "all", 0, CLI_AT(struct diff_args, all), NULL,
	 "also compare the Python binding's own metadata entries\n"
	 "(libckpt.python, the saved structure, and libckpt.names)")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct diff_args, json), NULL,
	 "print a JSON object: from, to, added, removed and changed (arrays of\n"
	 "tensors; changed ones with changed_bytes, changed_chunks and\n"
	 "layout_changed), unchanged, added_bytes, removed_bytes, changed_bytes and\n"
	 "metadata (added, removed, changed); sizes in bytes")},
	CLI_OPT_END,
};

static int cmd_diff(int argc, char **argv);

const struct cli_cmd ck_cmd_diff = {
	.name = "diff", .fn = cmd_diff, .help = "compare two checkpoints: tensors added, removed, changed",
	.args = "STORE A B", .opts = diff_opts,
	.desc = "Compare the checkpoints of steps A and B (numbers or 'latest'): the tensors B added and\n"
		"removed, and those it changed with the bytes that changed (the raw bytes of the chunks\n"
		"whose digests differ; all of a tensor whose dtype or shape changed), and the metadata\n"
		"keys added, removed or changed. Sizes are in IEC units. The store is opened read-only.\n"
		"Tensors are matched by their dotted names (model.fc1.weight), so a checkpoint an older\n"
		"Python binding saved with escaped keys (model.fc1%2Eweight) compares with a newer one.\n",
	.tail = "\n"
		"Exit status: 0 compared (whether or not they differ); 1 failed (damaged data or\n"
		"manifest); 2 usage error; 4 no such store or step.\n"
		"\n"
		"Example:\n"
		"  ckptctl diff /mnt/nvme/ckpt 1000 latest\n",
};

static const struct ck_pos diff_pos = {3, 3, true, {"expected STORE, A and B", "expected steps A and B", "expected step B"}};

enum change { UNCHANGED, ADDED, REMOVED, CHANGED };

struct tdiff {
	enum change kind;
	size_t ia, ib;          /* indexes in A and B (when present) */
	bool layout_changed;    /* dtype or shape differ */
	uint64_t changed_bytes, changed_chunks;
};

static bool same_layout(const ckpt_tensor_info *a, const ckpt_tensor_info *b)
{
	if (a->dtype != b->dtype || a->ndim != b->ndim)
		return false;
	for (unsigned d = 0; d < a->ndim; d++)
		if (a->shape[d] != b->shape[d])
			return false;
	return true;
}

/* Chunk boundaries of both tensors equal (the same chunk size)? */
static int same_chunking(const ckpt_reader *ra, size_t ia, const ckpt_tensor_info *a,
			 const ckpt_reader *rb, size_t ib, const ckpt_tensor_info *b, bool *same)
{
	*same = a->chunks == b->chunks;
	for (uint64_t j = 0; *same && j < a->chunks; j++) {
		ckpt_chunk_info ca = {.struct_size = sizeof ca}, cb = {.struct_size = sizeof cb};
		int r = ckpt_reader_chunk(ra, ia, j, &ca);
		if (!r)
			r = ckpt_reader_chunk(rb, ib, j, &cb);
		if (r)
			return r;
		*same = ca.raw_bytes == cb.raw_bytes;
	}
	return 0;
}

/* Compares tensors of the same layout: by chunk digest, or by reading both when chunked
 * differently (ranges of B's chunks). Returns 0 or a CKPT_E_* code. */
static int compare(ckpt_reader *ra, size_t ia, const ckpt_tensor_info *a, ckpt_reader *rb,
		   size_t ib, const ckpt_tensor_info *b, struct tdiff *d)
{
	bool same;
	int r = same_chunking(ra, ia, a, rb, ib, b, &same);
	if (r)
		return r;
	if (same) {
		for (uint64_t j = 0; j < b->chunks; j++) {
			ckpt_chunk_info ca = {.struct_size = sizeof ca}, cb = {.struct_size = sizeof cb};
			if ((r = ckpt_reader_chunk(ra, ia, j, &ca)) ||
			    (r = ckpt_reader_chunk(rb, ib, j, &cb)))
				return r;
			if (memcmp(ca.digest, cb.digest, sizeof ca.digest)) {
				d->changed_bytes += cb.raw_bytes;
				d->changed_chunks++;
			}
		}
		return 0;
	}
	uint8_t *x = malloc(a->nbytes ? a->nbytes : 1), *y = malloc(b->nbytes ? b->nbytes : 1);
	if (!x || !y) {
		free(x);
		free(y);
		return -CKPT_E_NOMEM;
	}
	r = ckpt_reader_read(ra, ia, NULL, CKPT_MEM_HOST, x, a->nbytes);
	if (!r)
		r = ckpt_reader_read(rb, ib, NULL, CKPT_MEM_HOST, y, b->nbytes);
	uint64_t off = 0;
	for (uint64_t j = 0; !r && j < b->chunks; j++) {
		ckpt_chunk_info cb = {.struct_size = sizeof cb};
		if ((r = ckpt_reader_chunk(rb, ib, j, &cb)))
			break;
		if (memcmp(x + off, y + off, cb.raw_bytes)) {
			d->changed_bytes += cb.raw_bytes;
			d->changed_chunks++;
		}
		off += cb.raw_bytes;
	}
	free(x);
	free(y);
	return r;
}

static void json_tensor(struct jw *w, const ckpt_tensor_info *t, const char *name)
{
	const char *dt = ckpt_dtype_name(t->dtype);
	jw_key(w, "name"); jw_str(w, name);
	jw_key(w, "dtype"); jw_str(w, dt ? dt : "?");
	jw_key(w, "shape");
	jw_arr_begin(w);
	for (unsigned d = 0; d < t->ndim; d++)
		jw_u64(w, t->shape[d]);
	jw_arr_end(w);
	jw_key(w, "nbytes"); jw_u64(w, t->nbytes);
}

static const char *dtype_name(ckpt_dtype dt)
{
	const char *n = ckpt_dtype_name(dt);
	return n ? n : "?";
}

struct sums {
	uint64_t added, removed, changed, n_added, n_removed, n_changed, n_unchanged;
};

/* One side of the comparison: its reader and its tensors' dotted names. */
struct side {
	ckpt_reader *rd;
	struct ck_names names;
};

/* The index in `to` of the tensor of `from` whose stored name is stored and dotted name dotted,
 * or -1: by dotted name, or by stored name where two tensors of a side read the same (two old
 * escaped names, "x%2Ey.z" and "x.y%2Ez"). */
static long match(const struct side *to, const struct side *from, const char *stored,
		  const char *dotted)
{
	size_t n_to, n_from;
	long i = ck_names_find(&to->names, dotted, &n_to);
	ck_names_find(&from->names, dotted, &n_from);
	return n_to > 1 || n_from > 1 ? ckpt_reader_find(to->rd, stored) : i;
}

/* Whether a metadata entry takes part (--all: every one; else not the binding's own). */
static bool meta_compared(const char *key, bool all)
{
	return all || !ck_binding_meta(key);
}

static void print_json(const struct side *A, const struct side *B, const ckpt_info *ia,
		       const ckpt_info *ib, const struct tdiff *v, size_t nv, const struct sums *s,
		       bool all)
{
	ckpt_reader *ra = A->rd, *rb = B->rd;
	struct jw w;
	jw_init(&w, stdout, true);
	jw_obj_begin(&w);
	jw_key(&w, "from"); jw_u64(&w, ia->step);
	jw_key(&w, "to"); jw_u64(&w, ib->step);
	static const char *const names[] = {"added", "removed", "changed"};
	for (int kind = ADDED; kind <= CHANGED; kind++) {
		jw_key(&w, names[kind - ADDED]);
		jw_arr_begin(&w);
		for (size_t k = 0; k < nv; k++) {
			if ((int)v[k].kind != kind)
				continue;
			ckpt_tensor_info a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
			jw_obj_begin(&w);
			if (kind == REMOVED) {
				ckpt_reader_tensor(ra, v[k].ia, &a);
				json_tensor(&w, &a, A->names.name[v[k].ia]);
			} else {
				ckpt_reader_tensor(rb, v[k].ib, &b);
				json_tensor(&w, &b, B->names.name[v[k].ib]);
			}
			if (kind == CHANGED) {
				ckpt_reader_tensor(ra, v[k].ia, &a);
				jw_key(&w, "changed_bytes"); jw_u64(&w, v[k].changed_bytes);
				jw_key(&w, "changed_chunks"); jw_u64(&w, v[k].changed_chunks);
				jw_key(&w, "layout_changed"); jw_bool(&w, v[k].layout_changed);
				if (v[k].layout_changed) {
					jw_key(&w, "from_dtype"); jw_str(&w, dtype_name(a.dtype));
					jw_key(&w, "from_shape");
					jw_arr_begin(&w);
					for (unsigned d = 0; d < a.ndim; d++)
						jw_u64(&w, a.shape[d]);
					jw_arr_end(&w);
					jw_key(&w, "from_nbytes"); jw_u64(&w, a.nbytes);
				}
			}
			jw_obj_end(&w);
		}
		jw_arr_end(&w);
	}
	jw_key(&w, "unchanged"); jw_u64(&w, s->n_unchanged);
	jw_key(&w, "added_bytes"); jw_u64(&w, s->added);
	jw_key(&w, "removed_bytes"); jw_u64(&w, s->removed);
	jw_key(&w, "changed_bytes"); jw_u64(&w, s->changed);
	jw_key(&w, "metadata");
	jw_obj_begin(&w);
	jw_key(&w, "added");
	jw_obj_begin(&w);
	for (size_t k = 0; k < ckpt_reader_meta_count(rb); k++) {
		const char *key, *val;
		if (!ckpt_reader_meta(rb, k, &key, &val) && !ckpt_reader_get_meta(ra, key) &&
		    meta_compared(key, all)) {
			jw_key(&w, key);
			jw_str(&w, val);
		}
	}
	jw_obj_end(&w);
	jw_key(&w, "removed");
	jw_obj_begin(&w);
	for (size_t k = 0; k < ckpt_reader_meta_count(ra); k++) {
		const char *key, *val;
		if (!ckpt_reader_meta(ra, k, &key, &val) && !ckpt_reader_get_meta(rb, key) &&
		    meta_compared(key, all)) {
			jw_key(&w, key);
			jw_str(&w, val);
		}
	}
	jw_obj_end(&w);
	jw_key(&w, "changed");
	jw_arr_begin(&w);
	for (size_t k = 0; k < ckpt_reader_meta_count(rb); k++) {
		const char *key, *val, *old;
		if (ckpt_reader_meta(rb, k, &key, &val) || !(old = ckpt_reader_get_meta(ra, key)) ||
		    !strcmp(old, val) || !meta_compared(key, all))
			continue;
		jw_obj_begin(&w);
		jw_key(&w, "key"); jw_str(&w, key);
		jw_key(&w, "from"); jw_str(&w, old);
		jw_key(&w, "to"); jw_str(&w, val);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	jw_obj_end(&w);
	jw_obj_end(&w);
	jw_finish(&w);
}

static void print_text(const struct side *A, const struct side *B, const ckpt_info *ia,
		       const ckpt_info *ib, const struct tdiff *v, size_t nv, const struct sums *s,
		       bool all)
{
	ckpt_reader *ra = A->rd, *rb = B->rd;
	printf("diff step %llu -> step %llu\n", (unsigned long long)ia->step,
	       (unsigned long long)ib->step);
	for (size_t k = 0; k < nv; k++) {
		ckpt_tensor_info a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
		char q[1100], sa[700], sb[700], za[32], zb[32];
		switch (v[k].kind) {
		case UNCHANGED:
			break;
		case ADDED:
			ckpt_reader_tensor(rb, v[k].ib, &b);
			printf("added    %s %s %s  %s\n", ck_name(B->names.name[v[k].ib], q, sizeof q),
			       dtype_name(b.dtype),
			       ck_fmt_shape(b.ndim, b.shape, sb, sizeof sb),
			       cli_fmt_iec(b.nbytes, zb, sizeof zb));
			break;
		case REMOVED:
			ckpt_reader_tensor(ra, v[k].ia, &a);
			printf("removed  %s %s %s  %s\n", ck_name(A->names.name[v[k].ia], q, sizeof q),
			       dtype_name(a.dtype),
			       ck_fmt_shape(a.ndim, a.shape, sa, sizeof sa),
			       cli_fmt_iec(a.nbytes, za, sizeof za));
			break;
		case CHANGED:
			ckpt_reader_tensor(ra, v[k].ia, &a);
			ckpt_reader_tensor(rb, v[k].ib, &b);
			if (v[k].layout_changed) {
				char sa2[700];
				snprintf(sa2, sizeof sa2, "%s %s", dtype_name(a.dtype),
					 ck_fmt_shape(a.ndim, a.shape, sa, sizeof sa));
				printf("changed  %s %s -> %s %s  %s (all)\n",
				       ck_name(B->names.name[v[k].ib], q, sizeof q),
				       sa2, dtype_name(b.dtype), ck_fmt_shape(b.ndim, b.shape, sb, sizeof sb),
				       cli_fmt_iec(b.nbytes, zb, sizeof zb));
			} else {
				printf("changed  %s %s %s  %s of %s (%llu of %llu chunks)\n",
				       ck_name(B->names.name[v[k].ib], q, sizeof q), dtype_name(b.dtype),
				       ck_fmt_shape(b.ndim, b.shape, sb, sizeof sb),
				       cli_fmt_iec(v[k].changed_bytes, za, sizeof za),
				       cli_fmt_iec(b.nbytes, zb, sizeof zb),
				       (unsigned long long)v[k].changed_chunks, (unsigned long long)b.chunks);
			}
			break;
		}
	}
	size_t nmeta = 0;
	for (size_t k = 0; k < ckpt_reader_meta_count(rb); k++) {
		const char *key, *val, *old;
		char qk[1100], qa[1100], qb[1100];
		if (ckpt_reader_meta(rb, k, &key, &val) || !meta_compared(key, all))
			continue;
		old = ckpt_reader_get_meta(ra, key);
		if (!old) {
			printf("meta +   %s = %s\n", ck_name(key, qk, sizeof qk),
			       st_quote(val, qb, sizeof qb, 1000));
			nmeta++;
		} else if (strcmp(old, val)) {
			printf("meta ~   %s = %s -> %s\n", ck_name(key, qk, sizeof qk),
			       st_quote(old, qa, sizeof qa, 1000), st_quote(val, qb, sizeof qb, 1000));
			nmeta++;
		}
	}
	for (size_t k = 0; k < ckpt_reader_meta_count(ra); k++) {
		const char *key, *val;
		char qk[1100], qa[1100];
		if (!ckpt_reader_meta(ra, k, &key, &val) && !ckpt_reader_get_meta(rb, key) &&
		    meta_compared(key, all)) {
			printf("meta -   %s = %s\n", ck_name(key, qk, sizeof qk),
			       st_quote(val, qa, sizeof qa, 1000));
			nmeta++;
		}
	}
	char a[32], r[32], c[32];
	printf("%llu added (%s), %llu removed (%s), %llu changed (%s changed), %llu unchanged; "
	       "%zu metadata change%s\n",
	       (unsigned long long)s->n_added, cli_fmt_iec(s->added, a, sizeof a),
	       (unsigned long long)s->n_removed, cli_fmt_iec(s->removed, r, sizeof r),
	       (unsigned long long)s->n_changed, cli_fmt_iec(s->changed, c, sizeof c),
	       (unsigned long long)s->n_unchanged, nmeta, nmeta == 1 ? "" : "s");
}

/* Fills v[0..*nv) (B's order first: added, changed, unchanged; then what A had and B lacks) and
 * the sums. Returns 0 or an exit status, reported. */
static int compare_all(const char *cmd, const struct side *A, const struct side *B,
		       struct tdiff *v, size_t *nv, struct sums *s)
{
	ckpt_reader *ra = A->rd, *rb = B->rd;
	size_t na = ckpt_reader_tensor_count(ra), nb = ckpt_reader_tensor_count(rb);
	for (size_t ib = 0; ib < nb; ib++) {
		ckpt_tensor_info a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
		ckpt_reader_tensor(rb, ib, &b);
		long ia = match(A, B, b.name, B->names.name[ib]);
		struct tdiff *d = &v[(*nv)++];
		d->ib = ib;
		if (ia < 0) {
			d->kind = ADDED;
			s->n_added++;
			s->added += b.nbytes;
			continue;
		}
		d->ia = (size_t)ia;
		ckpt_reader_tensor(ra, (size_t)ia, &a);
		if (!same_layout(&a, &b)) {
			d->layout_changed = true;
			d->changed_bytes = b.nbytes;
			d->changed_chunks = b.chunks;
		} else {
			int r = compare(ra, (size_t)ia, &a, rb, ib, &b, d);
			if (r) {
				char q[300], what[400];
				snprintf(what, sizeof what, "comparing tensor %s",
					 st_quote(B->names.name[ib], q, sizeof q, 200));
				return ck_fail(cmd, r, what);
			}
		}
		d->kind = d->changed_bytes || d->layout_changed ? CHANGED : UNCHANGED;
		if (d->kind == CHANGED) {
			s->n_changed++;
			s->changed += d->changed_bytes;
		} else
			s->n_unchanged++;
	}
	for (size_t ia = 0; ia < na; ia++) {
		ckpt_tensor_info a = {.struct_size = sizeof a};
		ckpt_reader_tensor(ra, ia, &a);
		if (match(B, A, a.name, A->names.name[ia]) >= 0)
			continue;
		v[(*nv)++] = (struct tdiff){.kind = REMOVED, .ia = ia};
		s->n_removed++;
		s->removed += a.nbytes;
	}
	return 0;
}

static int cmd_diff(int argc, char **argv)
{
	const char *cmd = "diff";
	struct diff_args opt = {0};
	int rc = ck_parse(&ck_cmd_diff, &opt, &argc, &argv, &diff_pos);
	if (rc >= 0)
		return rc;
	uint64_t sa, sb;
	if (ck_parse_step(cmd, argv[2], &sa) || ck_parse_step(cmd, argv[3], &sb))
		return EXIT_USAGE;

	ckpt_store *store;
	rc = ck_open_store(cmd, argv[1], true, NULL, &store);
	if (rc)
		return rc;
	struct side A = {0}, B = {0};
	struct tdiff *v = NULL;
	if ((rc = ck_open_reader(cmd, store, sa, &A.rd)) || (rc = ck_open_reader(cmd, store, sb, &B.rd)) ||
	    (rc = ck_names_load(cmd, A.rd, &A.names)) || (rc = ck_names_load(cmd, B.rd, &B.names)))
		goto out;
	v = calloc(A.names.n + B.names.n + 1, sizeof *v);
	if (!v) {
		cli_err("%s: out of memory", cmd);
		rc = EXIT_FAIL;
		goto out;
	}
	struct sums s = {0};
	size_t nv = 0;
	if ((rc = compare_all(cmd, &A, &B, v, &nv, &s)))
		goto out;
	ckpt_info ia_info = {.struct_size = sizeof ia_info}, ib_info = {.struct_size = sizeof ib_info};
	ckpt_reader_info(A.rd, &ia_info);
	ckpt_reader_info(B.rd, &ib_info);
	if (opt.json)
		print_json(&A, &B, &ia_info, &ib_info, v, nv, &s, opt.all);
	else
		print_text(&A, &B, &ia_info, &ib_info, v, nv, &s, opt.all);
	rc = ck_stdout_done(cmd);
out:
	free(v);
	ck_names_free(&A.names);
	ck_names_free(&B.names);
	ckpt_reader_close(A.rd);
	ckpt_reader_close(B.rd);
	ckpt_store_close(store);
	return rc;
}
