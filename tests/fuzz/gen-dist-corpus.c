/* Generates the seed corpus of fuzz-dist (README.md): the global manifests and part files of
 * multi-rank checkpoints saved through the public API (threads as ranks,
 * tests/unit/t-dist-world.h): 4 ranks saving "w" F32 [8, 6] by rows, "g" I16 [4, 6] as a 2 x 2
 * grid, "e" U16 [64, 8] replicated and a scalar "s" on rank 0; then 2 ranks and 1 rank saving w.
 * Plus bad-* seeds: the 4-rank global manifest or a part re-encoded (lib/format) with one
 * metadata value forged. Output: tests/fuzz/corpus/dist/.
 *
 *   make tests && cc -std=gnu11 -D_GNU_SOURCE -Iinclude -Ilib -Itests/unit \
 *       tests/fuzz/gen-dist-corpus.c build/tests/lib/libckpt-internal.a \
 *       $(pkg-config --libs liburing libzstd libxxhash) -lpthread -ldl -o build/gen-dist-corpus
 *   build/gen-dist-corpus
 *
 * The output differs from run to run (store uuids and times), so regenerate only to add seeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "common/ckpt_int.h"
#include "dist/dist.h"
#include "format/format.h"
#include "io/io.h"
#include "t-dist-world.h"

static const char *out_dir = "tests/fuzz/corpus/dist";

static void die(const char *what)
{
	fprintf(stderr, "gen-dist-corpus: %s: %s\n", what, ckpt_errmsg());
	exit(1);
}

static void put(const char *name, const void *b, size_t n)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", out_dir, name);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(b, 1, n, f) != n || fclose(f))
		die(p);
}

static int save(ckpt_comm *comm, ckpt_store *st, uint64_t step)
{
	unsigned n = (unsigned)comm->size, k = (unsigned)comm->rank;
	static uint16_t e[64 * 8];
	float w[8 * 6];
	int16_t g[6];
	double s = 0.5;
	for (unsigned i = 0; i < 48; i++)
		w[i] = (float)(i + k * 100 + step);
	for (unsigned i = 0; i < 6; i++)
		g[i] = (int16_t)(k * 10 + i);
	uint64_t r0 = 8u * k / n, r1 = 8u * (k + 1) / n;
	uint64_t gw[2] = {8, 6}, ow[2] = {r0, 0}, lw[2] = {r1 - r0, 6};
	uint64_t gg[2] = {4, 6}, og[2] = {k / 2 * 2, k % 2 * 3}, lg[2] = {2, 3}, ge[2] = {64, 8};
	dsave *d;
	int rc = dsave_begin(st, comm, step, &d);
	if (rc)
		return rc;
	rc = dsave_add_shard(d, "w", CKPT_DTYPE_F32, 2, gw, ow, lw, CKPT_MEM_HOST, w);
	if (!rc && n == 4)
		rc = dsave_add_shard(d, "g", CKPT_DTYPE_I16, 2, gg, og, lg, CKPT_MEM_HOST, g);
	if (!rc && n == 4)
		rc = dsave_add_replicated(d, "e", CKPT_DTYPE_U16, 2, ge, k, n, CKPT_MEM_HOST, e);
	if (!rc && n == 4 && k == 0)
		rc = dsave_add_shard(d, "s", CKPT_DTYPE_F64, 0, NULL, NULL, NULL,
					      CKPT_MEM_HOST, &s);
	if (rc) {
		dsave_abort(d);
		return rc;
	}
	return dsave_commit(d, NULL);
}

struct world {
	ckpt_store *s[TC_MAXR];
	uint64_t step;
};

static int rank_main(ckpt_comm *c, void *arg)
{
	struct world *w = arg;
	return save(c, w->s[c->rank], w->step);
}

static void save_world(const char *path, uint64_t step, unsigned n)
{
	struct world w = {.step = step};
	int rc[TC_MAXR];
	for (unsigned k = 0; k < n; k++)
		if (ckpt_store_open(path, NULL, &w.s[k]))
			die(path);
	if (tw_run(n, rank_main, &w, rc))
		die("threads");
	for (unsigned k = 0; k < n; k++) {
		if (rc[k])
			die("save");
		ckpt_store_close(w.s[k]);
	}
}

static void copy(const char *from, const char *name)
{
	uint8_t *b;
	size_t n;
	if (io_slurp(from, MF_MAX_LEN, &b, &n))
		die(from);
	put(name, b, n);
	free(b);
}

/* Value v with its blank-separated token idx replaced by nv (idx -1: nv appended). */
static char *tok_set(const char *v, int idx, const char *nv)
{
	char *o = malloc(strlen(v) + strlen(nv) + 2), *dup = strdup(v), *save = NULL;
	o[0] = 0;
	int i = 0;
	for (char *t = strtok_r(dup, " ", &save); t; t = strtok_r(NULL, " ", &save), i++) {
		if (i)
			strcat(o, " ");
		strcat(o, i == idx ? nv : t);
	}
	if (idx < 0) {
		strcat(o, " ");
		strcat(o, nv);
	}
	free(dup);
	return o;
}

/* Writes seed name: manifest file from with metadata key set to tok_set(value, idx, nv) (key
 * renamed to nv instead when idx is -2). */
static void forge(const char *from, const char *name, const char *key, int idx, const char *nv)
{
	uint8_t *b;
	size_t n;
	struct manifest m;
	if (io_slurp(from, MF_MAX_LEN, &b, &n) || manifest_decode(b, n, &m, from))
		die(from);
	char *v = NULL;
	for (uint32_t i = 0; i < m.n_meta; i++) {
		if (strcmp(m.meta[i].key, key))
			continue;
		if (idx == -2) {
			m.meta[i].key = nv;
			m.meta[i].klen = (uint32_t)strlen(nv);
		} else {
			v = tok_set(m.meta[i].value, idx, nv);
			m.meta[i].value = v;
			m.meta[i].vlen = (uint32_t)strlen(v);
		}
	}
	uint64_t len = manifest_encoded_len(&m);
	uint8_t *e = malloc(len);
	manifest_encode(&m, e);
	put(name, e, len);
	free(e);
	free(v);
	manifest_free(&m);
}

int main(void)
{
	char dir[] = "/tmp/gen-dist-corpus.XXXXXX", p[4096], q[128];
	if (!mkdtemp(dir))
		die("mkdtemp");
	mkdir(out_dir, 0755);
	ckpt_options *o = ckpt_options_create();
	ckpt_store *st;
	if (!o || ckpt_options_set(o, CKPT_OPT_CREATE, 1) || ckpt_store_open(dir, o, &st))
		die(dir);
	ckpt_store_close(st);
	ckpt_options_free(o);
	static const unsigned worlds[] = {4, 2, 1};
	for (unsigned s = 0; s < 3; s++) {
		save_world(dir, s + 1, worlds[s]);
		snprintf(p, sizeof p, "%s/manifests/%020u.ckpt", dir, s + 1);
		snprintf(q, sizeof q, "valid-global-%u-ranks", worlds[s]);
		copy(p, q);
		for (unsigned r = 0; r < worlds[s]; r++) {
			snprintf(p, sizeof p, "%s/parts/%020u/%u.part", dir, s + 1, r);
			snprintf(q, sizeof q, "valid-part-%u-ranks-%u", worlds[s], r);
			copy(p, q);
		}
	}
	char g[4096], part[4096], part3[4096];
	snprintf(g, sizeof g, "%s/manifests/%020u.ckpt", dir, 1);
	snprintf(part, sizeof part, "%s/parts/%020u/1.part", dir, 1);
	snprintf(part3, sizeof part3, "%s/parts/%020u/3.part", dir, 1);
	/* w's table: "12 2 8 6 4 t0 0 0 t1 2 0 t2 4 0 t3 6 0"; g's: "6 2 4 6 4 t0 0 0 t1 0 3 ..." */
	forge(g, "bad-world-minus1", DIST_WORLD, 0, "-1");
	forge(g, "bad-world-huge", DIST_WORLD, 0, "4294967300");
	forge(g, "bad-gap", DIST_SHARDS "w", 2, "9");
	forge(g, "bad-overlap-rows", DIST_SHARDS "w", 9, "3");
	forge(g, "bad-overlap-grid", DIST_SHARDS "g", 15, "1");
	forge(g, "bad-outside", DIST_SHARDS "w", 15, "7");
	forge(g, "bad-huge-dims", DIST_SHARDS "g", 2, "8589934592");
	forge(g, "bad-huge-dim-wraps", DIST_SHARDS "g", 3, "18446744073709551615");
	forge(g, "bad-trailing-garbage", DIST_SHARDS "w", -1, "junk");
	forge(g, "bad-dtype", DIST_SHARDS "w", 0, "10");
	forge(g, "bad-nshards-huge", DIST_SHARDS "w", 4, "99999999999");
	forge(g, "bad-part-key", DIST_PART "1", -2, DIST_PART "01");
	forge(part, "bad-piece-trailing", DIST_KEY "w", -1, "7");
	forge(part, "bad-piece-minus1", DIST_KEY "w", 4, "-1");
	forge(part, "bad-piece-ndim", DIST_KEY "w", 1, "3");
	forge(part, "bad-piece-outside", DIST_KEY "w", 4, "7");
	forge(part3, "bad-replica-outside", DIST_KEY "e", 4, "1048576");
	snprintf(p, sizeof p, "rm -rf '%s'", dir);
	return system(p) ? 1 : 0;
}
